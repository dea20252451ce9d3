//! What `bench runq` prints: the Markdown tables and the one-line summary.

use super::{
    plan::{Config, Plan},
    summary::Summary,
};

/// Per-program cost, every configuration that has some: ns per run and runs per second.
/// After each configuration's programs, their sum, and what that is above the programs of its
/// floor configuration when that ran with statistics too: the steadiest figure of a run (perf's
/// own times move by a tenth or more from run to run on a VM; program time does not).
pub(super) fn program_table(summary: &[Summary]) -> String {
    let mut t = String::from(
        "| config | program | runs/s | ns/run | % of one CPU |\n|---|---|---|---|---|\n",
    );
    for s in summary.iter().filter(|s| !s.programs.is_empty()) {
        for p in &s.programs {
            t += &format!(
                "| {} | {} | {:.1} k | {:.0} | {:.2} |\n",
                s.config.name(),
                p.name,
                p.runs_per_s / 1e3,
                p.ns_per_run,
                p.cpu_pct()
            );
        }
        let floor = s.config.floor().and_then(|f| {
            summary
                .iter()
                .find(|x| x.config == f && !x.programs.is_empty())
        });
        t += &format!(
            "| {} | **all programs** | | | **{:.2}**{} |\n",
            s.config.name(),
            s.programs_cpu_pct(),
            floor.map_or(String::new(), |f| format!(
                " ({:+.2} above {})",
                s.programs_cpu_pct() - f.programs_cpu_pct(),
                f.config.name()
            ))
        );
    }
    t
}

pub(super) fn markdown_table(summary: &[Summary]) -> String {
    let mut t = String::from(
        "| config | runs | median time (s) | min–max (s) | usecs/op | slowdown | above floor | \
         tracer events/s | dropped | tracer CPU (% of 1 CPU) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summary {
        t += &format!(
            "| {} | {} | {:.3} | {:.3}–{:.3} | {:.2} | {} | {} | {} | {} | {} |\n",
            s.config.name(),
            s.runs,
            s.median_total_s,
            s.min_total_s,
            s.max_total_s,
            s.median_usecs_per_op,
            opt(s.slowdown, |x| format!("{x:.2}×")),
            opt(s.above_floor, |x| format!("{x:+.2}×")),
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

pub(super) fn one_line_summary(plan: &Plan, summary: &[Summary]) -> String {
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
    if let Some(x) = s.above_floor {
        line += &format!(" ({x:+.2}× above its floor)");
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
