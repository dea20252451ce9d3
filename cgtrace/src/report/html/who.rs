//! The page's opening section: who delayed whom ([`WhoDelayedWhom`]) as a heatmap table, a row per
//! victim and a column per culprit, each cell shaded by its share of the victim's wait; the rest of
//! each row (other neighbours and the ledger's other [`PARTS`]) follows so a row adds up.

use std::fmt::Write as _;

use crate::{
    report::{
        medium::Medium::Html,
        model::{PARTS, Report},
    },
    safety::escape::html as esc,
};

/// `1.23 s` and, below it, `0.10 s/s`: a wait and the same per second of the recording.
fn cell(us: f64, per_s_us: f64, share: f64) -> String {
    if us <= 0.0 || !us.is_finite() {
        return "<td class=\"n\">·</td>".into();
    }
    // The page's accent colour, as strong as the share of the row's wait.
    let alpha = (share.clamp(0.0, 1.0) * 0.85 + 0.05).min(0.9);
    let fg = if alpha > 0.5 { ";color:#fff" } else { "" };
    format!(
        "<td class=\"n\" style=\"background:rgba(179,38,30,{alpha:.2}){fg}\">{:.2} s<br><small>{:.3} s/s</small></td>",
        us / 1e6,
        per_s_us / 1e6
    )
}

pub(super) fn who_delayed_whom(o: &mut String, r: &Report) {
    let m = &r.who_delayed_whom;
    o.push_str("<h2 id=\"who-delayed-whom\">Who delayed whom</h2>\n");
    if !m.ledger {
        let _ = writeln!(
            o,
            "<p class=\"warn\">{}.</p>",
            esc(crate::report::who_text::NO_LEDGER)
        );
        return;
    }
    let _ = writeln!(
        o,
        "<p class=\"what\">Run-queue wait each culprit (column) cost each victim (row) over the {:.1} s recorded, from the blame ledger: seconds, and seconds per second of the recording. A row adds up to the victim's wait: its cells, other neighbours and the rest of the ledger's parts. The cells are {:.1} % of the node's {:.2} s of run-queue wait.</p>",
        m.seconds,
        m.explained_share * 100.0,
        m.node_wait_us / 1e6
    );
    if m.victims.is_empty() {
        o.push_str("<p>No cgroup waited for a CPU another cgroup held.</p>\n");
        return;
    }
    o.push_str("<div class=\"scroll\"><table class=\"who\"><tr><th>victim \\ culprit</th><th class=\"n\">wait</th>");
    for c in &m.culprits {
        let _ = write!(o, "<th>{}</th>", Html.who(&c.path, &c.name, c.id));
    }
    o.push_str("<th class=\"n\">other neighbours</th>");
    for p in PARTS {
        let _ = write!(o, "<th class=\"n\">{}</th>", esc(p.label));
    }
    o.push_str("</tr>\n");
    let per_s = |us: f64| {
        if m.seconds > 0.0 { us / m.seconds } else { 0.0 }
    };
    for (vi, v) in m.victims.iter().enumerate() {
        let share = |us: f64| if v.wait_us > 0.0 { us / v.wait_us } else { 0.0 };
        let _ = write!(
            o,
            "<tr><td>{}{}</td><td class=\"n\">{:.2} s<br><small>{:.3} s/s</small></td>",
            Html.who(&v.path, &v.name, v.id),
            v.throttled_ancestors
                .iter()
                .map(|a| format!(
                    "<br><small>ancestor quota: {} ({:.2} s)</small>",
                    esc(&a.path),
                    a.wait_us / 1e6
                ))
                .collect::<String>(),
            v.wait_us / 1e6,
            v.wait_us_per_s / 1e6
        );
        for ci in 0..m.culprits.len() {
            let us = m
                .cells
                .iter()
                .find(|c| c.victim == vi && c.culprit == ci)
                .map_or(0.0, |c| c.wait_us);
            o.push_str(&cell(us, per_s(us), share(us)));
        }
        o.push_str(&cell(
            v.other_neighbours_us,
            per_s(v.other_neighbours_us),
            share(v.other_neighbours_us),
        ));
        for p in PARTS {
            match v.parts.get(p.key).copied().flatten() {
                Some(us) => o.push_str(&cell(us, per_s(us), share(us))),
                // The kernel could not tell this part: not 0.
                None => o.push_str("<td class=\"n\" title=\"this kernel cannot tell\">n/a</td>"),
            }
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table></div>\n");
    if !m.kernel_tasks.is_empty() {
        let tasks: Vec<String> = m
            .kernel_tasks
            .iter()
            .map(|t| {
                let name = match &t.comm {
                    Some(c) => format!("{} (pid {})", esc(c), t.pid),
                    None => format!("pid {}", t.pid),
                };
                format!("{name} {:.2} s", t.wait_us / 1e6)
            })
            .collect();
        let _ = writeln!(
            o,
            "<p class=\"meta\">The kernel part (root cgroup): {}.</p>",
            tasks.join(" · ")
        );
    }
    let l = &m.left_out;
    if l.victims + l.culprits + l.untallied > 0 {
        let _ = writeln!(
            o,
            "<p class=\"meta\">Not shown: {} more victims ({:.2} s charged to others), {} more culprits ({:.2} s caused), {} cgroups or pairs past the report's memory bound.</p>",
            l.victims,
            l.victims_charged_to_others_us / 1e6,
            l.culprits,
            l.culprits_caused_us / 1e6,
            l.untallied
        );
    }
}
