//! `throttle`'s part of a cgroup's window (`CgroupWindow::throttle`): types only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::burners::{PeriodUse, ThrottledPeriod};
use crate::{hist::HistSummary, model::flag::Flag};

/// The kernel's counters over one window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelDelta {
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_us: f64,
    pub nr_bursts: u64,
    pub burst_us: f64,
}

/// One cgroup's throttling in one window: configuration, our episodes, the kernel's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThrottleWindow {
    /// `null`: no quota.
    pub quota_us: Option<u64>,
    pub period_us: u64,
    pub burst_us: u64,
    /// Quota in CPUs (quota / period).
    pub quota_cores: Option<f64>,
    /// CPU used in the window (kernel's usage counter), and as CPUs.
    pub usage_us: Option<f64>,
    pub usage_cores: Option<f64>,
    /// Periods that elapsed and that were throttled, seen at the period timer.
    pub nr_periods: u64,
    pub nr_throttled: u64,
    /// `nr_throttled / nr_periods`.
    pub throttled_share: f64,
    /// Sum of our episode durations (one episode per throttled CPU of the group).
    pub throttled_us: f64,
    pub episodes: u64,
    /// Episodes by CPU.
    pub episodes_per_cpu: BTreeMap<u32, u64>,
    /// Episode durations.
    pub episode: HistSummary,
    /// Most and mean runnable tasks of the group when an episode began.
    pub runnable_at_throttle_max: u32,
    pub runnable_at_throttle_mean: f64,
    /// Tasks taken off the CPU by the throttle (6.18+: tasks that went into the limbo list).
    pub tasks_throttled: u64,
    /// fentry/kprobe modes: the kernel's own accounting of these same episodes (its
    /// `throttled_time` change across each `unthrottle_cfs_rq`); `null` in tracepoint mode.
    pub episodes_kernel_us: Option<f64>,
    /// The kernel's own counters for the same window (`null` in a cgroup's first window, before
    /// there was a reading to take a delta from).
    pub kernel: Option<KernelDelta>,
    /// Throttled periods that ended in the window, with the threads that used the quota.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub periods: Vec<ThrottledPeriod>,
    /// Every period that ended in the window while the group was watched (the second after each
    /// throttle): what it used and what its throttle held off — the demand `cgtrace whatif`
    /// replays. At most `USES_KEPT` (1 024) per window; more are counted in
    /// `period_use_dropped`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub period_use: Vec<PeriodUse>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub period_use_dropped: u64,
    /// The most CPU held off in one throttled period (its episodes' p99 times the CPUs
    /// throttled per period, or the mean when larger) over the cgroup's last
    /// [`HELD_OFF_WINDOWS`](super::collect::HELD_OFF_WINDOWS) windows with throttling: what the
    /// burst advice is sized for, so it follows the distribution over many periods rather than one
    /// window's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_off_recent_us: Option<f64>,
    /// Diagnoses from the numbers above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

impl ThrottleWindow {
    /// CPUs throttled per throttled period (at least one).
    pub fn cpus_per_throttled_period(&self) -> f64 {
        (self.episodes as f64 / self.nr_throttled.max(1) as f64).max(1.0)
    }

    /// The CPU held off in the larger throttled periods of the window: its episodes' p99 on each
    /// CPU throttled per period, or the mean per throttled period when larger. `None` without
    /// throttling.
    pub fn held_off_p99_us(&self) -> Option<f64> {
        (self.nr_throttled > 0).then(|| {
            (self.episode.p99_us * self.cpus_per_throttled_period())
                .max(self.throttled_us / self.nr_throttled as f64)
        })
    }
}
