//! `report --compare` as text: per changed cgroup (largest change first, at most
//! [`TEXT_TOP`]), each metric before → after, and the flags raised and cleared. Tenant strings
//! (paths, names, hosts) are escaped for a terminal.

use std::fmt::Write as _;

use super::diff::{CgroupChange, Compare, Figures, METRICS, TEXT_TOP, rel};
use crate::{safety::escape::terminal as esc, units::clock_utc};

/// A figure, or `-` when the recording has none.
fn fig(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

fn who(c: &CgroupChange) -> String {
    let id = c
        .after
        .as_ref()
        .or(c.before.as_ref())
        .map_or(0, |f: &Figures| f.id);
    match (&c.path, &c.name) {
        (Some(p), Some(n)) => format!("{} ({})", esc(n), esc(p)),
        (Some(p), None) => esc(p).into_owned(),
        (None, Some(n)) => format!("{} (id {id})", esc(n)),
        (None, None) => format!("id {id}"),
    }
}

pub fn render_text(c: &Compare) -> String {
    let mut o = String::new();
    for (label, s) in [("before", &c.before), ("after", &c.after)] {
        let _ = writeln!(
            o,
            "{label}: {} — {} (Linux {}), {} to {}, {} windows, {:.1} s",
            esc(&s.file),
            esc(&s.host),
            esc(&s.kernel),
            clock_utc(s.first_unix_ms),
            clock_utc(s.last_unix_ms),
            s.windows,
            s.seconds
        );
    }
    for w in &c.warnings {
        let _ = writeln!(o, "note: {}", esc(w));
    }
    let _ = writeln!(
        o,
        "{} of {} cgroups changed (largest change of run-queue wait or throttled time first)",
        c.cgroups_changed, c.cgroups_seen
    );
    let zero = Figures::default();
    for ch in c.cgroups.iter().take(TEXT_TOP) {
        let state = match (&ch.before, &ch.after) {
            (None, _) => " [only in after]",
            (_, None) => " [only in before]",
            _ => "",
        };
        let _ = writeln!(o, "\n## {}{state}", who(ch));
        let (b, a) = (
            ch.before.as_ref().unwrap_or(&zero),
            ch.after.as_ref().unwrap_or(&zero),
        );
        for (name, unit, m) in METRICS {
            let (vb, va) = (m(b), m(a));
            if vb.is_none() && va.is_none() {
                continue;
            }
            let _ = writeln!(
                o,
                "  {name:<30} {:>12} → {:<12} {unit:<13} {}",
                fig(vb),
                fig(va),
                rel(vb, va).unwrap_or_default()
            );
        }
        if b.nr_periods > 0 || a.nr_periods > 0 {
            let _ = writeln!(
                o,
                "  {:<30} {:>12} → {}/{}",
                "throttled of periods",
                format!("{}/{}", b.nr_throttled, b.nr_periods),
                a.nr_throttled,
                a.nr_periods
            );
        }
        if !ch.flags_raised.is_empty() {
            let _ = writeln!(o, "  flags raised:  {}", esc(&ch.flags_raised.join(", ")));
        }
        if !ch.flags_cleared.is_empty() {
            let _ = writeln!(o, "  flags cleared: {}", esc(&ch.flags_cleared.join(", ")));
        }
    }
    if c.cgroups.len() > TEXT_TOP {
        let _ = writeln!(
            o,
            "\n… and {} more cgroups changed (all of them in --json)",
            c.cgroups.len() - TEXT_TOP
        );
    }
    o
}
