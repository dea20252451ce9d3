//! `cgtrace whatif`: for each throttled cgroup of a recording, its recorded demand
//! ([`demand`]) replayed against other CFS bandwidth settings ([`replay`]): throttled periods,
//! throttled time, the p99 stall and the run-queue wait the throttle causes, per candidate
//! setting, beside the kernel's own counters for the setting it ran under.

pub mod demand;
pub mod replay;

use std::collections::BTreeMap;

use serde::Serialize;

use self::{
    demand::{Demand, Recorded, WindowIn},
    replay::{Prediction, Setting},
};
use crate::{
    family::throttle::{
        advice::{PERIOD_MAX_US, PERIOD_MIN_US, QUOTA_MIN_US},
        model::ThrottleWindow,
    },
    model::{Window, flag::ChangeKind},
    record::reader::{Item, Recording},
    safety::escape,
};

/// A quota to try: in CPUs (of whatever period is tried) or as time per period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quota {
    Cpus(f64),
    Us(u64),
}

impl Quota {
    fn us(self, period_us: u64) -> u64 {
        match self {
            Quota::Cpus(c) => (c * period_us as f64).round() as u64,
            Quota::Us(u) => u,
        }
    }
}

/// `--quota`: `1.5` (CPUs) or `150ms` / `150000us`.
pub fn parse_quota(s: &str) -> Result<Quota, String> {
    let t = s.trim();
    if t.ends_with("ms")
        || t.ends_with("us")
        || t.strip_suffix('s')
            .is_some_and(|n| n.parse::<f64>().is_ok())
    {
        return parse_time_us(t).map(Quota::Us);
    }
    match t.parse::<f64>() {
        Ok(c) if c > 0.0 && c <= 100_000.0 => Ok(Quota::Cpus(c)),
        _ => Err(format!(
            "{s:?} is not a quota: give CPUs (1.5) or time per period (150ms, 150000us)"
        )),
    }
}

/// `--period`/`--burst`: `100ms`, `100000us`, `0.1s`, or a plain number of ms.
pub fn parse_time_us(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        (t, 1e3)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v * mult <= 1e9 => Ok((v * mult).round() as u64),
        _ => Err(format!(
            "{s:?} is not a time: give it as 100ms, 100000us or 0.1s"
        )),
    }
}

/// What the user asked to try; empty: a standard set of candidates.
#[derive(Clone, Debug, Default)]
pub struct Ask {
    /// Only this cgroup (its path).
    pub cgroup: Option<String>,
    pub quota: Vec<Quota>,
    pub period_us: Vec<u64>,
    pub burst_us: Vec<u64>,
    pub cpus: Vec<f64>,
}

/// Candidate settings tried at most per cgroup.
const MAX_CANDIDATES: usize = 32;
/// Cgroups shown at most (the most throttled).
const MAX_CGROUPS: usize = 10;

/// One candidate and what it is predicted to do.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub label: String,
    pub setting: Setting,
    pub predicted: Prediction,
}

/// One cgroup's answer.
#[derive(Clone, Debug, Serialize)]
pub struct CgroupWhatif {
    pub path: String,
    pub setting: Setting,
    /// The kernel's counters over the windows replayed.
    pub recorded: Recorded,
    /// The recorded demand, replayed against the setting it ran under: how far to trust the
    /// rest (compare with `recorded`).
    pub replayed: Prediction,
    pub candidates: Vec<Candidate>,
    /// CPU demanded (ms per second), and the share of it estimated (periods not watched).
    pub demand_ms_per_s: f64,
    pub estimated_share: f64,
    pub parallelism: f64,
    /// What the prediction cannot know.
    pub uncertain: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Whatif {
    pub cgroups: Vec<CgroupWhatif>,
    /// The cgroup asked for (`--cgroup`), if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
}

/// Cgroups counted in the first pass at most (a hostile file may name millions); later ones are
/// not considered.
const MAX_COUNTED: usize = 1 << 20;
/// Windows kept per cgroup replayed (a day of 1 s windows); of a longer recording, the first.
const MAX_WINDOWS: usize = 86_400;

/// A path's key in the first pass: its hash (the paths themselves are kept only for the cgroups
/// replayed).
fn key(path: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(path)
}

/// Each window with its cgroups that have a quota (path, throttling).
fn quota_windows(rec: &Recording, mut f: impl FnMut(u64, &Window, &str, &ThrottleWindow)) {
    rec.for_each(|item| {
        let Item::Window { mono_ns, json, .. } = item else {
            return;
        };
        let Ok(w) = serde_json::from_slice::<Window>(json) else {
            return;
        };
        for c in &w.cgroups {
            if let (Some(path), Some(t)) = (&c.path, &c.throttle)
                && t.quota_us.is_some()
            {
                f(mono_ns, &w, path, t);
            }
        }
    });
}

/// What the replay needs of a window: the setting, the counters and the throttled periods.
fn slim(t: &ThrottleWindow) -> ThrottleWindow {
    ThrottleWindow {
        quota_us: t.quota_us,
        period_us: t.period_us,
        burst_us: t.burst_us,
        usage_us: t.usage_us,
        nr_periods: t.nr_periods,
        nr_throttled: t.nr_throttled,
        throttled_us: t.throttled_us,
        episodes: t.episodes,
        episodes_per_cpu: t.episodes_per_cpu.clone(),
        kernel: t.kernel.clone(),
        period_use: t
            .period_use
            .iter()
            .filter(|u| u.throttled)
            .cloned()
            .collect(),
        period_use_dropped: t.period_use_dropped,
        ..ThrottleWindow::default()
    }
}

/// The answer for a recording: a first pass counts each cgroup's throttled periods, a second
/// keeps the windows of the ones replayed (the most throttled, or the one asked for).
pub fn analyse(rec: &Recording, ask: &Ask) -> Whatif {
    let mut counts: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    quota_windows(rec, |_, _, path, t| {
        let n = t.kernel.as_ref().map_or(t.nr_throttled, |k| k.nr_throttled);
        if counts.len() < MAX_COUNTED || counts.contains_key(&key(path)) {
            *counts.entry(key(path)).or_default() += n;
        }
    });
    let chosen: Vec<u64> = match &ask.cgroup {
        Some(path) => vec![key(path)],
        None => {
            let mut v: Vec<(u64, u64)> = counts.into_iter().filter(|c| c.1 > 0).collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            v.into_iter().take(MAX_CGROUPS).map(|c| c.0).collect()
        }
    };
    type Kept = (Vec<WindowIn>, Vec<crate::model::flag::Flag>);
    let mut kept: BTreeMap<String, Kept> = BTreeMap::new();
    quota_windows(rec, |mono_ns, w, path, t| {
        if !chosen.contains(&key(path)) || ask.cgroup.as_ref().is_some_and(|c| c != path) {
            return;
        }
        let e = kept.entry(path.to_string()).or_default();
        if e.0.len() < MAX_WINDOWS {
            e.1 = t.flags.clone();
            e.0.push(WindowIn {
                end_ns: mono_ns,
                duration_ms: w.duration_ms,
                throttle: slim(t),
            });
        }
    });
    let mut cgroups: Vec<CgroupWhatif> = kept
        .into_iter()
        .filter_map(|(path, (windows, flags))| {
            let d = demand::build(&windows);
            (d.recorded.nr_throttled > 0 || ask.cgroup.is_some())
                .then(|| one(path, &d, ask, &flags))
        })
        .collect();
    cgroups.sort_by(|a, b| {
        b.recorded
            .nr_throttled
            .cmp(&a.recorded.nr_throttled)
            .then(a.path.cmp(&b.path))
    });
    cgroups.truncate(MAX_CGROUPS);
    Whatif {
        cgroups,
        asked: ask.cgroup.clone(),
    }
}

fn one(path: String, d: &Demand, ask: &Ask, flags: &[crate::model::flag::Flag]) -> CgroupWhatif {
    let current = Setting {
        quota_us: d.quota_us,
        period_us: d.period_us,
        burst_us: d.burst_us,
        cpus: None,
    };
    let candidates = candidates(&current, ask, flags)
        .into_iter()
        .map(|(label, setting)| Candidate {
            predicted: replay::replay(d, &setting),
            label,
            setting,
        })
        .collect();
    let secs = (d.end_ns.saturating_sub(d.start_ns) as f64 / 1e9).max(1e-9);
    let mut uncertain = vec![
        "demand hidden by throttling is estimated: work held off is moved back only as far as the next unthrottled period ran it; a run of throttled periods is replayed at its rate throughout".to_string(),
        "contention from neighbours is held as recorded: a higher limit that takes CPU from them is not modelled".to_string(),
    ];
    let estimated_share = d.estimated_us / d.total_us.max(1e-9);
    if estimated_share > 0.0 {
        uncertain.push(format!(
            "{:.0} % of the demand fell outside the periods watched after a throttle and is spread evenly over its window",
            estimated_share * 100.0
        ));
    }
    if d.periods_dropped > 0 {
        uncertain.push(format!(
            "{} periods past the per-window bound were not described",
            d.periods_dropped
        ));
    }
    CgroupWhatif {
        replayed: replay::replay(d, &current),
        path,
        setting: current,
        recorded: d.recorded.clone(),
        candidates,
        demand_ms_per_s: d.total_us / 1e3 / secs,
        estimated_share,
        parallelism: d.parallelism,
        uncertain,
    }
}

/// The settings to try: the user's (every combination, current values for what was not given),
/// or the current one's standard neighbours and the flags' suggestions.
fn candidates(
    cur: &Setting,
    ask: &Ask,
    flags: &[crate::model::flag::Flag],
) -> Vec<(String, Setting)> {
    let mut out: Vec<(String, Setting)> = Vec::new();
    let asked = !(ask.quota.is_empty()
        && ask.period_us.is_empty()
        && ask.burst_us.is_empty()
        && ask.cpus.is_empty());
    if asked {
        let quotas: Vec<Option<Quota>> = if ask.quota.is_empty() {
            vec![cur.quota_us.map(Quota::Us)]
        } else {
            ask.quota.iter().map(|q| Some(*q)).collect()
        };
        let periods = if ask.period_us.is_empty() {
            vec![cur.period_us]
        } else {
            ask.period_us.clone()
        };
        let bursts = if ask.burst_us.is_empty() {
            vec![cur.burst_us]
        } else {
            ask.burst_us.clone()
        };
        let cpus: Vec<Option<f64>> = if ask.cpus.is_empty() {
            vec![None]
        } else {
            ask.cpus.iter().map(|c| Some(*c)).collect()
        };
        for &q in &quotas {
            for &p in &periods {
                for &b in &bursts {
                    for &c in &cpus {
                        let s = Setting {
                            quota_us: q.map(|q| q.us(p)),
                            period_us: p,
                            burst_us: b,
                            cpus: c,
                        };
                        out.push((label(&s), s));
                    }
                }
            }
        }
    } else if let Some(q) = cur.quota_us {
        for f in flags {
            if let Some(s) = from_flag(cur, f) {
                out.push((format!("suggested ({})", f.code), s));
            }
        }
        for share in [0.25, 0.5, 1.0] {
            let b = ((q as f64 * share) as u64).max(QUOTA_MIN_US.min(q));
            if b != cur.burst_us {
                out.push((
                    format!("burst {}", ms(b)),
                    Setting {
                        burst_us: b,
                        ..cur.clone()
                    },
                ));
            }
        }
        for x in [1.25, 1.5, 2.0] {
            let s = Setting {
                quota_us: Some((q as f64 * x) as u64),
                ..cur.clone()
            };
            out.push((label(&s), s));
        }
        for div in [2, 4] {
            let p = cur.period_us / div;
            let q2 = q / div;
            if p >= PERIOD_MIN_US && q2 >= QUOTA_MIN_US {
                let s = Setting {
                    quota_us: Some(q2),
                    period_us: p,
                    burst_us: cur.burst_us.min(q2),
                    cpus: None,
                };
                out.push((label(&s), s));
            }
        }
    }
    out.retain(|(_, s)| (PERIOD_MIN_US..=PERIOD_MAX_US).contains(&s.period_us));
    let mut seen = Vec::new();
    out.retain(|(_, s)| {
        let new = !seen.contains(s);
        seen.push(s.clone());
        new
    });
    out.truncate(MAX_CANDIDATES);
    out
}

/// The setting a flag's cgroup-file change makes, if it names one.
fn from_flag(cur: &Setting, f: &crate::model::flag::Flag) -> Option<Setting> {
    let mut s = cur.clone();
    let mut any = false;
    for c in f.change.iter().filter(|c| c.kind == ChangeKind::CgroupFile) {
        let nums: Vec<u64> = c
            .value
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        match (c.knob.as_str(), nums.as_slice()) {
            ("cpu.max.burst" | "cpu.cfs_burst_us", [b]) => s.burst_us = *b,
            ("cpu.max", [q, p]) => (s.quota_us, s.period_us) = (Some(*q), *p),
            ("cpu.cfs_quota_us", [q]) => s.quota_us = Some(*q),
            ("cpu.cfs_period_us", [p]) => s.period_us = *p,
            _ => continue,
        }
        any = true;
    }
    (any && s != *cur).then_some(s)
}

fn ms(us: u64) -> String {
    crate::units::ms(us as f64 / 1e3)
}

/// `1.50 CPUs (150 ms / 100 ms), burst 20 ms, 2 CPUs`
pub fn label(s: &Setting) -> String {
    let mut out = match (s.quota_us, s.quota_cpus()) {
        (Some(q), Some(c)) => format!("{c:.2} CPUs ({} / {})", ms(q), ms(s.period_us)),
        _ => "no quota".to_string(),
    };
    if s.burst_us > 0 {
        out.push_str(&format!(", burst {}", ms(s.burst_us)));
    }
    if let Some(c) = s.cpus {
        out.push_str(&format!(", on {c} CPUs"));
    }
    out
}

/// The answer as text, one table per cgroup.
pub fn render_text(w: &Whatif) -> String {
    let mut o = String::new();
    if w.cgroups.is_empty() {
        match &w.asked {
            Some(path) => o.push_str(&format!(
                "{} has no quota in this recording, or is not in it: `cgtrace report FILE` lists its cgroups\n",
                escape::terminal(path)
            )),
            None => o.push_str(
                "no cgroup with a quota was throttled in this recording: nothing to replay\n",
            ),
        }
        return o;
    }
    for c in &w.cgroups {
        let r = &c.recorded;
        let secs = r.secs.max(1e-9);
        o.push_str(&format!(
            "{}: {} over {:.0} s; demand {:.0} ms CPU per second on up to {:.1} CPUs\n",
            escape::terminal(&c.path),
            label(&c.setting),
            r.secs,
            c.demand_ms_per_s,
            c.parallelism
        ));
        o.push_str(&format!(
            "  {:<44} {:>12} {:>9} {:>15} {:>11} {:>14}\n",
            "setting", "throttled/s", "share", "throttled ms/s", "p99 stall", "held off ms/s"
        ));
        o.push_str(&format!(
            "  {:<44} {:>12.2} {:>8.1}% {:>15.1} {:>11} {:>14}\n",
            "as recorded (kernel's cpu.stat)",
            r.nr_throttled as f64 / secs,
            r.nr_throttled as f64 / r.nr_periods.max(1) as f64 * 100.0,
            r.throttled_us / 1e3 / secs,
            "",
            ""
        ));
        let row = |o: &mut String, label: &str, p: &Prediction| {
            o.push_str(&format!(
                "  {:<44} {:>12.2} {:>8.1}% {:>15.1} {:>11} {:>14.1}\n",
                label,
                p.throttled_per_s,
                p.throttled_share * 100.0,
                p.throttled_ms_per_s,
                crate::units::ms(p.stall_p99_ms),
                p.held_off_ms_per_s
            ));
        };
        row(&mut o, "as recorded, replayed", &c.replayed);
        for k in &c.candidates {
            row(&mut o, &k.label, &k.predicted);
        }
        for u in &c.uncertain {
            o.push_str(&format!("  uncertain: {u}\n"));
        }
        o.push('\n');
    }
    o
}

/// The answer as one JSON document.
pub fn render_json(w: &Whatif) -> String {
    // Plain data: serialising it cannot fail. Tenant paths may hold what a terminal acts on.
    let s = serde_json::to_string_pretty(w).unwrap_or_else(|_| "{}".into());
    escape::json_line(&s).into_owned() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::flag::{Change, Flag};

    fn cur() -> Setting {
        Setting {
            quota_us: Some(100_000),
            period_us: 100_000,
            burst_us: 0,
            cpus: None,
        }
    }

    #[test]
    fn a_flags_change_is_a_candidate() {
        let f = Flag {
            code: "throttled_below_quota".into(),
            change: vec![Change::new(
                ChangeKind::CgroupFile,
                "cpu.max.burst",
                "99000",
            )],
            ..Flag::default()
        };
        let c = candidates(&cur(), &Ask::default(), &[f]);
        assert_eq!(c[0].0, "suggested (throttled_below_quota)");
        assert_eq!(c[0].1.burst_us, 99_000);
        // Shorter periods keep the share and the kernel's bounds.
        assert!(
            c.iter()
                .any(|(_, s)| s.period_us == 25_000 && s.quota_us == Some(25_000))
        );
        assert!(c.iter().all(|(_, s)| s.period_us >= PERIOD_MIN_US));
    }

    #[test]
    fn a_tenants_path_is_escaped_in_text_and_json() {
        let w = Whatif {
            cgroups: vec![CgroupWhatif {
                path: "/pod\u{202e}x\x1b[2J\u{9b}".into(),
                setting: cur(),
                recorded: Recorded::default(),
                replayed: Prediction::default(),
                candidates: Vec::new(),
                demand_ms_per_s: 0.0,
                estimated_share: 0.0,
                parallelism: 1.0,
                uncertain: Vec::new(),
            }],
            asked: None,
        };
        for out in [render_text(&w), render_json(&w)] {
            assert!(out.ends_with('\n'));
            for line in out.split_terminator('\n') {
                assert!(!line.chars().any(escape::is_unsafe), "{line:?}");
            }
        }
        let v: serde_json::Value = serde_json::from_str(&render_json(&w)).expect("JSON");
        assert_eq!(v["cgroups"][0]["path"], "/pod\u{202e}x\x1b[2J\u{9b}");
    }

    #[test]
    fn quotas_and_times_parse_as_users_write_them() {
        assert_eq!(parse_quota("1.5"), Ok(Quota::Cpus(1.5)));
        assert_eq!(parse_quota("150ms"), Ok(Quota::Us(150_000)));
        assert_eq!(parse_time_us("25ms"), Ok(25_000));
        assert_eq!(parse_time_us("0.1s"), Ok(100_000));
        assert_eq!(parse_time_us("500us"), Ok(500));
        assert_eq!(parse_time_us("20"), Ok(20_000));
        assert!(parse_quota("lots").unwrap_err().contains("give CPUs"));
        assert!(parse_time_us("-1ms").is_err());
    }

    #[test]
    fn the_users_values_are_tried_in_every_combination() {
        let ask = Ask {
            quota: vec![Quota::Us(150_000), Quota::Cpus(2.0)],
            burst_us: vec![0, 50_000],
            ..Ask::default()
        };
        let c = candidates(&cur(), &ask, &[]);
        assert_eq!(c.len(), 4);
        assert_eq!(c[3].0, "2.00 CPUs (200.0 ms / 100.0 ms), burst 50.0 ms");
    }
}
