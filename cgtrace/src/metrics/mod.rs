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
//! `ttl` (or removed that long ago) loses its series, freeing its place.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

pub mod encode;
pub mod otlp;

use encode::{Kind, Labels, MetricFamily};

use crate::{
    family,
    model::{CgroupWindow, Window},
};

/// Label value of the cgroups past the cap.
pub const OTHER: &str = "other";
/// Connections open at once; one more is accepted and closed at once. Every connection has its
/// own task, so idle or slow ones never hold a scrape back; they are cut at [`HEADER_TIMEOUT`]
/// (a request's head must arrive within it) or [`IDLE_TIMEOUT`] (nothing asked).
const MAX_CONNECTIONS: usize = 256;
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the metrics go: served for Prometheus, pushed as OTLP, or both.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    pub prometheus: Option<SocketAddr>,
    pub otlp: Option<hyper::Uri>,
    pub opts: MetricsOptions,
}

impl Outputs {
    pub fn is_empty(&self) -> bool {
        self.prometheus.is_none() && self.otlp.is_none()
    }

    /// Binds the Prometheus port and makes the OTLP pusher, as asked.
    pub async fn start(
        &self,
        host: &str,
    ) -> anyhow::Result<(Option<Exporter>, Option<otlp::Pusher>)> {
        let exporter = match self.prometheus {
            Some(addr) => Some(Exporter::start(addr, self.opts).await?),
            None => None,
        };
        let pusher = self
            .otlp
            .clone()
            .map(|u| otlp::Pusher::new(u, self.opts, host.to_string()));
        Ok((exporter, pusher))
    }
}

#[derive(Clone, Copy, Debug)]
pub struct MetricsOptions {
    pub max_series: usize,
    pub ttl: Duration,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self {
            max_series: 1000,
            ttl: Duration::from_secs(300),
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
    /// Wall clock (Unix ms) of the last window with activity.
    last_ms: u64,
}

impl Series {
    fn add(&mut self, c: &CgroupWindow) {
        for f in &c.flags {
            *self
                .flagged
                .entry((f.family.clone(), f.code.clone()))
                .or_insert(0) += 1;
        }
        self.runq.add(c);
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
    windows: u64,
    last_seq: u64,
    last_end_ms: u64,
    seen: u64,
    dropped: u64,
    counters: BTreeMap<String, u64>,
    /// Per BPF program (from the windows' `self`): runs, run time (ns), recursion misses.
    programs: BTreeMap<String, (u64, u64, u64)>,
    folded_total: u64,
    expired_total: u64,
    reads_host: family::reads::metrics::Host,
    /// cgtrace's own cost: CPU seconds and resident bytes, read at each window.
    own: Option<ProcessCost>,
}

/// A per-program metric of cgtrace's own BPF programs: name, unit, help, and its value from
/// (runs, run time in ns, recursion misses).
type PerProgram = (
    &'static str,
    &'static str,
    &'static str,
    fn(&(u64, u64, u64)) -> f64,
);

/// cgtrace's own process: CPU used since it started and resident memory now.
#[derive(Clone, Copy, Debug)]
struct ProcessCost {
    cpu_seconds: f64,
    rss_bytes: u64,
}

impl ProcessCost {
    /// CPU time from `getrusage`, resident pages from `/proc/self/statm` (the `self` object's
    /// source too).
    fn read_self() -> Option<Self> {
        let (cpu_seconds, rss_bytes) = crate::selfstat::process_totals()?;
        Some(Self {
            cpu_seconds,
            rss_bytes,
        })
    }
}

/// A cgroup's Kubernetes/container labels, from the structured parts of its name.
fn name_labels(c: &CgroupWindow) -> Vec<(&'static str, String)> {
    [
        ("namespace", &c.namespace),
        ("pod", &c.pod),
        ("container", &c.container),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
    .collect()
}

impl Metrics {
    pub fn new(opts: MetricsOptions) -> Self {
        Self {
            opts,
            series: HashMap::new(),
            folded: HashMap::new(),
            other: Series {
                labels: vec![("cgroup", OTHER.to_string())],
                ..Series::default()
            },
            windows: 0,
            last_seq: 0,
            last_end_ms: 0,
            seen: 0,
            dropped: 0,
            counters: BTreeMap::new(),
            programs: BTreeMap::new(),
            folded_total: 0,
            expired_total: 0,
            reads_host: family::reads::metrics::Host::default(),
            own: None,
        }
    }

    /// Adds one window.
    pub fn update(&mut self, w: &Window) {
        self.windows += 1;
        self.last_seq = w.seq;
        self.last_end_ms = w.end_unix_ms;
        self.seen += w.events.seen;
        self.dropped += w.events.dropped;
        for (k, v) in &w.events.counters {
            *self.counters.entry(k.clone()).or_insert(0) += v;
        }
        for p in w.self_cost.iter().flat_map(|s| &s.programs) {
            let e = self.programs.entry(p.name.clone()).or_insert((0, 0, 0));
            e.0 += p.runs;
            e.1 += (p.run_us * 1e3).round() as u64;
            e.2 += p.recursion_misses;
        }
        self.expire(w.end_unix_ms);
        self.reads_host.add(w);
        self.own = ProcessCost::read_self();
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
                let mut labels = vec![("cgroup", key.clone())];
                labels.extend(name_labels(c));
                self.series.insert(
                    key.clone(),
                    Series {
                        labels,
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
                    s.add(c);
                    s.last_ms = w.end_unix_ms;
                }
                Slot::Other => {
                    self.other.add(c);
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
    }

    /// Cgroups with series of their own now.
    pub fn cgroups(&self) -> usize {
        self.series.len()
    }

    /// The OpenMetrics exposition.
    pub fn render(&self) -> String {
        encode::text(&self.families())
    }

    /// Every metric with its series, for the text and OTLP encoders.
    pub fn families(&self) -> Vec<MetricFamily> {
        let mut series: Vec<&Series> = self.series.values().collect();
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        if self.folded_total > 0 {
            series.push(&self.other);
        }
        let mut out = Vec::with_capacity(32);
        family::runq::metrics::families(
            &series
                .iter()
                .map(|s| (&s.labels, &s.runq))
                .collect::<Vec<_>>(),
            &mut out,
        );
        family::throttle::metrics::families(
            &series
                .iter()
                .map(|s| (&s.labels, &s.throttle))
                .collect::<Vec<_>>(),
            &mut out,
        );
        family::reads::metrics::families(
            &series
                .iter()
                .map(|s| (&s.labels, &s.reads))
                .collect::<Vec<_>>(),
            &self.reads_host,
            &mut out,
        );
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
        let none = Labels::new();
        let mut one = |name, kind, unit, help, v: f64| {
            let mut f = MetricFamily::new(name, kind, unit, help);
            f.num(&none, None, v);
            out.push(f);
        };
        one(
            "cgtrace_events_seen",
            Kind::Counter,
            "",
            "Scheduler events the kernel programs handled",
            self.seen as f64,
        );
        one(
            "cgtrace_events_dropped",
            Kind::Counter,
            "",
            "Events or waits lost (full maps or ring buffer, undecodable)",
            self.dropped as f64,
        );
        let mut f = MetricFamily::new(
            "cgtrace_kernel_program",
            Kind::Counter,
            "",
            "Each counter of the kernel programs",
        );
        for (k, v) in &self.counters {
            f.num(&none, Some(("counter", k)), *v as f64);
        }
        out.push(f);
        // cgtrace's own programs, bpftop-style (`window.self`): what tracing costs the host.
        let per_program: [PerProgram; 3] = [
            (
                "cgtrace_bpf_runs",
                "",
                "Runs of each of cgtrace's BPF programs",
                |v| v.0 as f64,
            ),
            (
                "cgtrace_bpf_run_seconds",
                "seconds",
                "Time the kernel spent in each of cgtrace's BPF programs (counted while BPF \
                 run-time statistics are on: see window.self.bpf_stats)",
                |v| v.1 as f64 / 1e9,
            ),
            (
                "cgtrace_bpf_recursion_misses",
                "",
                "Runs of each of cgtrace's BPF programs the kernel skipped (the program was \
                 already running on that CPU)",
                |v| v.2 as f64,
            ),
        ];
        for (name, unit, help, value) in per_program {
            let mut f = MetricFamily::new(name, Kind::Counter, unit, help);
            for (program, v) in &self.programs {
                f.num(&none, Some(("program", program)), value(v));
            }
            out.push(f);
        }
        let mut one = |name, kind, unit, help, v: f64| {
            let mut f = MetricFamily::new(name, kind, unit, help);
            f.num(&none, None, v);
            out.push(f);
        };
        one(
            "cgtrace_windows",
            Kind::Counter,
            "",
            "Windows aggregated",
            self.windows as f64,
        );
        one(
            "cgtrace_last_window_seq",
            Kind::Gauge,
            "",
            "seq of the last window in these figures",
            self.last_seq as f64,
        );
        one(
            "cgtrace_last_window_end_seconds",
            Kind::Gauge,
            "seconds",
            "Unix time the last window ended",
            self.last_end_ms as f64 / 1e3,
        );
        one(
            "cgtrace_series_cgroups",
            Kind::Gauge,
            "",
            "Cgroups with series of their own (at most --max-series)",
            self.series.len() as f64,
        );
        one(
            "cgtrace_series_folded",
            Kind::Counter,
            "",
            "Cgroups summed into cgroup=\"other\" past --max-series",
            self.folded_total as f64,
        );
        one(
            "cgtrace_series_expired",
            Kind::Counter,
            "",
            "Cgroups whose series were dropped after --series-ttl without activity",
            self.expired_total as f64,
        );
        if let Some(c) = &self.own {
            one(
                "cgtrace_process_cpu_seconds",
                Kind::Counter,
                "seconds",
                "CPU cgtrace's own process used (user and system)",
                c.cpu_seconds,
            );
            one(
                "cgtrace_process_resident_memory_bytes",
                Kind::Gauge,
                "bytes",
                "cgtrace's own resident memory",
                c.rss_bytes as f64,
            );
        }
        out
    }
}

/// The rendered text the HTTP handler serves, replaced after every window.
#[derive(Clone, Default)]
pub struct Exposition(Arc<Mutex<Bytes>>);

impl Exposition {
    pub fn publish(&self, text: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Bytes::from(text);
    }

    fn get(&self) -> Bytes {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Metrics plus where they are served.
pub struct Exporter {
    pub metrics: Metrics,
    pub exposition: Exposition,
    /// Where it listens (the port chosen when ADDR's was 0).
    pub local_addr: SocketAddr,
}

impl Exporter {
    /// Binds `addr` and serves `/metrics` on the current tokio runtime.
    pub async fn start(addr: SocketAddr, opts: MetricsOptions) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("--prometheus {addr}: {e}"))?;
        let local_addr = listener.local_addr()?;
        let metrics = Metrics::new(opts);
        let exposition = Exposition::default();
        exposition.publish(metrics.render());
        tokio::spawn(accept_loop(listener, exposition.clone()));
        Ok(Self {
            metrics,
            exposition,
            local_addr,
        })
    }

    pub fn update(&mut self, w: &Window) {
        self.metrics.update(w);
        self.exposition.publish(self.metrics.render());
    }
}

async fn accept_loop(listener: TcpListener, exposition: Exposition) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (conn, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                log::warn!("prometheus: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        use std::sync::atomic::Ordering::Relaxed;
        if open.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Relaxed);
            drop(conn);
            continue;
        }
        let (exposition, open) = (exposition.clone(), open.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let text = exposition.get();
                async move { Ok::<_, std::convert::Infallible>(respond(&req, &text)) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(conn), service);
            // A connection that asks nothing for IDLE_TIMEOUT is closed.
            let _ = tokio::time::timeout(IDLE_TIMEOUT, served).await;
            open.fetch_sub(1, Relaxed);
        });
    }
}

/// The answer to one request: `/metrics` (GET or HEAD), `/`, or 404/405.
fn respond(req: &Request<Incoming>, text: &Bytes) -> Response<Full<Bytes>> {
    let head = req.method() == Method::HEAD;
    let plain = "text/plain; charset=utf-8";
    let (status, ctype, body) = if req.method() != Method::GET && !head {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            plain,
            Bytes::from_static(b"GET or HEAD only\n"),
        )
    } else {
        match req.uri().path() {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                text.clone(),
            ),
            "/" => (
                StatusCode::OK,
                plain,
                Bytes::from_static(b"cgtrace: metrics at /metrics\n"),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                plain,
                Bytes::from_static(b"not found: try /metrics\n"),
            ),
        }
    };
    let len = body.len();
    let mut r = Response::new(Full::new(if head { Bytes::new() } else { body }));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(len));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        hist::Hist,
        model::{EventCounts, RunqWindow},
    };

    fn window(seq: u64, end_ms: u64, cgroups: Vec<CgroupWindow>) -> Window {
        Window {
            kind: "window".into(),
            seq,
            end_unix_ms: end_ms,
            duration_ms: 1000,
            events: EventCounts {
                seen: 10,
                dropped: 1,
                counters: BTreeMap::new(),
            },
            cgroups_tracked: cgroups.len(),
            cgroups,
            ..Window::default()
        }
    }

    fn cgroup(id: u64, path: &str, waits_ns: &[u64]) -> CgroupWindow {
        let mut h = Hist::default();
        for &w in waits_ns {
            h.record(w);
        }
        let mut kinds = BTreeMap::new();
        kinds.insert("wakeup".to_string(), h.summary());
        CgroupWindow {
            id,
            hierarchy: "cpu".into(),
            path: Some(path.into()),
            name: Some("default/web-0/nginx".into()),
            name_kind: Some(crate::cgroup::name::NameKind::Container),
            namespace: Some("default".into()),
            pod: Some("web-0".into()),
            container: Some("nginx".into()),
            runq: RunqWindow {
                all: h.summary(),
                kinds,
                blame: None,
            },
            ..CgroupWindow::default()
        }
    }

    /// One scrape on a new connection: the status line and the body.
    async fn get(addr: SocketAddr, path: &str) -> (String, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).await.unwrap();
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }

    #[tokio::test]
    async fn idle_and_slow_connections_do_not_starve_a_scrape() {
        use tokio::io::AsyncWriteExt as _;
        let opts = MetricsOptions {
            max_series: 10,
            ttl: Duration::from_secs(60),
        };
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), opts)
            .await
            .unwrap();
        let addr = e.local_addr;
        let mut held = Vec::new();
        for i in 0..64 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            if i % 2 == 1 {
                // A byte a second, never finishing its request head.
                tokio::spawn(async move {
                    for b in b"GET /metrics HTTP/1.1\r\nX: ".iter().cycle() {
                        if c.write_all(&[*b]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                });
            } else {
                held.push(c);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = std::time::Instant::now();
        let (status, body) = tokio::time::timeout(Duration::from_secs(1), get(addr, "/metrics"))
            .await
            .expect("a scrape answers within a second");
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.ends_with("# EOF\n"), "{body}");
        let (status, _) = get(addr, "/nope").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        drop(held);
    }

    #[test]
    fn quota_usage_reads_dying_memcgs_and_own_cost_are_series() {
        let mut c = cgroup(1, "/kubepods/pod-a/c1", &[5_000]);
        c.throttle = Some(crate::family::throttle::model::ThrottleWindow {
            quota_cores: Some(0.5),
            usage_us: Some(400_000.0),
            nr_periods: 10,
            ..Default::default()
        });
        let file = |fs: &str, us: f64| crate::family::reads::FileReads {
            comm: "kubelet".into(),
            pid: 1,
            file: "/sys/fs/cgroup/memory/memory.stat".into(),
            fs: fs.into(),
            target: None,
            count: 3,
            total_us: us,
            flush_us: us / 2.0,
            lock_wait_us: 0.0,
            flushed_reads: 3,
            flush_locks: 3,
            contended: 0,
            bytes: 100,
            dying_memcgs: None,
            latency: Default::default(),
        };
        c.reads = Some(vec![file("cgroup", 300.0), file("proc", 100.0)]);
        let mut w = window(1, 2000, vec![c.clone()]);
        w.dying_memcgs = Some(crate::family::reads::DyingMemcgs {
            total: 42,
            source: "proc_cgroups".into(),
        });
        let mut m = Metrics::new(MetricsOptions::default());
        m.update(&w);
        m.update(&window(2, 3000, vec![c]));
        let t = m.render();
        let l =
            r#"{cgroup="/kubepods/pod-a/c1",namespace="default",pod="web-0",container="nginx"}"#;
        for want in [
            format!("cgtrace_cpu_quota_cores{l} 0.5\n"),
            format!("cgtrace_cpu_usage_seconds_total{l} 0.8\n"),
            "cgtrace_read_seconds_total{cgroup=\"/kubepods/pod-a/c1\",namespace=\"default\",pod=\"web-0\",container=\"nginx\",fs=\"cgroup\"} 0.0006\n".into(),
            "cgtrace_reads_total{cgroup=\"/kubepods/pod-a/c1\",namespace=\"default\",pod=\"web-0\",container=\"nginx\",fs=\"proc\"} 6\n".into(),
            "cgtrace_dying_memcgs 42\n".into(),
            "cgtrace_process_cpu_seconds_total ".into(),
            "cgtrace_process_resident_memory_bytes ".into(),
        ] {
            assert!(t.contains(&want), "{want} not in\n{t}");
        }
    }

    #[test]
    fn own_programs_are_counted_across_windows() {
        let mut m = Metrics::new(MetricsOptions::default());
        for seq in 1..=2 {
            let mut w = window(seq, seq * 1000, vec![]);
            w.self_cost = Some(crate::model::SelfCost {
                bpf_stats: true,
                programs: vec![crate::model::ProgramCost {
                    name: "sched_switch".into(),
                    runs: 1000,
                    run_us: 350.0,
                    ns_per_run: Some(350.0),
                    recursion_misses: seq,
                }],
                bpf_cpu_pct: 0.035,
                daemon_cpu_pct: 1.0,
                rss_kib: 20_000,
            });
            m.update(&w);
        }
        let t = m.render();
        for want in [
            "cgtrace_bpf_runs_total{program=\"sched_switch\"} 2000\n",
            "cgtrace_bpf_run_seconds_total{program=\"sched_switch\"} 0.0007\n",
            "cgtrace_bpf_recursion_misses_total{program=\"sched_switch\"} 3\n",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
    }

    #[test]
    fn histogram_is_cumulative_and_exact_at_powers_of_two() {
        let mut m = Metrics::new(MetricsOptions::default());
        // 500 ns and 1000 ns are below 1.024 µs; 1024 ns is in the next bound; 3 ms; 100 s overflow.
        m.update(&window(
            1,
            1000,
            vec![cgroup(
                7,
                "/a\"b",
                &[500, 1000, 1024, 3_000_000, 100_000_000_000],
            )],
        ));
        m.update(&window(2, 2000, vec![cgroup(7, "/a\"b", &[2000])]));
        let t = m.render();
        let l = r#"cgroup="/a\"b",namespace="default",pod="web-0",container="nginx",kind="wakeup""#;
        assert!(
            t.contains(&format!(
                "cgtrace_runq_wait_seconds_bucket{{le=\"0.000001024\",{l}}} 2\n"
            )),
            "{t}"
        );
        assert!(t.contains(&format!(
            "cgtrace_runq_wait_seconds_bucket{{le=\"0.000002048\",{l}}} 4\n"
        )));
        assert!(t.contains(&format!(
            "cgtrace_runq_wait_seconds_bucket{{le=\"0.000004096\",{l}}} 4\n"
        )));
        assert!(
            t.contains(&format!(
                "cgtrace_runq_wait_seconds_bucket{{le=\"34.359738368\",{l}}} 5\n"
            )),
            "{t}"
        );
        assert!(t.contains(&format!(
            "cgtrace_runq_wait_seconds_bucket{{le=\"+Inf\",{l}}} 6\n"
        )));
        assert!(t.contains(&format!("cgtrace_runq_wait_seconds_count{{{l}}} 6\n")));
        assert!(t.contains("cgtrace_events_seen_total 20\n"));
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn diagnoses_are_counted_per_window() {
        let mut m = Metrics::new(MetricsOptions::default());
        for seq in 1..=2 {
            let mut c = cgroup(7, "/slow", &[5000]);
            c.flags.push(crate::model::Flag {
                family: "runq".into(),
                code: "runq_long_waits".into(),
                message: String::new(),
                suggestion: String::new(),
            });
            m.update(&window(seq, seq * 1000, vec![c]));
        }
        let t = m.render();
        assert!(
            t.contains(r#"cgtrace_flagged_windows_total{cgroup="/slow",namespace="default",pod="web-0",container="nginx",family="runq",code="runq_long_waits"} 2"#),
            "{t}"
        );
    }

    #[test]
    fn blame_parts_neighbours_and_caused_are_counters() {
        use crate::family::runq::model::{Blame, Caused, Party};
        let party = |id: u64, us: f64| Party {
            id,
            path: Some(format!("/n{id}")),
            name: None,
            wait_us: us,
        };
        let mut m = Metrics::new(MetricsOptions::default());
        // Two windows; in each the victim is delayed by 12 neighbours (5 named, 7 summed) and
        // its named neighbours differ, so that more than MAX_NEIGHBOUR_SERIES are seen.
        for seq in 1..=3u64 {
            let mut c = cgroup(7, "/slow", &[5000]);
            c.runq.blame = Some(Blame {
                throttled_own_us: 1e6,
                throttled_ancestor_us: 0.0,
                siblings_us: 5e5,
                neighbours: (0..5).map(|i| party(seq * 10 + i, 1e5)).collect(),
                neighbours_other_us: 2e5,
                unattributed_us: 1e5,
            });
            let mut culprit = cgroup(8, "/noisy", &[]);
            culprit.caused = Some(Caused {
                wait_us: 2e6,
                victims: vec![party(7, 2e6)],
            });
            m.update(&window(seq, seq * 1000, vec![c, culprit]));
        }
        let t = m.render();
        // The value of the one series whose line starts with `prefix`.
        let value = |prefix: &str| -> f64 {
            let l: Vec<&str> = t.lines().filter(|l| l.starts_with(prefix)).collect();
            assert_eq!(l.len(), 1, "{prefix} in\n{t}");
            l[0].rsplit_once(' ').unwrap().1.parse().unwrap()
        };
        let blame = r#"cgtrace_runq_wait_blame_seconds_total{cgroup="/slow",namespace="default",pod="web-0",container="nginx",part="#;
        let near = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        near(value(&format!("{blame}\"throttled_own\"}}")), 3.0);
        near(value(&format!("{blame}\"siblings\"}}")), 1.5);
        // 5 named (0.1 s each) + 0.2 s summed, three times.
        near(value(&format!("{blame}\"neighbours\"}}")), 2.1);
        near(value(&format!("{blame}\"unattributed\"}}")), 0.3);
        let by = r#"cgtrace_runq_wait_by_neighbour_seconds_total{cgroup="/slow",namespace="default",pod="web-0",container="nginx",neighbour="#;
        near(value(&format!("{by}\"/n10\"}}")), 0.1);
        // 15 named neighbours seen: 10 get series, the other 5 and the summed ones are "other".
        let named = t
            .lines()
            .filter(|l| {
                l.starts_with("cgtrace_runq_wait_by_neighbour_seconds_total{")
                    && l.contains("neighbour=\"/n")
            })
            .count();
        assert_eq!(named, super::family::runq::metrics::MAX_NEIGHBOUR_SERIES);
        near(value(&format!("{by}\"other\"}}")), 1.1);
        near(
            value(r#"cgtrace_runq_delay_caused_seconds_total{cgroup="/noisy","#),
            6.0,
        );
    }

    #[test]
    fn caps_series_folds_the_rest_and_expires_idle_cgroups() {
        let mut m = Metrics::new(MetricsOptions {
            max_series: 2,
            ttl: Duration::from_secs(10),
        });
        m.update(&window(
            1,
            1000,
            (1..=5)
                .map(|i| cgroup(i, &format!("/c{i}"), &[5000]))
                .collect(),
        ));
        assert_eq!(m.cgroups(), 2);
        let t = m.render();
        assert!(
            t.contains(r#"cgtrace_runq_wait_seconds_count{cgroup="other","#),
            "{t}"
        );
        assert!(t.contains(r#"cgroup="other",kind="wakeup"} 3"#), "{t}");
        assert!(t.contains("cgtrace_series_folded_total 3\n"));
        // 20 s later only cgroup 9 is active: the others expire, 9 gets its own series.
        m.update(&window(2, 21_000, vec![cgroup(9, "/c9", &[5000])]));
        assert_eq!(m.cgroups(), 1);
        let t = m.render();
        assert!(
            t.contains(r#"cgroup="/c9""#) && !t.contains(r#"cgroup="/c1""#),
            "{t}"
        );
        assert!(t.contains("cgtrace_series_expired_total 2\n"));
        // /c9 removed and made again (another id): the same series goes on.
        m.update(&window(3, 22_000, vec![cgroup(10, "/c9", &[5000])]));
        let t = m.render();
        assert_eq!(
            t.matches(r#"cgtrace_runq_wait_seconds_count{cgroup="/c9""#)
                .count(),
            1
        );
        assert!(
            t.contains(
                r#"cgroup="/c9",namespace="default",pod="web-0",container="nginx",kind="wakeup"} 2"#
            ),
            "{t}"
        );
    }
}
