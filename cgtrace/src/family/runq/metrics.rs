//! `runq`'s metric series: run-queue wait histograms by wait kind, per cgroup.

use std::collections::BTreeMap;

use crate::{
    metrics::encode::{CumHist, Kind, Labels, MetricFamily, OTHER},
    model::CgroupWindow,
};

/// Neighbours a cgroup's `cgtrace_runq_wait_by_neighbour_seconds` names; the wait charged to
/// later ones is summed as `neighbour="other"`.
pub const MAX_NEIGHBOUR_SERIES: usize = 10;

/// One cgroup's waits since cgtrace started, by wait kind; with the blame ledger, its wait by
/// part, by neighbour, and the wait it caused others.
#[derive(Clone, Debug, Default)]
pub struct Series {
    by_kind: BTreeMap<String, CumHist>,
    /// Seconds by part, in `Blame::parts` order, as the `part` label has them (`None`: the
    /// ledger never reported on it; a part `None`: this kernel never told it).
    blame: Option<Vec<(&'static str, Option<f64>)>>,
    /// Seconds by the neighbour's `cgroup` label, at most [`MAX_NEIGHBOUR_SERIES`] and
    /// `other`, with the wall clock (Unix ms) of the last window that charged it: a neighbour not
    /// charged for `--series-ttl` (a removed cgroup, most often) loses its series and its place.
    by_neighbour: BTreeMap<String, (f64, u64)>,
    /// Seconds of wait it caused other cgroups (`None`: never).
    caused: Option<f64>,
    /// Seconds of sleep the kernel's `run_delay` counted as waiting (`None`: never).
    asleep: Option<f64>,
}

impl Series {
    /// Adds the window of `c` that ended at `now_ms` (Unix ms).
    pub fn add(&mut self, c: &CgroupWindow, now_ms: u64) {
        for (kind, h) in &c.runq.kinds {
            match self.by_kind.get_mut(kind) {
                Some(acc) => acc.add(h),
                None => self.by_kind.entry(kind.to_string()).or_default().add(h),
            }
        }
        if let Some(b) = &c.runq.blame {
            let parts = b.parts();
            let acc = self
                .blame
                .get_or_insert_with(|| parts.iter().map(|p| (p.0, None)).collect());
            for ((name, acc), (label, us)) in acc.iter_mut().zip(parts) {
                debug_assert_eq!(*name, label);
                if let Some(us) = us {
                    *acc.get_or_insert(0.0) += us / 1e6;
                }
            }
            for n in &b.neighbours {
                let label = n.path.clone().unwrap_or_else(|| format!("id:{}", n.id));
                let named =
                    self.by_neighbour.len() - usize::from(self.by_neighbour.contains_key(OTHER));
                let key = if self.by_neighbour.contains_key(&label) || named < MAX_NEIGHBOUR_SERIES
                {
                    label
                } else {
                    OTHER.to_string()
                };
                let e = self.by_neighbour.entry(key).or_insert((0.0, now_ms));
                *e = (e.0 + n.wait_us / 1e6, now_ms);
            }
            if b.neighbours_other_us > 0.0 {
                let e = self
                    .by_neighbour
                    .entry(OTHER.to_string())
                    .or_insert((0.0, now_ms));
                *e = (e.0 + b.neighbours_other_us / 1e6, now_ms);
            }
        }
        if let Some(caused) = &c.caused {
            *self.caused.get_or_insert(0.0) += caused.wait_us / 1e6;
        }
        if c.runq.run_delay_asleep_us > 0.0 {
            *self.asleep.get_or_insert(0.0) += c.runq.run_delay_asleep_us / 1e6;
        }
    }
}

impl Series {
    /// Drops the neighbours not charged within `ttl_ms` of `now_ms`.
    pub fn expire(&mut self, now_ms: u64, ttl_ms: u64) {
        self.by_neighbour
            .retain(|_, &mut (_, last)| now_ms.saturating_sub(last) < ttl_ms);
    }
}

/// `cgtrace_runq_wait_seconds{…, kind}` of every cgroup.
pub fn families(series: &[(&Labels, &Series)], out: &mut Vec<MetricFamily>) {
    let mut f = MetricFamily::new(
        "cgtrace_runq_wait_seconds",
        Kind::Histogram,
        "seconds",
        "Run-queue waits (time runnable before running), by wait kind, since cgtrace started",
    );
    for (l, s) in series {
        for (kind, h) in &s.by_kind {
            f.hist(l, Some(("kind", kind)), h);
        }
    }
    out.push(f);
    let mut f = MetricFamily::new(
        "cgtrace_runq_wait_blame_seconds",
        Kind::Counter,
        "seconds",
        "Run-queue wait by why it waited (blame ledger, --blame): its own quota, an ancestor's \
         quota, its own other tasks, other cgroups' tasks, kernel and host, its CPU waking, an idle \
         CPU elsewhere, interrupts, hypervisor steal, unattributed; the parts add up to the wait \
         (no series for a part this kernel cannot tell)",
    );
    for (l, s) in series {
        // A part this kernel cannot tell has no series (not 0).
        for (part, v) in s.blame.iter().flatten() {
            if let Some(v) = v {
                f.num(l, Some(("part", part)), *v);
            }
        }
    }
    out.push(f);
    let mut f = MetricFamily::new(
        "cgtrace_runq_wait_by_neighbour_seconds",
        Kind::Counter,
        "seconds",
        "Run-queue wait charged to each other cgroup that held the CPU meanwhile (blame ledger; \
         a cgroup's top neighbours of each window, at most 10 per cgroup, the rest as other)",
    );
    for (l, s) in series {
        for (n, (v, _)) in &s.by_neighbour {
            f.num(l, Some(("neighbour", n)), *v);
        }
    }
    out.push(f);
    let mut f = MetricFamily::new(
        "cgtrace_runq_delay_caused_seconds",
        Kind::Counter,
        "seconds",
        "Run-queue wait the cgroup's tasks caused other cgroups by holding their CPU (blame ledger)",
    );
    for (l, s) in series {
        if let Some(v) = s.caused {
            f.num(l, None, v);
        }
    }
    out.push(f);
    let mut f = MetricFamily::new(
        "cgtrace_runq_run_delay_asleep_seconds",
        Kind::Counter,
        "seconds",
        "Sleep the kernel's run_delay counted as waiting (6.12+: a sleeping task still queued, moved \
         to another CPU), left out of cgtrace_runq_wait_seconds: the two add up to run_delay",
    );
    for (l, s) in series {
        if let Some(v) = s.asleep {
            f.num(l, None, v);
        }
    }
    out.push(f);
}
