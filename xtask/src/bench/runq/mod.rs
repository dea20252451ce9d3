//! `cargo xtask bench runq`: what tracing costs a scheduler-heavy load.
//!
//! `perf bench sched pipe` (~200 k context switches/s on the 2-vCPU dev VM) runs in interleaved
//! rounds: bare, under `cgtrace stream`, under libbpf-tools `runqlat` (A B C, A B C, …), so drift
//! over the session hits all three alike. `--pin CPU` pins perf's tasks to one CPU. Each tracer
//! is attached before perf starts (cgtrace: its `hello` line and a first `window` line; runqlat:
//! its SIGINT handler is installed, which it does right after attaching) and stopped with SIGINT
//! after perf exits.
//!
//! Per configuration: median perf "Total time", slowdown vs bare (ratio of medians), and for the
//! tracers their own CPU while perf ran (utime+stime from /proc/PID/stat, % of one CPU) and the
//! events they took in. BPF program time is charged to the traced tasks, so it shows up in the
//! slowdown, not in the tracer's CPU.
//!
//! Here the rounds: each configuration's run and its tracer's numbers. Elsewhere: the
//! configurations and the plan ([`plan`]), perf ([`perf`]), a running `cgtrace stream`
//! ([`cgtrace`]) and what its lines say ([`windows`]), a process's CPU ([`process`]),
//! runqlat's per-program cost ([`progcost`]), the medians ([`summary`]), the tables ([`table`])
//! and the JSON file ([`report`]).

use std::{path::Path, time::Instant};

use anyhow::{Context, Result};
use cgtrace_tests::runqlat;
use serde::Serialize;

mod cgtrace;
mod perf;
mod plan;
mod process;
mod progcost;
mod report;
mod summary;
mod table;
mod windows;

use cgtrace::Cgtrace;
use perf::{Perf, run_perf};
pub(super) use plan::RunqArgs;
use plan::{Config, Plan};
use process::{clock_ticks_per_s, cpu_ticks};
use progcost::ProgramRuns;
use report::write_report;
use summary::summarize;
use table::{markdown_table, one_line_summary, program_table};
use windows::{window_programs, window_stats};

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
    programs: Vec<ProgramRuns>,
}

pub(super) fn run(args: RunqArgs) -> Result<()> {
    let plan = Plan::new(args)?;
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
        Config::Baseline | Config::BaselineStats | Config::BaselineOwnStats => {
            let bin = plan.baseline.as_ref().context("--baseline")?;
            let (perf, stats) = under_cgtrace(plan, bin, config)?;
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
        // Every other configuration runs the workspace's cgtrace (`Config::runs_cgtrace`), with
        // its own arguments and environment.
        _ => {
            let (perf, stats) = under_cgtrace(plan, &plan.cgtrace, config)?;
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

fn under_cgtrace(plan: &Plan, bin: &Path, config: Config) -> Result<(Perf, TracerStats)> {
    let cgtrace = Cgtrace::start(
        bin,
        plan.interval_ms,
        config.cgtrace_args().unwrap_or(&[]),
        config.cgtrace_env(),
    )?;
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
        Some(progcost::enable_stats()?)
    } else {
        None
    };
    let rq = runqlat::Runqlat::start_all()?;
    let attached = Instant::now();
    let before = progcost::read(rq.pid())?;
    let (perf, cpu_pct) = perf_beside(plan, rq.pid())?;
    let after = progcost::read(rq.pid())?;
    let programs = if with_stats {
        progcost::delta(&before, &after)
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
