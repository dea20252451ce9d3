//! `throttle` in the daemon: period counters from the kernel map, episodes from the ring buffer,
//! and the kernel's own counters (`cpu.stat`, quota, period, burst, usage) read from cgroupfs for
//! the same window, so every window carries both.

pub mod advice;
pub mod attach;
pub mod burners;
pub mod collect;
pub mod metrics;
pub mod model;
pub mod sched_ext;

pub use advice::{FlagRules, flags};
pub use model::{KernelDelta, ThrottleWindow};

use std::collections::{BTreeMap, HashMap as StdHashMap};

use cgtrace_common::throttle::{
    CLOSE_CSD, CLOSE_LATE, CLOSE_TIMER, CLOSE_UNTHROTTLE, ThrottleEvent,
};
use serde::{Deserialize, Serialize};

use crate::{
    family::info::{Describe, FamilyInfo, LineHead, Room},
    family::throttle::burners::ThrottledPeriod,
    hist::Hist,
    model::Flag,
};

pub const INFO: FamilyInfo = FamilyInfo {
    name: "throttle",
    first_kind: 0x200,
    event_kind: cgtrace_common::event::KIND_THROTTLE,
    event_line: "throttle",
    lines_offline: true,
    // Made with the window (they need the flag rules); copied, named as this family's even
    // where a recording from before the family field left it empty.
    flags: |cg, _, out| {
        out.extend(cg.throttle.iter().flat_map(|t| &t.flags).map(|f| Flag {
            family: INFO.name.into(),
            ..f.clone()
        }));
    },
    mark: 2,
};

/// `throttle` records between two windows: episodes by cgroup, who burned each throttled
/// period, and the episodes kept for event lines.
#[derive(Debug, Default)]
pub struct Records {
    pub keep_lines: bool,
    /// Episodes since the last window, by cgroup.
    pub episodes: StdHashMap<u64, Episodes>,
    pub burners: burners::Burners,
    /// Episodes whose period is not complete yet (its last sums come a window after its end),
    /// with the period's number and the windows they waited.
    waiting: Vec<(ThrottleEvent, Option<u32>, u8)>,
    lines: Vec<(ThrottleEvent, Option<ThrottledPeriod>)>,
}

/// Windows an episode line waits for its period at most.
const LINE_WAIT: u8 = 2;

impl Records {
    pub fn episode(&mut self, ev: &ThrottleEvent, room: &mut Room<'_>) {
        self.episodes.entry(ev.cgroup_id).or_default().add(ev);
        let period = self.burners.episode(ev);
        if self.keep_lines && room.fits(&self.waiting) {
            self.waiting.push((*ev, period, 0));
        }
    }

    pub fn lines(&mut self, describe: &mut Describe<'_>, out: &mut Vec<ThrottleLine>) {
        for (ev, period) in self.lines.drain(..) {
            let (path, name) = describe(ev.cgroup_id);
            out.push(line(&ev, period, path, name));
        }
    }

    /// Episode lines whose period completed (or that waited long enough, or with `all`) become
    /// lines, in the order they came.
    fn release(&mut self, all: bool) {
        let burners = &self.burners;
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.retain_mut(|(ev, n, waited)| {
            let period = n.and_then(|n| burners.completed(ev.cgroup_id, n));
            let open = n.is_some_and(|n| burners.is_open(ev.cgroup_id, n));
            if period.is_none() && open && *waited < LINE_WAIT && !all {
                *waited += 1;
                return true;
            }
            self.lines.push((*ev, period.cloned()));
            false
        });
        self.waiting = waiting;
    }

    /// What a window ending at `mono_ns` takes: the episodes since the last one and the throttled
    /// periods completed.
    pub fn take_window(
        &mut self,
        mono_ns: u64,
    ) -> (
        StdHashMap<u64, Episodes>,
        std::collections::HashMap<u64, burners::Taken>,
    ) {
        let burned = self.burners.take(mono_ns);
        self.release(false);
        (std::mem::take(&mut self.episodes), burned)
    }

    /// The end of a run: periods whose end was seen complete, and every episode line goes out.
    pub fn finish(&mut self) {
        self.burners.finish();
        self.release(true);
    }
}

/// The event line of one throttle episode of the cgroup at `path`.
pub fn line(
    ev: &ThrottleEvent,
    period: Option<ThrottledPeriod>,
    path: Option<String>,
    name: Option<String>,
) -> ThrottleLine {
    ThrottleLine {
        head: LineHead::new(&INFO, &ev.header, ev.cgroup_id).named((path, name)),
        start_ns: ev.start_ns,
        duration_us: ev.duration_ns as f64 / 1e3,
        tasks: ev.tasks,
        runnable: ev.runnable,
        period,
        kernel_us: (ev.kernel_ns > 0).then(|| ev.kernel_ns as f64 / 1e3),
        closed_by: match ev.closed_by {
            CLOSE_TIMER => "timer",
            CLOSE_CSD => "csd",
            CLOSE_LATE => "late",
            CLOSE_UNTHROTTLE => "unthrottle",
            _ => "unknown",
        }
        .to_string(),
    }
}

/// Period counter deltas of one cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeriodDelta {
    pub nr_periods: u64,
    pub nr_throttled: u64,
}

/// A throttle episode (`--events`): one cgroup throttled on one CPU.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThrottleLine {
    #[serde(flatten)]
    pub head: LineHead,
    pub start_ns: u64,
    pub duration_us: f64,
    /// Tasks taken off the CPU by it.
    pub tasks: u32,
    /// Runnable tasks of the group when it began.
    pub runnable: u32,
    /// The throttled period it belongs to, with the threads that burned the quota.
    pub period: Option<ThrottledPeriod>,
    /// How its end was seen: `timer` (period/slack timer on this CPU), `csd` (remote unthrottle),
    /// `late` (at a later context switch: an unthrottle path without a hook, e.g. a quota write),
    /// `unthrottle` (the fentry/kprobe hook on `unthrottle_cfs_rq`).
    pub closed_by: String,
    /// fentry/kprobe modes: the kernel's own accounting of this episode.
    pub kernel_us: Option<f64>,
}

/// What the kernel says about a cgroup's CPU bandwidth, read from its cgroupfs files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCpu {
    /// `None`: no limit.
    pub quota_us: Option<u64>,
    pub period_us: u64,
    pub burst_us: u64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: u64,
    pub nr_bursts: u64,
    pub burst_ns: u64,
    /// CPU time used (v1 `cpuacct.usage`, v2 `cpu.stat usage_usec`).
    pub usage_ns: Option<u64>,
    /// When it was read (CLOCK_MONOTONIC ns; 0: unknown).
    pub at_ns: u64,
}

/// Episodes of one cgroup gathered during a window.
#[derive(Default, Debug, Clone)]
pub struct Episodes {
    pub durations: Hist,
    pub per_cpu: BTreeMap<u32, u64>,
    pub tasks: u64,
    pub runnable_sum: u64,
    pub runnable_max: u32,
    /// Hook modes: the kernel's own accounting of the episodes (sum of `kernel_ns`).
    pub kernel_ns: u64,
}

impl Episodes {
    pub fn add(&mut self, ev: &ThrottleEvent) {
        self.durations.record(ev.duration_ns);
        *self.per_cpu.entry(ev.header.cpu).or_insert(0) += 1;
        self.tasks = self.tasks.saturating_add(u64::from(ev.tasks));
        self.runnable_sum = self.runnable_sum.saturating_add(u64::from(ev.runnable));
        self.runnable_max = self.runnable_max.max(ev.runnable);
        self.kernel_ns = self.kernel_ns.saturating_add(ev.kernel_ns);
    }
}

/// Builds a window from its parts. `prev`/`cur` are the kernel's counters at the window's ends.
pub fn window(
    periods: PeriodDelta,
    episodes: Option<&Episodes>,
    burned: burners::Taken,
    prev: Option<&KernelCpu>,
    cur: Option<&KernelCpu>,
    duration_ms: u64,
) -> ThrottleWindow {
    let mut w = ThrottleWindow {
        nr_periods: periods.nr_periods,
        nr_throttled: periods.nr_throttled,
        throttled_share: if periods.nr_periods > 0 {
            periods.nr_throttled as f64 / periods.nr_periods as f64
        } else {
            0.0
        },
        ..ThrottleWindow::default()
    };
    if let Some(e) = episodes {
        w.episodes = e.durations.count;
        w.throttled_us = e.durations.sum_ns as f64 / 1e3;
        w.episode = e.durations.summary();
        w.episodes_per_cpu = e.per_cpu.clone();
        w.tasks_throttled = e.tasks;
        w.episodes_kernel_us = (e.kernel_ns > 0).then(|| e.kernel_ns as f64 / 1e3);
        w.runnable_at_throttle_max = e.runnable_max;
        w.runnable_at_throttle_mean = if e.durations.count > 0 {
            e.runnable_sum as f64 / e.durations.count as f64
        } else {
            0.0
        };
    }
    if let Some(c) = cur {
        w.quota_us = c.quota_us;
        w.period_us = c.period_us;
        w.burst_us = c.burst_us;
        w.quota_cores = c
            .quota_us
            .filter(|_| c.period_us > 0)
            .map(|q| q as f64 / c.period_us as f64);
        if let Some(p) = prev {
            w.kernel = Some(KernelDelta {
                nr_periods: c.nr_periods.saturating_sub(p.nr_periods),
                nr_throttled: c.nr_throttled.saturating_sub(p.nr_throttled),
                throttled_us: c.throttled_ns.saturating_sub(p.throttled_ns) as f64 / 1e3,
                nr_bursts: c.nr_bursts.saturating_sub(p.nr_bursts),
                burst_us: c.burst_ns.saturating_sub(p.burst_ns) as f64 / 1e3,
            });
            if let (Some(u1), Some(u0)) = (c.usage_ns, p.usage_ns) {
                let used = u1.saturating_sub(u0) as f64;
                w.usage_us = Some(used / 1e3);
                // Over the time between the two readings: the earlier one may be windows old (the
                // cgroup's timer did not run in between).
                let span_ns = match (p.at_ns, c.at_ns) {
                    (t0, t1) if t0 > 0 && t1 > t0 => t1 - t0,
                    _ => duration_ms.saturating_mul(1_000_000),
                };
                if span_ns > 0 {
                    w.usage_cores = Some(used / span_ns as f64);
                }
            }
        }
    }
    w.periods = burned.periods;
    w.period_use = burned.uses;
    w.period_use_dropped = burned.uses_dropped;
    w
}

/// Makes the window's diagnoses (once everything they rest on is in it: the collector adds what
/// recent windows held off before).
pub fn set_flags(w: &mut ThrottleWindow, rules: &FlagRules) {
    w.flags = flags(w, rules)
        .into_iter()
        .map(|f| Flag {
            family: INFO.name.into(),
            ..f
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use cgtrace_common::event::KIND_THROTTLE;

    use super::*;

    #[test]
    fn an_episode_line_waits_for_its_period_then_carries_its_burners() {
        use cgtrace_common::{
            event::{EventHeader, KIND_THROTTLE_PERIOD, KIND_THROTTLE_SLICE},
            throttle::{PeriodEvent, SliceEvent},
        };
        let h = |kind, ts_ns| EventHeader {
            kind,
            cpu: 0,
            ts_ns,
        };
        let period = |ts_ns, n, throttled| PeriodEvent {
            header: h(KIND_THROTTLE_PERIOD, ts_ns),
            cgroup_id: 5,
            throttled,
            period: n,
        };
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"spin");
        let sum = |tid, n, ms: u64| SliceEvent {
            header: h(KIND_THROTTLE_SLICE, 0),
            cgroup_id: 5,
            runtime_ns: ms * 1_000_000,
            pid: tid,
            tgid: tid,
            comm,
            period: n,
            slices: 3,
            cpus: 1,
            flags: 0,
            first_ns: 1,
        };
        let ep = ThrottleEvent {
            header: h(KIND_THROTTLE, 100_000_000),
            cgroup_id: 5,
            start_ns: 30_000_000,
            duration_ns: 70_000_000,
            tasks: 1,
            runnable: 1,
            closed_by: 0,
            _pad: 0,
            kernel_ns: 0,
        };
        let lines_of = |r: &mut Records| {
            let mut out = Vec::new();
            r.lines(&mut |_| (None, None), &mut out);
            out.into_iter().map(|t| t.period).collect::<Vec<_>>()
        };
        let mut dropped = 0;
        let mut r = Records {
            keep_lines: true,
            ..Records::default()
        };
        r.burners.period(&period(0, 1, 0));
        r.burners.slice(&sum(9, 2, 12));
        r.burners.period(&period(100_000_000, 2, 1));
        r.episode(&ep, &mut Room::new(&mut dropped));
        // Thread 8 slept through the period's end: its sum comes from the map a window later.
        let _ = r.take_window(100_000_000);
        assert!(
            lines_of(&mut r).is_empty(),
            "the period is not complete yet"
        );
        r.burners.slice(&sum(8, 2, 8));
        let (_, burned) = r.take_window(1_100_000_000);
        let lines = lines_of(&mut r);
        let p = lines[0].as_ref().expect("the line carries its period");
        assert_eq!((p.threads, p.cpu_ms, p.burned_in_ms), (2, 20.0, Some(30.0)));
        assert_eq!(p.top[0].comm, "spin");
        assert_eq!(burned[&5].periods, vec![p.clone()]);
        // An episode of a period that never completes goes out at the end of the run.
        r.burners.period(&period(1_200_000_000, 3, 1));
        r.episode(&ep, &mut Room::new(&mut dropped));
        r.burners.slice(&sum(9, 4, 1));
        r.finish();
        assert_eq!(lines_of(&mut r).len(), 1);
        assert_eq!(dropped, 0);
    }

    #[test]
    fn window_combines_ours_and_the_kernels() {
        let mut e = Episodes::default();
        for (cpu, ns) in [(0u32, 80_000_000u64), (1, 79_000_000)] {
            e.add(&ThrottleEvent {
                header: cgtrace_common::event::EventHeader {
                    kind: KIND_THROTTLE,
                    cpu,
                    ts_ns: 0,
                },
                cgroup_id: 5,
                start_ns: 0,
                duration_ns: ns,
                tasks: 2,
                runnable: 3,
                closed_by: 0,
                _pad: 0,
                kernel_ns: 0,
            });
        }
        let prev = KernelCpu {
            quota_us: Some(20_000),
            period_us: 100_000,
            usage_ns: Some(0),
            ..Default::default()
        };
        let cur = KernelCpu {
            nr_periods: 10,
            nr_throttled: 10,
            throttled_ns: 159_000_000,
            usage_ns: Some(200_000_000),
            ..prev
        };
        let w = window(
            PeriodDelta {
                nr_periods: 10,
                nr_throttled: 10,
            },
            Some(&e),
            burners::Taken::default(),
            Some(&prev),
            Some(&cur),
            1000,
        );
        assert_eq!(w.episodes, 2);
        assert_eq!(w.throttled_us, 159_000.0);
        assert_eq!(w.kernel.as_ref().map(|k| k.throttled_us), Some(159_000.0));
        assert_eq!(w.quota_cores, Some(0.2));
        assert_eq!(w.usage_cores, Some(0.2));
        assert_eq!(w.throttled_share, 1.0);
        assert_eq!(w.episodes_per_cpu.len(), 2);
        assert_eq!(w.runnable_at_throttle_mean, 3.0);
        // Using its whole quota while throttled: no "below quota" flag; 80 ms stalls in 100 ms
        // periods are long.
        let mut w = w;
        set_flags(&mut w, &FlagRules::default());
        let codes: Vec<&str> = w.flags.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["long_throttle_waits"]);
    }

    #[test]
    fn usage_is_over_the_time_between_the_two_readings() {
        // The last reading is three seconds old (the timer did not run for two windows): 600 ms
        // of CPU since then is 0.2 CPUs, not 0.6 over this one-second window.
        let prev = KernelCpu {
            quota_us: Some(50_000),
            period_us: 100_000,
            usage_ns: Some(1_000_000_000),
            at_ns: 10_000_000_000,
            ..Default::default()
        };
        let cur = KernelCpu {
            usage_ns: Some(1_600_000_000),
            at_ns: 13_000_000_000,
            ..prev
        };
        let w = window(
            PeriodDelta::default(),
            None,
            burners::Taken::default(),
            Some(&prev),
            Some(&cur),
            1000,
        );
        assert_eq!(w.usage_us, Some(600_000.0));
        assert!(
            (w.usage_cores.unwrap() - 0.2).abs() < 1e-9,
            "{:?}",
            w.usage_cores
        );
    }
}
