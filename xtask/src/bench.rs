//! `cargo xtask bench runq`: what tracing costs a scheduler-heavy load. (`cargo xtask bench
//! record`: what recording costs; see `cgtrace/benches/record.rs`.)
//!
//! `perf bench sched pipe` (~200 k context switches/s on the 2-vCPU dev VM) runs in interleaved
//! rounds: bare, under `cgtrace stream`, under libbpf-tools `runqlat` (A B C, A B C, …), so drift
//! over the session hits all three alike. `--pin CPU` pins perf's tasks to one CPU. Each tracer is attached before perf
//! starts (cgtrace: its `hello` line and a first `window` line; runqlat: its SIGINT handler is
//! installed, which it does right after attaching) and stopped with SIGINT after perf exits.
//!
//! Per configuration: median perf "Total time", slowdown vs bare (ratio of medians), and for the
//! tracers their own CPU while perf ran (utime+stime from /proc/PID/stat, % of one CPU) and the
//! events they took in. BPF program time is charged to the traced tasks, so it shows up in the
//! slowdown, not in the tracer's CPU.

use std::{
    fs,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread::{self, JoinHandle},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result, bail, ensure};
use cgtrace_tests::runqlat;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value;


const DEFAULT_ROUNDS: u32 = 5;
/// ~3–5 s per run on the dev VM (9–15 µs per op, depending on where the two tasks land).
const DEFAULT_LOOPS: u64 = 350_000;
const QUICK_LOOPS: u64 = 50_000;
/// Bounds for a hung daemon only; nothing is asserted on time.
const CGTRACE_ATTACH_TIMEOUT: Duration = Duration::from_secs(60);
const CGTRACE_EXIT_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Slowdown of `perf bench sched pipe` under cgtrace and under runqlat, vs bare.
    Runq(RunqArgs),
    /// Nanoseconds added per read syscall (regular and cgroup files, 1-byte reads) by cgtrace.
    Reads(crate::bench_reads::ReadsArgs),
    /// Recording costs: bytes per event on disk, recorder CPU at an event rate, replay speed
    /// (`cgtrace/benches/record.rs`, synthetic records shaped like the kernel's).
    Record(RecordBenchArgs),
}

#[derive(Args)]
struct RecordBenchArgs {
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
fn record(args: RecordBenchArgs) -> Result<()> {
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

#[derive(Args)]
struct RunqArgs {
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
    /// cgtrace-blame (--blame), baseline (the --baseline binary as a user starts it), runqlat,
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
enum Config {
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
    /// With `--blame`: what the blame ledger's per-switch slice ring costs.
    CgtraceBlame,
    /// The `--baseline` binary as a user starts it.
    Baseline,
    Runqlat,
    /// runqlat with the kernel's BPF run-time statistics on, for its ns per program run.
    RunqlatStats,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Bare => "bare",
            Config::Cgtrace => "cgtrace",
            Config::CgtraceStats => "cgtrace-stats",
            Config::CgtraceReads => "cgtrace-reads",
            Config::CgtraceEvents => "cgtrace-events",
            Config::CgtraceBlame => "cgtrace-blame",
            Config::Baseline => "baseline",
            Config::Runqlat => "runqlat",
            Config::RunqlatStats => "runqlat-stats",
        }
    }

    /// `cgtrace stream` arguments beyond `--interval`, for the cgtrace configurations.
    fn cgtrace_args(self) -> Option<&'static [&'static str]> {
        match self {
            Config::Cgtrace | Config::Baseline => Some(&[]),
            Config::CgtraceStats => Some(&["--bpf-stats"]),
            Config::CgtraceReads => Some(&["--reads-mode", "syscall"]),
            Config::CgtraceEvents => Some(&["--event-min-ms", "0"]),
            Config::CgtraceBlame => Some(&["--blame"]),
            _ => None,
        }
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.bench {
        Bench::Runq(args) => runq(Plan::new(args)?),
        Bench::Reads(args) => crate::bench_reads::run(args),
        Bench::Record(args) => record(args),
    }
}

// ---------------------------------------------------------------------------------------------
// Plan

#[derive(Serialize)]
struct Plan {
    rounds: u32,
    loops: u64,
    configs: Vec<Config>,
    cgtrace: PathBuf,
    baseline: Option<PathBuf>,
    interval_ms: u64,
    pin: Option<usize>,
    #[serde(skip)]
    out: PathBuf,
    #[serde(skip)]
    perf: PathBuf,
}

impl Plan {
    fn new(args: RunqArgs) -> Result<Self> {
        let root = workspace_root();
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
        if self.has(Config::Cgtrace) || self.has(Config::Baseline) || self.has(Config::Runqlat) {
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            ensure!(uid == 0, "bench runq needs root to attach BPF programs");
        }
        if self.has(Config::Cgtrace) {
            ensure!(
                self.cgtrace.is_file(),
                "cgtrace not found at {}: cargo build --release -p cgtrace, or pass --cgtrace PATH \
                 (or --configs bare,runqlat)",
                self.cgtrace.display()
            );
        }
        if self.has(Config::Baseline) {
            match &self.baseline {
                Some(b) => ensure!(b.is_file(), "--baseline {}: no such file", b.display()),
                None => {
                    bail!("the baseline configuration needs --baseline PATH (a cgtrace binary)")
                }
            }
        }
        if self.has(Config::Runqlat) {
            runqlat::find_runqlat()?;
        }
        Ok(())
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
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

// ---------------------------------------------------------------------------------------------
// Rounds

/// One perf run in one configuration.
#[derive(Serialize)]
struct Run {
    round: u32,
    config: Config,
    /// perf's "Total time".
    total_s: f64,
    usecs_per_op: f64,
    /// perf's whole process, as seen from here.
    wall_s: f64,
    tracer: Option<TracerStats>,
}

#[derive(Serialize)]
struct TracerStats {
    /// The tracer's utime+stime while perf ran, in % of one CPU.
    cpu_pct: f64,
    /// cgtrace: sum of `events.seen` over the windows after the first (the first one covers the
    /// idle time before perf started). runqlat: latency samples in its histogram.
    events: u64,
    /// `events` over the time they cover (cgtrace: between the arrivals of the first and the
    /// last window; runqlat: from attach to SIGINT).
    events_per_s: Option<f64>,
    /// cgtrace: sum of `events.dropped` over all windows.
    dropped: Option<u64>,
    /// cgtrace: window lines received, the first and the partial last one included.
    windows: Option<usize>,
    /// Each BPF program's runs and time while perf ran (cgtrace: its windows' `self` after the
    /// first; runqlat-stats: its program fds' statistics across the perf run).
    programs: Vec<crate::progcost::ProgramRuns>,
}

fn runq(plan: Plan) -> Result<()> {
    let mut runs = Vec::new();
    for round in 1..=plan.rounds {
        for &config in &plan.configs {
            let run = run_one(&plan, config, round)
                .with_context(|| format!("round {round}, {}", config.name()))?;
            eprintln!(
                "round {round}/{} {:<8} {:.3} s  {:.2} usecs/op",
                plan.rounds,
                config.name(),
                run.total_s,
                run.usecs_per_op
            );
            runs.push(run);
        }
    }
    let summary = summarize(&plan.configs, &runs);
    print!("{}", markdown_table(&summary));
    if summary.iter().any(|s| !s.programs.is_empty()) {
        print!("\n{}", program_table(&summary));
    }
    println!("\n{}", one_line_summary(&plan, &summary));
    write_report(&plan, &runs, &summary)
}

fn run_one(plan: &Plan, config: Config, round: u32) -> Result<Run> {
    let (perf, tracer) = match config {
        Config::Bare => (run_perf(plan)?, None),
        Config::Cgtrace
        | Config::CgtraceStats
        | Config::CgtraceReads
        | Config::CgtraceEvents
        | Config::CgtraceBlame => {
            let args = config.cgtrace_args().unwrap_or(&[]);
            let (perf, stats) = under_cgtrace(plan, &plan.cgtrace, args)?;
            (perf, Some(stats))
        }
        Config::Baseline => {
            let bin = plan.baseline.as_ref().context("--baseline")?;
            let (perf, stats) = under_cgtrace(plan, bin, &[])?;
            (perf, Some(stats))
        }
        Config::Runqlat => {
            let (perf, stats) = under_runqlat(plan, false)?;
            (perf, Some(stats))
        }
        Config::RunqlatStats => {
            let (perf, stats) = under_runqlat(plan, true)?;
            (perf, Some(stats))
        }
    };
    Ok(Run {
        round,
        config,
        total_s: perf.total_s,
        usecs_per_op: perf.usecs_per_op,
        wall_s: perf.wall_s,
        tracer,
    })
}

fn under_cgtrace(plan: &Plan, bin: &Path, extra: &[&str]) -> Result<(Perf, TracerStats)> {
    let cgtrace = Cgtrace::start(bin, plan.interval_ms, extra)?;
    let (perf, cpu_pct) = perf_beside(plan, cgtrace.pid())?;
    let windows = cgtrace.stop()?;
    let stats = window_stats(&windows);
    Ok((
        perf,
        TracerStats {
            cpu_pct,
            events: stats.seen,
            events_per_s: stats.per_s,
            dropped: Some(stats.dropped),
            windows: Some(windows.len()),
            programs: window_programs(&windows),
        },
    ))
}

fn under_runqlat(plan: &Plan, with_stats: bool) -> Result<(Perf, TracerStats)> {
    // Taken before runqlat loads, so its programs are counted from their first run.
    let stats_fd = if with_stats {
        Some(crate::progcost::enable_stats()?)
    } else {
        None
    };
    let rq = runqlat::Runqlat::start_all()?;
    let attached = Instant::now();
    let before = crate::progcost::read(rq.pid())?;
    let (perf, cpu_pct) = perf_beside(plan, rq.pid())?;
    let after = crate::progcost::read(rq.pid())?;
    let programs = if with_stats {
        crate::progcost::delta(&before, &after)
    } else {
        Vec::new()
    };
    let span = attached.elapsed().as_secs_f64();
    let events = rq.stop()?.total();
    drop(stats_fd);
    Ok((
        perf,
        TracerStats {
            cpu_pct,
            events,
            events_per_s: Some(events as f64 / span),
            dropped: None,
            windows: None,
            programs,
        },
    ))
}

/// Runs perf while `tracer` is attached; also the tracer's CPU over that time.
fn perf_beside(plan: &Plan, tracer: u32) -> Result<(Perf, f64)> {
    let before = cpu_ticks(tracer)?;
    let perf = run_perf(plan)?;
    let after = cpu_ticks(tracer)?;
    let cpu_s = after.saturating_sub(before) as f64 / clock_ticks_per_s();
    Ok((perf, 100.0 * cpu_s / perf.wall_s))
}

// ---------------------------------------------------------------------------------------------
// perf bench

#[derive(Clone, Copy, Debug, PartialEq)]
struct Perf {
    total_s: f64,
    usecs_per_op: f64,
    wall_s: f64,
}

fn run_perf(plan: &Plan) -> Result<Perf> {
    let start = Instant::now();
    let mut cmd = Command::new(&plan.perf);
    cmd.args(["bench", "sched", "pipe", "-l", &plan.loops.to_string()])
        .stdin(Stdio::null());
    if let Some(cpu) = plan.pin {
        use std::os::unix::process::CommandExt;
        // SAFETY: only sched_setaffinity between fork and exec; perf's children inherit it.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = cmd.output().context("running perf bench")?;
    let wall_s = start.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "perf bench sched pipe failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let (total_s, usecs_per_op) = parse_perf(&String::from_utf8_lossy(&out.stdout))?;
    Ok(Perf {
        total_s,
        usecs_per_op,
        wall_s,
    })
}

/// `(Total time in s, usecs/op)` from `perf bench sched pipe` output.
fn parse_perf(text: &str) -> Result<(f64, f64)> {
    let mut total = None;
    let mut per_op = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Total time:") {
            total = rest.split_whitespace().next().and_then(|v| v.parse().ok());
        } else if line.ends_with("usecs/op") {
            per_op = line.split_whitespace().next().and_then(|v| v.parse().ok());
        }
    }
    match (total, per_op) {
        (Some(t), Some(p)) => Ok((t, p)),
        _ => bail!("perf bench output has no \"Total time\"/\"usecs/op\" lines:\n{text}"),
    }
}

// ---------------------------------------------------------------------------------------------
// cgtrace stream

/// A stdout line of `cgtrace stream`, stamped when it arrived.
struct Line {
    at: Instant,
    msg: Msg,
}

#[derive(Debug, PartialEq)]
enum Msg {
    Hello,
    Window {
        seen: u64,
        dropped: u64,
        programs: Vec<crate::progcost::ProgramRuns>,
    },
    /// Another well-formed type (e.g. the closing `summary`).
    Other,
    Bad(String),
}

#[derive(Clone, Debug)]
struct Window {
    at: Instant,
    seen: u64,
    dropped: u64,
    /// The window's `self.programs`.
    programs: Vec<crate::progcost::ProgramRuns>,
}

fn classify(line: &str) -> Msg {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return Msg::Bad(format!("not JSON: {}", clip(line)));
    };
    match v["type"].as_str() {
        Some("hello") => Msg::Hello,
        Some("window") => {
            let events = &v["events"];
            match (events["seen"].as_u64(), events["dropped"].as_u64()) {
                (Some(seen), Some(dropped)) => Msg::Window {
                    seen,
                    dropped,
                    programs: self_programs(&v),
                },
                _ => Msg::Bad(format!(
                    "window without events.seen/dropped: {}",
                    clip(line)
                )),
            }
        }
        Some(_) => Msg::Other,
        None => Msg::Bad(format!("no \"type\": {}", clip(line))),
    }
}

/// A window line's `self.programs` (empty before cgtrace reported them).
fn self_programs(window: &Value) -> Vec<crate::progcost::ProgramRuns> {
    window
        .pointer("/self/programs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(crate::progcost::ProgramRuns {
                name: p["name"].as_str()?.to_string(),
                runs: p["runs"].as_u64()?,
                run_ns: (p["run_us"].as_f64()? * 1e3).round() as u64,
            })
        })
        .collect()
}

/// Programs summed over the windows after the first (it covers the idle time before perf).
fn window_programs(windows: &[Window]) -> Vec<crate::progcost::ProgramRuns> {
    let mut sum: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for p in windows.iter().skip(1).flat_map(|w| &w.programs) {
        let e = sum.entry(&p.name).or_default();
        e.0 += p.runs;
        e.1 += p.run_ns;
    }
    sum.into_iter()
        .map(|(name, (runs, run_ns))| crate::progcost::ProgramRuns {
            name: name.to_string(),
            runs,
            run_ns,
        })
        .collect()
}

fn clip(line: &str) -> String {
    line.chars().take(200).collect()
}

/// A running `cgtrace stream`. Killed if dropped before [`Cgtrace::stop`] ends it.
struct Cgtrace {
    child: Child,
    lines: Receiver<Line>,
    stderr: Option<JoinHandle<String>>,
    windows: Vec<Window>,
}

impl Cgtrace {
    /// Spawns it and returns once the `hello` and the first `window` line have arrived.
    fn start(bin: &Path, interval_ms: u64, extra: &[&str]) -> Result<Self> {
        let mut child = Command::new(bin)
            .args(["stream", "--interval", &interval_ms.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let lines = spawn_line_reader(child.stdout.take().context("cgtrace stdout")?);
        let stderr = child.stderr.take().map(read_all);
        let mut me = Cgtrace {
            child,
            lines,
            stderr,
            windows: Vec::new(),
        };
        me.wait_attached()?;
        Ok(me)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_attached(&mut self) -> Result<()> {
        let deadline = Instant::now() + CGTRACE_ATTACH_TIMEOUT;
        let first = self.next_line(deadline, "its hello line")?;
        ensure!(
            first.msg == Msg::Hello,
            "cgtrace's first line is not a hello line: {:?}",
            first.msg
        );
        while self.windows.is_empty() {
            let line = self.next_line(deadline, "its first window line")?;
            self.record(line)?;
        }
        Ok(())
    }

    /// SIGINT, then every line up to EOF; the windows it printed (incl. the partial last one).
    fn stop(mut self) -> Result<Vec<Window>> {
        signal(self.pid(), libc::SIGINT)?;
        let deadline = Instant::now() + CGTRACE_EXIT_TIMEOUT;
        loop {
            match self.lines.recv_timeout(remaining(deadline)) {
                Ok(line) => self.record(line)?,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    bail!(
                        "cgtrace did not exit within {CGTRACE_EXIT_TIMEOUT:?} of SIGINT: {}",
                        self.kill_and_stderr()
                    )
                }
            }
        }
        let status = self.child.wait()?;
        ensure!(
            status.success(),
            "cgtrace failed ({status}): {}",
            self.stderr_text()
        );
        Ok(std::mem::take(&mut self.windows))
    }

    fn next_line(&mut self, deadline: Instant, what: &str) -> Result<Line> {
        match self.lines.recv_timeout(remaining(deadline)) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait()?;
                bail!(
                    "cgtrace exited before {what} ({status}): {}",
                    self.stderr_text()
                )
            }
            Err(RecvTimeoutError::Timeout) => bail!(
                "cgtrace printed no {what} within {CGTRACE_ATTACH_TIMEOUT:?}: {}",
                self.kill_and_stderr()
            ),
        }
    }

    fn record(&mut self, line: Line) -> Result<()> {
        match line.msg {
            Msg::Window {
                seen,
                dropped,
                programs,
            } => self.windows.push(Window {
                at: line.at,
                seen,
                dropped,
                programs,
            }),
            Msg::Other => {}
            Msg::Hello => bail!("cgtrace printed a second hello line"),
            Msg::Bad(why) => bail!("cgtrace stdout: {why}"),
        }
        Ok(())
    }

    fn kill_and_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr_text()
    }

    fn stderr_text(&mut self) -> String {
        let text = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let tail: Vec<&str> = text.trim().lines().rev().take(5).collect();
        if tail.is_empty() {
            "(no stderr)".to_string()
        } else {
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        }
    }
}

impl Drop for Cgtrace {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn spawn_line_reader(stdout: impl Read + Send + 'static) -> Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let at = Instant::now();
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim();
            if !text.is_empty()
                && tx
                    .send(Line {
                        at,
                        msg: classify(text),
                    })
                    .is_err()
            {
                break;
            }
            buf.clear();
        }
    });
    rx
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

#[derive(Debug, PartialEq)]
struct WindowStats {
    seen: u64,
    dropped: u64,
    per_s: Option<f64>,
}

/// Windows after the first, over the time between the first and the last arrival.
fn window_stats(windows: &[Window]) -> WindowStats {
    let seen = windows.iter().skip(1).map(|w| w.seen).sum();
    let dropped = windows.iter().map(|w| w.dropped).sum();
    let span = match (windows.first(), windows.last()) {
        (Some(first), Some(last)) => last.at.duration_since(first.at).as_secs_f64(),
        _ => 0.0,
    };
    let per_s = (windows.len() > 1 && span > 0.0).then(|| seen as f64 / span);
    WindowStats {
        seen,
        dropped,
        per_s,
    }
}

// ---------------------------------------------------------------------------------------------
// /proc and signals

/// utime + stime of process `pid` (all its threads), in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (did the tracer die?)"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("parsing /proc/{pid}/stat"))
}

fn parse_cpu_ticks(stat: &str) -> Result<u64> {
    // The comm field may hold spaces and parentheses: fields restart after the last ')'.
    let rest = &stat[stat.rfind(')').context("no ')'")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After comm: state(3) … utime(14) stime(15), i.e. indices 11 and 12 here.
    let tick = |i: usize| -> Result<u64> {
        let f = fields.get(i).context("short stat line")?;
        f.parse().with_context(|| format!("field {f:?}"))
    };
    Ok(tick(11)? + tick(12)?)
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

fn signal(pid: u32, sig: i32) -> Result<()> {
    let pid = i32::try_from(pid).context("pid out of range")?;
    // SAFETY: kill(2) takes plain integers.
    let rc = unsafe { libc::kill(pid, sig) };
    ensure!(
        rc == 0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Summary and report

#[derive(Debug, Serialize)]
struct Summary {
    config: Config,
    runs: usize,
    median_total_s: f64,
    min_total_s: f64,
    max_total_s: f64,
    median_usecs_per_op: f64,
    /// Median total time over the bare median.
    slowdown: Option<f64>,
    median_events_per_s: Option<f64>,
    events_dropped: Option<u64>,
    median_cpu_pct: Option<f64>,
    /// Each BPF program over all rounds of the configuration, most time first.
    programs: Vec<ProgramSummary>,
}

/// One program's runs and time over every round of a configuration.
#[derive(Debug, Serialize, PartialEq)]
struct ProgramSummary {
    name: String,
    runs: u64,
    run_ns: u64,
    ns_per_run: f64,
    /// Runs per second of perf's run time.
    runs_per_s: f64,
}

fn program_summary(mine: &[&Run]) -> Vec<ProgramSummary> {
    let mut sum: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for p in mine
        .iter()
        .filter_map(|r| r.tracer.as_ref())
        .flat_map(|t| &t.programs)
    {
        let e = sum.entry(&p.name).or_default();
        e.0 += p.runs;
        e.1 += p.run_ns;
    }
    let secs: f64 = mine.iter().map(|r| r.total_s).sum();
    let mut out: Vec<ProgramSummary> = sum
        .into_iter()
        .filter(|(_, (runs, _))| *runs > 0)
        .map(|(name, (runs, run_ns))| ProgramSummary {
            name: name.to_string(),
            runs,
            run_ns,
            ns_per_run: run_ns as f64 / runs as f64,
            runs_per_s: if secs > 0.0 { runs as f64 / secs } else { 0.0 },
        })
        .collect();
    out.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then_with(|| a.name.cmp(&b.name)));
    out
}

/// Per-program cost, every configuration that has some: ns per run and runs per second.
fn program_table(summary: &[Summary]) -> String {
    let mut t = String::from(
        "| config | program | runs/s | ns/run | % of one CPU |\n|---|---|---|---|---|\n",
    );
    for s in summary {
        for p in &s.programs {
            t += &format!(
                "| {} | {} | {:.1} k | {:.0} | {:.2} |\n",
                s.config.name(),
                p.name,
                p.runs_per_s / 1e3,
                p.ns_per_run,
                p.runs_per_s * p.ns_per_run / 1e7
            );
        }
    }
    t
}

fn summarize(configs: &[Config], runs: &[Run]) -> Vec<Summary> {
    let mut out: Vec<Summary> = configs
        .iter()
        .filter_map(|&c| summarize_one(c, runs))
        .collect();
    let bare = out
        .iter()
        .find(|s| s.config == Config::Bare)
        .map(|s| s.median_total_s);
    for s in &mut out {
        s.slowdown = bare.map(|b| s.median_total_s / b);
    }
    out
}

fn summarize_one(config: Config, runs: &[Run]) -> Option<Summary> {
    let mine: Vec<&Run> = runs.iter().filter(|r| r.config == config).collect();
    let totals: Vec<f64> = mine.iter().map(|r| r.total_s).collect();
    let tracers: Vec<&TracerStats> = mine.iter().filter_map(|r| r.tracer.as_ref()).collect();
    let rates: Vec<f64> = tracers.iter().filter_map(|t| t.events_per_s).collect();
    let drops: Vec<u64> = tracers.iter().filter_map(|t| t.dropped).collect();
    let cpu: Vec<f64> = tracers.iter().map(|t| t.cpu_pct).collect();
    Some(Summary {
        config,
        runs: mine.len(),
        median_total_s: median(&totals)?,
        min_total_s: totals.iter().copied().fold(f64::INFINITY, f64::min),
        max_total_s: totals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        median_usecs_per_op: median(&mine.iter().map(|r| r.usecs_per_op).collect::<Vec<_>>())?,
        slowdown: None,
        median_events_per_s: median(&rates),
        events_dropped: (!drops.is_empty()).then(|| drops.iter().sum()),
        median_cpu_pct: median(&cpu),
        programs: program_summary(&mine),
    })
}

fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn markdown_table(summary: &[Summary]) -> String {
    let mut t = String::from(
        "| config | runs | median time (s) | min–max (s) | usecs/op | slowdown | \
         tracer events/s | dropped | tracer CPU (% of 1 CPU) |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summary {
        t += &format!(
            "| {} | {} | {:.3} | {:.3}–{:.3} | {:.2} | {} | {} | {} | {} |\n",
            s.config.name(),
            s.runs,
            s.median_total_s,
            s.min_total_s,
            s.max_total_s,
            s.median_usecs_per_op,
            opt(s.slowdown, |x| format!("{x:.2}×")),
            opt(s.median_events_per_s, |x| format!("{:.0} k", x / 1e3)),
            opt(s.events_dropped, |x| x.to_string()),
            opt(s.median_cpu_pct, |x| format!("{x:.1}")),
        );
    }
    t
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

fn one_line_summary(plan: &Plan, summary: &[Summary]) -> String {
    let parts: Vec<String> = summary
        .iter()
        .filter(|s| s.config != Config::Bare)
        .map(describe)
        .collect();
    let what = if parts.is_empty() {
        "bare only".to_string()
    } else {
        parts.join("; ")
    };
    format!(
        "perf bench sched pipe -l {}, {} interleaved round(s), medians: {what}.",
        plan.loops, plan.rounds
    )
}

fn describe(s: &Summary) -> String {
    let mut line = s.config.name().to_string();
    if let Some(x) = s.slowdown {
        line += &format!(" {x:.2}× bare");
    }
    if let Some(rate) = s.median_events_per_s {
        line += &format!(", {:.0} k events/s", rate / 1e3);
    }
    if let Some(d) = s.events_dropped {
        line += &format!(", {d} dropped");
    }
    if let Some(cpu) = s.median_cpu_pct {
        line += &format!(", {cpu:.1} % CPU");
    }
    line
}

#[derive(Serialize)]
struct Report<'a> {
    unix_time: u64,
    kernel: String,
    cpus: usize,
    pinned: bool,
    plan: &'a Plan,
    runs: &'a [Run],
    summary: &'a [Summary],
}

fn write_report(plan: &Plan, runs: &[Run], summary: &[Summary]) -> Result<()> {
    let report = Report {
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        cpus: thread::available_parallelism().map_or(0, |n| n.get()),
        pinned: false,
        plan,
        runs,
        summary,
    };
    if let Some(dir) = plan.out.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(&plan.out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", plan.out.display()))?;
    eprintln!("raw numbers: {}", plan.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `perf bench sched pipe -l 100000` on the dev VM.
    const PERF_OUT: &str = "# Running 'sched/pipe' benchmark:
# Executed 100000 pipe operations between two processes

     Total time: 1.522 [sec]

      15.224810 usecs/op
          65682 ops/sec
";

    #[test]
    fn parses_perf_output() {
        assert_eq!(parse_perf(PERF_OUT).unwrap(), (1.522, 15.224810));
        assert!(parse_perf("# Running 'sched/pipe' benchmark:\n").is_err());
    }

    #[test]
    fn classifies_stream_lines() {
        assert_eq!(classify(r#"{"type":"hello","schema":1}"#), Msg::Hello);
        let window = r#"{"type":"window","seq":3,"interval_ms":1000,
            "events":{"seen":201234,"dropped":7},"cgroups":[]}"#
            .replace('\n', "");
        assert_eq!(
            classify(&window),
            Msg::Window {
                seen: 201234,
                dropped: 7,
                programs: Vec::new(),
            }
        );
        let with_self = r#"{"type":"window","events":{"seen":5,"dropped":0},"self":{"programs":
            [{"name":"sched_switch","runs":1000,"run_us":350.5,"ns_per_run":350.5}]}}"#
            .replace('\n', "");
        let Msg::Window { programs, .. } = classify(&with_self) else {
            panic!("not a window");
        };
        assert_eq!(
            programs,
            [crate::progcost::ProgramRuns {
                name: "sched_switch".into(),
                runs: 1000,
                run_ns: 350_500
            }]
        );
        assert_eq!(classify(r#"{"type":"summary","windows":4}"#), Msg::Other);
        assert!(matches!(classify("garbage"), Msg::Bad(_)));
        assert!(matches!(classify(r#"{"type":"window"}"#), Msg::Bad(_)));
    }

    #[test]
    fn window_rate_skips_the_first_window() {
        let t0 = Instant::now();
        let w = |ms: u64, seen: u64, dropped: u64| Window {
            at: t0 + Duration::from_millis(ms),
            seen,
            dropped,
            programs: vec![crate::progcost::ProgramRuns {
                name: "sched_switch".into(),
                runs: seen,
                run_ns: seen * 100,
            }],
        };
        let stats = window_stats(&[w(0, 999, 1), w(1000, 200, 0), w(1500, 100, 2)]);
        assert_eq!(stats.seen, 300);
        assert_eq!(stats.dropped, 3);
        assert_eq!(stats.per_s, Some(200.0));
        assert_eq!(window_stats(&[w(0, 5, 0)]).per_s, None);
        let programs = window_programs(&[w(0, 999, 1), w(1000, 200, 0), w(1500, 100, 2)]);
        assert_eq!((programs[0].runs, programs[0].run_ns), (300, 30_000));
    }

    #[test]
    fn parses_proc_stat_with_odd_comm() {
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 123 \
                    1000 10 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat).unwrap(), 22);
    }

    fn run(config: Config, total_s: f64, cpu: Option<f64>) -> Run {
        Run {
            round: 1,
            config,
            total_s,
            usecs_per_op: total_s * 10.0,
            wall_s: total_s,
            tracer: cpu.map(|cpu_pct| TracerStats {
                cpu_pct,
                events: 10,
                events_per_s: Some(5.0),
                dropped: (config == Config::Cgtrace).then_some(1),
                windows: None,
                programs: vec![crate::progcost::ProgramRuns {
                    name: "sched_switch".into(),
                    runs: 1000,
                    run_ns: 300_000,
                }],
            }),
        }
    }

    #[test]
    fn summary_uses_ratio_of_medians() {
        let runs = [
            run(Config::Bare, 2.0, None),
            run(Config::Cgtrace, 3.75, Some(3.0)),
            run(Config::Bare, 4.0, None),
            run(Config::Cgtrace, 3.5, Some(1.0)),
            run(Config::Bare, 3.0, None),
            run(Config::Cgtrace, 9.0, Some(2.0)),
        ];
        let s = summarize(&[Config::Bare, Config::Cgtrace, Config::Runqlat], &runs);
        assert_eq!(s.len(), 2, "runqlat had no runs");
        assert_eq!(s[0].median_total_s, 3.0);
        assert_eq!(s[0].slowdown, Some(1.0));
        assert_eq!(s[1].median_total_s, 3.75);
        assert_eq!(s[1].slowdown, Some(1.25));
        assert_eq!(s[1].events_dropped, Some(3));
        assert_eq!(s[1].median_cpu_pct, Some(2.0));
        assert_eq!((s[1].min_total_s, s[1].max_total_s), (3.5, 9.0));
        let table = markdown_table(&s);
        assert!(
            table.contains("| cgtrace | 3 | 3.750 | 3.500–9.000 | 37.50 | 1.25× |"),
            "{table}"
        );
        // 3000 runs of 300 ns over 16.25 s of perf.
        let programs = program_table(&s);
        assert!(
            programs.contains("| cgtrace | sched_switch | 0.2 k | 300 | 0.01 |"),
            "{programs}"
        );
    }

    #[test]
    fn median_of_even_and_empty() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
