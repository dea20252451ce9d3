//! The page's pictures, as inline SVG: a latency heatmap (time × latency octave), lines over
//! time, and the share of periods throttled as bars; each with its time axis.

use std::fmt::Write as _;

use super::series::{Col, ROW_BASE, Series};
use crate::{hist::micros, units::clock_utc};

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
pub(super) fn heatmap(o: &mut String, s: &Series, cols: &[Col], label: &str) {
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
pub(super) fn lines(
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

/// The share of periods throttled per column, as bars; episodes and throttled time in the
/// tooltip.
pub(super) fn throttled_bars(o: &mut String, s: &Series, cols: &[Col]) {
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
