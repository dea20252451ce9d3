//! The pseudo-file reads section of the page: the slowest reads by reader and file, the memory
//! cgroups whose stat files were read, dying memcgs and cgroup churn over time.

use std::fmt::Write as _;

use super::{series::Series, svg::lines};
use crate::{
    hist::micros,
    report::{medium::Medium::Html, model::Report},
    safety::escape::html as esc,
};

pub(super) fn reads(o: &mut String, r: &Report, s: &Series) {
    let dying: Vec<Option<f64>> = s.dying.iter().map(|d| d.map(|v| v as f64)).collect();
    let any_dying = dying.iter().any(Option::is_some);
    let any_churn = s.churn.iter().any(|c| c.0 + c.1 > 0);
    if r.slowest_reads.is_empty() && r.memcgs.is_empty() && !any_dying && !any_churn {
        return;
    }
    o.push_str("<h2>Pseudo-file reads</h2>\n");
    if !r.slowest_reads.is_empty() {
        o.push_str("<p class=\"what\">The slowest reads of cgroup, proc, sys and FUSE files, by reader and file, and how much of the time was spent flushing memory-cgroup statistics.</p><div class=\"scroll\"><table><tr><th>reader</th><th>file</th><th class=\"n\">reads</th><th class=\"n\">total</th><th class=\"n\">max</th><th class=\"n\">flushing</th><th class=\"n\">dying below</th></tr>\n");
        for f in &r.slowest_reads {
            let flush = if f.total_us > 0.0 {
                format!("{:.0} %", f.flush_us / f.total_us * 100.0)
            } else {
                "-".into()
            };
            let _ = writeln!(
                o,
                "<tr><td><code>{}</code> in {}</td><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{flush}</td><td class=\"n\">{}</td></tr>",
                esc(&f.comm),
                Html.who(&f.path, &f.name, f.cgroup_id),
                esc(&f.file),
                f.count,
                micros(f.total_us),
                micros(f.max_us),
                f.dying_memcgs.map_or("-".into(), |d| d.to_string())
            );
        }
        o.push_str("</table></div>\n");
    }
    if !r.memcgs.is_empty() {
        o.push_str("<h3>Memory cgroups whose stat files were read</h3><div class=\"scroll\"><table><tr><th>memcg</th><th class=\"n\">stat reads</th><th class=\"n\">read time</th><th class=\"n\">flushing</th><th class=\"n\">dying below</th><th>read by</th></tr>\n");
        for m in &r.memcgs {
            let readers: Vec<String> = m.readers.iter().map(|c| esc(c)).collect();
            let _ = writeln!(
                o,
                "<tr><td><code>{} {}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                esc(&m.hierarchy),
                esc(&m.path),
                m.stat_reads,
                micros(m.read_us),
                micros(m.flush_us),
                m.dying_memcgs_max,
                readers.join(", ")
            );
        }
        o.push_str("</table></div>\n");
    }
    if any_dying {
        let _ = writeln!(
            o,
            "<h3>Dying memory cgroups</h3><p class=\"what\">Removed memory cgroups the kernel still holds (each makes memory.stat reads slower), at most {} over the recording.</p>",
            r.dying_memcgs_max.unwrap_or(0)
        );
        lines(
            o,
            s,
            &[("dying memcgs", "#8e44ad", false, dying)],
            false,
            &|v| format!("{v:.0}"),
        );
    }
    if any_churn {
        let _ = writeln!(
            o,
            "<h3>Cgroup churn</h3><p class=\"what\">Cgroups created and removed per stretch of time ({} and {} over the recording).</p>",
            r.cgroups_created, r.cgroups_removed
        );
        let created: Vec<Option<f64>> = s.churn.iter().map(|c| Some(c.0 as f64)).collect();
        let removed: Vec<Option<f64>> = s.churn.iter().map(|c| Some(c.1 as f64)).collect();
        lines(
            o,
            s,
            &[
                ("created", "#54a24b", false, created),
                ("removed", "#e45756", true, removed),
            ],
            false,
            &|v| format!("{v:.0}"),
        );
    }
}
