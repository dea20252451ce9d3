//! `cargo xtask sim node`: the node simulator as an hour-long benchmark (see
//! `tests/src/bin/node_sim.rs`). Builds cgtrace and the simulator in release mode, then runs it;
//! every argument after `node` goes to the simulator (`--minutes`, `--pods`, `--containers`,
//! `--replace-per-min`, `--driver`, and after `--`, cgtrace's own).
use std::process::Command;

use anyhow::{Context, Result, ensure};
use clap::{Args, Subcommand};

use crate::workspace;

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
    workspace::build_cgtrace_and_test_bins(&[])?;
    let root = workspace::root();
    let status = Command::new(root.join("target/release/node_sim"))
        .args(&args)
        .env("CGTRACE_BIN", root.join("target/release/cgtrace"))
        .status()
        .context("running node_sim")?;
    ensure!(status.success(), "node_sim failed: {status}");
    Ok(())
}
