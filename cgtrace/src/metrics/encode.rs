//! The exported metrics as data ([`MetricFamily`]: name, type, unit, help, samples), made by each
//! family's series (`family::<name>::metrics`) and the exporter, and their OpenMetrics text
//! ([`text`]); [`super::otlp`] encodes the same data as OTLP. Histograms are cumulative in
//! cgtrace's exact `le` bounds.
//!
//! The text is `prometheus-client`'s (label values are cgroup paths and container names a tenant
//! chooses: it escapes them; `tests::tenant_label_values_are_escaped` checks it).
//!
//! A leaf: the families' series (`family::<name>::metrics`) import this module, and
//! [`super::Metrics`] imports the families, never the other way round.

use crate::hist::HistSummary;

/// Label value of the series past a cap: the cgroups past `max_series`, a cgroup's neighbours
/// past `MAX_NEIGHBOUR_SERIES`.
pub const OTHER: &str = "other";

/// `le` bounds: 2^10 ns (1.024 µs) to 2^35 ns (34.4 s), the last power of two below cgtrace's
/// open-ended top bucket (60.1 s and up), so every bound is exact.
pub const LE_FIRST: u32 = 10;
pub const LE_LAST: u32 = 35;
/// The `le` bounds, in seconds.
pub fn le_bounds() -> Vec<f64> {
    (LE_FIRST..=LE_LAST)
        .map(|b| (1u64 << b) as f64 / 1e9)
        .collect()
}

/// A cgroup's labels: `cgroup`, then `namespace`/`pod`/`container` when known.
pub type Labels = Vec<(&'static str, String)>;

/// A cumulative histogram in the `le` buckets above.
#[derive(Clone, Debug, Default)]
pub struct CumHist {
    count: u64,
    sum_us: f64,
    /// Counts below each bound `2^(LE_FIRST + i)` ns, not yet cumulative.
    le: [u64; (LE_LAST - LE_FIRST + 1) as usize],
}

impl CumHist {
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_us / 1e6
    }

    /// Counts per `le` bound (not cumulative), the last `+Inf` bucket left out.
    pub fn bucket_counts(&self) -> &[u64] {
        &self.le
    }

    pub fn add(&mut self, h: &HistSummary) {
        self.count = self.count.saturating_add(h.count);
        // The whole waits, like the buckets (run-queue waits: the clock's staleness included).
        self.sum_us += h.sum_us + h.stale_us;
        for &(lower, n) in &h.buckets {
            // The first bound above the bucket's lower edge holds the whole bucket (powers of two
            // are bucket edges).
            let bit = 64 - lower.leading_zeros(); // lower < 2^bit
            let i = bit.clamp(LE_FIRST, LE_LAST + 1) - LE_FIRST;
            if let Some(slot) = self.le.get_mut(i as usize) {
                *slot = slot.saturating_add(n);
            }
        }
    }
}

/// A metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Clone, Debug)]
pub enum Value {
    Num(f64),
    Hist(Box<CumHist>),
}

/// One series: its labels and value.
#[derive(Clone, Debug)]
pub struct Sample {
    pub labels: Labels,
    pub value: Value,
    /// Wall clock (Unix ms) since which the value is cumulative, when the series began after
    /// cgtrace started (a cgroup's series made again after `--series-ttl` restarts from zero);
    /// `None`: since cgtrace started.
    pub start_unix_ms: Option<u64>,
}

/// One metric: the family of its series.
#[derive(Clone, Debug)]
pub struct MetricFamily {
    /// Without `_total` (counters get it in the text).
    pub name: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    pub help: &'static str,
    pub samples: Vec<Sample>,
}

impl MetricFamily {
    pub fn new(name: &'static str, kind: Kind, unit: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind,
            unit,
            help,
            samples: Vec::new(),
        }
    }

    /// A family of one series without labels.
    pub fn single(
        name: &'static str,
        kind: Kind,
        unit: &'static str,
        help: &'static str,
        v: f64,
    ) -> Self {
        let mut f = Self::new(name, kind, unit, help);
        f.num(&Labels::new(), None, v);
        f
    }

    /// `base` labels plus `extra`, with a number.
    pub fn num(&mut self, base: &Labels, extra: Option<(&'static str, &str)>, v: f64) {
        self.samples.push(Sample {
            labels: with(base, extra),
            value: Value::Num(v),
            start_unix_ms: None,
        });
    }

    pub fn hist(&mut self, base: &Labels, extra: Option<(&'static str, &str)>, h: &CumHist) {
        self.samples.push(Sample {
            labels: with(base, extra),
            value: Value::Hist(Box::new(h.clone())),
            start_unix_ms: None,
        });
    }
}

fn with(base: &Labels, extra: Option<(&'static str, &str)>) -> Labels {
    let mut l = base.clone();
    if let Some((k, v)) = extra {
        l.push((k, v.to_string()));
    }
    l
}

/// The OpenMetrics text of `families`, ending in `# EOF`, written by `prometheus-client`'s
/// encoder (it escapes label values and help, and names counters and units as the format asks).
pub fn text(families: &[MetricFamily]) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Snapshot(families.to_vec())));
    let n: usize = families.iter().map(|f| f.samples.len()).sum();
    let mut o = String::with_capacity(4096 + n * 160);
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut o, &registry);
    o
}

/// The families of one scrape, handed to `prometheus-client` as a collector.
#[derive(Debug)]
struct Snapshot(Vec<MetricFamily>);

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> std::fmt::Result {
        use prometheus_client::{encoding::NoLabelSet, metrics::MetricType, registry::Unit};
        let bounds = le_bounds();
        for f in &self.0 {
            // The crate appends the unit to the name: give it the name without it.
            let (name, unit) = match f.unit {
                "seconds" => (f.name.trim_end_matches("_seconds"), Some(Unit::Seconds)),
                "bytes" => (f.name.trim_end_matches("_bytes"), Some(Unit::Bytes)),
                _ => (f.name, None),
            };
            let kind = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut metric = encoder.encode_descriptor(name, f.help, unit.as_ref(), kind)?;
            for s in &f.samples {
                let labels: Vec<(&str, &str)> =
                    s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut e = metric.encode_family(&labels)?;
                match (&s.value, f.kind) {
                    // Whole numbers as integers (`6`, not `6.0`).
                    (Value::Num(v), Kind::Counter) => match whole(*v) {
                        Some(n) => e.encode_counter::<NoLabelSet, _, u64>(&(n as u64), None)?,
                        None => e.encode_counter::<NoLabelSet, _, u64>(&finite(*v), None)?,
                    },
                    (Value::Num(v), _) => match whole(*v) {
                        Some(n) => e.encode_gauge(&n)?,
                        None => e.encode_gauge(&finite(*v))?,
                    },
                    (Value::Hist(h), _) => {
                        let mut buckets: Vec<(f64, u64)> =
                            bounds.iter().copied().zip(h.le.iter().copied()).collect();
                        let below: u64 = h.le.iter().sum();
                        buckets.push((f64::INFINITY, h.count.saturating_sub(below)));
                        e.encode_histogram::<NoLabelSet>(h.sum_seconds(), h.count, &buckets, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `v` as an integer when it is one (and exact as f64).
fn whole(v: f64) -> Option<i64> {
    (v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
}

fn finite(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

/// A cgroup's labels: `cgroup` (its path, `id:N` unresolved), `name` (what the view calls it:
/// `ns/pod/container`, a Docker container's or a systemd unit's name, else the path: every
/// series has one, so a dashboard can group by it on any host) and the Kubernetes `namespace`,
/// `pod`, `container` and `qos` (the QoS class) where the name has them.
pub fn cgroup_labels(c: &crate::model::CgroupWindow) -> Labels {
    let path = c.path.clone().unwrap_or_else(|| format!("id:{}", c.id));
    let name = c.name.clone().unwrap_or_else(|| path.clone());
    let mut l = vec![("cgroup", path), ("name", name)];
    for (k, v) in [
        ("namespace", &c.namespace),
        ("pod", &c.pod),
        ("container", &c.container),
        ("qos", &c.qos),
    ] {
        if let Some(v) = v {
            l.push((k, v.clone()));
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant's cgroup named with a quote, a backslash and a line feed.
    const EVIL: &str = "/kubepods/a\"b\\c\nd";

    #[test]
    fn tenant_label_values_are_escaped() {
        let mut f = MetricFamily::new("cgtrace_windows", Kind::Counter, "", "x");
        f.num(&vec![("cgroup", EVIL.to_string())], None, 1.0);
        let t = text(&[f]);
        assert!(
            t.contains(r#"cgtrace_windows_total{cgroup="/kubepods/a\"b\\c\nd"} 1"#),
            "{t}"
        );
        assert_eq!(t.lines().count(), 4, "no line split by the value: {t}");
    }
}
