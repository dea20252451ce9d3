//! The workspace xtask serves: where it is, and cargo run in it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, ensure};

/// The workspace root (xtask's parent folder).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// `cargo ARGS` in the workspace root, with the cargo that runs xtask; an error unless it
/// succeeds, named by its first argument (`cargo build failed: …`).
pub fn cargo(args: &[&str]) -> Result<()> {
    let what = args.first().copied().unwrap_or_default();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root())
        .args(args)
        .status()
        .with_context(|| format!("running cargo {what}"))?;
    ensure!(status.success(), "cargo {what} failed: {status}");
    Ok(())
}

/// Builds cgtrace and the test crate's `bins` (all of them when empty) in release mode, for a
/// benchmark that runs one of them against the other.
pub fn build_cgtrace_and_test_bins(bins: &[&str]) -> Result<()> {
    cargo(&["build", "--release", "--locked", "-p", "cgtrace"])?;
    let mut args = vec!["build", "--release", "--locked", "-p", "cgtrace-tests"];
    if bins.is_empty() {
        args.push("--bins");
    }
    for b in bins {
        args.extend(["--bin", b]);
    }
    cargo(&args)
}

/// The short hash of `root`'s HEAD (`unknown` outside a git checkout): the name a kept bench
/// binary goes by.
pub fn commit(root: &Path) -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
