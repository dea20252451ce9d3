//! `runq`'s metric series: run-queue wait histograms by wait kind, per cgroup.

use std::collections::BTreeMap;

use crate::{
    metrics::encode::{CumHist, Labels, family, histogram, labels},
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
pub fn render(series: &[(&Labels, &Series)], le: &[String], o: &mut String) {
    family(
        o,
        "cgtrace_runq_wait_seconds",
        "histogram",
        "seconds",
        "Run-queue waits (time runnable before running), by wait kind, since cgtrace started",
    );
    for (l, s) in series {
        for (kind, h) in &s.by_kind {
            let l = labels(l, Some(("kind", kind)));
            histogram(o, "cgtrace_runq_wait_seconds", &l, h, le);
        }
    }
}
