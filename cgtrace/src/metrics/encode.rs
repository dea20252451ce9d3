//! The exported metrics as data ([`MetricFamily`]: name, type, unit, help, samples), made by each
//! family's series (`family::<name>::metrics`) and the exporter, and their OpenMetrics text
//! ([`text`]); [`super::otlp`] encodes the same data as OTLP. Histograms are cumulative in
//! cgtrace's exact `le` bounds.

use std::fmt::Write as _;

use crate::hist::HistSummary;

/// `le` bounds: 2^10 ns (1.024 µs) to 2^35 ns (34.4 s), the last power of two below cgtrace's
/// open-ended top bucket (60.1 s and up), so every bound is exact.
pub const LE_FIRST: u32 = 10;
pub const LE_LAST: u32 = 35;
/// The `le` bounds as the exposition prints them (seconds).
pub fn le_bounds() -> Vec<String> {
    (LE_FIRST..=LE_LAST)
        .map(|b| format!("{:e}", (1u64 << b) as f64 / 1e9))
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
        self.sum_us += h.sum_us;
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

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
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

    /// `base` labels plus `extra`, with a number.
    pub fn num(&mut self, base: &Labels, extra: Option<(&'static str, &str)>, v: f64) {
        self.samples.push(Sample {
            labels: with(base, extra),
            value: Value::Num(v),
        });
    }

    pub fn hist(&mut self, base: &Labels, extra: Option<(&'static str, &str)>, h: &CumHist) {
        self.samples.push(Sample {
            labels: with(base, extra),
            value: Value::Hist(Box::new(h.clone())),
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

/// The OpenMetrics text of `families`, ending in `# EOF`.
pub fn text(families: &[MetricFamily]) -> String {
    let n: usize = families.iter().map(|f| f.samples.len()).sum();
    let mut o = String::with_capacity(4096 + n * 160);
    let le = le_bounds();
    for f in families {
        family(&mut o, f.name, f.kind.as_str(), f.unit, f.help);
        for s in &f.samples {
            let l = labels(&s.labels, None);
            match (&s.value, f.kind) {
                (Value::Hist(h), _) => histogram(&mut o, f.name, &l, h, &le),
                (Value::Num(v), Kind::Counter) => {
                    let _ = writeln!(o, "{}_total{l} {}", f.name, num(*v));
                }
                (Value::Num(v), _) => {
                    let _ = writeln!(o, "{}{l} {}", f.name, num(*v));
                }
            }
        }
    }
    o.push_str("# EOF\n");
    o
}

pub fn family(o: &mut String, name: &str, kind: &str, unit: &str, help: &str) {
    let _ = writeln!(o, "# TYPE {name} {kind}");
    if !unit.is_empty() {
        let _ = writeln!(o, "# UNIT {name} {unit}");
    }
    let _ = writeln!(o, "# HELP {name} {help}");
}

/// `{a="x",b="y"}` (empty string when there are none).
pub fn labels(base: &[(&'static str, String)], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = base
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{}\"", escape(v)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

pub fn histogram(o: &mut String, name: &str, l: &str, h: &CumHist, le: &[String]) {
    // `l` is `{…}`: the `le` label goes inside it.
    let inner = l.trim_start_matches('{').trim_end_matches('}');
    let sep = if inner.is_empty() { "" } else { "," };
    let mut cum = 0;
    for (i, bound) in le.iter().enumerate() {
        cum += h.le[i];
        let _ = writeln!(o, "{name}_bucket{{{inner}{sep}le=\"{bound}\"}} {cum}");
    }
    let _ = writeln!(o, "{name}_bucket{{{inner}{sep}le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(o, "{name}_count{l} {}", h.count);
    let _ = writeln!(o, "{name}_sum{l} {}", num(h.sum_us / 1e6));
}

pub fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "0".into()
    }
}

pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}
