//! The `cgtrace` command line.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand};

use cgtrace::{
    doctor,
    loader::{ReadsMode, ThrottleMode},
    session::SessionOptions,
    stream,
    throttle::FlagRules,
    top,
};

#[derive(Parser)]
#[command(
    name = "cgtrace",
    version,
    about = "Per-cgroup scheduler latency, traced with eBPF"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write per-cgroup run-queue latency and CFS throttling as NDJSON to stdout, one line per
    /// interval.
    Stream(StreamArgs),
    /// Live full-screen view of per-cgroup run-queue latency and throttling (press ? for keys).
    Top(TopArgs),
    /// Probe the kernel and say which attach mode each feature would use.
    Doctor,
}

#[derive(Args)]
struct TraceArgs {
    /// Window length in milliseconds (100 to 3600000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    interval: u64,
    /// Most cgroups tracked at once (kernel maps and daemon table); least recently active are
    /// evicted beyond it, and counted.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u32).range(16..=1_000_000))]
    max_cgroups: u32,
    /// Waits at least this long (ms) are also sent as individual events (see `stream --events`).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    event_min_ms: u64,
    /// Flag a cgroup throttled while its average use is below this fraction of its quota (0.05 to
    /// 1.0).
    #[arg(long, default_value_t = 0.5, value_parser = parse_fraction)]
    below_quota_fraction: f64,
    /// How CFS throttle episodes are detected: the best available (auto), or one forced.
    #[arg(long, value_enum, default_value_t = ThrottleMode::Auto)]
    throttle_mode: ThrottleMode,
    /// How pseudo-file reads (cgroupfs, sysfs, procfs, FUSE) are timed: the best available
    /// (auto), one forced, or off.
    #[arg(long, value_enum, default_value_t = ReadsMode::Auto)]
    reads_mode: ReadsMode,
    /// Pseudo-file reads at least this long (ms, fractions allowed: 0.01 to 600000) are also sent
    /// as `slow_read` events.
    #[arg(long, default_value_t = 5.0, value_parser = parse_slow_read_ms)]
    slow_read_ms: f64,
    /// Ring buffer size in KiB (a power of two, 64 to 262144).
    #[arg(long, default_value_t = 1024, value_parser = parse_ringbuf_kib)]
    ringbuf_kib: u32,
}

#[derive(Args)]
struct StreamArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM or stdout closes).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    duration: Option<u64>,
    /// Do not print the closing `summary` line with since-start histograms.
    #[arg(long)]
    no_summary: bool,
    /// Also print each run-queue wait of at least `--event-min-ms` as a `runq_wait` line, each
    /// throttle episode as a `throttle` line, and each read of at least `--slow-read-ms` as a
    /// `slow_read` line.
    #[arg(long)]
    events: bool,
}

#[derive(Args)]
struct TopArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Log file (default: $XDG_STATE_HOME/cgtrace/top.log or ~/.local/state/cgtrace/top.log).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(0.05..=1.0).contains(&v) {
        return Err(format!("{v}: must be between 0.05 and 1.0"));
    }
    Ok(v)
}

fn parse_slow_read_ms(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    if !(0.01..=600_000.0).contains(&v) {
        return Err(format!("{v} ms: must be between 0.01 and 600000"));
    }
    Ok(v)
}

fn parse_ringbuf_kib(s: &str) -> Result<u32, String> {
    let v: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of KiB"))?;
    if !(64..=262_144).contains(&v) || !v.is_power_of_two() {
        return Err(format!(
            "{v} KiB: must be a power of two between 64 and 262144"
        ));
    }
    Ok(v)
}

impl TraceArgs {
    fn session(&self) -> SessionOptions {
        SessionOptions {
            interval: Duration::from_millis(self.interval),
            max_cgroups: self.max_cgroups,
            event_min: Duration::from_millis(self.event_min_ms),
            ringbuf_bytes: self.ringbuf_kib * 1024,
            throttle_mode: self.throttle_mode,
            flag_rules: FlagRules {
                below_quota_fraction: self.below_quota_fraction,
            },
            reads_mode: self.reads_mode,
            slow_read_min: Duration::from_secs_f64(self.slow_read_ms / 1e3),
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: what was wrong and where to look.
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("cgtrace: error: {first} (see `cgtrace --help`)");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Stream(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                rt.block_on(stream::run(
                    args.trace.session(),
                    args.duration.map(Duration::from_secs),
                    !args.no_summary,
                    args.events,
                ))
            }),
        Command::Top(args) => top::run(args.trace.session(), args.log),
        Command::Doctor => doctor::run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cgtrace: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
