//! A throttled cgroup's recorded demand, as a timeline of CPU rates: what its threads would have
//! run had nothing held them off.
//!
//! Where the kernel watched the group (the second after each throttle: `period_use`), each
//! period is known: the CPU its threads used and the CPU time its throttle held off. A throttled
//! period's demand is what it used plus what was held off, at the rate it ran before the quota
//! ran out (`burned_in_ms`); when the period after it was not throttled, the held-off part was
//! work it finished there, so only that much is moved back (a burst of fixed work is not counted
//! twice); when the period after it was throttled too, the group wanted the CPU all along and the
//! whole held-off time is demand. Elsewhere only the window's usage is known: it is spread evenly
//! over the window's unwatched time, and counted as estimated.

use crate::family::throttle::{burners::PeriodUse, model::ThrottleWindow};

/// One stretch of constant demand (CPUs) over `[start_ns, end_ns)` (CLOCK_MONOTONIC).
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub start_ns: u64,
    pub end_ns: u64,
    pub rate: f64,
}

/// A window of the cgroup, as recorded.
#[derive(Clone, Debug)]
pub struct WindowIn {
    /// CLOCK_MONOTONIC (ns) at the window's end.
    pub end_ns: u64,
    pub duration_ms: u64,
    pub throttle: ThrottleWindow,
}

/// What the kernel counted over the windows replayed (`cpu.stat`, or cgtrace's own period
/// counts where the files were not read).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Recorded {
    pub secs: f64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    /// Throttled time as the kernel sums it (each throttled CPU's time), µs.
    pub throttled_us: f64,
    pub usage_us: f64,
}

/// The demand of one cgroup over its recorded windows.
#[derive(Clone, Debug, Default)]
pub struct Demand {
    /// Sorted, not overlapping.
    pub segments: Vec<Segment>,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The setting in the last window.
    pub quota_us: Option<u64>,
    pub period_us: u64,
    pub burst_us: u64,
    /// CPU time demanded in all, and the part spread evenly over unwatched time (µs).
    pub total_us: f64,
    pub estimated_us: f64,
    /// The most CPUs the group ran on at once (its threads' parallelism, as seen).
    pub parallelism: f64,
    /// CPUs held off per throttled period, on average (the kernel sums throttled time per CPU).
    pub cpus_per_throttled_period: f64,
    pub recorded: Recorded,
    /// Periods past the per-window bound (`period_use_dropped`): those stretches are estimated.
    pub periods_dropped: u64,
    /// Where the period timer's grid lay (a period end, CLOCK_MONOTONIC ns), when seen: the
    /// recorded period is replayed on it (the timer keeps its grid when the group idles).
    pub grid_ns: Option<u64>,
}

/// How far apart two period timers may be and still be consecutive (ns): timers fire late by
/// microseconds, and a period is at least 1 ms.
const ADJACENT_NS: u64 = 500_000;

/// Builds the demand of a cgroup from its windows (in order).
pub fn build(windows: &[WindowIn]) -> Demand {
    let mut d = Demand::default();
    let Some(last) = windows.last() else {
        return d;
    };
    d.quota_us = last.throttle.quota_us;
    d.period_us = last.throttle.period_us.max(1);
    d.burst_us = last.throttle.burst_us;
    d.start_ns = windows[0]
        .end_ns
        .saturating_sub(windows[0].duration_ms * 1_000_000);
    d.end_ns = last.end_ns;
    let (mut episodes, mut throttled_periods) = (0u64, 0u64);
    for w in windows {
        let t = &w.throttle;
        d.recorded.secs += w.duration_ms as f64 / 1e3;
        match &t.kernel {
            Some(k) => {
                d.recorded.nr_periods += k.nr_periods;
                d.recorded.nr_throttled += k.nr_throttled;
                d.recorded.throttled_us += k.throttled_us;
            }
            None => {
                d.recorded.nr_periods += t.nr_periods;
                d.recorded.nr_throttled += t.nr_throttled;
                d.recorded.throttled_us += t.throttled_us;
            }
        }
        d.recorded.usage_us += t.usage_us.unwrap_or(0.0);
        episodes += t.episodes;
        throttled_periods += t.nr_throttled;
        d.periods_dropped += t.period_use_dropped;
    }
    // Episodes per throttled period, at most the CPUs they were seen on (a CPU's group may be
    // throttled twice in a period, when runtime handed back by another CPU runs out again).
    let cpus_seen = windows
        .iter()
        .map(|w| w.throttle.episodes_per_cpu.len())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    d.cpus_per_throttled_period = (episodes as f64 / throttled_periods.max(1) as f64)
        .min(cpus_seen)
        .max(1.0);
    // Every watched throttled period once, in order.
    let mut uses: Vec<PeriodUse> = windows
        .iter()
        .flat_map(|w| {
            w.throttle
                .period_use
                .iter()
                .filter(|u| u.throttled)
                .cloned()
        })
        .collect();
    uses.sort_by_key(|u| u.end_ns);
    uses.dedup_by_key(|u| u.end_ns);
    let period_ns = d.period_us * 1_000;
    d.grid_ns = uses.last().map(|u| u.end_ns);
    let period_ms = period_ns as f64 / 1e6;
    let quota_ms = d.quota_us.map_or(0.0, |q| q as f64 / 1e3);
    // A throttled period ran its whole quota (slices before the throttle may go unseen: the
    // quota is the floor), at the rate it ran before the quota ran out.
    let used = |u: &PeriodUse| u.cpu_ms.max(quota_ms);
    let burned_ms = |u: &PeriodUse| {
        // The timer of an idle group stops: the period began one period before its end, not at
        // the previous timer's run (recordings made before `Burners` knew that start there).
        let start = u.end_ns.saturating_sub(period_ns);
        match (u.start_ns, u.burned_in_ms) {
            (Some(s), Some(b)) => {
                let at = s as f64 + b * 1e6;
                Some(((at - start as f64) / 1e6).clamp(0.0, period_ms))
            }
            _ => None,
        }
        .filter(|b| *b > 0.0)
    };
    // Each window's usage left after its throttled periods' quota: what ran outside them (the
    // work held off, finished after the throttle, comes out of it first).
    let mut left: Vec<f64> = windows
        .iter()
        .map(|w| {
            let (ws, we) = (w.end_ns.saturating_sub(w.duration_ms * 1_000_000), w.end_ns);
            let quota_used: f64 = uses
                .iter()
                .filter(|u| u.end_ns > ws && u.end_ns <= we)
                .map(used)
                .sum();
            (w.throttle.usage_us.unwrap_or(0.0) / 1e3 - quota_used).max(0.0)
        })
        .collect();
    let window_of = |end: u64| {
        windows.iter().position(|w| {
            end > w.end_ns.saturating_sub(w.duration_ms * 1_000_000) && end <= w.end_ns
        })
    };
    let mut segs: Vec<Segment> = Vec::new();
    for (i, u) in uses.iter().enumerate() {
        let start = u.end_ns.saturating_sub(period_ns);
        let cpu = used(u);
        // At most as many CPUs as its throttle was seen on (a quota seen gone sooner than that
        // allows is a late period-timer stamp).
        let rate = burned_ms(u)
            .map_or(d.cpus_per_throttled_period, |b| cpu / b)
            .min(cpus_seen);
        let next_throttled = uses
            .get(i + 1)
            .is_some_and(|n| n.end_ns.saturating_sub(u.end_ns) <= period_ns + ADJACENT_NS);
        // The recording ended before the next period did: held off as it was.
        let at_end = i + 1 == uses.len() && u.end_ns + period_ns + ADJACENT_NS >= d.end_ns;
        let held = if next_throttled || at_end {
            // Throttled again: it wanted the CPU all along.
            u.held_off_ms
        } else {
            // The work held off ran after the throttle, out of what the window used besides.
            let w = window_of(u.end_ns);
            let spare = w.map_or(0.0, |k| left[k]);
            let carry = u.held_off_ms.min(spare);
            if let Some(k) = w {
                left[k] -= carry;
            }
            carry
        };
        let total = cpu + held;
        let busy_ms = if rate > 0.0 {
            (total / rate).min(period_ms)
        } else {
            period_ms
        };
        let end = start + (busy_ms * 1e6) as u64;
        segs.push(Segment {
            start_ns: start,
            end_ns: end.max(start + 1),
            rate: total / busy_ms.max(1e-6),
        });
    }
    // The rest of each window: its leftover usage spread evenly over the time outside the
    // throttled periods.
    for (k, w) in windows.iter().enumerate() {
        let (ws, we) = (w.end_ns.saturating_sub(w.duration_ms * 1_000_000), w.end_ns);
        if we <= ws || left[k] <= 0.0 {
            continue;
        }
        let mut gaps = Vec::new();
        let mut at = ws;
        for u in uses
            .iter()
            .filter(|u| u.end_ns > ws && u.end_ns.saturating_sub(period_ns) < we)
        {
            let (a, b) = (u.end_ns.saturating_sub(period_ns).max(ws), u.end_ns.min(we));
            if a > at {
                gaps.push((at, a));
            }
            at = at.max(b);
        }
        if at < we {
            gaps.push((at, we));
        }
        let gap_ns: u64 = gaps.iter().map(|(a, b)| b - a).sum();
        if gap_ns == 0 {
            continue;
        }
        d.estimated_us += left[k] * 1e3;
        let rate = left[k] * 1e6 / gap_ns as f64;
        segs.extend(gaps.into_iter().map(|(a, b)| Segment {
            start_ns: a,
            end_ns: b,
            rate,
        }));
    }
    segs.sort_by_key(|s| s.start_ns);
    // Overlaps (a watched period reaching into an estimated stretch of the next window) are cut.
    let mut out: Vec<Segment> = Vec::with_capacity(segs.len());
    for mut s in segs {
        if let Some(prev) = out.last()
            && s.start_ns < prev.end_ns
        {
            s.start_ns = prev.end_ns;
        }
        if s.end_ns > s.start_ns {
            out.push(s);
        }
    }
    d.total_us = out
        .iter()
        .map(|s| s.rate * (s.end_ns - s.start_ns) as f64 / 1e3)
        .sum();
    d.parallelism = out.iter().map(|s| s.rate).fold(0.0, f64::max).max(1e-9);
    if let (Some(first), Some(last)) = (out.first(), out.last()) {
        d.start_ns = d.start_ns.min(first.start_ns);
        d.end_ns = d.end_ns.max(last.end_ns);
    }
    d.segments = out;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn window(end_ms: u64, usage_ms: f64, uses: Vec<PeriodUse>) -> WindowIn {
        quota_window(100, end_ms, usage_ms, uses)
    }

    fn quota_window(quota_ms: u64, end_ms: u64, usage_ms: f64, uses: Vec<PeriodUse>) -> WindowIn {
        WindowIn {
            end_ns: end_ms * MS,
            duration_ms: 1000,
            throttle: ThrottleWindow {
                quota_us: Some(quota_ms * 1000),
                // Throttled on two CPUs.
                episodes_per_cpu: [(0, 1), (1, 1)].into_iter().collect(),
                period_us: 100_000,
                usage_us: Some(usage_ms * 1e3),
                period_use: uses,
                ..ThrottleWindow::default()
            },
        }
    }

    fn period(end_ms: u64, cpu_ms: f64, throttled: bool, held_ms: f64) -> PeriodUse {
        PeriodUse {
            start_ns: Some((end_ms - 100) * MS),
            end_ns: end_ms * MS,
            cpu_ms,
            throttled,
            burned_in_ms: throttled.then_some(50.0),
            held_off_ms: held_ms,
        }
    }

    #[test]
    fn a_burst_of_fixed_work_is_its_work_at_its_rate() {
        // Two threads, 80 ms each, in a 1-CPU quota: 100 ms in 50 ms, throttled 50 ms on both
        // CPUs (100 ms held off), the last 60 ms in the next period.
        let d = build(&[window(
            1000,
            160.0,
            vec![
                period(200, 100.0, true, 100.0),
                period(300, 60.0, false, 0.0),
            ],
        )]);
        let watched: f64 = d
            .segments
            .iter()
            .filter(|s| s.start_ns >= 100 * MS && s.end_ns <= 300 * MS)
            .map(|s| s.rate * (s.end_ns - s.start_ns) as f64 / 1e6)
            .sum();
        assert!((watched - 160.0).abs() < 1e-6, "{watched} {:?}", d.segments);
        assert_eq!(d.segments.len(), 1, "{:?}", d.segments);
        assert!((d.segments[0].rate - 2.0).abs() < 1e-9, "{:?}", d.segments);
        assert_eq!(d.segments[0].end_ns, 180 * MS);
        assert_eq!(d.estimated_us, 0.0);
        assert_eq!(d.parallelism, 2.0);
    }

    #[test]
    fn a_group_throttled_period_after_period_wanted_the_cpu_all_along() {
        // One spinner under 50 ms / 100 ms: 50 ms used, 50 ms held off, every period.
        let uses = (1..=10)
            .map(|k| period(k * 100, 50.0, true, 50.0))
            .collect();
        let d = build(&[quota_window(50, 1000, 500.0, uses)]);
        assert!((d.total_us - 1_000_000.0).abs() < 1.0, "{}", d.total_us);
        assert!(d.segments.iter().all(|s| (s.rate - 1.0).abs() < 1e-9));
    }

    #[test]
    fn unwatched_time_gets_the_windows_leftover_usage_evenly() {
        let d = build(&[window(1000, 300.0, vec![period(200, 100.0, true, 0.0)])]);
        // 200 ms of usage over the 900 ms not watched.
        assert!((d.estimated_us - 200_000.0).abs() < 1.0);
        let est = d.segments.iter().find(|s| s.start_ns == 0).expect("gap");
        assert!((est.rate - 200.0 / 900.0).abs() < 1e-9, "{est:?}");
    }
}
