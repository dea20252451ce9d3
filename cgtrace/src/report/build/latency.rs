//! The families' worst cgroups: each cgroup's histograms merged over the recording (so a p99 is
//! of every wait, not an average of windows), then ranked by p99 and by max.

use std::collections::{BTreeMap, HashMap, hash_map::Entry};

use serde_json::Value;

use cgtrace_common::hist::NR_BUCKETS;

use super::budget::{self, Budget};
use crate::{
    family,
    hist::{Hist, HistSummary},
    model::CgroupWindow,
    report::{model::CgroupLatency, model::FamilyReport, model::TOP},
};

/// A family's histogram of one cgroup over the recording.
#[derive(Default)]
struct Acc {
    path: Option<String>,
    name: Option<String>,
    hist: Hist,
    max_at: u64,
    /// Run-queue waits only: what the kernel's `run_delay` counted while the task slept
    /// (`run_delay_asleep_us`), summed.
    asleep_us: f64,
}

/// One cgroup's run-queue waits over a recording (see [`Latency::runq_totals`]).
pub(super) struct RunqTotal {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub summary: HistSummary,
    pub asleep_us: f64,
}

/// Most families ranked: a file's families found by shape are its keys, and a forged file could
/// name a new one in every cgroup of every window.
pub(super) const MAX_FAMILIES: usize = 64;

/// Per family, per cgroup id, the merged histogram.
#[derive(Default)]
pub(super) struct Latency(BTreeMap<String, HashMap<u64, Acc>>);

fn as_hist(v: &Value) -> Option<HistSummary> {
    let o = v.as_object()?;
    if !(o.contains_key("count") && o.contains_key("buckets") && o.contains_key("max_us")) {
        return None;
    }
    serde_json::from_value(v.clone()).ok()
}

impl Latency {
    /// Adds a cgroup's histograms of one window (ending at `end_ms`): run-queue waits, throttle
    /// episodes, and those of families this build does not know, found by shape.
    pub(super) fn add_cgroup(&mut self, c: &CgroupWindow, end_ms: u64, budget: &mut Budget) {
        let (id, path, name) = (c.id, &c.path, &c.name);
        // Only where the window's waits were tallied (a sleep the kernel counted ends a wait).
        if let Some(a) = self.add(
            family::runq::INFO.name,
            id,
            (path, name),
            &c.runq.all,
            end_ms,
            budget,
        ) {
            a.asleep_us += c.runq.run_delay_asleep_us;
        }
        let mut add = |l: &mut Self, family: &str, h: &HistSummary| {
            l.add(family, id, (path, name), h, end_ms, budget);
        };
        // Families this build does not know, by shape: a histogram, or histograms one level down
        // (e.g. per operation).
        for (key, v) in &c.other {
            if let Some(h) = as_hist(v) {
                add(self, key, &h);
            } else if let Some(o) = v.as_object() {
                for (sub, sv) in o {
                    if let Some(h) = as_hist(sv) {
                        add(self, &format!("{key}.{sub}"), &h);
                    }
                }
            }
        }
        if let Some(t) = &c.throttle {
            add(self, "throttle.episode", &t.episode);
        }
    }

    fn add(
        &mut self,
        family: &str,
        id: u64,
        (path, name): (&Option<String>, &Option<String>),
        h: &HistSummary,
        end_ms: u64,
        budget: &mut Budget,
    ) -> Option<&mut Acc> {
        if h.count == 0 || (self.0.len() >= MAX_FAMILIES && !self.0.contains_key(family)) {
            return None;
        }
        let accs = self.0.entry(family.to_string()).or_default();
        let a = match accs.entry(id) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let size =
                    size_of::<Acc>() + NR_BUCKETS * 8 + budget::len(path) + budget::len(name);
                if !budget.take(size) {
                    return None;
                }
                e.insert(Acc::default())
            }
        };
        budget.set(&mut a.path, path);
        budget.set(&mut a.name, name);
        let hist = Hist::from_summary(h);
        if hist.max_ns > a.hist.max_ns {
            a.max_at = end_ms;
        }
        // Saturating at 2^56 per bucket (no real window comes near): a damaged or forged file
        // cannot overflow the sums the percentiles take over 140 buckets.
        const CAP: u64 = 1 << 56;
        a.hist.count = a.hist.count.saturating_add(hist.count).min(CAP);
        a.hist.sum_ns = a.hist.sum_ns.saturating_add(hist.sum_ns);
        a.hist.stale_ns = a.hist.stale_ns.saturating_add(hist.stale_ns);
        a.hist.max_ns = a.hist.max_ns.max(hist.max_ns);
        for (x, y) in a.hist.buckets.iter_mut().zip(hist.buckets.iter()) {
            *x = x.saturating_add(*y).min(CAP);
        }
        Some(a)
    }

    /// Each cgroup's run-queue waits over the recording: id, path, name, the merged summary and
    /// the sleep the kernel counted as waiting (µs).
    pub(super) fn runq_totals(&self) -> Vec<RunqTotal> {
        self.0
            .get(family::runq::INFO.name)
            .into_iter()
            .flatten()
            .map(|(id, a)| RunqTotal {
                id: *id,
                path: a.path.clone(),
                name: a.name.clone(),
                summary: a.hist.summary(),
                asleep_us: a.asleep_us,
            })
            .collect()
    }

    /// Per family, the `TOP` worst cgroups by max, and by p99 among those with 100 waits or more.
    pub(super) fn finish(self) -> BTreeMap<String, FamilyReport> {
        self.0
            .into_iter()
            .map(|(f, accs)| (f, rank(accs)))
            .collect()
    }
}

fn rank(accs: HashMap<u64, Acc>) -> FamilyReport {
    let mut all: Vec<CgroupLatency> = accs
        .into_iter()
        .filter(|(_, a)| a.hist.count > 0)
        .map(|(id, a)| {
            let s = a.hist.summary();
            CgroupLatency {
                id,
                path: a.path,
                name: a.name,
                count: s.count,
                mean_us: s.mean_us,
                p99_us: s.p99_us,
                max_us: s.max_us,
                max_at_unix_ms: a.max_at,
            }
        })
        .collect();
    let n = all.len();
    all.sort_by(|a, b| b.max_us.total_cmp(&a.max_us).then(a.id.cmp(&b.id)));
    let worst_max = all.iter().take(TOP).cloned().collect();
    // A p99 needs enough waits to mean something.
    all.retain(|c| c.count >= 100);
    all.sort_by(|a, b| b.p99_us.total_cmp(&a.p99_us).then(a.id.cmp(&b.id)));
    all.truncate(TOP);
    FamilyReport {
        cgroups: n,
        worst_p99: all,
        worst_max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_found_by_shape_are_bounded() {
        let hist = serde_json::json!({"count": 1, "sum_us": 5.0, "mean_us": 5.0, "p50_us": 5.0, "p90_us": 5.0, "p99_us": 5.0, "max_us": 5.0, "buckets": [[4096, 1]]});
        let mut l = Latency::default();
        for w in 0..10 {
            let c = CgroupWindow {
                id: 7,
                other: (0..100)
                    .map(|k| (format!("fam{w}_{k}"), hist.clone()))
                    .collect(),
                ..Default::default()
            };
            l.add_cgroup(&c, 1000, &mut Budget::default());
        }
        let f = l.finish();
        assert_eq!(f.len(), MAX_FAMILIES);
        assert!(f.contains_key("fam0_0"), "the first seen are kept");
    }

    #[test]
    fn runq_totals_carry_the_sleep_the_kernel_counted_and_the_staleness() {
        let mut l = Latency::default();
        for (asleep, stale) in [(300_000.0, 3.0), (0.0, 4.0), (150_000.0, 0.0)] {
            let mut c = CgroupWindow {
                id: 9,
                ..Default::default()
            };
            c.runq.all = HistSummary {
                count: 2,
                sum_us: 10.0,
                stale_us: stale,
                max_us: 6.0,
                buckets: vec![(4096, 2)],
                ..Default::default()
            };
            c.runq.run_delay_asleep_us = asleep;
            l.add_cgroup(&c, 1000, &mut Budget::default());
        }
        let t = l.runq_totals();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].summary.count, t[0].summary.sum_us), (6, 30.0));
        assert_eq!(t[0].summary.stale_us, 7.0);
        assert_eq!(t[0].asleep_us, 450_000.0);
    }
}
