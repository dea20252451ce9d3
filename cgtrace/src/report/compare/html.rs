//! `report --compare --html`: one self-contained page (the report page's style, no script or
//! request) with a difference heatmap per metric: a row per changed cgroup, before, after and
//! the relative change, the cell's background red when it got worse, green when better, deeper
//! the larger the change. Every tenant string goes through [`crate::safety::escape::html`].

use std::fmt::Write as _;

use super::diff::{CgroupChange, Compare, Figures, METRICS, rel};
use crate::{report::html::STYLE, safety::escape::html as esc, units::clock_utc};

/// Rows per metric table (the JSON has every cgroup).
const ROWS: usize = 50;

/// A cell's background for a change from `b` to `a` (more is worse): red worse, green better,
/// the opacity the relative change (full at ±100 % and beyond).
fn shade(b: f64, a: f64) -> String {
    if a == b {
        return String::new();
    }
    let r = if b == 0.0 {
        1.0
    } else {
        ((a - b) / b).abs().min(1.0)
    };
    let alpha = 0.15 + 0.75 * r;
    let rgb = if a > b { "220,40,40" } else { "30,160,60" };
    format!(" style=\"background:rgba({rgb},{alpha:.2})\"")
}

fn who(c: &CgroupChange) -> String {
    let id = c
        .after
        .as_ref()
        .or(c.before.as_ref())
        .map_or(0, |f: &Figures| f.id);
    let name = c
        .name
        .as_deref()
        .map_or(String::new(), |n| format!("<b>{}</b> ", esc(n)));
    match &c.path {
        Some(p) => format!("{name}<code>{}</code>", esc(p)),
        None => format!("{name}id {id}"),
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.1}"))
}

pub fn render_html(c: &Compare) -> String {
    let mut o = String::with_capacity(32 << 10);
    let title = "cgtrace report: comparison";
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{title}</title><style>{STYLE}</style></head><body>\n<h1>{title}</h1>\n<table>\n"
    );
    for (label, s) in [("Before", &c.before), ("After", &c.after)] {
        let _ = writeln!(
            o,
            "<tr><th>{label}</th><td><code>{}</code></td><td>{} (Linux {})</td><td>{} to {}</td><td>{} windows, {:.1} s</td></tr>",
            esc(&s.file),
            esc(&s.host),
            esc(&s.kernel),
            clock_utc(s.first_unix_ms),
            clock_utc(s.last_unix_ms),
            s.windows,
            s.seconds
        );
    }
    o.push_str("</table>\n");
    for w in &c.warnings {
        let _ = writeln!(o, "<p class=\"warn\">{}</p>", esc(w));
    }
    let _ = writeln!(
        o,
        "<p>{} of {} cgroups changed. Red: worse after, green: better; the deeper, the larger the relative change.</p>",
        c.cgroups_changed, c.cgroups_seen
    );
    let flagged: Vec<&CgroupChange> = c
        .cgroups
        .iter()
        .filter(|ch| !ch.flags_raised.is_empty() || !ch.flags_cleared.is_empty())
        .collect();
    if !flagged.is_empty() {
        o.push_str("<h2>Flags raised and cleared</h2>\n<table class=\"flags\"><tr><th>cgroup</th><th>raised</th><th>cleared</th></tr>\n");
        for ch in flagged.iter().take(ROWS) {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td style=\"background:rgba(220,40,40,.3)\">{}</td><td style=\"background:rgba(30,160,60,.3)\">{}</td></tr>",
                who(ch),
                esc(&ch.flags_raised.join(", ")),
                esc(&ch.flags_cleared.join(", "))
            );
        }
        o.push_str("</table>\n");
    }
    let zero = Figures::default();
    for (name, unit, m) in METRICS {
        let rows: Vec<(&CgroupChange, Option<f64>, Option<f64>)> = c
            .cgroups
            .iter()
            .map(|ch| {
                let b = m(ch.before.as_ref().unwrap_or(&zero));
                let a = m(ch.after.as_ref().unwrap_or(&zero));
                (ch, b, a)
            })
            .filter(|(_, b, a)| (b.is_some() || a.is_some()) && b != a)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "<h2>{} ({})</h2>\n<table class=\"diff\"><tr><th>cgroup</th><th>before</th><th>after</th><th>change</th></tr>",
            esc(name),
            esc(unit)
        );
        for (ch, b, a) in rows.iter().take(ROWS) {
            let style = match (b, a) {
                (Some(b), Some(a)) => shade(*b, *a),
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td{style}>{}</td></tr>",
                who(ch),
                num(*b),
                num(*a),
                esc(&rel(*b, *a).unwrap_or_default())
            );
        }
        if rows.len() > ROWS {
            let _ = writeln!(
                o,
                "<tr><td colspan=\"4\">… and {} more (all in --json)</td></tr>",
                rows.len() - ROWS
            );
        }
        o.push_str("</table>\n");
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worse_is_red_better_is_green_and_names_are_escaped() {
        assert!(shade(10.0, 20.0).contains("220,40,40"));
        assert!(shade(10.0, 1.0).contains("30,160,60"));
        assert_eq!(shade(3.0, 3.0), "");
        let ch = CgroupChange {
            path: Some("/a<script>".into()),
            name: Some("\"x\"&".into()),
            before: None,
            after: Some(Figures::default()),
            flags_raised: vec![],
            flags_cleared: vec![],
            change_us_per_s: 0.0,
        };
        let w = who(&ch);
        assert!(
            !w.contains("<script>") && w.contains("&lt;script&gt;"),
            "{w}"
        );
    }
}
