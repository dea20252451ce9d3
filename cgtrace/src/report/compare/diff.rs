//! [`diff`]: two reports' cgroups matched and their figures set side by side.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::model::{CgroupTotals, Report};

/// Cgroups the text shows (JSON and the page show every one that changed).
pub const TEXT_TOP: usize = 20;

/// The comparison of two recordings.
#[derive(Debug, Serialize)]
pub struct Compare {
    pub before: Side,
    pub after: Side,
    /// What a reader must know before trusting the comparison (different hosts, damaged files).
    pub warnings: Vec<String>,
    /// Cgroups in either recording, and of those, those with any change.
    pub cgroups_seen: usize,
    pub cgroups_changed: usize,
    /// The changed cgroups, largest change first.
    pub cgroups: Vec<CgroupChange>,
}

/// One recording, as the comparison names it.
#[derive(Debug, Serialize)]
pub struct Side {
    pub file: String,
    pub host: String,
    pub kernel: String,
    pub first_unix_ms: u64,
    pub last_unix_ms: u64,
    pub windows: u64,
    /// The time its windows cover: what the per-second figures divide by.
    pub seconds: f64,
}

/// One cgroup's figures in one recording, per second of it where they are sums.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Figures {
    pub id: u64,
    pub wait_us_per_s: f64,
    pub wait_p50_us: f64,
    pub wait_p99_us: f64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_periods_per_s: f64,
    /// Throttled periods in % of periods.
    pub throttled_pct: f64,
    pub throttled_us_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_nr_throttled: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_throttled_periods_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_throttled_us_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caused_us_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suffered_us_per_s: Option<f64>,
    pub flags: Vec<String>,
}

/// A cgroup in both, or in one, of the recordings.
#[derive(Clone, Debug, Serialize)]
pub struct CgroupChange {
    pub path: Option<String>,
    pub name: Option<String>,
    /// Absent from a recording: `null`.
    pub before: Option<Figures>,
    pub after: Option<Figures>,
    /// Flag codes in AFTER only, and in BEFORE only.
    pub flags_raised: Vec<String>,
    pub flags_cleared: Vec<String>,
    /// What it is ranked by: the larger absolute change of run-queue wait and of throttled time,
    /// in µs per second.
    pub change_us_per_s: f64,
}

/// The metrics a comparison sets side by side (the page's heatmap rows): name, unit, value.
/// More is worse for each.
#[allow(clippy::type_complexity)]
pub const METRICS: [(&str, &str, fn(&Figures) -> Option<f64>); 9] = [
    ("run-queue wait", "µs/s", |f| Some(f.wait_us_per_s)),
    ("wait p50", "µs", |f| Some(f.wait_p50_us)),
    ("wait p99", "µs", |f| Some(f.wait_p99_us)),
    ("throttled periods", "/s", |f| {
        Some(f.throttled_periods_per_s)
    }),
    ("throttled share", "% of periods", |f| Some(f.throttled_pct)),
    ("throttled time", "µs/s", |f| Some(f.throttled_us_per_s)),
    ("kernel nr_throttled", "/s", |f| {
        f.kernel_throttled_periods_per_s
    }),
    ("kernel throttled time", "µs/s", |f| {
        f.kernel_throttled_us_per_s
    }),
    ("wait suffered from neighbours", "µs/s", |f| {
        f.suffered_us_per_s
    }),
];

/// `+12 %`, `-80 %`, `new`, `gone` (or nothing when neither side has it).
pub fn rel(b: Option<f64>, a: Option<f64>) -> Option<String> {
    match (b, a) {
        (Some(b), Some(a)) if b == a => Some("=".into()),
        (Some(b), Some(a)) if b != 0.0 => Some(format!("{:+.0} %", 100.0 * (a - b) / b)),
        (Some(_), Some(_)) => Some("new".into()),
        _ => None,
    }
}

/// The seconds a report's windows cover: first to last window end, plus the first window (the
/// recorder's interval; without one, the mean spacing of the windows).
fn seconds(r: &Report) -> f64 {
    let span = r.last_unix_ms.saturating_sub(r.first_unix_ms) as f64 / 1e3;
    if r.windows >= 1 && r.interval_ms > 0 {
        span + r.interval_ms as f64 / 1e3
    } else if r.windows >= 2 && span > 0.0 {
        span * r.windows as f64 / (r.windows - 1) as f64
    } else {
        1.0
    }
}

fn side(file: &str, r: &Report) -> Side {
    Side {
        file: file.to_string(),
        host: r.host.clone(),
        kernel: r.kernel.clone(),
        first_unix_ms: r.first_unix_ms,
        last_unix_ms: r.last_unix_ms,
        windows: r.windows,
        seconds: seconds(r),
    }
}

/// A cgroup's figures over `secs` seconds.
pub(super) fn figures(t: &CgroupTotals, secs: f64) -> Figures {
    let per_s = |v: f64| v / secs;
    Figures {
        id: t.id,
        wait_us_per_s: per_s(t.wait_us),
        wait_p50_us: t.wait_p50_us,
        wait_p99_us: t.wait_p99_us,
        nr_periods: t.nr_periods,
        nr_throttled: t.nr_throttled,
        throttled_periods_per_s: per_s(t.nr_throttled as f64),
        throttled_pct: if t.nr_periods > 0 {
            100.0 * t.nr_throttled as f64 / t.nr_periods as f64
        } else {
            0.0
        },
        throttled_us_per_s: per_s(t.throttled_us),
        kernel_nr_throttled: t.kernel_nr_throttled,
        kernel_throttled_periods_per_s: t.kernel_nr_throttled.map(|n| per_s(n as f64)),
        kernel_throttled_us_per_s: t.kernel_throttled_us.map(per_s),
        caused_us_per_s: t.caused_us.map(per_s),
        suffered_us_per_s: t.suffered_us.map(per_s),
        flags: t.flags.clone(),
    }
}

/// How a cgroup is matched between recordings: its path, or its id when it has none.
fn key(t: &CgroupTotals) -> String {
    match &t.path {
        Some(p) => format!("p:{p}"),
        None => format!("i:{}", t.id),
    }
}

/// The change of one cgroup between `b` and `a` (either absent).
fn change(b: Option<Figures>, a: Option<Figures>, who: &CgroupTotals) -> CgroupChange {
    let zero = Figures::default();
    let (fb, fa) = (b.as_ref().unwrap_or(&zero), a.as_ref().unwrap_or(&zero));
    let raised = fa
        .flags
        .iter()
        .filter(|c| !fb.flags.contains(c))
        .cloned()
        .collect();
    let cleared = fb
        .flags
        .iter()
        .filter(|c| !fa.flags.contains(c))
        .cloned()
        .collect();
    let change_us_per_s = (fa.wait_us_per_s - fb.wait_us_per_s)
        .abs()
        .max((fa.throttled_us_per_s - fb.throttled_us_per_s).abs());
    CgroupChange {
        path: who.path.clone(),
        name: who.name.clone(),
        before: b,
        after: a,
        flags_raised: raised,
        flags_cleared: cleared,
        change_us_per_s,
    }
}

impl CgroupChange {
    /// Any figure or flag differs.
    fn changed(&self) -> bool {
        let zero = Figures::default();
        let (b, a) = (
            self.before.as_ref().unwrap_or(&zero),
            self.after.as_ref().unwrap_or(&zero),
        );
        !self.flags_raised.is_empty()
            || !self.flags_cleared.is_empty()
            || b.nr_throttled != a.nr_throttled
            || METRICS.iter().any(|(_, _, m)| m(b) != m(a))
    }
}

/// Compares `before` (read from the file named `bf`) with `after` (from `af`).
pub fn diff(bf: &str, before: &Report, af: &str, after: &Report) -> Compare {
    let (sb, sa) = (seconds(before), seconds(after));
    let mut by_key: BTreeMap<String, (Option<&CgroupTotals>, Option<&CgroupTotals>)> =
        BTreeMap::new();
    for t in &before.cgroups {
        by_key.entry(key(t)).or_default().0 = Some(t);
    }
    for t in &after.cgroups {
        by_key.entry(key(t)).or_default().1 = Some(t);
    }
    let seen = by_key.len();
    let mut cgroups: Vec<CgroupChange> = by_key
        .into_values()
        .filter_map(|(b, a)| {
            let who = a.or(b)?;
            Some(change(
                b.map(|t| figures(t, sb)),
                a.map(|t| figures(t, sa)),
                who,
            ))
        })
        .filter(CgroupChange::changed)
        .collect();
    cgroups.sort_by(|x, y| {
        y.change_us_per_s
            .total_cmp(&x.change_us_per_s)
            .then_with(|| {
                let n = |c: &CgroupChange| c.flags_raised.len() + c.flags_cleared.len();
                n(y).cmp(&n(x))
            })
            .then_with(|| x.path.cmp(&y.path))
    });
    let mut warnings = Vec::new();
    if before.host != after.host {
        warnings.push(format!(
            "the recordings are from different hosts ({} and {}): cgroups are matched by path all the same",
            before.host, after.host
        ));
    }
    for (which, r) in [("BEFORE", before), ("AFTER", after)] {
        if r.untallied > 0 {
            warnings.push(format!(
                "{which}: {} per-cgroup entries were left out (the report's tallies reached their bound)",
                r.untallied
            ));
        }
        if let Some(w) = r.read.warning() {
            warnings.push(format!("{which} file is damaged: {w}"));
        }
    }
    Compare {
        before: side(bf, before),
        after: side(af, after),
        warnings,
        cgroups_seen: seen,
        cgroups_changed: cgroups.len(),
        cgroups,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(host: &str, secs: u64, cgroups: Vec<CgroupTotals>) -> Report {
        Report {
            host: host.into(),
            first_unix_ms: 1_000,
            // `secs` one-second windows: first to last end is secs-1 seconds.
            last_unix_ms: 1_000 + (secs - 1) * 1_000,
            windows: secs,
            cgroups,
            ..Report::default()
        }
    }

    fn cg(id: u64, path: Option<&str>) -> CgroupTotals {
        CgroupTotals {
            id,
            path: path.map(Into::into),
            name: Some(format!("n{id}")),
            ..CgroupTotals::default()
        }
    }

    #[test]
    fn cgroups_are_matched_by_path_and_by_id_without_one() {
        let mut a = cg(10, Some("/app"));
        a.throttled_us = 6_000_000.0;
        a.nr_throttled = 300;
        a.nr_periods = 600;
        a.flags = vec!["period_exhausted".into()];
        let mut a2 = cg(99, Some("/app"));
        a2.throttled_us = 600_000.0;
        a2.nr_throttled = 30;
        a2.nr_periods = 600;
        let mut anon = cg(5, None);
        anon.wait_us = 1_000.0;
        let mut anon2 = cg(5, None);
        anon2.wait_us = 4_000.0;
        let gone = cg(6, None);
        let b = report("h", 6, vec![a, anon, gone.clone()]);
        let af = report("h", 6, vec![a2, anon2, gone]);
        let c = diff("b", &b, "a", &af);
        assert!(c.warnings.is_empty());
        assert_eq!(
            (c.cgroups_seen, c.cgroups_changed),
            (3, 2),
            "id 6 did not change"
        );
        let app = &c.cgroups[0];
        assert_eq!(app.path.as_deref(), Some("/app"), "largest change first");
        let (fb, fa) = (app.before.as_ref().unwrap(), app.after.as_ref().unwrap());
        assert_eq!((fb.id, fa.id), (10, 99), "matched across re-creation");
        assert_eq!(fb.throttled_periods_per_s, 50.0);
        assert_eq!(fa.throttled_periods_per_s, 5.0);
        assert_eq!((fb.throttled_pct, fa.throttled_pct), (50.0, 5.0));
        assert_eq!(fb.throttled_us_per_s, 1_000_000.0);
        assert_eq!(app.change_us_per_s, 900_000.0);
        assert_eq!(app.flags_cleared, vec!["period_exhausted".to_string()]);
        assert!(app.flags_raised.is_empty());
        let anon = &c.cgroups[1];
        assert_eq!(anon.path, None);
        assert_eq!(anon.change_us_per_s, 500.0, "(4000 - 1000) µs over 6 s");
    }

    #[test]
    fn a_cgroup_in_one_recording_only_is_compared_against_nothing() {
        let mut new = cg(7, Some("/new"));
        new.nr_throttled = 12;
        new.nr_periods = 12;
        new.flags = vec!["x".into()];
        let c = diff(
            "b",
            &report("one", 4, vec![]),
            "a",
            &report("two", 4, vec![new]),
        );
        assert_eq!(c.warnings.len(), 1, "different hosts: a warning");
        assert!(c.warnings[0].contains("different hosts"));
        let n = &c.cgroups[0];
        assert!(n.before.is_none());
        assert_eq!(n.after.as_ref().unwrap().throttled_periods_per_s, 3.0);
        assert_eq!(n.flags_raised, vec!["x".to_string()]);
    }

    #[test]
    fn relative_changes() {
        assert_eq!(rel(Some(10.0), Some(5.0)).as_deref(), Some("-50 %"));
        assert_eq!(rel(Some(0.0), Some(5.0)).as_deref(), Some("new"));
        assert_eq!(rel(Some(2.0), Some(2.0)).as_deref(), Some("="));
        assert_eq!(rel(None, Some(2.0)), None);
    }

    #[test]
    fn the_seconds_cover_every_window() {
        assert_eq!(seconds(&report("h", 6, vec![])), 6.0);
        assert_eq!(seconds(&report("h", 1, vec![])), 1.0);
        // A partial last window 200 ms after the one before it, 500 ms windows.
        let mut r = report("h", 4, vec![]);
        r.interval_ms = 500;
        r.last_unix_ms = r.first_unix_ms + 1_200;
        assert_eq!(seconds(&r), 1.7);
    }
}
