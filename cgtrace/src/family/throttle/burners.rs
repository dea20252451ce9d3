//! Who burned the quota: the threads that ran in each throttled period of a group, from the
//! kernel's slice and period records (sent only for groups throttled in the last second).

use std::collections::{HashMap, VecDeque};

use cgtrace_common::throttle::{PeriodEvent, SliceEvent, ThrottleEvent};
use serde::{Deserialize, Serialize};

use crate::decode::comm_str;

/// Threads listed per throttled period.
pub const TOP_THREADS: usize = 5;
/// Throttled periods kept per group until the next window takes them.
pub const PERIODS_KEPT: usize = 10;
/// A group silent for this long (ns) is forgotten.
const FORGET_NS: u64 = 5_000_000_000;
/// CPUs remembered per thread and period (a thread migrates a few times a period at most; the
/// bound keeps a forged recording from growing the list).
const MAX_CPUS_PER_THREAD: usize = 256;
/// Distinct threads tracked per group within one period; more are counted, not named.
const THREADS_PER_PERIOD: usize = 4096;

/// A thread's share of one throttled period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodThread {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    pub cpu_ms: f64,
    /// CPUs it ran on in the period.
    pub cpus: u32,
}

/// One throttled period of a group and who used its quota.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThrottledPeriod {
    /// CLOCK_MONOTONIC (ns) of the period timer that began it, if seen.
    pub start_ns: Option<u64>,
    /// CLOCK_MONOTONIC (ns) of the period timer that ended it.
    pub end_ns: u64,
    /// How long after the period began the group was first throttled (the quota was gone),
    /// when both ends were seen.
    pub burned_in_ms: Option<f64>,
    /// Threads that ran, and their CPU time, in the period.
    pub threads: usize,
    pub cpu_ms: f64,
    /// The busiest threads, most CPU first.
    pub top: Vec<PeriodThread>,
}

#[derive(Default, Debug)]
struct ThreadAcc {
    tgid: u32,
    comm: [u8; 16],
    runtime_ns: u64,
    /// The CPUs it ran on, each once (hosts have up to thousands of CPUs; a thread in one
    /// period runs on a few).
    cpus: Vec<u32>,
}

#[derive(Default, Debug)]
struct Group {
    /// When the current period began (the previous period event), if seen.
    period_start: Option<u64>,
    /// When its last record (slice or period) was seen.
    last_ns: u64,
    threads: HashMap<u32, ThreadAcc>,
    overflow_ns: u64,
    done: VecDeque<ThrottledPeriod>,
}

/// Per-group accumulation between windows.
#[derive(Default, Debug)]
pub struct Burners {
    groups: HashMap<u64, Group>,
}

impl Burners {
    pub fn slice(&mut self, ev: &SliceEvent) {
        let g = self.groups.entry(ev.cgroup_id).or_default();
        g.last_ns = g.last_ns.max(ev.header.ts_ns);
        if g.threads.len() >= THREADS_PER_PERIOD && !g.threads.contains_key(&ev.pid) {
            g.overflow_ns = g.overflow_ns.saturating_add(ev.runtime_ns);
            return;
        }
        let t = g.threads.entry(ev.pid).or_default();
        t.tgid = ev.tgid;
        t.comm = ev.comm;
        t.runtime_ns = t.runtime_ns.saturating_add(ev.runtime_ns);
        if !t.cpus.contains(&ev.header.cpu) && t.cpus.len() < MAX_CPUS_PER_THREAD {
            t.cpus.push(ev.header.cpu);
        }
    }

    pub fn period(&mut self, ev: &PeriodEvent) {
        let g = self.groups.entry(ev.cgroup_id).or_default();
        g.last_ns = g.last_ns.max(ev.header.ts_ns);
        let start = g.period_start.replace(ev.header.ts_ns);
        if ev.throttled != 0 {
            let mut threads: Vec<(u32, ThreadAcc)> = g.threads.drain().collect();
            // Saturating: replayed records come from files, which may be damaged or forged.
            let total_ns = threads.iter().fold(g.overflow_ns, |acc, (_, t)| {
                acc.saturating_add(t.runtime_ns)
            });
            let n = threads.len();
            threads.sort_by(|a, b| b.1.runtime_ns.cmp(&a.1.runtime_ns).then(a.0.cmp(&b.0)));
            let top = threads
                .into_iter()
                .take(TOP_THREADS)
                .map(|(tid, t)| PeriodThread {
                    tid,
                    tgid: t.tgid,
                    comm: comm_str(&t.comm),
                    cpu_ms: t.runtime_ns as f64 / 1e6,
                    cpus: t.cpus.len() as u32,
                })
                .collect();
            if g.done.len() >= PERIODS_KEPT {
                g.done.pop_front();
            }
            g.done.push_back(ThrottledPeriod {
                start_ns: start,
                end_ns: ev.header.ts_ns,
                burned_in_ms: None,
                threads: n,
                cpu_ms: total_ns as f64 / 1e6,
                top,
            });
        }
        g.threads.clear();
        g.overflow_ns = 0;
    }

    /// An episode of this group closed. It began when the quota ran out in the period that the
    /// last period record ended: the first such episode sets that period's `burned_in_ms`.
    /// Returns the period, for the episode's event line.
    pub fn episode(&mut self, ev: &ThrottleEvent) -> Option<ThrottledPeriod> {
        let p = self.groups.get_mut(&ev.cgroup_id)?.done.back_mut()?;
        if let Some(start) = p.start_ns
            && (start..=p.end_ns).contains(&ev.start_ns)
        {
            let ms = ev.start_ns.saturating_sub(start) as f64 / 1e6;
            p.burned_in_ms = Some(p.burned_in_ms.map_or(ms, |b| b.min(ms)));
        }
        Some(p.clone())
    }

    /// Throttled periods completed since the last call, by group. Groups whose last record is
    /// older than `FORGET_NS` before `now_ns` (CLOCK_MONOTONIC) are forgotten.
    pub fn take(&mut self, now_ns: u64) -> HashMap<u64, Vec<ThrottledPeriod>> {
        let mut out = HashMap::new();
        self.groups.retain(|&id, g| {
            if !g.done.is_empty() {
                out.insert(id, g.done.drain(..).collect());
            }
            // Silent for FORGET_NS: forgotten, slices of an unfinished period included (the
            // kernel stops sending records a second after a group's last throttle).
            now_ns.saturating_sub(g.last_ns) < FORGET_NS
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use cgtrace_common::event::{
        EventHeader, KIND_THROTTLE, KIND_THROTTLE_PERIOD, KIND_THROTTLE_SLICE,
    };

    use super::*;

    fn header(kind: u32, cpu: u32, ts_ns: u64) -> EventHeader {
        EventHeader { kind, cpu, ts_ns }
    }

    fn slice(tid: u32, cpu: u32, ms: u64, comm: &str) -> SliceEvent {
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm.as_bytes());
        SliceEvent {
            header: header(KIND_THROTTLE_SLICE, cpu, 0),
            cgroup_id: 7,
            runtime_ns: ms * 1_000_000,
            pid: tid,
            tgid: 100,
            comm: c,
        }
    }

    fn period(ts_ms: u64, throttled: bool) -> PeriodEvent {
        PeriodEvent {
            header: header(KIND_THROTTLE_PERIOD, 0, ts_ms * 1_000_000),
            cgroup_id: 7,
            throttled: u32::from(throttled),
            _pad: 0,
        }
    }

    #[test]
    fn names_the_threads_that_burned_a_throttled_period() {
        let mut b = Burners::default();
        b.period(&period(0, false));
        for (tid, cpu) in [(11, 0), (12, 1), (13, 0)] {
            b.slice(&slice(tid, cpu, 4, "GC Thread#n"));
        }
        b.slice(&slice(11, 1, 2, "GC Thread#n"));
        b.slice(&slice(20, 0, 1, "app"));
        b.period(&period(100, true));
        let ep = ThrottleEvent {
            header: header(KIND_THROTTLE, 0, 100_000_000),
            cgroup_id: 7,
            start_ns: 18_000_000,
            duration_ns: 82_000_000,
            tasks: 4,
            runnable: 4,
            closed_by: 0,
            _pad: 0,
            kernel_ns: 0,
        };
        let p = b.episode(&ep).expect("period");
        assert_eq!(p.burned_in_ms, Some(18.0));
        assert_eq!(p.threads, 4);
        assert_eq!(p.cpu_ms, 15.0);
        assert_eq!(p.top[0].tid, 11);
        assert_eq!(p.top[0].cpu_ms, 6.0);
        assert_eq!(p.top[0].cpus, 2);
        assert_eq!(p.top[0].comm, "GC Thread#n");
        let taken = b.take(150_000_000);
        assert_eq!(taken[&7].len(), 1);
        assert!(b.take(150_000_000).is_empty(), "taken once");
        // An unthrottled period only resets the accumulation.
        b.slice(&slice(30, 0, 9, "x"));
        b.period(&period(200, false));
        assert!(b.take(250_000_000).is_empty());
        // Silent groups are forgotten.
        b.take(10_000_000_000);
        assert!(b.groups.is_empty());
    }

    #[test]
    fn cpus_beyond_64_are_told_apart() {
        // A 192-CPU host: a thread on CPUs 3 and 67 ran on two CPUs, not one.
        let mut b = Burners::default();
        b.period(&period(0, false));
        b.slice(&slice(40, 3, 1, "x"));
        b.slice(&slice(40, 67, 1, "x"));
        b.slice(&slice(40, 131, 1, "x"));
        b.slice(&slice(40, 3, 1, "x"));
        b.period(&period(100, true));
        let periods = b.take(150_000_000).remove(&7).expect("periods");
        assert_eq!(periods[0].top[0].cpus, 3);
    }

    #[test]
    fn groups_with_slices_but_no_more_periods_are_forgotten() {
        // Slices of a period that never ended (the group stopped being watched, or was removed):
        // the group goes once it is silent, not only once its thread list is empty.
        let mut b = Burners::default();
        let mut s = slice(50, 0, 1, "x");
        s.header.ts_ns = 1_000_000_000;
        b.slice(&s);
        assert!(b.take(2_000_000_000).is_empty());
        assert_eq!(b.groups.len(), 1, "still within FORGET_NS");
        b.take(1_000_000_000 + FORGET_NS + 1);
        assert!(b.groups.is_empty());
    }
}
