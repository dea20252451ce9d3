//! `--prometheus ADDR`: OpenMetrics text over HTTP/1.1, fed from the same windows the stream
//! prints, so the numbers are the stream's.
//!
//! Per cgroup (labels `cgroup` = its path, plus `namespace`, `pod`, `container` when the name
//! says so): run-queue wait histograms by `kind`, the throttle-episode histogram, and counters
//! of periods, throttled periods and throttled time (ours and the kernel's `cpu.stat`), all
//! cumulative since cgtrace started. Histogram buckets are the powers of two from 1.024 µs to 34.4 s
//! (`le` in seconds; every one is a boundary of cgtrace's own buckets, so counts are exact; a wait
//! of exactly 2^k ns counts in the bucket above). At most `max_series` cgroups get series of their
//! own; later ones are summed into `cgroup="other"` (and counted). A cgroup with no activity for
//! `ttl` (or removed that long ago) loses its series, freeing its place. Per node, with the
//! blame ledger: the top `max_pairs` (victim, culprit) pairs' wait, the rest in one `other`
//! series (`family::runq::pairs`).
//!
//! The house: [`encode`] is the data every metric is made of and its OpenMetrics text (a leaf:
//! the families' series, `family::<name>::metrics`, build on it); this file keeps the per-cgroup
//! series (each family's part, the cap, the fold into `other`, expiry); `host` the series
//! without a cgroup (events, cgtrace's own programs and process); `http` the server, `peers` who
//! may hold a connection to it; [`otlp`] the pusher.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

pub mod encode;
mod host;
pub mod http;
pub mod otlp;
pub mod outputs;
pub mod peers;

pub use encode::OTHER;
use encode::{Kind, Labels, MetricFamily, cgroup_labels};

use crate::{
    family,
    model::{CgroupWindow, Window},
};

#[derive(Clone, Copy, Debug)]
pub struct MetricsOptions {
    pub max_series: usize,
    pub ttl: Duration,
    /// Most (victim, culprit) pairs with a `cgtrace_runq_wait_delayed_by_seconds` series.
    pub max_pairs: usize,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self {
            max_series: 1000,
            ttl: Duration::from_secs(300),
            max_pairs: family::runq::pairs::DEFAULT_MAX_PAIRS,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Series {
    labels: Labels,
    /// Each family's part, cumulative since start.
    runq: family::runq::metrics::Series,
    throttle: family::throttle::metrics::Series,
    reads: family::reads::metrics::Series,
    /// Windows in which each diagnosis (family, code) was made.
    flagged: BTreeMap<(String, String), u64>,
    /// The flags of the cgroup's last window that say what their change should do: (family,
    /// code) → (the metric it changes, by how much in percent).
    expected: BTreeMap<(String, String), (String, f64)>,
    /// Wall clock (Unix ms) of the last window with activity.
    last_ms: u64,
    /// Wall clock (Unix ms) since which the counts are cumulative: the start of the window that
    /// made the series (a series expired and made again starts from zero, and says so).
    start_ms: u64,
}

impl Series {
    fn add(&mut self, c: &CgroupWindow, now_ms: u64) {
        self.expected.clear();
        for f in &c.flags {
            if let Some(e) = &f.expected {
                self.expected.insert(
                    (f.family.clone(), f.code.clone()),
                    (e.metric.clone(), e.change_percent),
                );
            }
            *self
                .flagged
                .entry((f.family.clone(), f.code.clone()))
                .or_insert(0) += 1;
        }
        self.runq.add(c, now_ms);
        self.throttle.add(c);
        self.reads.add(c);
    }
}

/// Where a cgroup's data go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Own,
    Other,
}

/// The exported state.
#[derive(Debug)]
pub struct Metrics {
    opts: MetricsOptions,
    /// By `cgroup` label (path, or `id:N` when unresolved).
    series: HashMap<String, Series>,
    /// Cgroups summed into `other`, with when they were last active.
    folded: HashMap<String, u64>,
    other: Series,
    folded_total: u64,
    expired_total: u64,
    reads_host: family::reads::metrics::Host,
    /// The node's top "who delays whom" pairs.
    pairs: family::runq::pairs::Pairs,
    host: host::Host,
}

/// Each cgroup's labels with one family's part of its series.
fn parts<'a, T>(series: &[&'a Series], part: fn(&'a Series) -> &'a T) -> Vec<(&'a Labels, &'a T)> {
    series.iter().map(|s| (&s.labels, part(s))).collect()
}

impl Metrics {
    pub fn new(opts: MetricsOptions) -> Self {
        Self {
            opts,
            series: HashMap::new(),
            folded: HashMap::new(),
            other: Series {
                labels: vec![("cgroup", OTHER.to_string()), ("name", OTHER.to_string())],
                ..Series::default()
            },
            folded_total: 0,
            expired_total: 0,
            reads_host: family::reads::metrics::Host::default(),
            pairs: family::runq::pairs::Pairs::new(opts.max_pairs, opts.ttl.as_millis() as u64),
            host: host::Host::default(),
        }
    }

    /// Adds one window.
    pub fn update(&mut self, w: &Window) {
        self.host.add(w);
        self.expire(w.end_unix_ms);
        self.reads_host.add(w);
        self.pairs.add(w);
        for c in &w.cgroups {
            // Series are keyed by the `cgroup` label, not the id: a cgroup removed and made
            // again at the same path (a restarted service) continues its series, and no two
            // series ever carry the same labels.
            let key = c.path.clone().unwrap_or_else(|| format!("id:{}", c.id));
            let slot = if self.series.contains_key(&key) {
                Slot::Own
            } else if self.folded.contains_key(&key) {
                Slot::Other
            } else if self.series.len() < self.opts.max_series {
                let labels = cgroup_labels(c);
                self.series.insert(
                    key.clone(),
                    Series {
                        labels,
                        start_ms: w.end_unix_ms.saturating_sub(w.duration_ms),
                        ..Series::default()
                    },
                );
                Slot::Own
            } else {
                self.folded_total += 1;
                Slot::Other
            };
            match slot {
                Slot::Own => {
                    let s = self.series.get_mut(&key).expect("inserted above");
                    // A cgroup named after its series began (metadata that came later)
                    // carries its name from now on.
                    let named = s.labels.iter().find(|(k, _)| *k == "name");
                    if c.name.is_some() && named.map(|(_, n)| n) != c.name.as_ref() {
                        s.labels = cgroup_labels(c);
                    }
                    s.add(c, w.end_unix_ms);
                    s.last_ms = w.end_unix_ms;
                }
                Slot::Other => {
                    self.other.add(c, w.end_unix_ms);
                    self.folded.insert(key, w.end_unix_ms);
                }
            }
        }
    }

    fn expire(&mut self, now_ms: u64) {
        let ttl = self.opts.ttl.as_millis() as u64;
        let before = self.series.len();
        self.series
            .retain(|_, s| now_ms.saturating_sub(s.last_ms) < ttl);
        self.expired_total += (before - self.series.len()) as u64;
        self.folded
            .retain(|_, &mut t| now_ms.saturating_sub(t) < ttl);
        // A live cgroup's series naming a neighbour that went (or went quiet) for as long.
        for s in self.series.values_mut().chain([&mut self.other]) {
            s.runq.expire(now_ms, ttl);
        }
    }

    /// Cgroups with series of their own now.
    pub fn cgroups(&self) -> usize {
        self.series.len()
    }

    /// The OpenMetrics exposition.
    pub fn render(&self) -> String {
        encode::text(&self.families())
    }

    /// Every metric with its series, for the text and OTLP encoders: each family's per-cgroup
    /// series, the diagnoses, then the host's.
    pub fn families(&self) -> Vec<MetricFamily> {
        let mut series: Vec<&Series> = self.series.values().collect();
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        if self.folded_total > 0 {
            series.push(&self.other);
        }
        let mut out = Vec::with_capacity(32);
        family::runq::metrics::families(&parts(&series, |s| &s.runq), &mut out);
        self.pairs.families(&mut out);
        family::throttle::metrics::families(&parts(&series, |s| &s.throttle), &mut out);
        family::reads::metrics::families(&parts(&series, |s| &s.reads), &self.reads_host, &mut out);
        let mut f = MetricFamily::new(
            "cgtrace_flagged_windows",
            Kind::Counter,
            "",
            "Windows in which cgtrace made a diagnosis of the cgroup, by family and code (the stream's flags)",
        );
        for s in &series {
            for ((fam, code), n) in &s.flagged {
                let mut l = s.labels.clone();
                l.push(("family", fam.clone()));
                f.num(&l, Some(("code", code)), *n as f64);
            }
        }
        out.push(f);
        let mut f = MetricFamily::new(
            "cgtrace_flag_expected_change_percent",
            Kind::Gauge,
            "",
            "What the change a diagnosis suggests should do, in percent of the metric it names (negative: fewer or shorter), as of the cgroup's last window (the stream's flags[].expected)",
        );
        for s in &series {
            for ((fam, code), (metric, pct)) in &s.expected {
                let mut l = s.labels.clone();
                l.push(("family", fam.clone()));
                l.push(("code", code.clone()));
                f.num(&l, Some(("metric", metric)), *pct);
            }
        }
        out.push(f);
        let counts = host::SeriesCounts {
            cgroups: self.series.len(),
            folded: self.folded_total,
            expired: self.expired_total,
        };
        self.host.families(&counts, &mut out);
        // Each cgroup's samples carry its series' start (OTLP's `start_time_unix_nano`), unless
        // they have their own (a pair's); `other` and the host's series count since cgtrace
        // started.
        for s in out
            .iter_mut()
            .flat_map(|f| f.samples.iter_mut())
            .filter(|s| s.start_unix_ms.is_none())
        {
            if let Some((_, key)) = s.labels.first().filter(|(k, _)| *k == "cgroup") {
                s.start_unix_ms = self.series.get(key).map(|x| x.start_ms);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
