//! Each configuration's numbers over its rounds: medians, the slowdown against bare, and each BPF
//! program's runs and time.

use serde::Serialize;

use super::{Run, TracerStats, plan::Config, progcost::sum_by_name};
use crate::bench::median;

#[derive(Debug, Serialize)]
pub(super) struct Summary {
    pub(super) config: Config,
    pub(super) runs: usize,
    pub(super) median_total_s: f64,
    pub(super) min_total_s: f64,
    pub(super) max_total_s: f64,
    pub(super) median_usecs_per_op: f64,
    /// Median total time over the bare median.
    pub(super) slowdown: Option<f64>,
    /// The slowdown minus its floor configuration's ([`Config::floor`]), when that ran too:
    /// what the tracer costs above empty programs on the same hooks.
    pub(super) above_floor: Option<f64>,
    pub(super) median_events_per_s: Option<f64>,
    pub(super) events_dropped: Option<u64>,
    pub(super) median_cpu_pct: Option<f64>,
    /// Each BPF program over all rounds of the configuration, most time first.
    pub(super) programs: Vec<ProgramSummary>,
}

/// One program's runs and time over every round of a configuration.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct ProgramSummary {
    pub(super) name: String,
    pub(super) runs: u64,
    pub(super) run_ns: u64,
    pub(super) ns_per_run: f64,
    /// Runs per second of perf's run time.
    pub(super) runs_per_s: f64,
}

impl ProgramSummary {
    /// Its time in % of one CPU while perf ran.
    pub(super) fn cpu_pct(&self) -> f64 {
        self.runs_per_s * self.ns_per_run / 1e7
    }
}

impl Summary {
    /// All its programs' time, in % of one CPU while perf ran.
    pub(super) fn programs_cpu_pct(&self) -> f64 {
        self.programs.iter().map(ProgramSummary::cpu_pct).sum()
    }
}

fn program_summary(mine: &[&Run]) -> Vec<ProgramSummary> {
    let programs = mine
        .iter()
        .filter_map(|r| r.tracer.as_ref())
        .flat_map(|t| &t.programs);
    let secs: f64 = mine.iter().map(|r| r.total_s).sum();
    let mut out: Vec<ProgramSummary> = sum_by_name(programs)
        .into_iter()
        .filter(|p| p.runs > 0)
        .map(|p| ProgramSummary {
            ns_per_run: p.run_ns as f64 / p.runs as f64,
            runs_per_s: if secs > 0.0 {
                p.runs as f64 / secs
            } else {
                0.0
            },
            name: p.name,
            runs: p.runs,
            run_ns: p.run_ns,
        })
        .collect();
    out.sort_by(|a, b| b.run_ns.cmp(&a.run_ns).then_with(|| a.name.cmp(&b.name)));
    out
}

pub(super) fn summarize(configs: &[Config], runs: &[Run]) -> Vec<Summary> {
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
    let slowdowns: Vec<(Config, Option<f64>)> =
        out.iter().map(|s| (s.config, s.slowdown)).collect();
    for s in &mut out {
        let floor = s.config.floor().and_then(|f| {
            slowdowns
                .iter()
                .find(|(c, _)| *c == f)
                .and_then(|(_, x)| *x)
        });
        s.above_floor = s.slowdown.zip(floor).map(|(x, f)| x - f);
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
        above_floor: None,
        median_events_per_s: median(&rates),
        events_dropped: (!drops.is_empty()).then(|| drops.iter().sum()),
        median_cpu_pct: median(&cpu),
        programs: program_summary(&mine),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::runq::{
        progcost::ProgramRuns,
        table::{markdown_table, program_table},
    };

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
                programs: vec![ProgramRuns {
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
            table.contains("| cgtrace | 3 | 3.750 | 3.500–9.000 | 37.50 | 1.25× | – |"),
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
    fn above_floor_is_the_slowdown_minus_the_floor_on_the_same_hooks() {
        let runs = [
            run(Config::Bare, 2.0, None),
            run(Config::Floor, 2.1, Some(1.0)),
            run(Config::Cgtrace, 2.3, Some(1.0)),
            run(Config::FloorOwn, 2.2, Some(1.0)),
            run(Config::Runqlat, 2.6, Some(1.0)),
            run(Config::CgtraceOwn, 2.5, Some(1.0)),
            run(Config::CgtraceStats, 2.4, Some(1.0)),
            run(Config::FloorClock, 2.2, Some(1.0)),
            run(Config::FloorClockOwn, 2.4, Some(1.0)),
        ];
        let configs = runs.iter().map(|r| r.config).collect::<Vec<_>>();
        let s = summarize(&configs, &runs);
        let above = |c: Config| {
            s.iter()
                .find(|x| x.config == c)
                .and_then(|x| x.above_floor)
                .map(|x| (x * 1000.0).round() / 1000.0)
        };
        assert_eq!(above(Config::Cgtrace), Some(0.1));
        assert_eq!(above(Config::CgtraceOwn), Some(0.15));
        // runqlat's programs sit on the own-stamps path's hooks.
        assert_eq!(above(Config::Runqlat), Some(0.2));
        // A clock floor is set against the empty programs on its own hooks.
        assert_eq!(above(Config::FloorClock), Some(0.05));
        assert_eq!(above(Config::FloorClockOwn), Some(0.1));
        // Its floor (floor-stats) did not run; a floor has none.
        assert_eq!(above(Config::CgtraceStats), None);
        assert_eq!(above(Config::Floor), None);
        let table = markdown_table(&s);
        assert!(table.contains("| 1.15× | +0.10× |"), "{table}");
        // Program time: 1000 runs of 300 ns in 2.3 s of perf (0.013 %) against the floor's in
        // 2.1 s (0.014 %).
        let programs = program_table(&s);
        assert!(
            programs.contains("| cgtrace | **all programs** | | | **0.01** (-0.00 above floor) |"),
            "{programs}"
        );
    }
}
