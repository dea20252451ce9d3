//! `runq`'s node-level "who delays whom" series: the run-queue wait the blame ledger charged
//! per (victim cgroup, culprit cgroup) pair, `cgtrace_runq_wait_delayed_by_seconds_total`,
//! bounded to the node's top `max` pairs with the rest summed in one
//! `{cgroup="other", culprit="other"}` series, so the series still add up to every cgroup's
//! `part="neighbours"` wait.
//!
//! Which pairs have series: each pair's score is its wait per window, decayed with a half-life
//! of [`HALF_LIFE_MS`]. While fewer than `max` pairs have series, a pair with wait gets one; once
//! full, a pair takes the place of the lowest-scored one only when its score is more than
//! [`HYSTERESIS`] times that one's (two pairs of equal rate do not swap places every window).
//!
//! Counters never decrease: each window's wait of a pair goes to its own series while it has
//! one, and to `other` while it has not, never both. A pair that loses its place stops being
//! exported (its series goes stale in Prometheus, which is not a counter reset) and keeps its
//! value here; when it wins a place again within `ttl`, its series continues from that value,
//! the wait of the gap staying in `other`. A pair without wait for `ttl` is forgotten (a later
//! one starts again from zero, with its own start time), as a cgroup's series is. At most
//! [`TRACKED_PER_SERIES`] × `max` pairs are remembered: past that, a new pair's wait goes to
//! `other` unless it displaces a remembered pair that never had a series and scores less.

use std::collections::HashMap;

use crate::{
    family::runq::model::Party,
    metrics::encode::{Kind, Labels, MetricFamily, OTHER, Sample, Value, cgroup_labels},
    model::{CgroupWindow, Window},
};

/// Default `--max-pairs`.
pub const DEFAULT_MAX_PAIRS: usize = 20;
/// Half-life of a pair's score.
pub const HALF_LIFE_MS: f64 = 10_000.0;
/// How many times the lowest exported pair's score a pair must score to take its place.
pub const HYSTERESIS: f64 = 1.5;
/// Pairs remembered per exported series.
pub const TRACKED_PER_SERIES: usize = 50;

/// (victim's `cgroup` label, culprit's `cgroup` label).
type Key = (String, String);

#[derive(Clone, Debug)]
struct Pair {
    /// The victim's labels, then `culprit` (and `culprit_name`).
    labels: Labels,
    /// Decayed seconds of wait per window.
    score: f64,
    /// Seconds charged to its own series (only while it had one).
    value: f64,
    /// It has a series now.
    exported: bool,
    /// It had a series at some time (its value must be kept to continue it).
    ever_exported: bool,
    /// Wall clock (Unix ms) of its first window: its series counts from then.
    start_ms: u64,
    /// Wall clock (Unix ms) of its last window with wait.
    last_ms: u64,
}

/// The pair series of a node, cumulative since cgtrace started.
#[derive(Clone, Debug)]
pub struct Pairs {
    max: usize,
    ttl_ms: u64,
    pairs: HashMap<Key, Pair>,
    /// Seconds charged to pairs without a series of their own, and to the neighbours a window
    /// did not name.
    other: f64,
    /// Some wait went to `other` (its series exists from then on).
    other_seen: bool,
}

fn cgroup_label(id: u64, path: &Option<String>) -> String {
    path.clone().unwrap_or_else(|| format!("id:{id}"))
}

impl Pairs {
    /// At most `max` pair series (and `other`); a pair silent for `ttl_ms` is forgotten.
    pub fn new(max: usize, ttl_ms: u64) -> Self {
        Self {
            max,
            ttl_ms,
            pairs: HashMap::new(),
            other: 0.0,
            other_seen: false,
        }
    }

    /// Pairs with a series now.
    pub fn exported(&self) -> usize {
        self.pairs.values().filter(|p| p.exported).count()
    }

    /// Pairs remembered now.
    pub fn tracked(&self) -> usize {
        self.pairs.len()
    }

    /// Adds one window's ledger.
    pub fn add(&mut self, w: &Window) {
        let now = w.end_unix_ms;
        let start = now.saturating_sub(w.duration_ms);
        let ttl = self.ttl_ms;
        self.pairs
            .retain(|_, p| now.saturating_sub(p.last_ms) < ttl);
        let decay = 0.5f64.powf(w.duration_ms as f64 / HALF_LIFE_MS);
        for p in self.pairs.values_mut() {
            p.score *= decay;
        }
        // This window's charges, by pair; the wait of pairs not remembered goes to `other`.
        let mut charged: Vec<(Key, f64)> = Vec::new();
        for c in &w.cgroups {
            let Some(b) = &c.runq.blame else { continue };
            if b.neighbours_other_us > 0.0 {
                self.fold(b.neighbours_other_us / 1e6);
            }
            let victim = cgroup_label(c.id, &c.path);
            for n in b.neighbours.iter().filter(|n| n.wait_us > 0.0) {
                let key = (victim.clone(), cgroup_label(n.id, &n.path));
                let s = n.wait_us / 1e6;
                if self.remember(&key, c, n, start) {
                    let p = self.pairs.get_mut(&key).expect("remembered");
                    p.score += s;
                    p.last_ms = now;
                    charged.push((key, s));
                } else {
                    self.fold(s);
                }
            }
        }
        self.choose(&charged);
        for (key, s) in charged {
            match self.pairs.get_mut(&key) {
                Some(p) if p.exported => p.value += s,
                _ => self.fold(s),
            }
        }
    }

    fn fold(&mut self, s: f64) {
        self.other += s;
        self.other_seen = true;
    }

    /// Makes sure `key` is remembered, if there is room or a place to take; false if not.
    fn remember(&mut self, key: &Key, c: &CgroupWindow, n: &Party, start: u64) -> bool {
        if self.pairs.contains_key(key) {
            return true;
        }
        let cap = self.max.max(1).saturating_mul(TRACKED_PER_SERIES);
        if self.pairs.len() >= cap {
            // The lowest-scored pair that never had a series may go (forgetting it loses no
            // exported value); with none, the new pair waits outside.
            let lowest = self
                .pairs
                .iter()
                .filter(|(_, p)| !p.ever_exported)
                .min_by(|a, b| a.1.score.total_cmp(&b.1.score))
                .map(|(k, p)| (k.clone(), p.score));
            match lowest {
                Some((k, score)) if score < n.wait_us / 1e6 => {
                    self.pairs.remove(&k);
                }
                _ => return false,
            }
        }
        let mut labels = cgroup_labels(c);
        labels.push(("culprit", key.1.clone()));
        if let Some(name) = &n.name {
            labels.push(("culprit_name", name.clone()));
        }
        self.pairs.insert(
            key.clone(),
            Pair {
                labels,
                score: 0.0,
                value: 0.0,
                exported: false,
                ever_exported: false,
                start_ms: start,
                last_ms: start,
            },
        );
        true
    }

    /// Gives series to the highest-scored of this window's pairs without one: into free places,
    /// then in place of lower-scored ones (by more than [`HYSTERESIS`]).
    fn choose(&mut self, charged: &[(Key, f64)]) {
        let mut candidates: Vec<(&Key, f64)> = charged
            .iter()
            // A pair charged earlier in the window may have made room for a later one.
            .filter_map(|(k, _)| {
                let p = self.pairs.get(k)?;
                (!p.exported).then_some((k, p.score))
            })
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        candidates.dedup_by(|a, b| a.0 == b.0);
        let mut exported = self.exported();
        let promote: Vec<Key> = candidates.iter().map(|(k, _)| (*k).clone()).collect();
        for key in promote {
            let Some(score) = self.pairs.get(&key).map(|p| p.score) else {
                continue;
            };
            if exported < self.max {
                exported += 1;
            } else {
                let lowest = self
                    .pairs
                    .iter()
                    .filter(|(_, p)| p.exported)
                    .min_by(|a, b| a.1.score.total_cmp(&b.1.score).then_with(|| b.0.cmp(a.0)))
                    .map(|(k, p)| (k.clone(), p.score));
                match lowest {
                    Some((k, low)) if score > low * HYSTERESIS => {
                        if let Some(p) = self.pairs.get_mut(&k) {
                            p.exported = false;
                        }
                    }
                    // Candidates come most first: no later one scores higher.
                    _ => break,
                }
            }
            if let Some(p) = self.pairs.get_mut(&key) {
                p.exported = true;
                p.ever_exported = true;
            }
        }
    }

    /// `cgtrace_runq_wait_delayed_by_seconds{cgroup, …, culprit, culprit_name}`: the exported
    /// pairs, then `other`.
    pub fn families(&self, out: &mut Vec<MetricFamily>) {
        let mut f = MetricFamily::new(
            "cgtrace_runq_wait_delayed_by_seconds",
            Kind::Counter,
            "seconds",
            "Run-queue wait charged by the blame ledger to the culprit cgroup that held the victim's \
             CPU (--blame), for the node's top --max-pairs (victim, culprit) pairs by recent rate; \
             the rest in one series with cgroup and culprit both other",
        );
        let mut pairs: Vec<&Pair> = self.pairs.values().filter(|p| p.exported).collect();
        pairs.sort_by(|a, b| a.labels.cmp(&b.labels));
        for p in pairs {
            f.samples.push(Sample {
                labels: p.labels.clone(),
                value: Value::Num(p.value),
                start_unix_ms: Some(p.start_ms),
            });
        }
        if self.other_seen {
            f.num(
                &vec![
                    ("cgroup", OTHER.to_string()),
                    ("name", OTHER.to_string()),
                    ("culprit", OTHER.to_string()),
                ],
                None,
                self.other,
            );
        }
        out.push(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::runq::model::Blame;

    /// A window at `end_ms` (1 s long) in which each (victim, culprit, µs) charged that wait.
    fn window(end_ms: u64, charges: &[(&str, &str, f64)], unnamed_us: f64) -> Window {
        let mut cgroups: Vec<CgroupWindow> = Vec::new();
        for &(victim, culprit, us) in charges {
            let i = match cgroups
                .iter()
                .position(|c| c.path.as_deref() == Some(victim))
            {
                Some(i) => i,
                None => {
                    cgroups.push(CgroupWindow {
                        id: cgroups.len() as u64 + 1,
                        path: Some(victim.to_string()),
                        ..CgroupWindow::default()
                    });
                    cgroups.len() - 1
                }
            };
            let b = cgroups[i].runq.blame.get_or_insert_with(Blame::default);
            b.neighbours.push(Party {
                id: 1000,
                path: Some(culprit.to_string()),
                name: None,
                wait_us: us,
                cpu_max: None,
            });
        }
        if let Some(c) = cgroups.first_mut() {
            c.runq
                .blame
                .get_or_insert_with(Blame::default)
                .neighbours_other_us = unnamed_us;
        }
        Window {
            end_unix_ms: end_ms,
            duration_ms: 1000,
            cgroups,
            ..Window::default()
        }
    }

    /// Each series' value by (cgroup, culprit).
    fn values(p: &Pairs) -> HashMap<(String, String), f64> {
        let mut out = Vec::new();
        p.families(&mut out);
        out[0]
            .samples
            .iter()
            .map(|s| {
                let get = |k: &str| {
                    s.labels
                        .iter()
                        .find(|(n, _)| *n == k)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                let Value::Num(v) = s.value else {
                    panic!("a counter")
                };
                ((get("cgroup"), get("culprit")), v)
            })
            .collect()
    }

    fn key(v: &str, c: &str) -> (String, String) {
        (v.to_string(), c.to_string())
    }

    #[test]
    fn bounded_to_the_top_pairs_with_the_rest_in_other_adding_up() {
        let mut p = Pairs::new(3, 300_000);
        let mut total = 0.0;
        for t in 1..=5u64 {
            // Ten pairs, pair i charged (i + 1) ms a window, and 0.5 ms unnamed.
            let charges: Vec<(String, String, f64)> = (0..10)
                .map(|i| (format!("/v{i}"), format!("/c{i}"), (i + 1) as f64 * 1000.0))
                .collect();
            let refs: Vec<(&str, &str, f64)> = charges
                .iter()
                .map(|(a, b, us)| (a.as_str(), b.as_str(), *us))
                .collect();
            total += refs.iter().map(|c| c.2).sum::<f64>() + 500.0;
            p.add(&window(t * 1000, &refs, 500.0));
        }
        let v = values(&p);
        assert_eq!(v.len(), 4, "3 pairs and other: {v:?}");
        assert_eq!(p.exported(), 3);
        let sum: f64 = v.values().sum();
        assert!((sum - total / 1e6).abs() < 1e-9, "{sum} vs {}", total / 1e6);
        // The first window filled the places with its three largest pairs.
        for i in [9, 8, 7] {
            let got = v[&key(&format!("/v{i}"), &format!("/c{i}"))];
            assert!(
                (got - 5.0 * (i + 1) as f64 / 1000.0).abs() < 1e-9,
                "{i}: {got}"
            );
        }
        assert!(v.contains_key(&key(OTHER, OTHER)));
    }

    #[test]
    fn churn_keeps_every_counter_monotonic_and_the_total_exact() {
        let mut p = Pairs::new(2, 300_000);
        let mut last: HashMap<(String, String), f64> = HashMap::new();
        let mut seen_series: std::collections::BTreeSet<(String, String)> = Default::default();
        let mut total = 0.0;
        // Phase by phase a different pair dominates, then the first comes back.
        let phases = [("/a", "/x"), ("/b", "/x"), ("/c", "/y"), ("/a", "/x")];
        let mut t = 0u64;
        for (hot_v, hot_c) in phases {
            for _ in 0..30 {
                t += 1;
                let charges = [
                    (hot_v, hot_c, 50_000.0),
                    ("/d", "/y", 1_000.0),
                    ("/e", "/y", 900.0),
                ];
                total += charges.iter().map(|c| c.2).sum::<f64>();
                p.add(&window(t * 1000, &charges, 0.0));
                let v = values(&p);
                assert!(v.len() <= 3, "at most 2 pairs and other: {v:?}");
                for (k, x) in &v {
                    let before = last.get(k).copied().unwrap_or(0.0);
                    assert!(*x + 1e-12 >= before, "{k:?} went from {before} to {x}");
                    last.insert(k.clone(), *x);
                    seen_series.insert(k.clone());
                }
                // The series seen so far, dropped ones at their last value, add up to all wait.
                let sum: f64 = last.values().sum();
                assert!(
                    (sum - total / 1e6).abs() < 1e-9,
                    "t={t}: {sum} vs {}",
                    total / 1e6
                );
            }
            if hot_v == "/c" {
                // /a<-/x, cold for 30 windows, has given its place to /c<-/y.
                assert!(
                    !values(&p).contains_key(&key("/a", "/x")),
                    "{:?}",
                    values(&p)
                );
            }
            // Each hot pair has won a place within its phase.
            assert!(
                values(&p).contains_key(&key(hot_v, hot_c)),
                "t={t}: {hot_v}<-{hot_c} in {:?}",
                values(&p)
            );
        }
        // /a<-/x left and came back: its series continued from the value it had (30 windows of
        // its first phase, less the windows before it won a place, plus its last phase's).
        let a = last[&key("/a", "/x")];
        assert!(a > 1.5 && a <= 3.0 + 1e-9, "{a}");
        assert!(seen_series.len() >= 4, "{seen_series:?}");
    }

    #[test]
    fn equal_pairs_do_not_swap_places_and_silent_ones_are_forgotten() {
        let mut p = Pairs::new(1, 5_000);
        for t in 1..=20u64 {
            // Two pairs alternate as the larger by a little.
            let (a, b) = if t % 2 == 0 {
                (1000.0, 1100.0)
            } else {
                (1100.0, 1000.0)
            };
            p.add(&window(t * 1000, &[("/a", "/x", a), ("/b", "/x", b)], 0.0));
        }
        let v = values(&p);
        assert!(
            (v[&key("/a", "/x")] - 20.0 * 1050.0 / 1e6).abs() < 1e-9,
            "{v:?}"
        );
        assert!(!v.contains_key(&key("/b", "/x")), "{v:?}");
        // Silent for the ttl: forgotten, its place free for another.
        for t in 21..=30u64 {
            p.add(&window(t * 1000, &[("/b", "/x", 10.0)], 0.0));
        }
        assert_eq!(p.tracked(), 1);
        assert!(values(&p).contains_key(&key("/b", "/x")));
    }

    #[test]
    fn remembered_pairs_are_bounded() {
        let mut p = Pairs::new(2, 300_000);
        for t in 1..=10u64 {
            let charges: Vec<(String, String, f64)> = (0..100)
                .map(|i| (format!("/v{t}-{i}"), "/hog".to_string(), 1.0 + i as f64))
                .collect();
            let refs: Vec<(&str, &str, f64)> = charges
                .iter()
                .map(|(a, b, us)| (a.as_str(), b.as_str(), *us))
                .collect();
            p.add(&window(t * 1000, &refs, 0.0));
            assert!(p.tracked() <= 2 * TRACKED_PER_SERIES, "{}", p.tracked());
        }
        assert_eq!(p.exported(), 2);
    }
}
