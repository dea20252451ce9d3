//! `cgtrace report FILE --html`: the report as one self-contained page (inline CSS and SVG, no
//! script, font or request), readable printed and on a phone.
//!
//! The page holds the text report's findings as tables and, drawn from the windows, the pictures
//! people reach for first: run-queue latency heatmaps over time (time × latency octave, colour =
//! waits) for the host and the worst cgroups, with p50/p99/max timelines; per throttled cgroup
//! its usage against its quota and the share of periods throttled, with the kernel's `cpu.stat`
//! next to ours; dying memcgs and cgroup churn over time. Every string a tenant controls goes
//! through [`crate::safety::escape::html`].
//!
//! Memory is bounded by the picture, not the recording: at most [`MAX_COLS`] time columns (a
//! longer recording merges neighbouring windows into a column) for the host and the few cgroups
//! drawn.
//!
//! Here: the page and its plain parts (header, diagnoses, kernel counters, own cost); `who.rs`
//! is the opening "who delayed whom" matrix. `series.rs`
//! buckets the windows into time columns, `svg.rs` draws the pictures from them, and `runq.rs`,
//! `throttle.rs` and `reads.rs` are the families' sections.

mod reads;
mod runq;
mod series;
mod svg;
mod throttle;
mod who;

use std::{collections::HashMap, fmt::Write as _};

use reads::reads;
use runq::{noisy_neighbours, runq, runq_ids, waits};
use throttle::{throttle, throttle_series_only};

pub use series::{MAX_COLS, Series};

use super::{medium::Medium::Html, model::OwnCost, model::Report};
use crate::{
    family,
    model::Window,
    record::reader::{Item, Recording},
    safety::escape::html as esc,
    units::clock_utc,
};

/// The page for a recording and its report.
pub fn render(rec: &Recording, r: &Report) -> String {
    let mut ids: Vec<u64> = runq_ids(r);
    ids.extend(
        r.throttled
            .iter()
            .take(throttle::THROTTLE_DRAWN)
            .map(|t| t.id),
    );
    let mut s = Series::new(rec.windows.len(), ids);
    rec.for_each(|item| {
        if let Item::Window { json, .. } = item
            && let Ok(w) = serde_json::from_slice::<Window>(json)
        {
            s.add(&w);
        }
    });
    page(Some(r), &s)
}

/// A page of these windows alone (no recording around them: the fuzzer, tests).
pub fn render_windows(ws: &[Window]) -> String {
    let mut busiest: HashMap<u64, u64> = HashMap::new();
    for w in ws {
        for cg in &w.cgroups {
            *busiest.entry(cg.id).or_default() += cg.runq.all.count;
        }
    }
    let mut ids: Vec<(u64, u64)> = busiest.into_iter().collect();
    ids.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut s = Series::new(ws.len(), ids.iter().take(runq::RUNQ_DRAWN).map(|x| x.0));
    for w in ws {
        s.add(w);
    }
    page(None, &s)
}

pub(super) const STYLE: &str = "
:root{--fg:#1b1f24;--mut:#5b6470;--bg:#fff;--line:#d8dde3;--acc:#b3261e}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;max-width:1100px;padding:12px}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .3em;border-bottom:1px solid var(--line)}
h3{font-size:1em;margin:1em 0 .2em}
.what{color:var(--mut);margin:.1em 0 .4em;font-size:.92em}
.meta{color:var(--mut)}
.warn{background:#fff4e5;border-left:4px solid #e08a00;padding:.4em .6em}
figure{margin:.3em 0 1em;overflow-x:auto}
svg{width:100%;height:auto;display:block}
svg text{font:11px system-ui,sans-serif;fill:var(--mut)}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.9em;width:100%}
th,td{text-align:left;padding:.25em .5em;border-bottom:1px solid var(--line);vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.flag{border-left:4px solid var(--acc);padding:.3em .6em;margin:.5em 0;background:#fbf1f0}
.flag b{color:var(--acc)}
.sug{color:var(--fg)}
.why{color:var(--mut)}
.change code{font-weight:bold}
.legend span{display:inline-block;margin-right:1em;font-size:.85em;color:var(--mut)}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-2px}
table.who td{min-width:4.5em}table.who small{opacity:.8}
code{font:12.5px ui-monospace,monospace;word-break:break-all}
@media (max-width:600px){body{font-size:14px;padding:6px}th,td{padding:.2em .3em}figure svg{min-width:820px}}
@media print{body{max-width:none}h2{break-after:avoid}figure,table,.flag{break-inside:avoid}.scroll{overflow:visible}}
";

/// The page of a report alone (no windows to draw: tests).
#[cfg(test)]
pub(super) fn page_of(r: &Report) -> String {
    page(Some(r), &Series::new(0, std::iter::empty()))
}

fn page(r: Option<&Report>, s: &Series) -> String {
    let mut o = String::with_capacity(64 << 10);
    let title = r.map_or("cgtrace report".to_string(), |r| {
        format!("cgtrace report: {}", esc(&r.host))
    });
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{title}</title><style>{STYLE}</style></head><body>\n<h1>{title}</h1>\n"
    );
    if let Some(r) = r {
        header(&mut o, r);
        who::who_delayed_whom(&mut o, r);
        flags(&mut o, r);
    }
    runq(&mut o, r, s);
    if let Some(r) = r {
        noisy_neighbours(&mut o, r);
        throttle(&mut o, r, s);
        reads(&mut o, r, s);
        waits(&mut o, r);
    } else {
        throttle_series_only(&mut o, s);
    }
    counters(&mut o, r, s);
    o.push_str("</body></html>\n");
    o
}

fn header(o: &mut String, r: &Report) {
    let _ = writeln!(
        o,
        "<p class=\"meta\">Linux {} · cgtrace {} (format {}) · {} to {} UTC · {} windows · {} single events recorded · {} lost in the kernel</p>",
        esc(&r.kernel),
        esc(&r.cgtrace),
        esc(&r.format),
        clock_utc(r.first_unix_ms),
        clock_utc(r.last_unix_ms),
        r.windows,
        r.events_recorded,
        r.events_dropped
    );
    for w in Html.warnings(r) {
        let _ = writeln!(o, "{w}");
    }
    if let Some(s) = &r.wait_split {
        let _ = writeln!(
            o,
            "<p class=\"meta\">Wait split ({}, {}): {}</p>",
            esc(&s.method),
            if s.exact { "exact" } else { "approximate" },
            esc(&s.detail)
        );
    }
}

/// The diagnoses, one box each: the other families' (most windows first), then `throttle`'s by
/// throttled cgroup.
fn flags(o: &mut String, r: &Report) {
    o.push_str("<h2>Diagnoses</h2>\n<p class=\"what\">What each family found, per cgroup, with the change it suggests.</p>\n");
    let others = r.diagnoses.iter().map(|d| {
        let who = Html.who(&d.path, &d.name, d.id);
        (d.family.as_str(), &d.code, who, &d.seen)
    });
    let throttle = r.throttled.iter().flat_map(|t| {
        let who = Html.who(&t.path, &t.name, t.id);
        t.flags
            .iter()
            .map(move |(code, f)| (family::throttle::INFO.name, code, who.clone(), f))
    });
    let mut any = false;
    for (family, code, who, seen) in others.chain(throttle) {
        any = true;
        let _ = writeln!(
            o,
            "<div class=\"flag\"><b>{} {}</b> — {who} ({} windows)<br>{}{}<br><span class=\"sug\">→ {}</span>{}</div>",
            esc(family),
            esc(code),
            seen.windows,
            esc(&seen.message),
            if seen.evidence.is_empty() {
                String::new()
            } else {
                format!("<br><span class=\"why\">{}</span>", esc(&seen.evidence))
            },
            esc(&seen.suggestion),
            match seen.change_line() {
                c if c.is_empty() => String::new(),
                c => format!(
                    "<br><span class=\"change\">change: <code>{}</code></span>",
                    esc(&c)
                ),
            }
        );
    }
    if !any {
        o.push_str("<p>None: no cgroup crossed a diagnosis threshold.</p>\n");
    }
}

fn counters(o: &mut String, r: Option<&Report>, s: &Series) {
    o.push_str("<h2>Kernel counters</h2>\n<p class=\"what\">What the programs handled and lost over the recording, by the kernel-side counter.</p><div class=\"scroll\"><table><tr><th>counter</th><th class=\"n\">total</th></tr>\n");
    let _ = writeln!(
        o,
        "<tr><td>scheduler events handled</td><td class=\"n\">{}</td></tr><tr><td>events or waits lost</td><td class=\"n\">{}</td></tr>",
        s.events_seen, s.events_dropped
    );
    for (k, v) in &s.counters {
        let _ = writeln!(
            o,
            "<tr><td><code>{}</code></td><td class=\"n\">{v}</td></tr>",
            esc(k)
        );
    }
    if let Some(r) = r {
        for (f, n) in &r.events_by_family {
            let _ = writeln!(
                o,
                "<tr><td>single events recorded: {}</td><td class=\"n\">{n}</td></tr>",
                esc(f)
            );
        }
    }
    o.push_str("</table></div>\n");
    if let Some(c) = r.and_then(|r| r.own_cost.as_ref()) {
        own_cost(o, c);
    }
}

/// cgtrace's own cost over the recording (the windows' `self`).
fn own_cost(o: &mut String, c: &OwnCost) {
    o.push_str("<h2>cgtrace's own cost</h2>\n<p class=\"what\">What tracing cost the recorded host: the daemon's CPU and memory, and each BPF program's time per run where it was timed (--bpf-stats).</p>\n");
    let _ = writeln!(
        o,
        "<p>daemon {:.2} % of one CPU on average ({:.2} % at most), resident memory up to {} KiB, over {} windows; BPF programs {}</p>",
        c.mean_daemon_cpu_pct,
        c.max_daemon_cpu_pct,
        c.max_rss_kib,
        c.windows,
        if c.timed_windows == 0 {
            "not timed (record with --bpf-stats)".to_string()
        } else {
            format!(
                "{:.2} % of one CPU over {} timed windows",
                c.mean_bpf_cpu_pct, c.timed_windows
            )
        }
    );
    if c.programs.is_empty() {
        return;
    }
    o.push_str("<div class=\"scroll\"><table><tr><th>program</th><th class=\"n\">runs</th><th class=\"n\">ns/run</th></tr>\n");
    for p in &c.programs {
        let _ = writeln!(
            o,
            "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{:.0}</td></tr>",
            esc(&p.name),
            p.runs,
            p.ns_per_run
        );
    }
    o.push_str("</table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn window(seq: u64, path: &str, waits: &[(u64, u64)]) -> Window {
        let mut w: Window = serde_json::from_str(&crate::record::tests::window_json(seq)).unwrap();
        w.cgroups[0].path = Some(path.into());
        w.cgroups[0].runq.all.buckets = waits.to_vec();
        w.cgroups[0].runq.all.count = waits.iter().map(|b| b.1).sum();
        w
    }

    #[test]
    fn a_page_has_its_pictures_and_escapes_names() {
        let ws: Vec<Window> = (1..=5)
            .map(|s| window(s, "/evil<script>\u{202e}", &[(4096, 3), (1 << 20, s)]))
            .collect();
        let page = render_windows(&ws);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<svg") && page.contains("class=\"heatmap\""));
        assert!(!page.contains("<script"), "tenant text is escaped");
        assert!(!page.contains('\u{202e}'));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "self-contained"
        );
    }
}
