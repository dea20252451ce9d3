//! The CFS throttling section of the page: per throttled cgroup its use against its quota and
//! the share of periods throttled over time, ours next to the kernel's `cpu.stat`, and who burned
//! the quota.

use std::fmt::Write as _;

use super::{
    series::{Col, Series},
    svg::{lines, throttled_bars},
};
use crate::{
    hist::micros,
    report::{medium::Medium::Html, model::Report, model::TOP},
    units::{PeriodIn, clock_utc, period, period_thread},
};

/// Throttled cgroups drawn at most.
pub(super) const THROTTLE_DRAWN: usize = 6;

fn throttle_chart(o: &mut String, s: &Series, cols: &[Col]) {
    let usage: Vec<Option<f64>> = cols
        .iter()
        .map(|c| (c.usage.1 > 0).then(|| c.usage.0 / f64::from(c.usage.1)))
        .collect();
    let quota: Vec<Option<f64>> = cols.iter().map(|c| c.quota).collect();
    if usage.iter().all(Option::is_none) {
        o.push_str("<p class=\"meta\">CPU use unknown: the kernel gave no usage counter for this cgroup (v1: it has no directory in the cpuacct hierarchy).</p>\n");
    }
    lines(
        o,
        s,
        &[
            ("CPU used (cores)", "#4c78a8", false, usage),
            ("quota (cores)", "#e45756", true, quota),
        ],
        false,
        &|v| format!("{v:.2}"),
    );
    throttled_bars(o, s, cols);
}

pub(super) fn throttle(o: &mut String, r: &Report, s: &Series) {
    if r.throttled.is_empty() {
        return;
    }
    o.push_str("<h2>CFS throttling</h2>\n<p class=\"what\">Cgroups held off the CPU by their quota: what they used against their quota, and the share of periods throttled, over time; then ours next to the kernel's own cpu.stat.</p>\n");
    for t in r.throttled.iter().take(THROTTLE_DRAWN) {
        let _ = writeln!(
            o,
            "<h3 class=\"cgroup\">{}</h3>",
            Html.who(&t.path, &t.name, t.id)
        );
        if let Some(cols) = s.cgroups.get(&t.id) {
            throttle_chart(o, s, cols);
        }
    }
    o.push_str("<h3>Ours and the kernel's</h3><p class=\"what\">Throttled periods and time counted by cgtrace and by the kernel (cpu.stat) over the same windows.</p><div class=\"scroll\"><table><tr><th>cgroup</th><th class=\"n\">quota</th><th class=\"n\">periods</th><th class=\"n\">throttled (ours)</th><th class=\"n\">throttled (kernel)</th><th class=\"n\">time (ours)</th><th class=\"n\">time (kernel)</th><th class=\"n\">episodes</th></tr>\n");
    for t in &r.throttled {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            Html.who(&t.path, &t.name, t.id),
            t.quota_cores.map_or("-".into(), |q| format!("{q:.2} CPUs")),
            t.nr_periods,
            t.ours_nr_throttled_matched,
            t.kernel_nr_throttled,
            micros(t.ours_throttled_us_matched),
            micros(t.kernel_throttled_us),
            t.episodes
        );
    }
    o.push_str("</table></div>\n");
    if !r.longest_episodes.is_empty() {
        o.push_str("<h3>Who burned the quota</h3><p class=\"what\">The longest throttle episodes, and the threads that used the quota of the period they ended.</p><div class=\"scroll\"><table><tr><th class=\"n\">episode</th><th class=\"n\">at</th><th>cgroup</th><th>threads that used the quota</th></tr>\n");
        for e in r.longest_episodes.iter().take(TOP) {
            let top = e.period.as_ref().map_or(String::new(), |p| {
                let head = period(p.burned_in_ms, p.threads, p.cpu_ms, PeriodIn::Html);
                let mut v = vec![format!("{head}:")];
                for t in &p.top {
                    v.push(period_thread(
                        &t.comm,
                        t.tid,
                        t.cpu_ms,
                        t.cpus,
                        PeriodIn::Html,
                    ));
                }
                v.join("<br>")
            });
            let _ = writeln!(
                o,
                "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{top}</td></tr>",
                micros(e.duration_us),
                clock_utc(e.at_unix_ms),
                Html.who(&e.path, &e.name, e.cgroup_id)
            );
        }
        o.push_str("</table></div>\n");
    }
}

pub(super) fn throttle_series_only(o: &mut String, s: &Series) {
    let mut ids: Vec<&u64> = s
        .cgroups
        .iter()
        .filter(|(_, c)| c.iter().any(|c| c.periods > 0))
        .map(|(id, _)| id)
        .collect();
    ids.sort_unstable();
    if ids.is_empty() {
        return;
    }
    o.push_str("<h2>CFS throttling</h2>\n");
    for id in ids {
        let _ = writeln!(o, "<h3>cgroup id {id}</h3>");
        throttle_chart(o, s, &s.cgroups[id]);
    }
}
