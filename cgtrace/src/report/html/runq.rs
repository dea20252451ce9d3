//! The run-queue sections of the page: latency heatmaps and percentiles over time for the host
//! and the worst cgroups, the noisy neighbours, and the slowest single waits.

use std::{collections::HashMap, fmt::Write as _};

use super::{
    series::{Col, Series},
    svg::{heatmap, lines},
};
use crate::{
    hist::micros,
    report::{medium::Medium::Html, model::Report, model::TOP},
    safety::escape::html as esc,
    units::clock_utc,
};

/// Run-queue cgroups drawn at most.
pub(super) const RUNQ_DRAWN: usize = 4;

/// The run-queue cgroups drawn: the worst by p99, then by max, [`RUNQ_DRAWN`] at most.
pub(super) fn runq_ids(r: &Report) -> Vec<u64> {
    let Some(f) = r.families.get(crate::family::runq::INFO.name) else {
        return Vec::new();
    };
    let mut ids: Vec<u64> = Vec::new();
    for c in f.worst_p99.iter().chain(&f.worst_max) {
        if !ids.contains(&c.id) && ids.len() < RUNQ_DRAWN {
            ids.push(c.id);
        }
    }
    ids
}

fn percentiles(o: &mut String, s: &Series, cols: &[Col]) {
    let p = |q: f64| cols.iter().map(|c| c.quantile_us(q)).collect::<Vec<_>>();
    let max: Vec<Option<f64>> = cols
        .iter()
        .map(|c| (c.waits() > 0).then_some(c.max_us))
        .collect();
    lines(
        o,
        s,
        &[
            ("p50", "#4c78a8", false, p(0.5)),
            ("p99", "#e45756", false, p(0.99)),
            ("max", "#222", true, max),
        ],
        true,
        &|v| micros(v),
    );
}

pub(super) fn runq(o: &mut String, r: Option<&Report>, s: &Series) {
    o.push_str("<h2>Run-queue latency</h2>\n<p class=\"what\">How long runnable tasks waited for a CPU: each column is a stretch of time, each row a latency octave, darker = more waits.</p>\n");
    o.push_str("<h3>Host (every cgroup)</h3>\n");
    heatmap(o, s, &s.host, "host run-queue latency heatmap");
    let ids: Vec<u64> = match r {
        Some(r) => runq_ids(r),
        None => {
            let mut v: Vec<u64> = s.cgroups.keys().copied().collect();
            v.sort_unstable();
            v
        }
    };
    let names: HashMap<u64, (Option<String>, Option<String>)> = r
        .and_then(|r| r.families.get(crate::family::runq::INFO.name))
        .map(|f| {
            f.worst_p99
                .iter()
                .chain(&f.worst_max)
                .map(|c| (c.id, (c.path.clone(), c.name.clone())))
                .collect()
        })
        .unwrap_or_default();
    for id in ids {
        let Some(cols) = s.cgroups.get(&id) else {
            continue;
        };
        let (path, name) = names.get(&id).cloned().unwrap_or((None, None));
        let _ = writeln!(
            o,
            "<h3 class=\"cgroup\">{}</h3><p class=\"what\">Its waits over time, then its p50, p99 and max per column.</p>",
            Html.who(&path, &name, id)
        );
        heatmap(o, s, cols, "cgroup run-queue latency heatmap");
        percentiles(o, s, cols);
    }
    if let Some(f) = r.and_then(|r| r.families.get(crate::family::runq::INFO.name))
        && !f.worst_p99.is_empty()
    {
        o.push_str("<div class=\"scroll\"><table><tr><th>cgroup</th><th class=\"n\">waits</th><th class=\"n\">mean</th><th class=\"n\">p99</th><th class=\"n\">max</th><th class=\"n\">max at</th></tr>\n");
        for c in &f.worst_p99 {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                Html.who(&c.path, &c.name, c.id),
                c.count,
                micros(c.mean_us),
                micros(c.p99_us),
                micros(c.max_us),
                clock_utc(c.max_at_unix_ms)
            );
        }
        o.push_str("</table></div>\n");
    }
}

/// The blame ledger's noisy neighbours: who cost others the most run-queue wait, and whom.
pub(super) fn noisy_neighbours(o: &mut String, r: &Report) {
    if r.noisy_neighbours.is_empty() {
        return;
    }
    o.push_str("<h2>Noisy neighbours</h2>\n<p class=\"what\">The cgroups whose tasks held CPUs that other cgroups' tasks were waiting for (the blame ledger, recorded with --blame), with the cgroups they delayed most.</p><div class=\"scroll\"><table><tr><th class=\"n\">wait caused</th><th class=\"n\">windows</th><th>cgroup</th><th>delayed most</th></tr>\n");
    for n in &r.noisy_neighbours {
        let victims: Vec<String> = n
            .victims
            .iter()
            .map(|v| format!("{} {}", micros(v.wait_us), Html.who(&v.path, &v.name, v.id)))
            .collect();
        let _ = writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            micros(n.caused_us),
            n.windows,
            Html.who(&n.path, &n.name, n.id),
            victims.join("<br>")
        );
    }
    o.push_str("</table></div>\n");
}

pub(super) fn waits(o: &mut String, r: &Report) {
    if r.slowest_waits.is_empty() {
        return;
    }
    o.push_str("<h2>Slowest single waits</h2><div class=\"scroll\"><table><tr><th class=\"n\">wait</th><th class=\"n\">at</th><th>kind</th><th>task</th><th>cgroup</th></tr>\n");
    for w in r.slowest_waits.iter().take(TOP) {
        let _ = writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td><code>{}</code> [{}]</td><td>{}</td></tr>",
            micros(w.wait_us),
            clock_utc(w.at_unix_ms),
            esc(&w.wait_kind),
            esc(&w.comm),
            w.pid,
            Html.who(&w.path, &w.name, w.cgroup_id)
        );
    }
    o.push_str("</table></div>\n");
}
