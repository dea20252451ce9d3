//! Replays a cgroup's demand against a CFS bandwidth setting, as the kernel enforces it: each
//! period refills the runtime with the quota, unused runtime carries over up to the burst
//! (`runtime = min(runtime + quota, quota + burst)`), and once the runtime is gone the group is
//! throttled until the next period. Demand that cannot run waits (a backlog, run at up to the
//! group's parallelism once the group may run again).

use serde::Serialize;

use super::demand::Demand;
use crate::family::throttle::advice::{PERIOD_MAX_US, PERIOD_MIN_US};

/// A CFS bandwidth setting to try.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting {
    /// `None`: no quota.
    pub quota_us: Option<u64>,
    pub period_us: u64,
    pub burst_us: u64,
    /// CPUs the group may run on at once (a cpuset); `None`: as many as it used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
}

impl Setting {
    /// The quota in CPUs.
    pub fn quota_cpus(&self) -> Option<f64> {
        self.quota_us
            .map(|q| q as f64 / self.period_us.max(1) as f64)
    }
}

/// What a setting is predicted to do to the recorded demand.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Prediction {
    pub throttled_per_s: f64,
    /// Throttled periods over the recording, and throttled time as the kernel sums it (ms): to
    /// set beside `cpu.stat` deltas of a run of the same length.
    pub throttled_periods: f64,
    pub throttled_ms: f64,
    /// Throttled periods of the periods the group wanted the CPU in (as the kernel counts
    /// `nr_periods`: its timer stops while the group idles).
    pub throttled_share: f64,
    /// Throttled time as the kernel sums it (each throttled CPU's time), ms per second.
    pub throttled_ms_per_s: f64,
    /// How long a throttled period stalled the group (ms), over the throttled periods.
    pub stall_p50_ms: f64,
    pub stall_p99_ms: f64,
    /// CPU time the group's runnable threads waited on the throttle (run-queue wait the throttle
    /// causes), ms per second.
    pub held_off_ms_per_s: f64,
}

/// Steps of one replay at most (about 10 ms of work): an hour of 100 ms periods is replayed in
/// 1.8 ms steps; of a longer recording, or one with more periods than steps, the beginning; a
/// forged recording's span cannot make it run long.
const MAX_STEPS: u64 = 1_000_000;

/// Phases of the period timer tried (its phase against the demand is not recorded): the
/// prediction is their mean.
const PHASES: u64 = 4;

/// Predicts what `s` does to `d`.
pub fn replay(d: &Demand, s: &Setting) -> Prediction {
    let span_ns = d.end_ns.saturating_sub(d.start_ns);
    if span_ns == 0 {
        return Prediction::default();
    }
    let mut sum = Prediction::default();
    let mut stalls: Vec<f64> = Vec::new();
    let period_ns = s.period_us.clamp(PERIOD_MIN_US, PERIOD_MAX_US) * 1_000;
    // The recorded period on its recorded grid; another period on several phases.
    let phases: Vec<u64> = match d.grid_ns {
        Some(g) if s.period_us == d.period_us => {
            vec![(g % period_ns + period_ns - d.start_ns % period_ns) % period_ns]
        }
        _ => (0..PHASES).map(|k| period_ns * k / PHASES).collect(),
    };
    for &phase in &phases {
        let (p, mut st) = run(d, s, phase);
        sum.throttled_per_s += p.throttled_per_s;
        sum.throttled_periods += p.throttled_periods;
        sum.throttled_ms += p.throttled_ms;
        sum.throttled_share += p.throttled_share;
        sum.throttled_ms_per_s += p.throttled_ms_per_s;
        sum.held_off_ms_per_s += p.held_off_ms_per_s;
        stalls.append(&mut st);
    }
    let n = phases.len() as f64;
    stalls.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        if stalls.is_empty() {
            0.0
        } else {
            stalls[((stalls.len() - 1) as f64 * q).round() as usize]
        }
    };
    Prediction {
        throttled_per_s: sum.throttled_per_s / n,
        throttled_periods: sum.throttled_periods / n,
        throttled_ms: sum.throttled_ms / n,
        throttled_share: sum.throttled_share / n,
        throttled_ms_per_s: sum.throttled_ms_per_s / n,
        stall_p50_ms: pct(0.5),
        stall_p99_ms: pct(0.99),
        held_off_ms_per_s: sum.held_off_ms_per_s / n,
    }
}

/// One run with the period timer `phase_ns` after the demand's start. Returns the prediction and
/// each throttled period's stall (ms).
fn run(d: &Demand, s: &Setting, phase_ns: u64) -> (Prediction, Vec<f64>) {
    let period = (s.period_us.clamp(PERIOD_MIN_US, PERIOD_MAX_US) * 1_000) as f64;
    let quota = s.quota_us.map(|q| (q * 1_000) as f64);
    let burst = (s.burst_us * 1_000) as f64;
    let cap = s.cpus.unwrap_or(d.parallelism).max(1e-9);
    // Steps of 1/200 of a period (at least 10 µs, at most 1 ms).
    let (t0, t1) = (d.start_ns as f64, d.end_ns as f64);
    let dt = (period / 200.0)
        .clamp(10_000.0, 1_000_000.0)
        .max((t1 - t0) / MAX_STEPS as f64);
    let mut next_period = t0 + phase_ns as f64;
    if next_period <= t0 {
        next_period += period;
    }
    // The burst full at the start: the recording begins with the group idle, or as good as.
    let mut runtime = quota.map_or(f64::INFINITY, |q| q + burst);
    let mut backlog = 0.0f64;
    let mut throttled_at: Option<(f64, f64)> = None;
    let (mut periods, mut throttled, mut throttled_ns, mut held_ns) = (0u64, 0u64, 0.0, 0.0);
    let mut stalls = Vec::new();
    let mut seg = 0usize;
    let mut t = t0;
    let mut steps = 0u64;
    // Whether the group wanted the CPU in the current period (the kernel counts only those).
    let mut active = false;
    while t < t1 && steps < MAX_STEPS {
        steps += 1;
        let step = dt.min(t1 - t).min((next_period - t).max(1.0));
        // Demand arriving in the step (CPU ns).
        while seg < d.segments.len() && (d.segments[seg].end_ns as f64) <= t {
            seg += 1;
        }
        let rate = d
            .segments
            .get(seg)
            .filter(|g| (g.start_ns as f64) <= t)
            .map_or(0.0, |g| g.rate);
        backlog += rate * step;
        active |= backlog > 0.0;
        match throttled_at {
            Some((_, cpus)) => {
                // Runnable threads wait: as many as were running when the quota ran out, or as
                // many as the demand now has.
                if backlog > 0.0 {
                    held_ns += rate.max(cpus).min(cap) * step;
                }
            }
            None => {
                let serve = backlog.min(cap * step).min(runtime.max(0.0));
                runtime -= serve;
                backlog -= serve;
                if quota.is_some() && runtime <= 1e-6 && backlog > 1e-3 {
                    // As many CPUs held off as the recorded throttled periods had (their
                    // episodes per period), at most the CPUs it may use.
                    let cpus = if d.cpus_per_throttled_period > 0.0 {
                        d.cpus_per_throttled_period
                    } else {
                        (serve / step).max(rate)
                    };
                    throttled_at = Some((t + step, cpus.clamp(1.0, cap.max(1.0))));
                }
            }
        }
        t += step;
        if t >= next_period - 0.5 {
            periods += u64::from(active);
            active = backlog > 0.0;
            if let Some((at, cpus)) = throttled_at.take() {
                throttled += 1;
                let stall = (next_period - at).max(0.0);
                stalls.push(stall / 1e6);
                throttled_ns += stall * cpus;
            }
            if let Some(q) = quota {
                runtime = (runtime.max(0.0) + q).min(q + burst);
            }
            next_period += period;
        }
    }
    let secs = ((t - t0) / 1e9).max(1e-9);
    (
        Prediction {
            throttled_per_s: throttled as f64 / secs,
            throttled_periods: throttled as f64,
            throttled_ms: throttled_ns / 1e6,
            throttled_share: throttled as f64 / periods.max(1) as f64,
            throttled_ms_per_s: throttled_ns / 1e6 / secs,
            held_off_ms_per_s: held_ns / 1e6 / secs,
            ..Prediction::default()
        },
        stalls,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::demand::Segment;

    const MS: u64 = 1_000_000;

    fn spinner(secs: u64) -> Demand {
        Demand {
            segments: vec![Segment {
                start_ns: 0,
                end_ns: secs * 1000 * MS,
                rate: 1.0,
            }],
            start_ns: 0,
            end_ns: secs * 1000 * MS,
            parallelism: 1.0,
            ..Demand::default()
        }
    }

    fn setting(quota_ms: u64, period_ms: u64, burst_ms: u64) -> Setting {
        Setting {
            quota_us: Some(quota_ms * 1000),
            period_us: period_ms * 1000,
            burst_us: burst_ms * 1000,
            cpus: None,
        }
    }

    #[test]
    fn a_spinner_under_a_fifth_of_a_cpu_stalls_four_fifths_of_every_period() {
        let p = replay(&spinner(10), &setting(20, 100, 0));
        assert!((p.throttled_per_s - 10.0).abs() < 0.3, "{p:?}");
        assert!((p.stall_p99_ms - 80.0).abs() < 1.0, "{p:?}");
        assert!((p.throttled_ms_per_s - 800.0).abs() < 30.0, "{p:?}");
        // A quarter of the period, the same share: stalls a quarter as long.
        let q = replay(&spinner(10), &setting(5, 25, 0));
        assert!((q.stall_p99_ms - 20.0).abs() < 0.5, "{q:?}");
        assert!((q.throttled_per_s - 40.0).abs() < 1.0, "{q:?}");
        // A whole CPU: never throttled.
        let r = replay(&spinner(10), &setting(100, 100, 0));
        assert_eq!(r.throttled_per_s, 0.0, "{r:?}");
    }

    #[test]
    fn a_burst_the_size_of_the_overrun_is_never_throttled() {
        // 160 ms of work on 2 CPUs once a second under a 1-CPU quota.
        let mut segments = Vec::new();
        for k in 0..10u64 {
            segments.push(Segment {
                start_ns: k * 1000 * MS + 300 * MS,
                end_ns: k * 1000 * MS + 380 * MS,
                rate: 2.0,
            });
        }
        let d = Demand {
            segments,
            start_ns: 0,
            end_ns: 10_000 * MS,
            parallelism: 2.0,
            ..Demand::default()
        };
        let none = replay(&d, &setting(100, 100, 0));
        assert!(none.throttled_per_s > 0.5, "{none:?}");
        let burst = replay(&d, &setting(100, 100, 60));
        assert_eq!(burst.throttled_per_s, 0.0, "{burst:?}");
        let small = replay(&d, &setting(100, 100, 20));
        assert!(small.throttled_per_s > 0.0, "{small:?}");
    }
}
