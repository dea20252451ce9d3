//! `runq`'s metric series: run-queue wait histograms by wait kind, per cgroup.

use std::collections::BTreeMap;

use crate::{
    metrics::encode::{CumHist, Kind, Labels, MetricFamily},
    model::CgroupWindow,
};

/// One cgroup's waits since cgtrace started, by wait kind.
#[derive(Clone, Debug, Default)]
pub struct Series {
    by_kind: BTreeMap<String, CumHist>,
}

impl Series {
    pub fn add(&mut self, c: &CgroupWindow) {
        for (kind, h) in &c.runq.kinds {
            self.by_kind.entry(kind.clone()).or_default().add(h);
        }
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
}
