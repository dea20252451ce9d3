//! `throttle`'s metric series: the episode histogram, and periods, throttled periods and
//! throttled time, ours and the kernel's, per cgroup with a quota.

use crate::{
    metrics::encode::{CumHist, Kind, Labels, MetricFamily},
    model::CgroupWindow,
};

/// One throttled cgroup since cgtrace started.
#[derive(Clone, Debug, Default)]
pub struct Series {
    seen: bool,
    episodes: CumHist,
    nr_periods: u64,
    nr_throttled: u64,
    throttled_us: f64,
    kernel_nr_periods: u64,
    kernel_nr_throttled: u64,
    kernel_throttled_us: f64,
    /// The last quota seen (CPUs), and CPU used (the kernel's usage counter).
    quota_cores: Option<f64>,
    usage_us: f64,
    usage_seen: bool,
}

/// The throttle counters per cgroup: ours, then the kernel's `cpu.stat` over the same windows
/// (name, unit, help; the values are [`Series::counter`]).
#[rustfmt::skip]
const THROTTLE_COUNTERS: [(&str, &str, &str); 6] = [
    ("cgtrace_throttle_periods", "", "Bandwidth periods that elapsed (period timer)"),
    ("cgtrace_throttled_periods", "", "Periods in which the cgroup was throttled"),
    ("cgtrace_throttled_seconds", "seconds", "Time throttled, summed over CPUs (cgtrace's episodes)"),
    ("cgtrace_kernel_periods", "", "The kernel's cpu.stat nr_periods"),
    ("cgtrace_kernel_throttled_periods", "", "The kernel's cpu.stat nr_throttled"),
    ("cgtrace_kernel_throttled_seconds", "seconds", "The kernel's cpu.stat throttled time"),
];

impl Series {
    pub fn add(&mut self, c: &CgroupWindow) {
        let Some(t) = &c.throttle else { return };
        self.seen = true;
        self.episodes.add(&t.episode);
        self.nr_periods += t.nr_periods;
        self.nr_throttled += t.nr_throttled;
        self.throttled_us += t.throttled_us;
        self.quota_cores = t.quota_cores;
        if let Some(u) = t.usage_us.filter(|u| u.is_finite()) {
            self.usage_us += u;
            self.usage_seen = true;
        }
        if let Some(k) = &t.kernel {
            self.kernel_nr_periods += k.nr_periods;
            self.kernel_nr_throttled += k.nr_throttled;
            self.kernel_throttled_us += k.throttled_us;
        }
    }

    /// The value of `THROTTLE_COUNTERS[i]`.
    fn counter(&self, i: usize) -> f64 {
        match i {
            0 => self.nr_periods as f64,
            1 => self.nr_throttled as f64,
            2 => self.throttled_us / 1e6,
            3 => self.kernel_nr_periods as f64,
            4 => self.kernel_nr_throttled as f64,
            _ => self.kernel_throttled_us / 1e6,
        }
    }
}

/// The throttle series of every cgroup that had a `throttle` part.
pub fn families(series: &[(&Labels, &Series)], out: &mut Vec<MetricFamily>) {
    let throttled = || series.iter().filter(|(_, s)| s.seen);
    let mut f = MetricFamily::new(
        "cgtrace_throttle_episode_seconds",
        Kind::Histogram,
        "seconds",
        "CFS throttle episodes (one cgroup on one CPU), since cgtrace started",
    );
    for (l, s) in throttled() {
        f.hist(l, None, &s.episodes);
    }
    out.push(f);
    for (i, (name, unit, help)) in THROTTLE_COUNTERS.into_iter().enumerate() {
        let mut f = MetricFamily::new(name, Kind::Counter, unit, help);
        for (l, s) in throttled() {
            f.num(l, None, s.counter(i));
        }
        out.push(f);
    }
    let mut f = MetricFamily::new(
        "cgtrace_cpu_quota_cores",
        Kind::Gauge,
        "",
        "The cgroup's CFS quota in CPUs (quota / period) at its last window",
    );
    for (l, s) in throttled() {
        if let Some(q) = s.quota_cores {
            f.num(l, None, q);
        }
    }
    out.push(f);
    let mut f = MetricFamily::new(
        "cgtrace_cpu_usage_seconds",
        Kind::Counter,
        "seconds",
        "CPU the cgroup used (the kernel's usage counter) over the windows cgtrace read it",
    );
    for (l, s) in throttled().filter(|(_, s)| s.usage_seen) {
        f.num(l, None, s.usage_us / 1e6);
    }
    out.push(f);
}
