//! Each tallied cgroup's totals over the recording ([`CgroupTotals`]), for `report --compare`:
//! gathered at the end from the tallies the other parts kept (run-queue histograms, throttle
//! sums, diagnoses, the blame ledger), so they cost no memory of their own while reading.

use std::collections::BTreeMap;

use super::latency::RunqTotal;
use crate::{
    family::runq::blame::NoisyNeighbour,
    report::model::{CgroupTotals, Diagnosed, ThrottledCgroup},
};

/// The totals by cgroup id, in id order.
pub(super) fn collect<'a>(
    runq: Vec<RunqTotal>,
    throttled: impl Iterator<Item = &'a ThrottledCgroup>,
    diagnosed: &[Diagnosed],
    noisy: &[NoisyNeighbour],
) -> Vec<CgroupTotals> {
    let mut by_id: BTreeMap<u64, CgroupTotals> = BTreeMap::new();
    for r in runq {
        let (s, e) = (&r.summary, get(&mut by_id, r.id, &r.path, &r.name));
        e.waits = s.count;
        e.wait_us = s.sum_us;
        e.wait_stale_us = s.stale_us;
        e.run_delay_asleep_us = r.asleep_us;
        e.wait_p50_us = s.p50_us;
        e.wait_p99_us = s.p99_us;
    }
    for t in throttled {
        let e = get(&mut by_id, t.id, &t.path, &t.name);
        e.nr_periods = t.nr_periods;
        e.nr_throttled = t.nr_throttled;
        e.throttled_us = t.throttled_us;
        if t.kernel_windows > 0 {
            e.kernel_nr_throttled = Some(t.kernel_nr_throttled);
            e.kernel_throttled_us = Some(t.kernel_throttled_us);
        }
        e.flags.extend(t.flags.keys().cloned());
    }
    for d in diagnosed {
        let e = get(&mut by_id, d.id, &d.path, &d.name);
        e.flags.push(d.code.clone());
    }
    for n in noisy {
        let e = get(&mut by_id, n.id, &n.path, &n.name);
        *e.caused_us.get_or_insert(0.0) += n.caused_us;
        for v in &n.victims {
            let e = get(&mut by_id, v.id, &v.path, &v.name);
            *e.suffered_us.get_or_insert(0.0) += v.wait_us;
        }
    }
    by_id
        .into_values()
        .map(|mut t| {
            t.flags.sort();
            t.flags.dedup();
            t
        })
        .collect()
}

fn get<'a>(
    by_id: &'a mut BTreeMap<u64, CgroupTotals>,
    id: u64,
    path: &Option<String>,
    name: &Option<String>,
) -> &'a mut CgroupTotals {
    let e = by_id.entry(id).or_insert_with(|| CgroupTotals {
        id,
        ..CgroupTotals::default()
    });
    if e.path.is_none() {
        e.path.clone_from(path);
    }
    if e.name.is_none() {
        e.name.clone_from(name);
    }
    e
}
