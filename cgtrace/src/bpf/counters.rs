//! The kernel side's per-CPU event and loss counters, read as window deltas.

use std::collections::BTreeMap;

use aya::maps::{MapData, PerCpuArray};
use cgtrace_common::counters::{self, Counters, NAMES, NR_COUNTERS};

use crate::model::EventCounts;

pub struct CounterReader {
    map: PerCpuArray<MapData, Counters>,
    prev: [u64; NR_COUNTERS as usize],
}

impl CounterReader {
    pub fn new(map: PerCpuArray<MapData, Counters>) -> Self {
        Self {
            map,
            prev: [0; NR_COUNTERS as usize],
        }
    }

    /// Sums over CPUs and returns the change since the last call.
    pub fn read_window(&mut self) -> [u64; NR_COUNTERS as usize] {
        let mut delta = [0u64; NR_COUNTERS as usize];
        let Ok(per_cpu) = self.map.get(&0, 0) else {
            return delta;
        };
        for (i, (d, prev)) in delta.iter_mut().zip(self.prev.iter_mut()).enumerate() {
            let total: u64 = per_cpu.iter().map(|c| c.v[i]).sum();
            *d = total.saturating_sub(*prev);
            *prev = total;
        }
        delta
    }
}

/// Seen/dropped totals and named counters from kernel deltas plus the daemon's own losses.
pub fn event_counts(
    kernel: &[u64; NR_COUNTERS as usize],
    daemon_dropped: u64,
    drain_full: u64,
) -> EventCounts {
    let k = |i: u32| kernel[i as usize];
    let mut named: BTreeMap<String, u64> = BTreeMap::new();
    for (i, name) in NAMES.iter().enumerate() {
        if !name.starts_with("reserved") {
            named.insert((*name).to_string(), kernel[i]);
        }
    }
    named.insert("undecodable".into(), daemon_dropped);
    named.insert("drain_full".into(), drain_full);
    EventCounts {
        seen: k(counters::SCHED_SWITCH) + k(counters::SCHED_WAKEUP),
        dropped: k(counters::RUNQ_START_FULL)
            + k(counters::RUNQ_HIST_FULL)
            + k(counters::RINGBUF_FULL)
            + daemon_dropped
            + drain_full,
        counters: named,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_the_loss_counters() {
        let mut k = [0u64; NR_COUNTERS as usize];
        k[counters::SCHED_SWITCH as usize] = 100;
        k[counters::SCHED_WAKEUP as usize] = 50;
        k[counters::RUNQ_WAITS as usize] = 120;
        k[counters::RUNQ_START_FULL as usize] = 1;
        k[counters::RINGBUF_FULL as usize] = 2;
        let e = event_counts(&k, 3, 4);
        assert_eq!(e.seen, 150);
        assert_eq!(e.dropped, 10);
        assert_eq!(e.counters["runq_waits"], 120);
        assert_eq!(e.counters["undecodable"], 3);
        assert_eq!(e.counters["drain_full"], 4);
    }
}
