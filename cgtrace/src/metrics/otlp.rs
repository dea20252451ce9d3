//! `--otlp URL`: the metrics `--prometheus` serves, pushed after every window as OTLP/HTTP
//! protobuf (`POST URL`, `Content-Type: application/x-protobuf`; an OpenTelemetry collector's
//! `otlphttp` receiver listens at `http://HOST:4318/v1/metrics`).
//!
//! The messages are the reference ones (`opentelemetry-proto`), encoded with prost. Every metric
//! is cumulative since cgtrace started, as in the text exposition: counters are monotonic
//! cumulative sums, histograms carry the same explicit bounds (the powers of two from 1.024 µs to
//! 34.4 s, in seconds) and exact counts, and each series' labels (`cgroup`, `kind`, …) are its
//! data point's attributes. The resource names the host (`host.name`) and, by the OpenTelemetry
//! semantic conventions, the pod and container a series belongs to: `k8s.namespace.name`,
//! `k8s.pod.name`, `k8s.container.name` (a container outside Kubernetes: `container.name`), one
//! `ResourceMetrics` each; the host's own series (no pod, no container) come first.
//!
//! A push runs on its own task with a 10 s timeout; while one is in flight the next window's is
//! skipped and counted, so a slow or absent collector never holds the pump back. The last
//! window's push is always sent, and [`Pusher::flush`] waits for it before cgtrace exits.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Uri, header};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    metrics::v1::{
        AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
    },
    resource::v1::Resource,
};
use prost::Message as _;

use super::{
    Metrics, MetricsOptions,
    encode::{Kind, Labels, MetricFamily, Value, le_bounds},
};
use crate::{
    live::driver::{Flow, Sink, Turn},
    model::Window,
};

const TIMEOUT: Duration = Duration::from_secs(10);

fn attr(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

fn unit(u: &str) -> &'static str {
    match u {
        "seconds" => "s",
        "bytes" => "By",
        _ => "1",
    }
}

/// The resource attributes a series' `labels` name by the OpenTelemetry semantic conventions
/// (its pod and container; none for the host's own series), and the labels left for its data
/// point.
fn split_labels(labels: &Labels) -> (Labels, Labels) {
    let in_pod = labels.iter().any(|(k, _)| *k == "pod");
    let mut resource = Vec::new();
    let mut point = Vec::new();
    for (k, v) in labels {
        let key = match (*k, in_pod) {
            ("namespace", true) => "k8s.namespace.name",
            ("pod", true) => "k8s.pod.name",
            ("container", true) => "k8s.container.name",
            ("container", false) => "container.name",
            // A pod's or container's name is its resource's; a cgroup's elsewhere stays a
            // data point attribute.
            ("name", true) => continue,
            _ => {
                point.push((*k, v.clone()));
                continue;
            }
        };
        resource.push((key, v.clone()));
    }
    resource.sort();
    (resource, point)
}

/// The OTLP request for `families` at `now_ns` (Unix), each series cumulative since its own
/// start (a cgroup's series made again after `--series-ttl` restarts from zero) or `start_ns`:
/// one `ResourceMetrics` per pod or container (see the module's docs), the host's first.
pub fn request(
    families: &[MetricFamily],
    host: &str,
    start_ns: u64,
    now_ns: u64,
) -> ExportMetricsServiceRequest {
    let bounds = le_bounds();
    // Resource -> the metrics of its series, in the families' order.
    let mut by_resource: BTreeMap<Labels, Vec<Metric>> = BTreeMap::new();
    by_resource.insert(Vec::new(), Vec::new());
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let start = |s: &super::encode::Sample| -> u64 {
            s.start_unix_ms
                .map_or(start_ns, |ms| ms.saturating_mul(1_000_000))
        };
        // This family's points, by resource.
        let mut numbers: BTreeMap<Labels, Vec<NumberDataPoint>> = BTreeMap::new();
        let mut hists: BTreeMap<Labels, Vec<HistogramDataPoint>> = BTreeMap::new();
        for s in &f.samples {
            let (resource, point) = split_labels(&s.labels);
            let attributes = point.iter().map(|(k, v)| attr(k, v)).collect();
            match &s.value {
                Value::Num(v) => numbers.entry(resource).or_default().push(NumberDataPoint {
                    attributes,
                    start_time_unix_nano: start(s),
                    time_unix_nano: now_ns,
                    value: Some(number_data_point::Value::AsDouble(*v)),
                    ..Default::default()
                }),
                Value::Hist(h) => {
                    let mut counts = h.bucket_counts().to_vec();
                    let below: u64 = counts.iter().sum();
                    counts.push(h.count().saturating_sub(below));
                    hists.entry(resource).or_default().push(HistogramDataPoint {
                        attributes,
                        start_time_unix_nano: start(s),
                        time_unix_nano: now_ns,
                        count: h.count(),
                        sum: Some(h.sum_seconds()),
                        bucket_counts: counts,
                        explicit_bounds: bounds.clone(),
                        ..Default::default()
                    });
                }
            }
        }
        let metric = |data| Metric {
            name: f.name.to_string(),
            description: f.help.to_string(),
            unit: unit(f.unit).to_string(),
            data: Some(data),
            ..Default::default()
        };
        // A family's points are of its kind (others are left out, as the text exposition does).
        let data: Vec<_> = match f.kind {
            Kind::Counter => numbers
                .into_iter()
                .map(|(r, data_points)| {
                    let sum = Sum {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    };
                    (r, metric::Data::Sum(sum))
                })
                .collect(),
            Kind::Gauge => numbers
                .into_iter()
                .map(|(r, data_points)| (r, metric::Data::Gauge(Gauge { data_points })))
                .collect(),
            Kind::Histogram => hists
                .into_iter()
                .map(|(r, data_points)| {
                    let h = Histogram {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    };
                    (r, metric::Data::Histogram(h))
                })
                .collect(),
        };
        for (resource, data) in data {
            by_resource.entry(resource).or_default().push(metric(data));
        }
    }
    let scope = || InstrumentationScope {
        name: "cgtrace".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: by_resource
            .into_iter()
            .filter(|(resource, metrics)| resource.is_empty() || !metrics.is_empty())
            .map(|(resource, metrics)| ResourceMetrics {
                resource: Some(Resource {
                    attributes: [
                        attr("service.name", "cgtrace"),
                        attr("service.version", env!("CARGO_PKG_VERSION")),
                        attr("host.name", host),
                    ]
                    .into_iter()
                    .chain(resource.iter().map(|(k, v)| attr(k, v)))
                    .collect(),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope()),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

/// Parses `--otlp URL` (http only: a collector on the node or in the cluster).
pub fn parse_url(s: &str) -> Result<Uri, String> {
    let u: Uri = s.parse().map_err(|e| {
        format!("{s:?}: not a URL ({e}): use e.g. http://127.0.0.1:4318/v1/metrics")
    })?;
    if u.scheme_str() != Some("http") || u.host().is_none() {
        return Err(format!(
            "{s:?}: use an http:// URL with a host, e.g. http://127.0.0.1:4318/v1/metrics (https is not supported)"
        ));
    }
    Ok(u)
}

/// The push sink: the same metrics as `--prometheus`, pushed after every window.
pub struct Pusher {
    metrics: Metrics,
    url: Uri,
    host: String,
    start_ns: u64,
    client: Client<HttpConnector, Full<Bytes>>,
    in_flight: Vec<tokio::task::JoinHandle<()>>,
    /// Pushes done, skipped (one still in flight) and failed, for the closing line.
    pub stats: Arc<PushStats>,
}

#[derive(Debug, Default)]
pub struct PushStats {
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
}

impl Pusher {
    pub fn new(url: Uri, opts: MetricsOptions, host: String) -> Self {
        Self {
            metrics: Metrics::new(opts),
            url,
            host,
            start_ns: now_unix_ns(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            in_flight: Vec::new(),
            stats: Arc::default(),
        }
    }

    /// Adds the window; pushes unless a push is still in flight (`always`: push anyway).
    fn push(&mut self, w: &Window, always: bool) {
        self.metrics.update(w);
        self.in_flight.retain(|h| !h.is_finished());
        if !self.in_flight.is_empty() && !always {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let body = request(
            &self.metrics.families(),
            &self.host,
            self.start_ns,
            now_unix_ns(),
        )
        .encode_to_vec();
        let req = Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)));
        let Ok(req) = req else {
            return;
        };
        let (client, stats, url) = (self.client.clone(), self.stats.clone(), self.url.clone());
        self.in_flight.push(tokio::spawn(async move {
            match tokio::time::timeout(TIMEOUT, client.request(req)).await {
                Ok(Ok(r)) if r.status().is_success() => {
                    stats.sent.fetch_add(1, Ordering::Relaxed);
                }
                r => {
                    let n = stats.failed.fetch_add(1, Ordering::Relaxed);
                    let why = match r {
                        Ok(Ok(r)) => format!("HTTP {}", r.status()),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "timed out".into(),
                    };
                    // The first failure and then one in a hundred, not one a window.
                    if n % 100 == 0 {
                        log::warn!("--otlp {url}: push failed ({why}); {} failed so far", n + 1);
                    }
                }
            }
        }));
    }

    /// Waits for the pushes in flight (the last window's, at the end).
    pub async fn flush(&mut self) {
        for h in self.in_flight.drain(..) {
            let _ = h.await;
        }
    }
}

impl Sink for Pusher {
    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow> {
        if let Some(w) = t.window {
            self.push(w, false);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, t: &mut Turn<'_>, _summary: &str) -> anyhow::Result<()> {
        if let Some(w) = t.window {
            self.push(w, true);
        }
        Ok(())
    }
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::encode::{CumHist, Labels};

    #[test]
    fn histograms_keep_the_bounds_and_exact_counts() {
        let mut h = CumHist::default();
        let mut hs = crate::hist::Hist::default();
        for ns in [1_500u64, 3_000, 5_000_000, 70_000_000_000] {
            hs.record(ns);
        }
        h.add(&hs.summary());
        let labels: Labels = vec![("cgroup", "/a".into()), ("pod", "web-0".into())];
        let mut f = MetricFamily::new("cgtrace_runq_wait_seconds", Kind::Histogram, "seconds", "x");
        f.hist(&labels, Some(("kind", "wakeup")), &h);
        let mut c = MetricFamily::new("cgtrace_windows", Kind::Counter, "", "y");
        c.num(&Labels::new(), None, 3.0);
        let req = request(&[f, c], "node-1", 1, 2);
        let bytes = req.encode_to_vec();
        let back = ExportMetricsServiceRequest::decode(&bytes[..]).unwrap();
        // The host's series first, then the pod's, named by its resource.
        assert_eq!(back.resource_metrics.len(), 2);
        let resource = |i: usize| -> Vec<(String, String)> {
            back.resource_metrics[i]
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .map(|a| {
                    let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(any_value::Value::StringValue(s)) => s.clone(),
                        _ => String::new(),
                    };
                    (a.key.clone(), v)
                })
                .collect()
        };
        assert!(!resource(0).iter().any(|(k, _)| k.starts_with("k8s.")));
        assert!(resource(1).contains(&("k8s.pod.name".into(), "web-0".into())));
        assert!(resource(1).contains(&("host.name".into(), "node-1".into())));
        let m = &back.resource_metrics[1].scope_metrics[0].metrics;
        let Some(metric::Data::Histogram(hist)) = &m[0].data else {
            panic!("{m:?}")
        };
        let p = &hist.data_points[0];
        assert_eq!(p.count, 4);
        assert_eq!(p.explicit_bounds.len(), 26, "1.024 µs … 34.4 s");
        assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1);
        assert_eq!(p.bucket_counts.iter().sum::<u64>(), 4);
        assert_eq!(
            *p.bucket_counts.last().unwrap(),
            1,
            "70 s is above the last bound"
        );
        assert_eq!(p.bucket_counts[0], 0);
        assert_eq!(p.bucket_counts[1], 1, "1.5 µs: (1.024, 2.048] µs");
        let keys: Vec<&str> = p.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["cgroup", "kind"], "the pod is the resource's");
        assert_eq!(m[0].unit, "s");
        let host = &back.resource_metrics[0].scope_metrics[0].metrics;
        let Some(metric::Data::Sum(sum)) = &host[0].data else {
            panic!()
        };
        assert!(sum.is_monotonic);
        assert_eq!(
            sum.data_points[0].value,
            Some(number_data_point::Value::AsDouble(3.0))
        );
    }

    /// The start time and count of `cgroup`'s wakeup histogram point in `families`' request.
    fn wakeup_point(families: &[MetricFamily], cgroup: &str) -> Option<(u64, u64)> {
        let req = request(families, "node-1", 7, 8);
        let m = &req.resource_metrics[0].scope_metrics[0].metrics;
        let hist = m.iter().find(|m| m.name == "cgtrace_runq_wait_seconds")?;
        let Some(metric::Data::Histogram(h)) = &hist.data else {
            return None;
        };
        h.data_points
            .iter()
            .find(|p| {
                p.attributes.iter().any(|a| {
                    a.key == "cgroup"
                        && a.value.as_ref().and_then(|v| v.value.as_ref())
                            == Some(&any_value::Value::StringValue(cgroup.into()))
                })
            })
            .map(|p| (p.start_time_unix_nano, p.count))
    }

    #[test]
    fn a_series_made_again_after_its_ttl_starts_again() {
        use crate::{hist::Hist, model::CgroupWindow};
        let cg = |path: &str, waits: usize| {
            let mut h = Hist::default();
            for _ in 0..waits {
                h.record(5_000);
            }
            let mut c = CgroupWindow {
                path: Some(path.into()),
                ..CgroupWindow::default()
            };
            c.runq.kinds.insert("wakeup", h.summary());
            c.runq.all = h.summary();
            c
        };
        let window = |end_ms: u64, cgroups| Window {
            end_unix_ms: end_ms,
            duration_ms: 1000,
            cgroups,
            ..Window::default()
        };
        let mut m = Metrics::new(MetricsOptions {
            max_series: 10,
            ttl: Duration::from_secs(10),
            ..MetricsOptions::default()
        });
        let ms = 1_000_000u64; // ns in a ms
        m.update(&window(101_000, vec![cg("/a", 3), cg("/b", 1)]));
        m.update(&window(102_000, vec![cg("/a", 3), cg("/b", 1)]));
        assert_eq!(wakeup_point(&m.families(), "/a"), Some((100_000 * ms, 6)));
        // /a idle past its ttl while /b goes on: /a's series is gone.
        for t in (103_000..=120_000).step_by(1000) {
            m.update(&window(t, vec![cg("/b", 1)]));
        }
        assert_eq!(wakeup_point(&m.families(), "/a"), None);
        // Back: counted from zero again, and its start says since when; /b's start is unchanged.
        m.update(&window(121_000, vec![cg("/a", 2), cg("/b", 1)]));
        let f = m.families();
        assert_eq!(wakeup_point(&f, "/a"), Some((120_000 * ms, 2)));
        assert_eq!(wakeup_point(&f, "/b"), Some((100_000 * ms, 21)));
        // Series without a cgroup count since cgtrace started (request's start_ns).
        let req = request(&f, "node-1", 7, 8);
        let windows = req.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .find(|m| m.name == "cgtrace_windows")
            .expect("cgtrace_windows");
        let Some(metric::Data::Sum(s)) = &windows.data else {
            panic!("{windows:?}")
        };
        assert_eq!(s.data_points[0].start_time_unix_nano, 7);
    }

    #[test]
    fn urls_are_checked() {
        assert!(parse_url("http://127.0.0.1:4318/v1/metrics").is_ok());
        assert!(
            parse_url("https://x/v1/metrics")
                .unwrap_err()
                .contains("https")
        );
        assert!(parse_url("not a url").unwrap_err().contains("not a URL"));
    }
}
