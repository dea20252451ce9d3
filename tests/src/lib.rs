//! Helpers for cgtrace's privileged integration tests (`tests/tests/*.rs`): real cgroups, real
//! workloads, and the real `cgtrace` binary whose NDJSON output is parsed.
pub mod cgroup;
pub mod fuse;
pub mod lxcfs;
pub mod memcg;
pub mod record;
pub mod runqlat;
pub mod strace;
pub mod stream;
pub mod workload;

/// Whether the privileged tests can run here; prints why not.
pub fn can_trace() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: privileged tests need root");
        return false;
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        eprintln!("skipping: no kernel BTF");
        return false;
    }
    true
}
