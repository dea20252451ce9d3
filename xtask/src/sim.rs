//! `cargo xtask sim node`: the node simulator as an hour-long benchmark (see
//! `tests/src/bin/node_sim.rs`). Builds cgtrace and the simulator in release mode, then runs it;
//! every argument after `node` goes to the simulator (`--minutes`, `--pods`, `--containers`,
//! `--replace-per-min`, `--driver`, and after `--`, cgtrace's own).
use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result, ensure};
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct SimArgs {
    #[command(subcommand)]
    what: Sim,
}

#[derive(Subcommand)]
enum Sim {
    /// A simulated Kubernetes node under `cgtrace record` (root; default 60 minutes).
    Node {
        /// Passed to the simulator: --minutes N --pods N --containers N --replace-per-min F
        /// --driver cgroupfs|systemd [-- CGTRACE_ARGS...]
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(args: SimArgs) -> Result<()> {
    let Sim::Node { args } = args.what;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for pkg in [
        &["-p", "cgtrace"][..],
        &["-p", "cgtrace-tests", "--bins"][..],
    ] {
        let status = Command::new(&cargo)
            .current_dir(&root)
            .args(["build", "--release", "--locked"])
            .args(pkg)
            .status()
            .context("running cargo build")?;
        ensure!(status.success(), "cargo build failed: {status}");
    }
    let status = Command::new(root.join("target/release/node_sim"))
        .args(&args)
        .env("CGTRACE_BIN", root.join("target/release/cgtrace"))
        .status()
        .context("running node_sim")?;
    ensure!(status.success(), "node_sim failed: {status}");
    Ok(())
}
