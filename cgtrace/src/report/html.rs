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

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use super::Report;
use crate::{
    hist::micros,
    model::Window,
    record::reader::{Item, Recording},
    safety::escape::html as esc,
    units::{PeriodIn, clock_utc, period, period_thread},
};

/// Time columns at most per picture.
pub const MAX_COLS: usize = 240;
/// Latency rows of a heatmap: octaves from 1 µs (2^10 ns) up.
const ROWS: usize = 25;
const ROW_BASE: u32 = 10;
/// Cgroups drawn per family.
const RUNQ_DRAWN: usize = 4;
const THROTTLE_DRAWN: usize = 6;

/// One time column of one cgroup (or the host).
#[derive(Clone, Default)]
struct Col {
    heat: [u64; ROWS],
    /// Merged run-queue buckets (upper bound ns → waits), for the column's percentiles.
    buckets: BTreeMap<u64, u64>,
    max_us: f64,
    /// throttle: usage (sum of cores, windows with a reading), quota, periods.
    usage: (f64, u32),
    quota: Option<f64>,
    periods: u64,
    throttled: u64,
    episodes: u64,
    throttled_us: f64,
    kernel_throttled: Option<u64>,
}

impl Col {
    fn add_runq(&mut self, buckets: &[(u64, u64)], max_us: f64) {
        for &(upper, n) in buckets {
            *self.buckets.entry(upper).or_default() += n;
            self.heat[row_of(upper)] += n;
        }
        if max_us.is_finite() {
            self.max_us = self.max_us.max(max_us);
        }
    }

    fn waits(&self) -> u64 {
        self.heat.iter().sum()
    }

    /// The `q` quantile's bucket upper bound, in µs.
    fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.waits();
        if total == 0 {
            return None;
        }
        let want = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&upper, &n) in &self.buckets {
            seen += n;
            if seen >= want {
                return Some(upper as f64 / 1e3);
            }
        }
        None
    }
}

fn row_of(upper_ns: u64) -> usize {
    let oct = 63 - upper_ns.max(1).leading_zeros();
    (oct.saturating_sub(ROW_BASE) as usize).min(ROWS - 1)
}

/// What the pictures are drawn from: per time column, the host and the cgroups drawn.
pub struct Series {
    cols: usize,
    windows: usize,
    seen: usize,
    time: Vec<(u64, u64)>,
    host: Vec<Col>,
    cgroups: HashMap<u64, Vec<Col>>,
    dying: Vec<Option<u64>>,
    churn: Vec<(u64, u64)>,
    counters: BTreeMap<String, u64>,
    events_seen: u64,
    events_dropped: u64,
}

impl Series {
    /// For `windows` windows, keeping columns for the cgroups `ids`.
    pub fn new(windows: usize, ids: impl IntoIterator<Item = u64>) -> Self {
        let cols = windows.clamp(1, MAX_COLS);
        Self {
            cols,
            windows: windows.max(1),
            seen: 0,
            time: vec![(u64::MAX, 0); cols],
            host: vec![Col::default(); cols],
            cgroups: ids
                .into_iter()
                .map(|id| (id, vec![Col::default(); cols]))
                .collect(),
            dying: vec![None; cols],
            churn: vec![(0, 0); cols],
            counters: BTreeMap::new(),
            events_seen: 0,
            events_dropped: 0,
        }
    }

    /// Adds the next window.
    pub fn add(&mut self, w: &Window) {
        let c = (self.seen * self.cols / self.windows).min(self.cols - 1);
        self.seen += 1;
        let t = &mut self.time[c];
        let start = w.end_unix_ms.saturating_sub(w.duration_ms);
        *t = (t.0.min(start), t.1.max(w.end_unix_ms));
        for cg in &w.cgroups {
            self.host[c].add_runq(&cg.runq.all.buckets, cg.runq.all.max_us);
            let Some(col) = self.cgroups.get_mut(&cg.id).map(|v| &mut v[c]) else {
                continue;
            };
            col.add_runq(&cg.runq.all.buckets, cg.runq.all.max_us);
            if let Some(th) = &cg.throttle {
                if let Some(u) = th.usage_cores.filter(|u| u.is_finite()) {
                    col.usage.0 += u;
                    col.usage.1 += 1;
                }
                col.quota = th.quota_cores.or(col.quota);
                col.periods += th.nr_periods;
                col.throttled += th.nr_throttled;
                col.episodes += th.episodes;
                col.throttled_us += th.throttled_us;
                if let Some(k) = &th.kernel {
                    *col.kernel_throttled.get_or_insert(0) += k.nr_throttled;
                }
            }
        }
        if let Some(d) = &w.dying_memcgs {
            let v = &mut self.dying[c];
            *v = Some(v.unwrap_or(0).max(d.total));
        }
        if let Some(ch) = &w.churn {
            self.churn[c].0 += ch.created;
            self.churn[c].1 += ch.removed;
        }
        for (k, v) in &w.events.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        self.events_seen += w.events.seen;
        self.events_dropped += w.events.dropped;
    }

    /// Columns that had a window.
    fn used(&self) -> usize {
        self.time.iter().rposition(|t| t.1 > 0).map_or(0, |i| i + 1)
    }
}

/// The page for a recording and its report.
pub fn render(rec: &Recording, r: &Report) -> String {
    let mut ids: Vec<u64> = runq_ids(r);
    ids.extend(r.throttled.iter().take(THROTTLE_DRAWN).map(|t| t.id));
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
    let mut s = Series::new(ws.len(), ids.iter().take(RUNQ_DRAWN).map(|x| x.0));
    for w in ws {
        s.add(w);
    }
    page(None, &s)
}

fn runq_ids(r: &Report) -> Vec<u64> {
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

const STYLE: &str = "
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
.legend span{display:inline-block;margin-right:1em;font-size:.85em;color:var(--mut)}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-2px}
code{font:12.5px ui-monospace,monospace;word-break:break-all}
@media (max-width:600px){body{font-size:14px;padding:6px}th,td{padding:.2em .3em}figure svg{min-width:820px}}
@media print{body{max-width:none}h2{break-after:avoid}figure,table,.flag{break-inside:avoid}.scroll{overflow:visible}}
";

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

fn who(path: &Option<String>, name: &Option<String>, id: u64) -> String {
    match (name, path) {
        (Some(n), Some(p)) => format!("<b>{}</b> <code>{}</code>", esc(n), esc(p)),
        (None, Some(p)) => format!("<code>{}</code>", esc(p)),
        (Some(n), None) => format!("<b>{}</b>", esc(n)),
        (None, None) => format!("cgroup id {id} (removed before it was named)"),
    }
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
    if r.recorder_lost > 0 {
        let _ = writeln!(
            o,
            "<p class=\"warn\">The recorder could not keep {} single events (its buffer was full: the disk was too slow).</p>",
            r.recorder_lost
        );
    }
    if let Some(w) = r.read.warning() {
        let _ = writeln!(o, "<p class=\"warn\">The file is damaged: {}.</p>", esc(&w));
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

fn flags(o: &mut String, r: &Report) {
    let mut any = false;
    let mut out = String::new();
    for d in &r.diagnoses {
        any = true;
        let _ = writeln!(
            out,
            "<div class=\"flag\"><b>{} {}</b> — {} ({} windows)<br>{}<br><span class=\"sug\">→ {}</span></div>",
            esc(&d.family),
            esc(&d.code),
            who(&d.path, &d.name, d.id),
            d.windows,
            esc(&d.message),
            esc(&d.suggestion)
        );
    }
    for t in &r.throttled {
        for (code, f) in &t.flags {
            any = true;
            let _ = writeln!(
                out,
                "<div class=\"flag\"><b>throttle {}</b> — {} ({} windows)<br>{}<br><span class=\"sug\">→ {}</span></div>",
                esc(code),
                who(&t.path, &t.name, t.id),
                f.windows,
                esc(&f.message),
                esc(&f.suggestion)
            );
        }
    }
    o.push_str("<h2>Diagnoses</h2>\n<p class=\"what\">What each family found, per cgroup, with the change it suggests.</p>\n");
    if any {
        o.push_str(&out);
    } else {
        o.push_str("<p>None: no cgroup crossed a diagnosis threshold.</p>\n");
    }
}

/// Width and height of a picture's plot area, and the margins around it.
const W: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP_M: f64 = 8.0;
const BOTTOM: f64 = 22.0;

fn x_of(s: &Series, c: f64) -> f64 {
    LEFT + (W - LEFT - RIGHT) * c / s.used().max(1) as f64
}

/// Time labels under a plot of height `h` (start, middle, end).
fn time_axis(o: &mut String, s: &Series, h: f64) {
    let n = s.used();
    if n == 0 {
        return;
    }
    let y = TOP_M + h + 15.0;
    for (c, anchor) in [(0, "start"), (n / 2, "middle"), (n - 1, "end")] {
        let (a, b) = s.time[c];
        let t = if anchor == "end" { b } else { a };
        let x = if anchor == "end" {
            x_of(s, n as f64)
        } else {
            x_of(s, c as f64)
        };
        let _ = write!(
            o,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>",
            clock_utc(t)
        );
    }
}

fn heat_colour(v: u64, max: u64) -> String {
    let c = ((1.0 + v as f64).ln() / (1.0 + max as f64).ln()).clamp(0.0, 1.0);
    format!("hsl({:.0},85%,{:.0}%)", 55.0 - 55.0 * c, 88.0 - 50.0 * c)
}

/// A run-queue latency heatmap: time × latency octave, colour = waits.
fn heatmap(o: &mut String, s: &Series, cols: &[Col], label: &str) {
    let n = s.used();
    let lo = cols[..n]
        .iter()
        .filter_map(|c| c.heat.iter().position(|&v| v > 0))
        .min();
    let hi = cols[..n]
        .iter()
        .filter_map(|c| c.heat.iter().rposition(|&v| v > 0))
        .max();
    let (Some(lo), Some(hi)) = (lo, hi) else {
        let _ = writeln!(o, "<p class=\"meta\">{label}: no waits recorded.</p>");
        return;
    };
    let rows = hi - lo + 1;
    let cell_h = (160.0 / rows as f64).clamp(6.0, 14.0);
    let h = cell_h * rows as f64;
    let max = cols[..n]
        .iter()
        .flat_map(|c| c.heat.iter())
        .copied()
        .max()
        .unwrap_or(1);
    let _ = write!(
        o,
        "<figure><svg viewBox=\"0 0 {W} {:.0}\" role=\"img\" aria-label=\"{label}\" class=\"heatmap\">",
        TOP_M + h + BOTTOM
    );
    let cw = (W - LEFT - RIGHT) / n as f64;
    for (ci, col) in cols[..n].iter().enumerate() {
        for r in lo..=hi {
            let v = col.heat[r];
            if v == 0 {
                continue;
            }
            let y = TOP_M + (hi - r) as f64 * cell_h;
            let _ = write!(
                o,
                "<rect x=\"{:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{cell_h:.2}\" fill=\"{}\"><title>{} waits ≤ {}</title></rect>",
                x_of(s, ci as f64),
                cw + 0.3,
                heat_colour(v, max),
                v,
                micros(((1u64 << (r as u32 + ROW_BASE + 1)) as f64) / 1e3)
            );
        }
    }
    // Latency labels every few rows.
    let step = rows.div_ceil(6).max(1);
    for r in (lo..=hi).step_by(step) {
        let y = TOP_M + (hi - r) as f64 * cell_h + cell_h * 0.8;
        let _ = write!(
            o,
            "<text x=\"{:.0}\" y=\"{y:.1}\" text-anchor=\"end\">≤{}</text>",
            LEFT - 4.0,
            micros(((1u64 << (r as u32 + ROW_BASE + 1)) as f64) / 1e3)
        );
    }
    let _ = write!(
        o,
        "<rect x=\"{LEFT}\" y=\"{TOP_M}\" width=\"{:.0}\" height=\"{h:.1}\" fill=\"none\" stroke=\"#d8dde3\"/>",
        W - LEFT - RIGHT
    );
    time_axis(o, s, h);
    let _ = writeln!(
        o,
        "</svg><div class=\"legend\"><span><i style=\"background:{}\"></i>1 wait</span><span><i style=\"background:{}\"></i>{max} waits per cell</span></div></figure>",
        heat_colour(1, max),
        heat_colour(max, max)
    );
}

/// Lines over time: each `(label, colour, dashed, values)`; `log` for latency.
fn lines(
    o: &mut String,
    s: &Series,
    series: &[(&str, &str, bool, Vec<Option<f64>>)],
    log: bool,
    unit: &dyn Fn(f64) -> String,
) {
    let n = s.used();
    let vals = series
        .iter()
        .flat_map(|x| x.3.iter().flatten())
        .copied()
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return;
    }
    let f = |v: f64| if log { v.max(1e-3).log10() } else { v };
    let (flo, mut fhi) = if log {
        (f(lo.max(1e-3)), f(hi))
    } else {
        (0.0, hi)
    };
    if fhi <= flo {
        fhi = flo + 1.0;
    }
    let h = 120.0;
    let y_of = |v: f64| TOP_M + h - (f(v) - flo) / (fhi - flo) * h;
    let _ = write!(
        o,
        "<figure><svg viewBox=\"0 0 {W} {:.0}\" role=\"img\" class=\"timeline\">",
        TOP_M + h + BOTTOM
    );
    let _ = write!(
        o,
        "<rect x=\"{LEFT}\" y=\"{TOP_M}\" width=\"{:.0}\" height=\"{h:.0}\" fill=\"none\" stroke=\"#d8dde3\"/>",
        W - LEFT - RIGHT
    );
    let top_v = if log { 10f64.powf(fhi) } else { fhi };
    let bottom_v = if log { 10f64.powf(flo) } else { flo };
    let _ = write!(
        o,
        "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text>",
        LEFT - 4.0,
        TOP_M + 10.0,
        unit(top_v),
        LEFT - 4.0,
        TOP_M + h,
        unit(bottom_v)
    );
    for (label, colour, dashed, v) in series {
        let mut d = String::new();
        let mut pen_up = true;
        for (c, val) in v.iter().take(n).enumerate() {
            match val.filter(|x| x.is_finite()) {
                Some(x) => {
                    let _ = write!(
                        d,
                        "{}{:.1},{:.1}",
                        if pen_up { "M" } else { "L" },
                        x_of(s, c as f64 + 0.5),
                        y_of(x)
                    );
                    pen_up = false;
                }
                None => pen_up = true,
            }
        }
        let _ = write!(
            o,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"{}><title>{label}</title></path>",
            if *dashed {
                " stroke-dasharray=\"5 4\""
            } else {
                ""
            }
        );
    }
    time_axis(o, s, h);
    o.push_str("</svg><div class=\"legend\">");
    for (label, colour, _, _) in series {
        let _ = write!(
            o,
            "<span><i style=\"background:{colour}\"></i>{label}</span>"
        );
    }
    o.push_str("</div></figure>\n");
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

fn runq(o: &mut String, r: Option<&Report>, s: &Series) {
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
            who(&path, &name, id)
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
                who(&c.path, &c.name, c.id),
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
    // Share of periods throttled, as bars; episodes in the tooltip.
    let n = s.used();
    let h = 60.0;
    let _ = write!(
        o,
        "<figure><svg viewBox=\"0 0 {W} {:.0}\" role=\"img\" class=\"throttled\">",
        TOP_M + h + BOTTOM
    );
    let _ = write!(
        o,
        "<rect x=\"{LEFT}\" y=\"{TOP_M}\" width=\"{:.0}\" height=\"{h:.0}\" fill=\"none\" stroke=\"#d8dde3\"/><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">100%</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">0</text>",
        W - LEFT - RIGHT,
        LEFT - 4.0,
        TOP_M + 10.0,
        LEFT - 4.0,
        TOP_M + h
    );
    let cw = (W - LEFT - RIGHT) / n.max(1) as f64;
    for (c, col) in cols.iter().take(n).enumerate() {
        if col.periods == 0 {
            continue;
        }
        let share = (col.throttled as f64 / col.periods as f64).clamp(0.0, 1.0);
        let bh = share * h;
        let _ = write!(
            o,
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{bh:.2}\" fill=\"#e45756\"><title>{} of {} periods throttled, {} episodes, {} throttled (ours){}</title></rect>",
            x_of(s, c as f64),
            TOP_M + h - bh,
            (cw - 0.5).max(0.5),
            col.throttled,
            col.periods,
            col.episodes,
            micros(col.throttled_us),
            col.kernel_throttled
                .map_or(String::new(), |k| format!("; kernel: {k} throttled"))
        );
    }
    time_axis(o, s, h);
    o.push_str("</svg><div class=\"legend\"><span><i style=\"background:#e45756\"></i>share of periods throttled</span></div></figure>\n");
}

fn throttle(o: &mut String, r: &Report, s: &Series) {
    if r.throttled.is_empty() {
        return;
    }
    o.push_str("<h2>CFS throttling</h2>\n<p class=\"what\">Cgroups held off the CPU by their quota: what they used against their quota, and the share of periods throttled, over time; then ours next to the kernel's own cpu.stat.</p>\n");
    for t in r.throttled.iter().take(THROTTLE_DRAWN) {
        let _ = writeln!(
            o,
            "<h3 class=\"cgroup\">{}</h3>",
            who(&t.path, &t.name, t.id)
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
            who(&t.path, &t.name, t.id),
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
        for e in r.longest_episodes.iter().take(super::TOP) {
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
                who(&e.path, &e.name, e.cgroup_id)
            );
        }
        o.push_str("</table></div>\n");
    }
}

fn throttle_series_only(o: &mut String, s: &Series) {
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

fn reads(o: &mut String, r: &Report, s: &Series) {
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
                who(&f.path, &f.name, f.cgroup_id),
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

/// The blame ledger's noisy neighbours: who cost others the most run-queue wait, and whom.
fn noisy_neighbours(o: &mut String, r: &Report) {
    if r.noisy_neighbours.is_empty() {
        return;
    }
    o.push_str("<h2>Noisy neighbours</h2>\n<p class=\"what\">The cgroups whose tasks held CPUs that other cgroups' tasks were waiting for (the blame ledger, recorded with --blame), with the cgroups they delayed most.</p><div class=\"scroll\"><table><tr><th class=\"n\">wait caused</th><th class=\"n\">windows</th><th>cgroup</th><th>delayed most</th></tr>\n");
    for n in &r.noisy_neighbours {
        let victims: Vec<String> = n
            .victims
            .iter()
            .map(|v| format!("{} {}", micros(v.wait_us), who(&v.path, &v.name, v.id)))
            .collect();
        let _ = writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            micros(n.caused_us),
            n.windows,
            who(&n.path, &n.name, n.id),
            victims.join("<br>")
        );
    }
    o.push_str("</table></div>\n");
}

fn waits(o: &mut String, r: &Report) {
    if r.slowest_waits.is_empty() {
        return;
    }
    o.push_str("<h2>Slowest single waits</h2><div class=\"scroll\"><table><tr><th class=\"n\">wait</th><th class=\"n\">at</th><th>kind</th><th>task</th><th>cgroup</th></tr>\n");
    for w in r.slowest_waits.iter().take(super::TOP) {
        let _ = writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td><code>{}</code> [{}]</td><td>{}</td></tr>",
            micros(w.wait_us),
            clock_utc(w.at_unix_ms),
            esc(&w.wait_kind),
            esc(&w.comm),
            w.pid,
            who(&w.path, &w.name, w.cgroup_id)
        );
    }
    o.push_str("</table></div>\n");
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
fn own_cost(o: &mut String, c: &super::OwnCost) {
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

    fn window(seq: u64, path: &str, waits: &[(u64, u64)]) -> Window {
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

    #[test]
    fn columns_merge_windows_beyond_the_limit() {
        let ws: Vec<Window> = (1..=1000).map(|s| window(s, "/a", &[(4096, 1)])).collect();
        let mut s = Series::new(ws.len(), [7]);
        for w in &ws {
            s.add(w);
        }
        assert_eq!(s.used(), MAX_COLS);
        let total: u64 = s.cgroups[&7].iter().map(Col::waits).sum();
        assert_eq!(total, 1000);
        assert_eq!(s.cgroups[&7][0].quantile_us(0.99), Some(4.096));
    }
}
