//! `throttle`'s diagnoses: what a window's throttling says, the numbers it rests on, the exact
//! knob and value to change (within each knob's kernel rules) and what that should do.

use crate::{
    family::throttle::model::ThrottleWindow,
    model::flag::{Change, ChangeKind, Expected, Flag},
    units::{self, PeriodIn},
};

/// The kernel's bounds for `cpu.cfs_period_us` / the period of `cpu.max` (1 ms – 1 s), and the
/// smallest quota it accepts (1 ms).
pub const PERIOD_MIN_US: u64 = 1_000;
pub const PERIOD_MAX_US: u64 = 1_000_000;
pub const QUOTA_MIN_US: u64 = 1_000;

/// Flag thresholds, and which cgroup files the advice names.
#[derive(Clone, Copy, Debug)]
pub struct FlagRules {
    /// Throttled while average use is below this fraction of the quota.
    pub below_quota_fraction: f64,
    /// cgroup v1 (`cpu.cfs_*` files) rather than v2 (`cpu.max`, `cpu.max.burst`).
    pub v1: bool,
    /// The kernel has a burst allowance (`cpu.cfs_burst_us` / `cpu.max.burst`: 5.14+).
    pub burst: bool,
}

impl Default for FlagRules {
    fn default() -> Self {
        Self {
            below_quota_fraction: 0.5,
            v1: false,
            burst: true,
        }
    }
}

/// Whether a kernel of this release (`/proc/sys/kernel/osrelease`) has the CFS burst allowance
/// (5.14+).
pub fn has_burst(release: &str) -> bool {
    crate::family::info::kernel_at_least(release, (5, 14))
}

/// The diagnoses a window's numbers support (their `family` left for the family to fill in).
pub fn flags(w: &ThrottleWindow, rules: &FlagRules) -> Vec<Flag> {
    let mut out = Vec::new();
    let (Some(quota_us), Some(quota_cores)) = (w.quota_us, w.quota_cores) else {
        return out;
    };
    if w.nr_throttled > 0
        && let Some(used) = w.usage_cores
        && used < rules.below_quota_fraction * quota_cores
    {
        out.push(burst(w, rules, quota_us, quota_cores, used));
    }
    if let Some(f) = thread_pool(w, quota_us, quota_cores) {
        out.push(f);
    }
    let period_ms = w.period_us as f64 / 1e3;
    if w.episodes > 0 && w.episode.p99_us >= 500.0 * period_ms {
        out.push(period(w, rules, quota_us));
    }
    out
}

/// Microseconds (the knobs' unit) rounded up to a whole millisecond.
pub fn ceil_ms_us(us: f64) -> u64 {
    ((us / 1000.0).ceil() * 1000.0).max(0.0) as u64
}

/// The quota as Kubernetes writes it: `resources.limits.cpu` in millicores.
fn millicores(quota_us: u64, period_us: u64) -> String {
    format!(
        "{}m",
        (quota_us as f64 * 1000.0 / period_us.max(1) as f64).ceil() as u64
    )
}

/// Headroom of a burst over the largest held-off CPU it is sized for: a burst that only just
/// holds the excess still throttles at the period's end whenever the load runs a little longer.
const BURST_HEADROOM: f64 = 1.25;

/// Throttled while using well under the quota: the demand comes in bursts a burst allowance
/// absorbs. A throttled period held the group off its episodes' length on each throttled CPU
/// (at most the work it could not do: an episode lasts to the period's end even when the demand
/// stopped earlier); the burst holds the large ones (p99 of the episodes, times the CPUs
/// throttled per period) with headroom, in whole ms, never above the quota (v1 and v2 refuse
/// that). Only when even the mean throttled period was held off more than the quota does the
/// quota go up, by the rest.
fn burst(
    w: &ThrottleWindow,
    rules: &FlagRules,
    quota_us: u64,
    quota_cores: f64,
    used: f64,
) -> Flag {
    let per_period = w.cpus_per_throttled_period();
    let held_off_us = w.throttled_us / w.nr_throttled.max(1) as f64;
    // This window's, or the most of recent windows': bursts land at different points of the
    // period, and the advice must hold for the ones that land worst.
    let held_off_p99_us = w
        .held_off_p99_us()
        .unwrap_or(held_off_us)
        .max(w.held_off_recent_us.unwrap_or(0.0));
    let needed_us = ceil_ms_us(BURST_HEADROOM * held_off_p99_us);
    if !rules.burst {
        return no_burst(
            w,
            rules,
            quota_us,
            quota_cores,
            used,
            needed_us,
            held_off_p99_us,
        );
    }
    let burst_us = needed_us.clamp(QUOTA_MIN_US.min(quota_us), quota_us);
    let file = if rules.v1 {
        "cpu.cfs_burst_us"
    } else {
        "cpu.max.burst"
    };
    let mut change = vec![Change::new(
        ChangeKind::CgroupFile,
        file,
        burst_us.to_string(),
    )];
    let mut suggestion = format!(
        "allow a burst: {file} = {burst_us} µs (≤ quota {quota_us}); it was held off up to {held_off_p99_us:.0} µs of CPU in a throttled period of its last windows"
    );
    let short_us = ceil_ms_us(held_off_us).saturating_sub(burst_us);
    if short_us > 0 {
        let quota = quota_us + short_us;
        change.extend(quota_changes(rules.v1, quota, w.period_us));
        suggestion.push_str(&format!(
            "; the bursts are larger than the quota: raise it to {quota} µs too"
        ));
    }
    // A throttled period goes away when what it was held off fits in the burst (and the quota
    // raised with it): its episodes, each counted at its bucket's middle, times the CPUs
    // throttled per period.
    let room_us = (burst_us + short_us) as f64 / per_period;
    let covered = share_at_most(&w.episode.buckets, room_us);
    Flag {
        family: String::new(),
        code: "throttled_below_quota".into(),
        message: below_quota_message(w, used, quota_cores),
        evidence: format!(
            "{} of {} periods throttled, held off {} of CPU per throttled period (p99 {}, {per_period:.1} CPUs throttled), using {used:.2} of {quota_cores:.2} CPUs",
            w.nr_throttled,
            w.nr_periods,
            crate::hist::micros(held_off_us),
            crate::hist::micros(held_off_p99_us),
        ),
        suggestion,
        change,
        expected: Some(Expected {
            metric: "throttled_periods".into(),
            change_percent: -100.0 * covered,
            words: format!(
                "throttled periods −{:.0} % (those whose held-off CPU fits in the burst, which refills from unused quota)",
                100.0 * covered
            ),
        }),
    }
}

/// What `throttled_below_quota` says, with or without a burst allowance.
fn below_quota_message(w: &ThrottleWindow, used: f64, quota_cores: f64) -> String {
    format!(
        "throttled in {} of {} periods while using {used:.2} of {quota_cores:.2} CPUs on average: bursts, or quota stranded on other CPUs",
        w.nr_throttled, w.nr_periods
    )
}

/// [`burst`] on a kernel without a burst allowance (before 5.14): the quota goes up by what the
/// large throttled periods were held off, and says that a 5.14+ kernel could absorb it instead.
fn no_burst(
    w: &ThrottleWindow,
    rules: &FlagRules,
    quota_us: u64,
    quota_cores: f64,
    used: f64,
    needed_us: u64,
    held_off_p99_us: f64,
) -> Flag {
    let per_period = w.cpus_per_throttled_period();
    let quota = quota_us + needed_us;
    let covered = share_at_most(&w.episode.buckets, needed_us as f64 / per_period);
    Flag {
        family: String::new(),
        code: "throttled_below_quota".into(),
        message: below_quota_message(w, used, quota_cores),
        evidence: format!(
            "{} of {} periods throttled, held off up to {} of CPU in a throttled period ({per_period:.1} CPUs throttled), using {used:.2} of {quota_cores:.2} CPUs; this kernel has no burst allowance (5.14+)",
            w.nr_throttled,
            w.nr_periods,
            crate::hist::micros(held_off_p99_us),
        ),
        suggestion: format!(
            "raise the quota to {quota} µs (this kernel has no burst allowance; on 5.14+ a burst of {needed_us} µs would absorb the bursts without raising the average)"
        ),
        change: quota_changes(rules.v1, quota, w.period_us),
        expected: Some(Expected {
            metric: "throttled_periods".into(),
            change_percent: -100.0 * covered,
            words: format!(
                "throttled periods −{:.0} % (those whose held-off CPU fits in the raised quota)",
                100.0 * covered
            ),
        }),
    }
}

/// The quota set to `quota_us` as the cgroup file (v1 `cpu.cfs_quota_us`, v2 `cpu.max`) and as
/// the Kubernetes limit.
pub fn quota_changes(v1: bool, quota_us: u64, period_us: u64) -> Vec<Change> {
    let file = if v1 {
        Change::new(
            ChangeKind::CgroupFile,
            "cpu.cfs_quota_us",
            quota_us.to_string(),
        )
    } else {
        Change::new(
            ChangeKind::CgroupFile,
            "cpu.max",
            format!("{quota_us} {period_us}"),
        )
    };
    vec![
        file,
        Change::new(
            ChangeKind::Kubernetes,
            "resources.limits.cpu",
            millicores(quota_us, period_us),
        ),
    ]
}

/// More threads than the quota has CPUs burned it early in the period: size the pool to the
/// quota. With at most `n` threads running, the quota lasts `quota / min(parallelism, n)` into
/// the period instead of `quota / parallelism`.
fn thread_pool(w: &ThrottleWindow, quota_us: u64, quota_cores: f64) -> Option<Flag> {
    let period_ms = w.period_us as f64 / 1e3;
    let pool = 2 * (quota_cores.ceil() as usize).max(1);
    let p = w
        .periods
        .iter()
        .filter(|p| p.threads > pool && p.burned_in_ms.is_some_and(|b| b < period_ms / 2.0))
        .max_by_key(|p| p.threads)?;
    let quota_ms = quota_us as f64 / 1e3;
    let burned_in = p.burned_in_ms.unwrap_or(0.0).max(0.001);
    let flag = PeriodIn::Flag { quota_ms };
    let names: Vec<String> = p
        .top
        .iter()
        .map(|t| units::period_thread(&t.comm, t.tid, t.cpu_ms, t.cpus, flag))
        .collect();
    let burn = units::period(p.burned_in_ms, p.threads, p.cpu_ms, flag);
    let n = (quota_cores.ceil() as usize).max(1);
    let parallel = (quota_ms / burned_in).max(1.0);
    let lasts = (quota_ms / parallel.min(n as f64)).min(period_ms);
    let n = n.to_string();
    Some(Flag {
        family: String::new(),
        code: "many_threads_burn".into(),
        message: format!("{burn} ({})", names.join(", ")),
        evidence: format!(
            "{} threads ran in a throttled period and used its {} quota in {} of {} ({parallel:.1} CPUs at once)",
            p.threads,
            units::ms(quota_ms),
            units::ms(burned_in),
            units::ms(period_ms),
        ),
        suggestion: format!(
            "size thread pools to the quota ({n} CPUs), not the host: e.g. JVM -XX:ActiveProcessorCount={n}, Go GOMAXPROCS={n}"
        ),
        change: vec![
            Change::new(ChangeKind::Runtime, "-XX:ActiveProcessorCount", n.clone()),
            Change::new(ChangeKind::Runtime, "GOMAXPROCS", n.clone()),
            Change::new(ChangeKind::Runtime, "thread pool size", n),
        ],
        expected: Some(Expected {
            metric: "quota_burned_in_ms".into(),
            change_percent: (lasts / burned_in - 1.0) * 100.0,
            words: format!(
                "the quota lasts {} into the period instead of {}{}",
                units::ms(lasts),
                units::ms(burned_in),
                if lasts >= period_ms {
                    " (the whole period: no throttling)"
                } else {
                    ""
                }
            ),
        }),
    })
}

/// Throttled tasks stall for most of the period: a stall ends with its period, so a shorter
/// period (same share of CPU) shortens each stall in proportion. A quarter of the period, within
/// the kernel's bounds (period ≥ 1 ms, quota ≥ 1 ms); when it cannot be shortened, more quota.
fn period(w: &ThrottleWindow, rules: &FlagRules, quota_us: u64) -> Flag {
    let period_us = w.period_us.max(1);
    let period_ms = period_us as f64 / 1e3;
    // Whole ms, at least what keeps the quota at 1 ms or more.
    let floor = (PERIOD_MIN_US as f64 * period_us as f64 / quota_us.max(1) as f64).ceil() as u64;
    let shorter = ceil_ms_us(period_us as f64 / 4.0)
        .max(PERIOD_MIN_US)
        .max(ceil_ms_us(floor as f64))
        .min(PERIOD_MAX_US);
    let evidence = format!(
        "{} throttle stalls, p99 {} (max {}) of each {} period, quota {}",
        w.episodes,
        crate::hist::micros(w.episode.p99_us),
        crate::hist::micros(w.episode.max_us),
        units::ms(period_ms),
        units::ms(quota_us as f64 / 1e3),
    );
    let message = format!(
        "throttled tasks stall up to {:.0} ms (p99) of each {period_ms:.0} ms period",
        w.episode.p99_us / 1e3
    );
    if shorter >= period_us {
        // Already as short as the quota allows: only more quota shortens the stalls.
        let quota = quota_us + ceil_ms_us(w.episode.p99_us).min(period_us);
        return Flag {
            family: String::new(),
            code: "long_throttle_waits".into(),
            message,
            evidence,
            suggestion: format!(
                "the period ({period_ms:.0} ms) cannot be shortened with this quota: raise the quota to {quota} µs"
            ),
            change: quota_changes(rules.v1, quota, period_us),
            expected: None,
        };
    }
    let quota = (quota_us as f64 * shorter as f64 / period_us as f64).round() as u64;
    let mut change = if rules.v1 {
        vec![
            Change::new(
                ChangeKind::CgroupFile,
                "cpu.cfs_period_us",
                shorter.to_string(),
            ),
            Change::new(
                ChangeKind::CgroupFile,
                "cpu.cfs_quota_us",
                quota.to_string(),
            ),
        ]
    } else {
        vec![Change::new(
            ChangeKind::CgroupFile,
            "cpu.max",
            format!("{quota} {shorter}"),
        )]
    };
    change.push(Change::new(
        ChangeKind::Kubernetes,
        "kubelet --cpu-cfs-quota-period",
        format!("{}ms", shorter / 1000),
    ));
    let factor = shorter as f64 / period_us as f64;
    Flag {
        family: String::new(),
        code: "long_throttle_waits".into(),
        message,
        evidence,
        suggestion: format!(
            "shorten the period to {} ms with the same share of CPU (quota {quota} µs), so each stall is shorter; or raise the quota toward the peak use",
            shorter / 1000
        ),
        change,
        expected: Some(Expected {
            metric: "throttle_stall_p99_us".into(),
            change_percent: (factor - 1.0) * 100.0,
            words: format!(
                "throttle stall p99 −{:.0} % (a stall ends with its period: {} instead of {})",
                (1.0 - factor) * 100.0,
                units::ms(shorter as f64 / 1e3),
                units::ms(period_ms)
            ),
        }),
    }
}

/// The share of a histogram's values (`(lower_ns, count)` buckets, four per power of two) of at
/// most `us`, counting a bucket by its middle.
fn share_at_most(buckets: &[(u64, u64)], us: f64) -> f64 {
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return 0.0;
    }
    let middle = 2f64.powf(1.0 / 8.0);
    let under: u64 = buckets
        .iter()
        .filter(|(lo, _)| *lo as f64 * middle / 1e3 <= us)
        .map(|b| b.1)
        .sum();
    under as f64 / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::throttle::burners::ThrottledPeriod;

    fn throttled_window(usage_cores: f64, threads: usize, burned_in_ms: f64) -> ThrottleWindow {
        let mut w = ThrottleWindow {
            quota_us: Some(100_000),
            period_us: 100_000,
            quota_cores: Some(1.0),
            usage_cores: Some(usage_cores),
            nr_periods: 10,
            nr_throttled: 2,
            throttled_us: 30_000.0,
            episodes: 2,
            ..ThrottleWindow::default()
        };
        w.periods.push(ThrottledPeriod {
            start_ns: Some(0),
            end_ns: 100_000_000,
            burned_in_ms: Some(burned_in_ms),
            threads,
            cpu_ms: 100.0,
            top: Vec::new(),
        });
        w
    }

    #[test]
    fn bursty_use_under_quota_is_flagged_with_a_burst_within_quota() {
        let f = flags(&throttled_window(0.3, 2, 60.0), &FlagRules::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].code, "throttled_below_quota");
        // 15 ms held off per throttled period, with a quarter of headroom.
        assert!(f[0].suggestion.contains("= 19000 "), "{}", f[0].suggestion);
        // Steady use near the quota is not.
        assert!(flags(&throttled_window(0.9, 2, 60.0), &FlagRules::default()).is_empty());
        // Never suggests a burst above the quota.
        let mut w = throttled_window(0.3, 2, 60.0);
        w.throttled_us = 10_000_000.0;
        assert!(
            flags(&w, &FlagRules::default())[0]
                .suggestion
                .contains("= 100000 ")
        );
    }

    #[test]
    fn a_kernel_without_burst_gets_a_higher_quota_instead() {
        assert!(has_burst("5.14.0-284.el9.x86_64") && has_burst("6.18.4"));
        assert!(!has_burst("5.10.226") && !has_burst("4.19.0"));
        let rules = FlagRules {
            burst: false,
            ..FlagRules::default()
        };
        let f = &flags(&throttled_window(0.3, 2, 60.0), &rules)[0];
        assert_eq!(f.code, "throttled_below_quota");
        let words: Vec<String> = f.change.iter().map(Change::words).collect();
        // The 100 ms quota plus the 19 ms a burst would have been.
        assert_eq!(
            words,
            ["cpu.max = 119000 100000", "resources.limits.cpu = 1190m"],
            "{f:?}"
        );
        assert!(f.evidence.contains("no burst allowance"), "{}", f.evidence);
        assert!(
            !f.suggestion.contains("cpu.max.burst ="),
            "{}",
            f.suggestion
        );
    }

    #[test]
    fn many_threads_burning_the_quota_fast_is_flagged() {
        let f = flags(&throttled_window(0.9, 14, 18.0), &FlagRules::default());
        assert_eq!(
            f.iter().map(|f| f.code.as_str()).collect::<Vec<_>>(),
            ["many_threads_burn"]
        );
        assert!(
            f[0].message.contains("burned in 18.0 ms by 14 threads"),
            "{}",
            f[0].message
        );
        assert!(flags(&throttled_window(0.9, 14, 80.0), &FlagRules::default()).is_empty());
    }

    #[test]
    fn the_burst_is_a_cgroup_file_with_what_it_should_take_away() {
        // Two throttled periods, 15 ms held off each, in episodes of 10–15 ms on one CPU.
        let mut w = throttled_window(0.3, 2, 60.0);
        w.episode.buckets = vec![(10_000_000, 1), (15_000_000, 1)];
        w.episode.p99_us = 16_000.0;
        let f = &flags(&w, &FlagRules::default())[0];
        let words: Vec<String> = f.change.iter().map(Change::words).collect();
        // The large ones (p99 16 ms) with a quarter of headroom.
        assert_eq!(words, ["cpu.max.burst = 20000"]);
        let e = f.expected.as_ref().expect("expected");
        assert_eq!(
            (e.metric.as_str(), e.change_percent),
            ("throttled_periods", -100.0)
        );
        assert!(
            f.evidence
                .starts_with("2 of 10 periods throttled, held off 15.0ms"),
            "{}",
            f.evidence
        );
        // v1 names its own file.
        let v1 = FlagRules {
            v1: true,
            ..FlagRules::default()
        };
        assert_eq!(flags(&w, &v1)[0].change[0].knob, "cpu.cfs_burst_us");
        // Bursts beyond the quota (120 ms held off on average): the burst is the quota and the
        // quota goes up by the rest.
        w.throttled_us = 2.0 * 120_000.0;
        let f = &flags(&w, &FlagRules::default())[0];
        let words: Vec<String> = f.change.iter().map(Change::words).collect();
        assert_eq!(
            words,
            [
                "cpu.max.burst = 100000",
                "cpu.max = 120000 100000",
                "resources.limits.cpu = 1200m"
            ]
        );
        // A recent window held off more: the burst is sized for that one.
        w.throttled_us = 30_000.0;
        w.held_off_recent_us = Some(40_000.0);
        assert_eq!(flags(&w, &FlagRules::default())[0].change[0].value, "50000");
        w.held_off_recent_us = None;
        // Half the throttled periods held off more than the burst holds: half the promise.
        w.throttled_us = 30_000.0;
        w.episode.p99_us = 0.0;
        w.episode.buckets = vec![(10_000_000, 1), (32_000_000, 1)];
        let e = flags(&w, &FlagRules::default())[0]
            .expected
            .clone()
            .expect("expected");
        assert_eq!(e.change_percent, -50.0);
    }

    #[test]
    fn a_smaller_pool_says_how_much_later_the_quota_runs_out() {
        // 14 threads burn a 1-CPU quota in 18 ms (5.6 CPUs at once); with 1 thread it lasts the
        // whole 100 ms period.
        let f = &flags(&throttled_window(0.9, 14, 18.0), &FlagRules::default())[0];
        let words: Vec<String> = f.change.iter().map(Change::words).collect();
        assert_eq!(
            words,
            [
                "-XX:ActiveProcessorCount = 1",
                "GOMAXPROCS = 1",
                "thread pool size = 1"
            ]
        );
        let e = f.expected.as_ref().expect("expected");
        assert_eq!(e.metric, "quota_burned_in_ms");
        assert!(
            (e.change_percent - (100.0 / 18.0 - 1.0) * 100.0).abs() < 1e-6,
            "{e:?}"
        );
        assert!(e.words.contains("no throttling"), "{}", e.words);
    }

    #[test]
    fn a_shorter_period_keeps_the_share_and_the_kernels_bounds() {
        let stalled = |quota_us: u64, period_us: u64| {
            let mut w = throttled_window(0.9, 2, 80.0);
            w.quota_us = Some(quota_us);
            w.period_us = period_us;
            w.quota_cores = Some(quota_us as f64 / period_us as f64);
            w.episodes = 10;
            w.episode.p99_us = period_us as f64 * 0.8;
            w
        };
        let long = |f: &[Flag]| {
            f.iter()
                .find(|f| f.code == "long_throttle_waits")
                .cloned()
                .expect("flagged")
        };
        // 20 ms of 100: a quarter of the period, the same share.
        let f = long(&flags(&stalled(20_000, 100_000), &FlagRules::default()));
        let words: Vec<String> = f.change.iter().map(Change::words).collect();
        assert_eq!(
            words,
            [
                "cpu.max = 5000 25000",
                "kubelet --cpu-cfs-quota-period = 25ms"
            ]
        );
        let e = f.expected.expect("expected");
        assert_eq!(
            (e.metric.as_str(), e.change_percent),
            ("throttle_stall_p99_us", -75.0)
        );
        // v1 writes period and quota apart.
        let v1 = FlagRules {
            v1: true,
            ..FlagRules::default()
        };
        let f = long(&flags(&stalled(20_000, 100_000), &v1));
        assert_eq!(f.change[0].words(), "cpu.cfs_period_us = 25000");
        assert_eq!(f.change[1].words(), "cpu.cfs_quota_us = 5000");
        // A 2 ms quota of 100 ms cannot go below 1 ms: the period stops at 50 ms.
        let f = long(&flags(&stalled(2_000, 100_000), &FlagRules::default()));
        assert_eq!(f.change[0].words(), "cpu.max = 1000 50000");
        // Already at the quota's floor: more quota instead, and no promise.
        let f = long(&flags(&stalled(1_000, 10_000), &FlagRules::default()));
        assert_eq!(f.change[0].words(), "cpu.max = 9000 10000");
        assert!(f.expected.is_none());
    }
}
