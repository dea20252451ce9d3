//! Builds `cgtrace-ebpf` for the BPF target with the nightly pinned in
//! `cgtrace-ebpf/rust-toolchain.toml` and puts the object in `OUT_DIR/cgtrace.bpf.o`.
//!
//! Without that nightly or `bpf-linker` (a machine that never ran `scripts/setup.sh`) the object is
//! left empty with a warning, so `cargo test` of the pure-userspace code still works; the binary
//! then refuses to trace with a one-line error that says to run the setup script.
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("workspace root").to_path_buf();
    let ebpf = root.join("cgtrace-ebpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("cgtrace.bpf.o");
    for p in [
        "cgtrace-ebpf/src",
        "cgtrace-ebpf/Cargo.toml",
        "cgtrace-ebpf/rust-toolchain.toml",
        "cgtrace-ebpf/.cargo/config.toml",
        "cgtrace-common/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-env-changed=CGTRACE_EBPF_STUB");

    if env::var_os("CGTRACE_EBPF_STUB").is_some_and(|v| v == "1") {
        stub(&out, "CGTRACE_EBPF_STUB=1");
        return;
    }
    if let Some(missing) = missing_tools(&ebpf) {
        stub(&out, &missing);
        return;
    }
    let target_dir = root.join("target").join("bpf");
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&ebpf)
        .args([
            "build",
            "-Z",
            "build-std=core",
            "--release",
            "--target",
            "bpfel-unknown-none",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // Let cgtrace-ebpf/rust-toolchain.toml pick the toolchain, not the outer build's.
    for (k, _) in env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("CARGO_") && k != "CARGO_HOME"
            || k.starts_with("RUSTC")
            || k == "RUSTUP_TOOLCHAIN"
            || k.contains("RUSTFLAGS")
        {
            cmd.env_remove(k);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo for cgtrace-ebpf: {e}"));
    assert!(
        status.success(),
        "building cgtrace-ebpf failed ({status}); see the errors above"
    );
    let obj = target_dir.join("bpfel-unknown-none/release/cgtrace");
    fs::copy(&obj, &out)
        .unwrap_or_else(|e| panic!("copy {} -> {}: {e}", obj.display(), out.display()));
}

/// What is missing to build the eBPF object, if anything.
fn missing_tools(ebpf: &Path) -> Option<String> {
    let linker = Command::new("bpf-linker").arg("--version").output();
    if !linker.is_ok_and(|o| o.status.success()) {
        return Some("bpf-linker not found".into());
    }
    let rustc = Command::new("rustup")
        .current_dir(ebpf)
        .env_remove("RUSTUP_TOOLCHAIN")
        .args(["which", "rustc"])
        .output();
    match rustc {
        Ok(o) if o.status.success() => None,
        _ => Some("the nightly in cgtrace-ebpf/rust-toolchain.toml is not installed".into()),
    }
}

fn stub(out: &Path, why: &str) {
    println!("cargo:warning=cgtrace built WITHOUT its eBPF programs ({why}); run scripts/setup.sh");
    fs::write(out, []).unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
}
