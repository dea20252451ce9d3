//! Who burned the quota: the threads that ran in each throttled period of a group.
//!
//! The kernel sums each thread's slices per period of its group (`SliceSum`, only for groups
//! throttled in the last second) and sends a thread's sum when the thread next runs in a later
//! period: one record per thread and period. A thread that has not run since its period ended
//! still holds its sum in the map; the collector reads those at the window's end and hands them
//! over here as the same records ([`Burners::wants_sum`]). A period is complete one window after
//! its end (the period record) was seen: by then every sum of it has come, from the ring buffer
//! or from the map.
//!
//! A period starts one period before its end, not at the group's previous period record: the
//! period timer of a group that idled stopped, so the record before can be seconds back. The
//! period's length is the smallest gap between the group's recent period records (the timer
//! keeps its phase, so every gap is a whole number of periods; a record missed makes one gap
//! longer, never shorter), which follows a period written to the group within [`GAPS`] records.

use std::collections::{BTreeMap, HashMap, VecDeque};

use cgtrace_common::throttle::{PeriodEvent, SLICE_ONE, SliceEvent, ThrottleEvent};
use serde::{Deserialize, Serialize};

use crate::decode::comm_str;

/// Threads listed per throttled period.
pub const TOP_THREADS: usize = 5;
/// Throttled periods kept per group until the next window takes them (and for event lines).
pub const PERIODS_KEPT: usize = 10;
/// A group silent for this long (ns) is forgotten.
pub const FORGET_NS: u64 = 5_000_000_000;
/// CPUs remembered per thread and period for lone slices (a thread migrates a few times a
/// period at most; the bound keeps a forged recording from growing the list).
const MAX_CPUS_PER_THREAD: usize = 256;
/// Distinct threads tracked per group within one period; more are counted, not named.
const THREADS_PER_PERIOD: usize = 4096;
/// Periods of one group described per window (`ThrottleWindow::period_use`): a 1 ms period
/// watched for a whole 1 s window. Beyond, they are counted in `period_use_dropped`.
pub const USES_KEPT: usize = 1024;
/// Periods of one group open at once: the current one, and those ended in this window and the
/// one before, waiting a window for their last sums (two windows of `USES_KEPT`). Beyond, the
/// oldest is dropped and counted in `period_use_dropped` (at 64, a 25 ms period lost 16 of its
/// 40 periods a window this way).
const OPEN_PERIODS: usize = 2 * USES_KEPT + 2;
/// Gaps between a group's period records kept for its period's length.
const GAPS: usize = 8;

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

/// One period of a group watched after a throttle (the second after each episode opens): the CPU
/// its threads used, and the CPU time its throttle held off (its episodes, one per throttled CPU).
/// What `cgtrace whatif` replays as the group's demand.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeriodUse {
    /// CLOCK_MONOTONIC (ns) of the period timer that began it (`null`: the first period seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// CLOCK_MONOTONIC (ns) of the period timer that ended it.
    pub end_ns: u64,
    /// CPU its threads ran in the period (ms).
    pub cpu_ms: f64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub throttled: bool,
    /// How long after its start the quota ran out, when both ends were seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burned_in_ms: Option<f64>,
    /// CPU time held off by the throttle: the episodes that ended the period, summed (ms).
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub held_off_ms: f64,
}

/// What a window takes of a group: its completed throttled periods with who burned them, and
/// every completed period it watched.
#[derive(Debug, Default, PartialEq)]
pub struct Taken {
    pub periods: Vec<ThrottledPeriod>,
    pub uses: Vec<PeriodUse>,
    /// Periods past [`USES_KEPT`] in one window, not described.
    pub uses_dropped: u64,
}

#[derive(Default, Debug)]
struct ThreadAcc {
    tgid: u32,
    comm: [u8; 16],
    /// The kernel's sum as last seen, told apart by its first slice's time.
    sum_first_ns: Option<u64>,
    sum_ns: u64,
    sum_cpus: u32,
    /// Earlier sums of the same thread and period (its entry was deleted and made again), and
    /// lone slices (the sums map was full, or a recording from before sums).
    extra_ns: u64,
    /// The CPUs of lone slices, each once.
    cpus: Vec<u32>,
}

impl ThreadAcc {
    fn runtime_ns(&self) -> u64 {
        self.sum_ns.saturating_add(self.extra_ns)
    }

    fn add(&mut self, ev: &SliceEvent) {
        self.tgid = ev.tgid;
        self.comm = ev.comm;
        if ev.flags & SLICE_ONE != 0 {
            self.extra_ns = self.extra_ns.saturating_add(ev.runtime_ns);
            if !self.cpus.contains(&ev.header.cpu) && self.cpus.len() < MAX_CPUS_PER_THREAD {
                self.cpus.push(ev.header.cpu);
            }
            return;
        }
        match self.sum_first_ns {
            // The same sum again (from the ring buffer after the map, or a later reading): it
            // only grows.
            Some(first) if first == ev.first_ns => {
                self.sum_ns = self.sum_ns.max(ev.runtime_ns);
                self.sum_cpus = self.sum_cpus.max(ev.cpus);
            }
            // An older sum than the one kept cannot come (a deleted entry sends nothing).
            Some(first) if first > ev.first_ns => {}
            prev => {
                if prev.is_some() {
                    self.extra_ns = self.extra_ns.saturating_add(self.sum_ns);
                }
                self.sum_first_ns = Some(ev.first_ns);
                self.sum_ns = ev.runtime_ns;
                self.sum_cpus = self.sum_cpus.max(ev.cpus);
            }
        }
    }
}

/// When and how a period ended.
#[derive(Clone, Copy, Debug)]
struct End {
    ns: u64,
    throttled: bool,
    /// [`Burners::takes`] when the end was seen: complete at a later take.
    seen_at: u64,
}

#[derive(Default, Debug)]
struct Period {
    start_ns: Option<u64>,
    end: Option<End>,
    /// The earliest start of an episode of it (the quota ran out).
    first_throttle_ns: Option<u64>,
    threads: HashMap<u32, ThreadAcc>,
    overflow_ns: u64,
    /// The episodes that closed it (throttled CPU time), summed.
    held_off_ns: u64,
}

impl Period {
    /// Its description for `ThrottleWindow::period_use`.
    fn use_of(&self, end: End) -> PeriodUse {
        let total_ns = self.threads.values().fold(self.overflow_ns, |acc, t| {
            acc.saturating_add(t.runtime_ns())
        });
        PeriodUse {
            start_ns: self.start_ns,
            end_ns: end.ns,
            cpu_ms: total_ns as f64 / 1e6,
            throttled: end.throttled,
            burned_in_ms: self.burned_in_ms(),
            held_off_ms: self.held_off_ns as f64 / 1e6,
        }
    }

    fn burned_in_ms(&self) -> Option<f64> {
        match (self.start_ns, self.first_throttle_ns) {
            (Some(start), Some(t)) => Some(t.saturating_sub(start) as f64 / 1e6),
            _ => None,
        }
    }

    fn finish(self, end: End) -> ThrottledPeriod {
        let burned_in_ms = self.burned_in_ms();
        let mut threads: Vec<(u32, ThreadAcc)> = self.threads.into_iter().collect();
        // Saturating: replayed records come from files, which may be damaged or forged.
        let total_ns = threads.iter().fold(self.overflow_ns, |acc, (_, t)| {
            acc.saturating_add(t.runtime_ns())
        });
        let n = threads.len();
        threads.sort_by(|a, b| b.1.runtime_ns().cmp(&a.1.runtime_ns()).then(a.0.cmp(&b.0)));
        let top = threads
            .into_iter()
            .take(TOP_THREADS)
            .map(|(tid, t)| PeriodThread {
                tid,
                tgid: t.tgid,
                comm: comm_str(&t.comm),
                cpu_ms: t.runtime_ns() as f64 / 1e6,
                cpus: t.sum_cpus.max(t.cpus.len() as u32),
            })
            .collect();
        ThrottledPeriod {
            start_ns: self.start_ns,
            end_ns: end.ns,
            burned_in_ms,
            threads: n,
            cpu_ms: total_ns as f64 / 1e6,
            top,
        }
    }
}

#[derive(Default, Debug)]
struct Group {
    /// Open periods by number (`SliceSum::period`).
    periods: BTreeMap<u32, Period>,
    /// Periods up to this one are complete: later sums of them are late.
    complete_upto: u32,
    /// When its last period record came.
    last_end_ns: Option<u64>,
    /// The last gaps between its period records (0: none yet), a ring at `gap_next`.
    gaps: [u64; GAPS],
    gap_next: usize,
    /// Its last throttled period that ended: episodes closing now belong to it.
    last_throttled: Option<u32>,
    /// Recordings from before sums number no periods: lone slices go to this one, which the
    /// group's next period record ends.
    legacy_open: u32,
    /// When its last record (slice or period) was seen.
    last_ns: u64,
    /// Throttled periods completed since the last take.
    done: Vec<ThrottledPeriod>,
    /// Every period completed since the last take, and those past [`USES_KEPT`].
    uses: Vec<PeriodUse>,
    uses_dropped: u64,
    /// The last throttled periods completed, by number, for event lines.
    recent: VecDeque<(u32, ThrottledPeriod)>,
}

impl Group {
    /// A period record came at `end_ns`: when its period started — at the record before when
    /// that was the period before (a gap under 1.5 periods: the timer's own jitter kept), else
    /// one period (the smallest recent gap) before; unknown for the group's first.
    fn start_of(&mut self, end_ns: u64) -> Option<u64> {
        let prev = self.last_end_ns.replace(end_ns)?;
        let gap = end_ns.saturating_sub(prev);
        if gap > 0 {
            self.gaps[self.gap_next] = gap;
            self.gap_next = (self.gap_next + 1) % GAPS;
        }
        let period = self.gaps.iter().copied().filter(|&g| g > 0).min()?;
        if gap < period.saturating_add(period / 2) {
            Some(prev)
        } else {
            Some(end_ns.saturating_sub(period))
        }
    }

    /// The open period `n`, made if new (dropping the oldest open one past `OPEN_PERIODS`: a
    /// period not described, counted as one).
    fn period(&mut self, n: u32) -> &mut Period {
        if !self.periods.contains_key(&n) && self.periods.len() >= OPEN_PERIODS {
            self.periods.pop_first();
            self.uses_dropped += 1;
        }
        self.periods.entry(n).or_default()
    }
}

/// Per-group accumulation between windows.
#[derive(Default, Debug)]
pub struct Burners {
    groups: HashMap<u64, Group>,
    /// Windows taken so far.
    takes: u64,
    /// Sums of periods already complete (should stay 0: a period waits a window for them).
    pub late: u64,
}

impl Burners {
    pub fn slice(&mut self, ev: &SliceEvent) {
        let g = self.groups.entry(ev.cgroup_id).or_default();
        g.last_ns = g.last_ns.max(ev.header.ts_ns);
        let n = if ev.period == 0 {
            g.legacy_open.max(1)
        } else {
            ev.period
        };
        if n <= g.complete_upto {
            self.late += 1;
            return;
        }
        let p = g.period(n);
        if p.threads.len() >= THREADS_PER_PERIOD && !p.threads.contains_key(&ev.pid) {
            p.overflow_ns = p.overflow_ns.saturating_add(ev.runtime_ns);
            return;
        }
        p.threads.entry(ev.pid).or_default().add(ev);
    }

    pub fn period(&mut self, ev: &PeriodEvent) {
        let takes = self.takes;
        let g = self.groups.entry(ev.cgroup_id).or_default();
        g.last_ns = g.last_ns.max(ev.header.ts_ns);
        let n = if ev.period == 0 {
            let n = g.legacy_open.max(1);
            g.legacy_open = n + 1;
            n
        } else {
            ev.period
        };
        let start = g.start_of(ev.header.ts_ns);
        if n <= g.complete_upto {
            self.late += 1;
            return;
        }
        let throttled = ev.throttled != 0;
        let p = g.period(n);
        p.start_ns = start;
        p.end = Some(End {
            ns: ev.header.ts_ns,
            throttled,
            seen_at: takes,
        });
        if throttled {
            g.last_throttled = Some(n);
        }
    }

    /// An episode of this group closed. It began when the quota ran out in the group's last
    /// throttled period that ended: the first such episode sets that period's `burned_in_ms`.
    /// Returns the period's number, for the episode's event line.
    pub fn episode(&mut self, ev: &ThrottleEvent) -> Option<u32> {
        let g = self.groups.get_mut(&ev.cgroup_id)?;
        let n = g.last_throttled?;
        if let Some(p) = g.periods.get_mut(&n) {
            p.held_off_ns = p.held_off_ns.saturating_add(ev.duration_ns);
        }
        if let Some(p) = g.periods.get_mut(&n)
            && let (Some(start), Some(end)) = (p.start_ns, p.end)
            && (start..=end.ns).contains(&ev.start_ns)
        {
            p.first_throttle_ns = Some(
                p.first_throttle_ns
                    .map_or(ev.start_ns, |t| t.min(ev.start_ns)),
            );
        }
        Some(n)
    }

    /// Whether the collector should hand over a sum it read from the kernel's map: its period
    /// has ended and is not complete, and this sum is not the one already seen.
    pub fn wants_sum(
        &self,
        cgroup_id: u64,
        tid: u32,
        period: u32,
        first_ns: u64,
        runtime_ns: u64,
    ) -> bool {
        let Some(p) = self
            .groups
            .get(&cgroup_id)
            .and_then(|g| g.periods.get(&period))
            .filter(|p| p.end.is_some())
        else {
            return false;
        };
        p.threads
            .get(&tid)
            .is_none_or(|t| t.sum_first_ns != Some(first_ns) || t.sum_ns != runtime_ns)
    }

    /// Whether the kernel's sum of `period` can go from the map: the period is complete (taken
    /// or dropped), or nothing of the group is kept.
    pub fn is_done(&self, cgroup_id: u64, period: u32) -> bool {
        self.groups
            .get(&cgroup_id)
            .is_none_or(|g| period <= g.complete_upto)
    }

    /// The throttled period `n` of a group, once complete (among the last [`PERIODS_KEPT`]).
    pub fn completed(&self, cgroup_id: u64, n: u32) -> Option<&ThrottledPeriod> {
        self.groups
            .get(&cgroup_id)?
            .recent
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, p)| p)
    }

    /// Whether period `n` of a group may still complete.
    pub fn is_open(&self, cgroup_id: u64, n: u32) -> bool {
        self.groups
            .get(&cgroup_id)
            .is_some_and(|g| g.periods.contains_key(&n))
    }

    /// Completes every period whose end was seen before the last take (or, with `all`, at all):
    /// the throttled ones are kept for the next [`take`](Self::take) and for event lines.
    fn complete(&mut self, all: bool) {
        let takes = self.takes;
        for g in self.groups.values_mut() {
            let Some(&last) = g
                .periods
                .iter()
                .rev()
                .find(|(_, p)| p.end.is_some_and(|e| all || e.seen_at < takes))
                .map(|(n, _)| n)
            else {
                continue;
            };
            // Everything up to it: periods before it that never ended cannot end any more.
            let rest = g.periods.split_off(&(last.saturating_add(1)));
            let finished = std::mem::replace(&mut g.periods, rest);
            g.complete_upto = g.complete_upto.max(last);
            for (n, p) in finished {
                let Some(end) = p.end else {
                    continue;
                };
                if g.uses.len() < USES_KEPT {
                    g.uses.push(p.use_of(end));
                } else {
                    g.uses_dropped += 1;
                }
                if !end.throttled {
                    continue;
                }
                let tp = p.finish(end);
                if g.done.len() >= PERIODS_KEPT {
                    g.done.remove(0);
                }
                g.done.push(tp.clone());
                if g.recent.len() >= PERIODS_KEPT {
                    g.recent.pop_front();
                }
                g.recent.push_back((n, tp));
            }
        }
    }

    /// Throttled periods completed at this window's end, by group: those whose end was seen
    /// before the previous window's end. Groups whose last record is older than `FORGET_NS`
    /// before `now_ns` (CLOCK_MONOTONIC) are forgotten, with the sums of an unfinished period.
    pub fn take(&mut self, now_ns: u64) -> HashMap<u64, Taken> {
        self.complete(false);
        self.takes += 1;
        let mut out = HashMap::new();
        self.groups.retain(|&id, g| {
            if !g.done.is_empty() || !g.uses.is_empty() || g.uses_dropped > 0 {
                out.insert(
                    id,
                    Taken {
                        periods: std::mem::take(&mut g.done),
                        uses: std::mem::take(&mut g.uses),
                        uses_dropped: std::mem::take(&mut g.uses_dropped),
                    },
                );
            }
            now_ns.saturating_sub(g.last_ns) < FORGET_NS
        });
        out
    }

    /// The end of a run: every period whose end was seen is complete (for event lines; no
    /// window takes them any more).
    pub fn finish(&mut self) {
        self.complete(true);
    }
}

#[cfg(test)]
mod tests {
    use cgtrace_common::event::{
        EventHeader, KIND_THROTTLE, KIND_THROTTLE_PERIOD, KIND_THROTTLE_SLICE,
    };

    use super::*;

    /// The throttled periods of a take, by group (groups with none left out).
    fn throttled(taken: HashMap<u64, Taken>) -> HashMap<u64, Vec<ThrottledPeriod>> {
        taken
            .into_iter()
            .filter(|(_, t)| !t.periods.is_empty())
            .map(|(id, t)| (id, t.periods))
            .collect()
    }

    fn header(kind: u32, cpu: u32, ts_ns: u64) -> EventHeader {
        EventHeader { kind, cpu, ts_ns }
    }

    /// A lone slice (as recordings from before sums hold them) of no known period.
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
            period: 0,
            slices: 1,
            cpus: 1,
            flags: SLICE_ONE,
            first_ns: 0,
        }
    }

    /// A kernel sum: `tid` ran `ms` over `cpus` CPUs in period `n`, its sum begun at `first`.
    fn sum(tid: u32, n: u32, first: u64, ms: u64, cpus: u32) -> SliceEvent {
        SliceEvent {
            period: n,
            cpus,
            flags: 0,
            first_ns: first,
            slices: 10,
            ..slice(tid, 0, ms, "GC Thread#0")
        }
    }

    fn period(ts_ms: u64, throttled: bool) -> PeriodEvent {
        numbered(ts_ms, throttled, 0)
    }

    fn numbered(ts_ms: u64, throttled: bool, n: u32) -> PeriodEvent {
        PeriodEvent {
            header: header(KIND_THROTTLE_PERIOD, 0, ts_ms * 1_000_000),
            cgroup_id: 7,
            throttled: u32::from(throttled),
            period: n,
        }
    }

    fn episode(start_ms: u64) -> ThrottleEvent {
        ThrottleEvent {
            header: header(KIND_THROTTLE, 0, 100_000_000),
            cgroup_id: 7,
            start_ns: start_ms * 1_000_000,
            duration_ns: 82_000_000,
            tasks: 4,
            runnable: 4,
            closed_by: 0,
            _pad: 0,
            kernel_ns: 0,
        }
    }

    #[test]
    fn names_the_threads_that_burned_a_throttled_period() {
        // A recording from before sums: lone slices between period records.
        let mut b = Burners::default();
        b.period(&period(0, false));
        for (tid, cpu) in [(11, 0), (12, 1), (13, 0)] {
            b.slice(&slice(tid, cpu, 4, "GC Thread#n"));
        }
        b.slice(&slice(11, 1, 2, "GC Thread#n"));
        b.slice(&slice(20, 0, 1, "app"));
        b.period(&period(100, true));
        let n = b.episode(&episode(18)).expect("period");
        assert!(
            throttled(b.take(150_000_000)).is_empty(),
            "complete one window later"
        );
        assert!(b.completed(7, n).is_none() && b.is_open(7, n));
        let taken = b.take(150_000_000);
        let p = b.completed(7, n).expect("completed").clone();
        assert_eq!(taken[&7].periods, vec![p.clone()]);
        let uses = &taken[&7].uses;
        assert_eq!(uses.len(), 2, "{uses:?}");
        assert_eq!((uses[0].start_ns, uses[0].throttled), (None, false));
        assert_eq!(
            (
                uses[1].cpu_ms,
                uses[1].throttled,
                uses[1].burned_in_ms,
                uses[1].held_off_ms
            ),
            (15.0, true, Some(18.0), 82.0)
        );
        assert_eq!(p.burned_in_ms, Some(18.0));
        assert_eq!(p.threads, 4);
        assert_eq!(p.cpu_ms, 15.0);
        assert_eq!(p.top[0].tid, 11);
        assert_eq!(p.top[0].cpu_ms, 6.0);
        assert_eq!(p.top[0].cpus, 2);
        assert_eq!(p.top[0].comm, "GC Thread#n");
        // The periods it watched: the one before (from its start: unknown) and the throttled
        // one, with its episode's 82 ms held off.
        let uses = b.take(150_000_000);
        assert!(uses.is_empty(), "taken once");
        // An unthrottled period is not among the throttled ones; every period is described once
        // (what it used, and what its episodes held off).
        b.slice(&slice(30, 0, 9, "x"));
        b.period(&period(200, false));
        assert!(throttled(b.take(250_000_000)).is_empty());
        let taken = b.take(250_000_000);
        assert!(taken[&7].periods.is_empty());
        assert_eq!(
            taken[&7].uses,
            vec![PeriodUse {
                start_ns: Some(100_000_000),
                end_ns: 200_000_000,
                cpu_ms: 9.0,
                throttled: false,
                burned_in_ms: None,
                held_off_ms: 0.0,
            }]
        );
        assert!(b.take(250_000_000).is_empty(), "taken once");
        // Silent groups are forgotten.
        throttled(b.take(10_000_000_000));
        assert!(b.groups.is_empty());
    }

    #[test]
    fn a_period_starts_one_period_before_its_end_after_the_group_idled() {
        let mut b = Burners::default();
        b.period(&numbered(0, false, 1));
        b.period(&numbered(25, false, 2));
        // The group idled (its timer stopped) and came back throttled, 40 ms into a period
        // that ended at 2 025 ms; a record missed (at 2 050) makes a gap of two periods.
        b.period(&numbered(2_025, true, 3));
        let n = b.episode(&episode(2_010)).expect("period");
        b.period(&numbered(2_075, false, 4));
        b.take(2_100_000_000);
        let taken = b.take(2_100_000_000);
        let p = b.completed(7, n).expect("completed");
        assert_eq!(p.start_ns, Some(2_000_000_000));
        assert_eq!(
            p.burned_in_ms,
            Some(10.0),
            "not 1 985 ms from the record before"
        );
        let starts: Vec<Option<u64>> = taken[&7].uses.iter().map(|u| u.start_ns).collect();
        assert_eq!(
            starts,
            [None, Some(0), Some(2_000_000_000), Some(2_050_000_000)]
        );
        // A longer period written to the group: followed once the short gaps are out of the
        // last eight.
        let mut t = 2_075;
        for n in 5..=14 {
            t += 100;
            b.period(&numbered(t, false, n));
        }
        b.take(3_200_000_000);
        let uses = b.take(3_200_000_000);
        let last = uses[&7].uses.last().expect("uses").clone();
        assert_eq!(
            (last.start_ns, last.end_ns),
            (Some((t - 100) * 1_000_000), t * 1_000_000)
        );
    }

    #[test]
    fn every_period_of_a_short_period_is_described() {
        // 25 ms periods for 3 s, a window a second: each period completes a window after its
        // end, so two windows' worth are open at a take (80; 64 were kept once).
        let mut b = Burners::default();
        let (mut described, mut dropped) = (0, 0);
        for n in 1..=120u32 {
            b.period(&numbered(u64::from(n) * 25, true, n));
            if n % 40 == 0 {
                let taken = b.take(u64::from(n) * 25_000_000);
                if let Some(t) = taken.get(&7) {
                    described += t.uses.len();
                    dropped += t.uses_dropped;
                }
            }
        }
        let taken = b.take(3_100_000_000);
        described += taken.get(&7).map_or(0, |t| t.uses.len());
        assert_eq!((described, dropped), (120, 0));
        // Past the bound the oldest open period goes, counted.
        let mut b = Burners::default();
        for n in 1..=(OPEN_PERIODS as u32 + 3) {
            b.period(&numbered(u64::from(n), false, n));
        }
        assert_eq!(b.take(0)[&7].uses_dropped, 3, "dropped open, counted");
        let t = b.take(0);
        assert_eq!(
            (t[&7].uses.len(), t[&7].uses_dropped),
            (USES_KEPT, (OPEN_PERIODS - USES_KEPT) as u64),
            "the rest completes a window later, described up to USES_KEPT"
        );
    }

    #[test]
    fn kernel_sums_count_once_from_the_ring_buffer_and_the_map() {
        let mut b = Burners::default();
        b.period(&numbered(0, false, 4));
        // Period 5: thread 1 sends its sum when it runs in period 6 (the ring buffer); thread 2
        // sleeps, its sum is read from the map after period 5 ended, then comes again from the
        // ring buffer when it wakes (the same sum: counted once); thread 3 ran, its entry was
        // deleted and made again within the period (two sums, both counted).
        b.slice(&sum(3, 5, 1_000, 2, 1));
        assert!(
            !b.wants_sum(7, 2, 5, 2_000, 3_000_000),
            "period 5 has not ended"
        );
        b.period(&numbered(100, true, 5));
        b.slice(&sum(1, 5, 1_500, 30, 2));
        assert!(b.wants_sum(7, 2, 5, 2_000, 3_000_000));
        b.slice(&sum(2, 5, 2_000, 3, 1));
        assert!(!b.wants_sum(7, 2, 5, 2_000, 3_000_000), "already seen");
        b.slice(&sum(3, 5, 9_000, 4, 1));
        // Period 6 runs on; its sums are not complete.
        b.slice(&sum(1, 6, 100_500, 7, 1));
        assert!(throttled(b.take(150_000_000)).is_empty());
        assert!(!b.is_done(7, 5));
        b.slice(&sum(2, 5, 2_000, 3, 1));
        let taken = throttled(b.take(250_000_000));
        let p = &taken[&7][0];
        assert_eq!((p.threads, p.cpu_ms), (3, 39.0));
        assert_eq!((p.top[0].tid, p.top[0].cpus), (1, 2));
        assert_eq!(p.top[1].tid, 3);
        assert_eq!(p.top[1].cpu_ms, 6.0);
        assert_eq!(p.start_ns, Some(0));
        assert!(b.is_done(7, 5) && !b.is_done(7, 6));
        // A sum of a complete period is late, and counted.
        b.slice(&sum(4, 5, 3_000, 1, 1));
        assert_eq!(b.late, 1);
        assert!(b.is_open(7, 6));
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
        throttled(b.take(150_000_000));
        let periods = throttled(b.take(150_000_000)).remove(&7).expect("periods");
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
        assert!(throttled(b.take(2_000_000_000)).is_empty());
        assert_eq!(b.groups.len(), 1, "still within FORGET_NS");
        throttled(b.take(1_000_000_000 + FORGET_NS + 1));
        assert!(b.groups.is_empty());
        assert!(b.is_done(7, 1), "nothing kept: its sums may go");
    }

    #[test]
    fn finish_completes_what_ended_in_the_last_window() {
        let mut b = Burners::default();
        b.period(&numbered(0, false, 1));
        b.slice(&sum(1, 2, 10, 20, 1));
        b.period(&numbered(100, true, 2));
        assert!(b.completed(7, 2).is_none());
        b.finish();
        assert_eq!(b.completed(7, 2).expect("complete").cpu_ms, 20.0);
    }
}
