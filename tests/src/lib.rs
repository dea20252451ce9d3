//! Helpers for cgtrace's privileged integration tests (`tests/tests/*.rs`): real cgroups, real
//! workloads, and the real `cgtrace` binary whose NDJSON output is parsed.
pub mod advice;
pub mod cgroup;
pub mod chromium;
pub mod cri;
pub mod dashboard;
pub mod fuse;
pub mod hostile;
pub mod kubelet;
pub mod lxcfs;
pub mod memcg;
pub mod node;
pub mod record;
pub mod runqlat;
pub mod scratch;
pub mod strace;
pub mod stream;
pub mod tmux;
pub mod workload;

/// A child process, killed and reaped on drop.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `grace` for `child` to exit (it was asked to), then kills it; reaps it either way.
pub fn reap(child: &mut std::process::Child, grace: std::time::Duration) {
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `sig` to process `pid`; fails, saying why, when kill(2) does.
pub fn signal(pid: u32, sig: i32) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let pid = i32::try_from(pid).context("pid out of range")?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, sig) };
    anyhow::ensure!(
        rc == 0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// Set to `1` by the test command (`scripts/setup.sh test`): every privileged test must run, so
/// a lost privilege, BTF or tool fails the suite instead of passing it silently.
pub const REQUIRE: &str = "CGTRACE_REQUIRE_PRIVILEGED";

/// A test cannot run here: says why on stderr and the caller returns; with [`REQUIRE`] set it
/// fails instead.
pub fn skip(reason: &str) {
    if required() {
        panic!("cannot run: {reason} ({REQUIRE}=1: every privileged test must run)");
    }
    eprintln!("skipping: {reason}");
}

fn required() -> bool {
    std::env::var_os(REQUIRE).is_some_and(|v| v == "1")
}

/// Whether the privileged tests can run here; says why not (see [`skip`]).
pub fn can_trace() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("privileged tests need root");
        return false;
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        skip("no kernel BTF");
        return false;
    }
    true
}

/// [`can_trace`], on at least `n` CPUs: says why not (see [`skip`]), `reason` when the CPUs are
/// too few.
pub fn can_trace_on_cpus(n: usize, reason: &str) -> bool {
    if !can_trace() {
        return false;
    }
    if workload::cpus() < n {
        skip(reason);
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn skip_fails_when_every_test_must_run() {
        let before = std::env::var_os(super::REQUIRE);
        // SAFETY: this binary's tests run on one thread (`--test-threads=1` in the test
        // command), so nothing reads the environment meanwhile; likewise below.
        unsafe { std::env::set_var(super::REQUIRE, "1") };
        let r = std::panic::catch_unwind(|| super::skip("no such thing"));
        // SAFETY: as above.
        unsafe { std::env::remove_var(super::REQUIRE) };
        super::skip("no such thing"); // without it: only a note
        if let Some(v) = before {
            // SAFETY: as above.
            unsafe { std::env::set_var(super::REQUIRE, v) };
        }
        let msg = r.expect_err("must fail");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("no such thing") && msg.contains("CGTRACE_REQUIRE_PRIVILEGED"),
            "{msg}"
        );
    }
}
