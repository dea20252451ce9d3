//! `cargo xtask bench record`: what recording costs; see `cgtrace/benches/record.rs`.

use anyhow::Result;
use clap::Args;

use crate::workspace;

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
    let [rate, secs, replay_events] =
        [args.rate, args.secs, args.replay_events].map(|n| n.to_string());
    workspace::cargo(&[
        "bench",
        "--locked",
        "-p",
        "cgtrace",
        "--bench",
        "record",
        "--",
        &rate,
        &secs,
        &replay_events,
    ])
}
