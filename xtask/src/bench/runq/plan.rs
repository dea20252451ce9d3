//! What a `bench runq` run does: its flags, the configurations a round runs, and the checked
//! plan made of them.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use cgtrace_tests::runqlat;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::workspace;

const DEFAULT_ROUNDS: u32 = 5;
/// ~3–5 s per run on the dev VM (9–15 µs per op, depending on where the two tasks land).
const DEFAULT_LOOPS: u64 = 350_000;
const QUICK_LOOPS: u64 = 50_000;

#[derive(Args)]
pub(crate) struct RunqArgs {
    /// Interleaved rounds, each running every configuration once [default: 5; 1 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: Option<u32>,
    /// `perf bench sched pipe -l` loops per run [default: 350000, ~3-5 s; 50000 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    loops: Option<u64>,
    /// Smoke run: one round of short runs.
    #[arg(long)]
    quick: bool,
    /// Pin perf's two tasks to this CPU. Unpinned, where the scheduler places them moves the bare
    /// time by up to 2x between runs here, more than the overhead being measured.
    #[arg(long)]
    pin: Option<usize>,
    /// The cgtrace binary [default: <workspace>/target/release/cgtrace].
    #[arg(long)]
    cgtrace: Option<PathBuf>,
    /// Another cgtrace binary (e.g. the previous commit's build) for the `baseline`
    /// configuration: a before/after in one interleaved run.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// `cgtrace stream --interval`, in ms.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Configurations, in their order within a round (comma-separated): bare, cgtrace (as a
    /// user starts it), cgtrace-stats (--bpf-stats, for its ns per program run), cgtrace-reads
    /// (--reads-mode syscall), cgtrace-events (--event-min-ms 0: every wait an event),
    /// cgtrace-no-blame (--no-blame), cgtrace-no-blame-stats; cgtrace-own, cgtrace-own-stats,
    /// cgtrace-own-no-blame, cgtrace-own-no-blame-stats (the same on the path kernels before
    /// 6.18 take, CGTRACE_RUNQ_WAITS=own); floor, floor-stats,
    /// floor-own, floor-own-stats (empty programs on the same hooks: the tables then show the
    /// cost above them); floor-clock, floor-clock-stats, floor-clock-own, floor-clock-own-stats
    /// (programs there that only read the clock: what one clock read per run costs above the
    /// floor); baseline (the --baseline binary as a user starts it), baseline-stats,
    /// baseline-own-stats (it with --bpf-stats, on either path), runqlat,
    /// runqlat-stats (with BPF run-time statistics on, for its ns per run).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "bare,cgtrace,cgtrace-stats,runqlat,runqlat-stats"
    )]
    configs: Vec<Config>,
    /// Where the raw numbers go [default: <workspace>/target/bench/runq.json].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Config {
    Bare,
    /// `cgtrace stream` as a user starts it (reads per `auto`).
    Cgtrace,
    /// With `--bpf-stats`: each program's ns per run, and what the statistics cost.
    CgtraceStats,
    /// With `--reads-mode syscall`: the reads family where fentry cannot load.
    CgtraceReads,
    /// With `--event-min-ms 0`: every wait also goes through the ring buffer as an event (the
    /// high-rate check of the event path: events absorbed, drops, daemon CPU).
    CgtraceEvents,
    /// With `--no-blame`: without the blame ledger (on by default), what it costs.
    CgtraceNoBlame,
    /// With `--no-blame --bpf-stats`: the ledger's ns per program run.
    CgtraceNoBlameStats,
    /// `CGTRACE_RUNQ_WAITS=own`: the path kernels before 6.18 take (cgtrace's own wait stamps,
    /// programs on sched_wakeup and sched_wakeup_new too).
    CgtraceOwn,
    /// The own-stamps path with `--bpf-stats`.
    CgtraceOwnStats,
    /// The own-stamps path with `--no-blame`.
    CgtraceOwnNoBlame,
    /// The own-stamps path with `--no-blame --bpf-stats`.
    CgtraceOwnNoBlameStats,
    /// `CGTRACE_BENCH_FLOOR=1`: empty programs on the hooks the 6.18 path uses (sched_switch),
    /// the rest of cgtrace as usual: what any program there costs.
    Floor,
    /// The floor with `--bpf-stats`: an empty program's ns per run.
    FloorStats,
    /// The floor of the own-stamps path (and of runqlat): empty programs on sched_switch,
    /// sched_wakeup and sched_wakeup_new.
    FloorOwn,
    /// The own-stamps floor with `--bpf-stats`.
    FloorOwnStats,
    /// `CGTRACE_BENCH_FLOOR=clock`: on the 6.18 path's hooks, programs that only read the clock
    /// and keep it (sched_switch; the wakeup one stays empty, as cgtrace's reads none): the
    /// least any tool that times waits pays, above the floor.
    FloorClock,
    /// The clock floor with `--bpf-stats`: the clock read's ns per run.
    FloorClockStats,
    /// The clock floor on the own-stamps path's hooks (sched_switch, sched_wakeup and
    /// sched_wakeup_new each read the clock).
    FloorClockOwn,
    /// The own-stamps clock floor with `--bpf-stats`.
    FloorClockOwnStats,
    /// The `--baseline` binary as a user starts it.
    Baseline,
    /// The `--baseline` binary with `--bpf-stats`: a change's ns per program run against the
    /// build before, in one run.
    BaselineStats,
    /// The `--baseline` binary on the own-stamps path with `--bpf-stats`.
    BaselineOwnStats,
    Runqlat,
    /// runqlat with the kernel's BPF run-time statistics on, for its ns per program run.
    RunqlatStats,
}

const OWN: (&str, &str) = ("CGTRACE_RUNQ_WAITS", "own");
const FLOOR: (&str, &str) = ("CGTRACE_BENCH_FLOOR", "1");
const FLOOR_CLOCK: (&str, &str) = ("CGTRACE_BENCH_FLOOR", "clock");

impl Config {
    pub(super) fn name(self) -> &'static str {
        match self {
            Config::Bare => "bare",
            Config::Cgtrace => "cgtrace",
            Config::CgtraceStats => "cgtrace-stats",
            Config::CgtraceReads => "cgtrace-reads",
            Config::CgtraceEvents => "cgtrace-events",
            Config::CgtraceNoBlame => "cgtrace-no-blame",
            Config::CgtraceNoBlameStats => "cgtrace-no-blame-stats",
            Config::CgtraceOwn => "cgtrace-own",
            Config::CgtraceOwnStats => "cgtrace-own-stats",
            Config::CgtraceOwnNoBlame => "cgtrace-own-no-blame",
            Config::CgtraceOwnNoBlameStats => "cgtrace-own-no-blame-stats",
            Config::Floor => "floor",
            Config::FloorStats => "floor-stats",
            Config::FloorOwn => "floor-own",
            Config::FloorOwnStats => "floor-own-stats",
            Config::FloorClock => "floor-clock",
            Config::FloorClockStats => "floor-clock-stats",
            Config::FloorClockOwn => "floor-clock-own",
            Config::FloorClockOwnStats => "floor-clock-own-stats",
            Config::Baseline => "baseline",
            Config::BaselineStats => "baseline-stats",
            Config::BaselineOwnStats => "baseline-own-stats",
            Config::Runqlat => "runqlat",
            Config::RunqlatStats => "runqlat-stats",
        }
    }

    /// `cgtrace stream` arguments beyond `--interval`, for the configurations that run a
    /// cgtrace binary.
    pub(super) fn cgtrace_args(self) -> Option<&'static [&'static str]> {
        match self {
            Config::Cgtrace
            | Config::Baseline
            | Config::CgtraceOwn
            | Config::Floor
            | Config::FloorOwn
            | Config::FloorClock
            | Config::FloorClockOwn => Some(&[]),
            Config::CgtraceStats
            | Config::CgtraceOwnStats
            | Config::FloorStats
            | Config::FloorOwnStats
            | Config::FloorClockStats
            | Config::FloorClockOwnStats
            | Config::BaselineStats
            | Config::BaselineOwnStats => Some(&["--bpf-stats"]),
            Config::CgtraceReads => Some(&["--reads-mode", "syscall"]),
            Config::CgtraceEvents => Some(&["--event-min-ms", "0"]),
            Config::CgtraceNoBlame | Config::CgtraceOwnNoBlame => Some(&["--no-blame"]),
            Config::CgtraceNoBlameStats | Config::CgtraceOwnNoBlameStats => {
                Some(&["--no-blame", "--bpf-stats"])
            }
            Config::Bare | Config::Runqlat | Config::RunqlatStats => None,
        }
    }

    /// Environment the cgtrace binary runs with.
    pub(super) fn cgtrace_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Config::CgtraceOwn
            | Config::CgtraceOwnStats
            | Config::CgtraceOwnNoBlame
            | Config::CgtraceOwnNoBlameStats
            | Config::BaselineOwnStats => &[OWN],
            Config::Floor | Config::FloorStats => &[FLOOR],
            Config::FloorOwn | Config::FloorOwnStats => &[OWN, FLOOR],
            Config::FloorClock | Config::FloorClockStats => &[FLOOR_CLOCK],
            Config::FloorClockOwn | Config::FloorClockOwnStats => &[OWN, FLOOR_CLOCK],
            _ => &[],
        }
    }

    /// The floor configuration on the same hooks, with the same statistics setting: what this
    /// configuration's slowdown is compared with. runqlat's programs sit where the own-stamps
    /// path's do.
    pub(super) fn floor(self) -> Option<Config> {
        match self {
            Config::Cgtrace
            | Config::CgtraceReads
            | Config::CgtraceEvents
            | Config::CgtraceNoBlame
            | Config::FloorClock
            | Config::Baseline => Some(Config::Floor),
            Config::CgtraceStats
            | Config::CgtraceNoBlameStats
            | Config::FloorClockStats
            | Config::BaselineStats => Some(Config::FloorStats),
            Config::CgtraceOwn
            | Config::CgtraceOwnNoBlame
            | Config::FloorClockOwn
            | Config::Runqlat => Some(Config::FloorOwn),
            Config::CgtraceOwnStats
            | Config::CgtraceOwnNoBlameStats
            | Config::RunqlatStats
            | Config::FloorClockOwnStats
            | Config::BaselineOwnStats => Some(Config::FloorOwnStats),
            Config::Bare
            | Config::Floor
            | Config::FloorStats
            | Config::FloorOwn
            | Config::FloorOwnStats => None,
        }
    }

    /// Runs the workspace's cgtrace binary.
    pub(super) fn runs_cgtrace(self) -> bool {
        self.cgtrace_args().is_some() && !self.runs_baseline()
    }

    /// Runs the `--baseline` binary.
    pub(super) fn runs_baseline(self) -> bool {
        matches!(
            self,
            Config::Baseline | Config::BaselineStats | Config::BaselineOwnStats
        )
    }
}

#[derive(Serialize)]
pub(super) struct Plan {
    pub(super) rounds: u32,
    pub(super) loops: u64,
    pub(super) configs: Vec<Config>,
    pub(super) cgtrace: PathBuf,
    pub(super) baseline: Option<PathBuf>,
    pub(super) interval_ms: u64,
    pub(super) pin: Option<usize>,
    #[serde(skip)]
    pub(super) out: PathBuf,
    #[serde(skip)]
    pub(super) perf: PathBuf,
}

impl Plan {
    pub(super) fn new(args: RunqArgs) -> Result<Self> {
        let root = workspace::root();
        let plan = Plan {
            rounds: args
                .rounds
                .unwrap_or(if args.quick { 1 } else { DEFAULT_ROUNDS }),
            loops: args.loops.unwrap_or(if args.quick {
                QUICK_LOOPS
            } else {
                DEFAULT_LOOPS
            }),
            configs: dedup(args.configs),
            cgtrace: args
                .cgtrace
                .unwrap_or_else(|| root.join("target/release/cgtrace")),
            baseline: args.baseline,
            interval_ms: args.interval_ms,
            pin: args.pin,
            out: args
                .out
                .unwrap_or_else(|| root.join("target/bench/runq.json")),
            perf: find_on_path("perf").context("perf not found: apt-get install linux-perf")?,
        };
        plan.check_tracers()?;
        Ok(plan)
    }

    fn has(&self, config: Config) -> bool {
        self.configs.contains(&config)
    }

    fn check_tracers(&self) -> Result<()> {
        if self.configs.iter().any(|c| *c != Config::Bare) {
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            ensure!(uid == 0, "bench runq needs root to attach BPF programs");
        }
        if self.configs.iter().any(|c| c.runs_cgtrace()) {
            ensure!(
                self.cgtrace.is_file(),
                "cgtrace not found at {}: cargo build --release -p cgtrace, or pass --cgtrace PATH \
                 (or --configs bare,runqlat)",
                self.cgtrace.display()
            );
        }
        if self.configs.iter().any(|c| c.runs_baseline()) {
            match &self.baseline {
                Some(b) => ensure!(b.is_file(), "--baseline {}: no such file", b.display()),
                None => {
                    bail!("the baseline configuration needs --baseline PATH (a cgtrace binary)")
                }
            }
        }
        if self.has(Config::Runqlat) || self.has(Config::RunqlatStats) {
            runqlat::find_runqlat()?;
        }
        Ok(())
    }
}

fn dedup(configs: Vec<Config>) -> Vec<Config> {
    let mut out = Vec::new();
    for c in configs {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
