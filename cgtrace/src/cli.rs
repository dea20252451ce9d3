//! The command line's words: every subcommand, its flags and their checks (clap), and how a
//! usage error becomes one line. What each subcommand does is in `main.rs`.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use cgtrace::{
    bpf::loader::{ReadsMode, ThrottleMode},
    family::select::EventSelection,
    family::throttle::FlagRules,
    live::session::SessionOptions,
    metrics::MetricsOptions,
    record::{self},
};

#[derive(Parser)]
#[command(
    name = "cgtrace",
    version,
    about = "Per-cgroup run-queue latency (runq), CFS throttling (throttle) and slow pseudo-file reads (reads), traced with eBPF"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Write per-cgroup run-queue latency (runq), CFS throttling (throttle) and slow pseudo-file
    /// reads (reads) as NDJSON to stdout, one window line per interval.
    Stream(StreamArgs),
    /// Live full-screen view of per-cgroup run-queue latency (runq), CFS throttling (throttle) and
    /// slow pseudo-file reads (reads); press ? for keys.
    Top(TopArgs),
    /// Record windows of every family (runq, throttle, reads), their single events and cgroup
    /// names to a file, for `replay` and `report`.
    Record(RecordArgs),
    /// Replay a recording of runq, throttle and reads windows in the live view (pause, step, seek,
    /// speed; press ? for keys), or as the NDJSON stream with --stream.
    Replay(ReplayArgs),
    /// Summarise a recording for an incident: worst cgroups by run-queue wait (runq), throttling
    /// (throttle) and pseudo-file reads (reads), longest throttle episodes, who delayed whom,
    /// flags; as text, JSON or an HTML page.
    Report(ReportArgs),
    /// For throttled cgroups, replay their recorded CPU demand against other quota, period,
    /// burst or CPU settings and predict throttling, stalls and the wait that goes away (from a
    /// recording, or traced live with --for).
    Whatif(WhatifArgs),
    /// Trace headless and serve runq, throttle and reads metrics as OpenMetrics for Prometheus
    /// and/or push them as OTLP.
    Serve(ServeArgs),
    /// Probe the kernel and say which attach mode each family (runq, throttle, reads) would use.
    Doctor,
}

#[derive(Args)]
pub struct PrometheusArgs {
    /// Serve OpenMetrics at http://ADDR/metrics (e.g. 127.0.0.1:9464 or [::]:9464).
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<std::net::SocketAddr>,
    /// Most cgroups with series of their own; later ones are summed into cgroup="other".
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_series: u64,
    /// Drop a cgroup's series after this many seconds without activity.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub series_ttl: u64,
    /// Most (victim, culprit) pairs with a cgtrace_runq_wait_delayed_by_seconds series of their
    /// own (with --blame): the node's top pairs by recent wait; the rest are summed into
    /// cgroup="other", culprit="other".
    #[arg(long, default_value_t = cgtrace::family::runq::pairs::DEFAULT_MAX_PAIRS as u64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_pairs: u64,
    /// Push the same metrics as OTLP/HTTP protobuf after every window (an OpenTelemetry
    /// collector: http://HOST:4318/v1/metrics).
    #[arg(long, value_name = "URL", value_parser = cgtrace::metrics::otlp::parse_url)]
    pub otlp: Option<hyper::Uri>,
}

impl PrometheusArgs {
    pub fn get(&self) -> cgtrace::metrics::outputs::Outputs {
        cgtrace::metrics::outputs::Outputs {
            prometheus: self.prometheus,
            otlp: self.otlp.clone(),
            opts: self.options(),
        }
    }

    pub fn options(&self) -> MetricsOptions {
        MetricsOptions {
            max_series: self.max_series as usize,
            ttl: Duration::from_secs(self.series_ttl),
            max_pairs: self.max_pairs as usize,
        }
    }
}

/// `--events` (all families), `--events runq,throttle`, or absent (none).
#[derive(Args)]
pub struct EventsArg {
    /// Also print single events as lines: `runq_wait` (waits of at least `--event-min-ms`),
    /// `throttle` (each episode), `slow_read` (reads of at least `--slow-read-ms`). Bare
    /// `--events` means every family; or name them:
    /// `--events runq,throttle,reads`.
    #[arg(long, value_name = "FAMILIES", num_args = 0..=1, default_missing_value = "all", value_parser = parse_events)]
    pub events: Option<EventSelection>,
}

fn parse_events(s: &str) -> Result<EventSelection, String> {
    EventSelection::parse(&[s]).map_err(|e| e.to_string())
}

impl EventsArg {
    pub fn selection(&self) -> Result<EventSelection, cgtrace::family::select::UnknownFamily> {
        Ok(self.events.clone().unwrap_or_default())
    }
}

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// The file to write (created with mode 0600).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration: Option<u64>,
    /// Largest file: bytes with K, M, G or T (default 1G).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = record::parse_size)]
    pub max_size: u64,
    /// At --max-size, rename FILE to FILE.1 (… up to --keep) and go on in a new FILE.
    #[arg(long, conflicts_with = "stop_at_max")]
    pub rotate: bool,
    /// At --max-size, stop recording (the default).
    #[arg(long)]
    pub stop_at_max: bool,
    /// Rotated files kept with --rotate (FILE.1 … FILE.N; older ones are removed).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub keep: u32,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    pub force: bool,
    /// Stop writing while the filesystem holding FILE has less than SIZE free (K, M, G or T);
    /// what is not written is counted (recorder_dropped_chunks), tracing and metrics go on.
    #[arg(long, value_name = "SIZE", value_parser = record::parse_size)]
    pub min_free: Option<u64>,
    /// Also print the NDJSON stream to stdout, as `cgtrace stream` would.
    #[arg(long)]
    pub stream: bool,
    #[command(flatten)]
    pub events: EventsArg,
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// A file written by `cgtrace record`.
    pub file: PathBuf,
    /// Playback speed (0.125 to 1024; 1 is as recorded).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Print the recorded NDJSON stream to stdout instead of showing the view.
    #[arg(long)]
    pub stream: bool,
    #[command(flatten)]
    pub events: EventsArg,
    /// With --stream: leave out the closing `summary` line.
    #[arg(long)]
    pub no_summary: bool,
    /// View log file (as for `top`).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

#[derive(Args)]
pub struct ReportArgs {
    /// A file written by `cgtrace record`; or several parts of one rotated recording (FILE.2
    /// FILE.1 FILE, a flight recorder's restarts included), reported as one.
    #[arg(
        value_name = "FILE",
        required_unless_present = "compare",
        conflicts_with = "compare",
        num_args = 1..
    )]
    pub files: Vec<PathBuf>,
    /// Per cgroup, what changed between two recordings (BEFORE and AFTER a change): run-queue
    /// wait, throttling, the blame ledger, flags raised and cleared.
    #[arg(long, num_args = 2, value_names = ["BEFORE", "AFTER"])]
    pub compare: Option<Vec<PathBuf>>,
    /// JSON instead of text.
    #[arg(long, conflicts_with = "html")]
    pub json: bool,
    /// One self-contained HTML page with pictures (heatmaps, timelines) instead of text.
    #[arg(long)]
    pub html: bool,
    /// Write the report to this file (created; not through a link) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args)]
pub struct WhatifArgs {
    /// A file written by `cgtrace record`.
    #[arg(required_unless_present = "for_secs", conflicts_with = "for_secs")]
    pub file: Option<PathBuf>,
    /// Trace live for this many seconds (as `record` does, into a file removed after), then
    /// answer.
    #[arg(long = "for", value_name = "SECS", value_parser = clap::value_parser!(u64).range(5..=86_400))]
    pub for_secs: Option<u64>,
    /// Only this cgroup (its path, as the stream and report show it).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Quotas to try: CPUs (1.5) or time per period (150ms); comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = cgtrace::whatif::parse_quota)]
    pub quota: Vec<cgtrace::whatif::Quota>,
    /// Periods to try (100ms, 25ms, 1000us); comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = cgtrace::whatif::parse_time_us)]
    pub period: Vec<u64>,
    /// Bursts to try (20ms); comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = cgtrace::whatif::parse_time_us)]
    pub burst: Vec<u64>,
    /// CPUs the group may run on at once (a cpuset) to try; comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<f64>,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration: Option<u64>,
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
}

#[derive(Args)]
pub struct TraceArgs {
    /// Window length in milliseconds (100 to 3600000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub interval: u64,
    /// Most cgroups tracked at once (kernel maps and daemon table); least recently active are
    /// evicted beyond it, and counted (default: the host's cgroups at start, as `/proc/cgroups`
    /// counts them for `cpu`, and half again, rounded up to a power of two; at least 8192).
    #[arg(long, value_parser = clap::value_parser!(u32).range(16..=1_000_000))]
    pub max_cgroups: Option<u32>,
    /// Most (reader cgroup, comm, file) keys the reads family keeps (its files table holds twice
    /// as many); reads past it are counted as `read_stats_full`.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(64..=1_000_000))]
    pub max_read_keys: u32,
    /// Threads the reads family follows at once (a read in flight, or the thread's last file
    /// kept for its next read); least recently reading are evicted beyond it, and a read evicted
    /// while in flight is counted as `read_inflight_lost` (default: 256 per CPU, at least 16384).
    #[arg(long, value_parser = clap::value_parser!(u32).range(16..=16_000_000))]
    pub max_read_threads: Option<u32>,
    /// Turn on the kernel's BPF run-time statistics (BPF_ENABLE_STATS) while tracing, so each
    /// window's `self` has every program's runs and time per run. Off by default: each program
    /// run then costs two more clock reads (+0.17x on perf bench sched pipe on the development
    /// VM).
    #[arg(long)]
    pub bpf_stats: bool,
    /// Turn off the blame ledger, which is on by default: each cgroup's run-queue wait charged to
    /// whoever held the CPU meanwhile (`runq.blame`, `caused`). Its cost: a slice-ring write per
    /// context switch, a ring walk per wait of at least `--blame-min-us` and a per-CPU table
    /// update per shorter one.
    #[arg(long, overrides_with = "blame")]
    pub no_blame: bool,
    /// The blame ledger is on by default; kept so older command lines still run.
    #[arg(long, hide = true, overrides_with = "no_blame")]
    pub blame: bool,
    /// Waits at least this long (µs) are charged by the blame ledger's walk of the CPU's slices;
    /// shorter ones (5.18+) to the slice they waited behind, and before 5.18 count as
    /// unattributed.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub blame_min_us: u64,
    /// Waits at least this long (ms) are also sent as individual events (see `stream --events`);
    /// 0 sends every wait (a load test of the event path: hundreds of thousands a second).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub event_min_ms: u64,
    /// Flag a cgroup throttled while its average use is below this fraction of its quota (0.05 to
    /// 1.0).
    #[arg(long, default_value_t = 0.5, value_parser = parse_fraction)]
    pub below_quota_fraction: f64,
    /// How CFS throttle episodes are detected: the best available (auto), or one forced.
    #[arg(long, value_enum, default_value_t = ThrottleMode::Auto)]
    pub throttle_mode: ThrottleMode,
    /// How pseudo-file reads (cgroupfs, sysfs, procfs, FUSE) are timed: the best available
    /// (auto), one forced, or off.
    #[arg(long, value_enum, default_value_t = ReadsMode::Auto)]
    pub reads_mode: ReadsMode,
    /// Pseudo-file reads at least this long (ms, fractions allowed: 0.01 to 600000) are also sent
    /// as `slow_read` events.
    #[arg(long, default_value_t = 5.0, value_parser = parse_slow_read_ms)]
    pub slow_read_ms: f64,
    /// Ring buffer size in KiB (a power of two, 64 to 262144).
    #[arg(long, default_value_t = 1024, value_parser = parse_ringbuf_kib)]
    pub ringbuf_kib: u32,
    /// containerd's state directory: its CRI bundles name the containers kubelet's log links do
    /// not (a pod's sandbox, containers kubelet did not start). k3s keeps it in
    /// /run/k3s/containerd.
    #[arg(long, value_name = "DIR", default_value = cgtrace::cgroup::name::DEFAULT_CONTAINERD_STATE)]
    pub containerd_state: std::path::PathBuf,
    /// Exit (status 1, one line) if capabilities cannot be dropped after attach, instead of
    /// warning and running with more than it needs. Dropping the bounding set needs CAP_SETPCAP.
    #[arg(long)]
    pub require_drop: bool,
}

#[derive(Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM or stdout closes).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration: Option<u64>,
    /// Do not print the closing `summary` line with since-start histograms.
    #[arg(long)]
    pub no_summary: bool,
    #[command(flatten)]
    pub events: EventsArg,
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
}

#[derive(Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Log file (default: $XDG_STATE_HOME/cgtrace/top.log or ~/.local/state/cgtrace/top.log).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

/// A number `what` (`"a number"`, `"a number of KiB"`) in `range`, with its unit in the error.
fn parse_in<T>(
    s: &str,
    what: &str,
    unit: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let v: T = s.parse().map_err(|_| format!("{s:?} is not {what}"))?;
    if !range.contains(&v) {
        return Err(format!(
            "{v}{unit}: must be between {} and {}",
            range.start(),
            range.end()
        ));
    }
    Ok(v)
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    parse_in(s, "a number", "", 0.05..=1.0)
}

fn parse_slow_read_ms(s: &str) -> Result<f64, String> {
    parse_in(s, "a number of milliseconds", " ms", 0.01..=600_000.0)
}

fn parse_ringbuf_kib(s: &str) -> Result<u32, String> {
    let v: u32 = parse_in(s, "a number of KiB", " KiB", 64..=262_144)?;
    if !v.is_power_of_two() {
        return Err(format!(
            "{v} KiB: must be a power of two between 64 and 262144"
        ));
    }
    Ok(v)
}

/// `--max-cgroups` when it is not given, for a host with `live` cgroups: room for them and half
/// again (pods come and go), as a power of two, at least 8192. A node with 10 000 cgroups gets
/// 16 384 instead of evicting 1 700 of them every window.
pub fn default_max_cgroups(live: u64) -> u32 {
    live.saturating_add(live / 2)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX)
        .clamp(8192, 1 << 19) as u32
}

impl TraceArgs {
    pub fn session(&self) -> SessionOptions {
        SessionOptions {
            interval: Duration::from_millis(self.interval),
            max_cgroups: self.max_cgroups.unwrap_or_else(|| {
                let live = cgtrace::cgroup::hierarchy::num_cgroups(
                    std::path::Path::new(cgtrace::cgroup::hierarchy::PROC_CGROUPS),
                    "cpu",
                );
                default_max_cgroups(live.unwrap_or(0))
            }),
            max_read_keys: self.max_read_keys,
            max_read_threads: self.max_read_threads,
            bpf_stats: self.bpf_stats,
            blame_min: (!self.no_blame).then(|| Duration::from_micros(self.blame_min_us)),
            event_min: Duration::from_millis(self.event_min_ms),
            ringbuf_bytes: self.ringbuf_kib * 1024,
            throttle_mode: self.throttle_mode,
            flag_rules: FlagRules {
                below_quota_fraction: self.below_quota_fraction,
                ..FlagRules::default()
            },
            reads_mode: self.reads_mode,
            slow_read_min: Duration::from_secs_f64(self.slow_read_ms / 1e3),
            containerd_state: self.containerd_state.clone(),
        }
    }
}

/// One line from clap's usage error: what was wrong, with the arguments it names (clap puts them
/// on the lines after the first), without the usage and tip that follow.
pub fn usage_error(msg: &str) -> String {
    let mut parts = Vec::new();
    for line in msg.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more information")
        {
            break;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    let one = parts.join(" ");
    if one.is_empty() {
        "invalid arguments".into()
    } else {
        one
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    fn error_of(args: &[&str]) -> String {
        match Cli::try_parse_from(args) {
            Ok(_) => panic!("{args:?} parsed"),
            Err(e) => usage_error(&e.to_string()),
        }
    }

    #[test]
    fn usage_errors_are_one_line_that_names_the_arguments() {
        let e = error_of(&["cgtrace", "record"]);
        assert!(e.contains("required arguments were not provided"), "{e}");
        assert!(e.contains("--output <FILE>"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = error_of(&["cgtrace", "stream", "--interval", "5"]);
        assert!(e.contains("--interval") && e.contains('5'), "{e}");
        assert!(!e.contains("Usage"), "{e}");
        let e = error_of(&["cgtrace", "stream", "--events", "bogus"]);
        assert!(
            e.contains("\"bogus\"") && e.contains("runq, throttle, reads"),
            "{e}"
        );
    }

    #[test]
    fn the_default_cgroup_bound_grows_with_the_host() {
        assert_eq!(default_max_cgroups(0), 8192);
        assert_eq!(default_max_cgroups(300), 8192);
        assert_eq!(default_max_cgroups(5461), 8192);
        assert_eq!(default_max_cgroups(10_000), 16_384);
        assert_eq!(default_max_cgroups(40_000), 65_536);
        assert_eq!(default_max_cgroups(u64::MAX), 1 << 19);
        // An explicit flag wins.
        let Ok(Cli {
            command: Command::Stream(a),
            ..
        }) = Cli::try_parse_from(["cgtrace", "stream", "--max-cgroups", "256"])
        else {
            panic!("stream did not parse");
        };
        assert_eq!(a.trace.session().max_cgroups, 256);
    }

    #[test]
    fn the_help_names_every_family() {
        let help = Cli::command().render_help().to_string();
        for f in cgtrace::family::FAMILIES {
            assert!(help.contains(f.name), "{} not in --help:\n{help}", f.name);
        }
        // Every subcommand covers every family, and its own --help says so.
        let mut cli = Cli::command();
        for sub in cli.get_subcommands_mut() {
            let name = sub.get_name().to_string();
            let help = sub.render_help().to_string();
            for f in cgtrace::family::FAMILIES {
                assert!(
                    help.contains(f.name),
                    "`cgtrace {name} --help` does not name {}:\n{help}",
                    f.name
                );
            }
        }
    }
}
