//! `cargo xtask bench record`: what recording costs; see `cgtrace/benches/record.rs`.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use clap::Args;

use super::workspace_root;

#[derive(Args)]
pub(super) struct RecordBenchArgs {
    /// Events per second fed to the recorder.
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    /// How long to record at that rate, in seconds.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Events in the file replayed for the replay speed.
    #[arg(long, default_value_t = 5_000_000)]
    replay_events: u64,
}

/// `cargo bench -p cgtrace --bench record`, which prints the figures and writes
/// `target/bench/record.json`.
pub(super) fn run(args: RecordBenchArgs) -> Result<()> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(workspace_root())
        .args([
            "bench", "--locked", "-p", "cgtrace", "--bench", "record", "--",
        ])
        .args([
            args.rate.to_string(),
            args.secs.to_string(),
            args.replay_events.to_string(),
        ])
        .status()
        .context("running cargo bench")?;
    ensure!(status.success(), "cargo bench failed: {status}");
    Ok(())
}
