//! `cargo xtask bench cgroups`: cgtrace's memory and CPU at 10 000 cgroups, each with a thread
//! waking once a second (`tests/src/bin/many_cgroups.rs`).

use std::process::Command;

use anyhow::{Context, Result, ensure};
use clap::Args;

use crate::workspace;

#[derive(Args)]
pub(super) struct CgroupsArgs {
    /// Cgroups, one thread each.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// How long cgtrace runs.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The cgtrace command measured (default: `stream --interval 1000`).
    #[arg(last = true)]
    cgtrace: Vec<String>,
}

pub(super) fn run(args: CgroupsArgs) -> Result<()> {
    workspace::build_cgtrace_and_test_bins(&["many_cgroups"])?;
    let root = workspace::root();
    let mut cmd = Command::new(root.join("target/release/many_cgroups"));
    cmd.args(["--count", &args.count.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .env("CGTRACE_BIN", root.join("target/release/cgtrace"));
    if !args.cgtrace.is_empty() {
        cmd.arg("--").args(&args.cgtrace);
    }
    let status = cmd.status().context("running many_cgroups")?;
    ensure!(status.success(), "many_cgroups failed: {status}");
    Ok(())
}
