//! `--otlp URL` against a receiver built on the reference protobuf definitions (PyPI's
//! `opentelemetry-proto`, `tests/otlp/receiver.py`): the histograms it decodes carry the busy
//! cgroup's run-queue waits, with cgtrace's bounds and exact counts, and the last push equals
//! what the stream's windows summed to. Then through a real OpenTelemetry Collector
//! (`otelcol-cgtrace`, built by `scripts/setup.sh` from the Go module proxy: its OTLP receiver,
//! and its OTLP/HTTP exporter to the same receiver): the histograms come out
//! of the collector under resources named by the semantic conventions (`k8s.pod.name`, …): a real
//! node's (kubelet and containerd, `cgtrace_tests::kubelet`) busy and throttled pods, with every
//! wait the stream counted.
use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    Killed, can_trace,
    kubelet::{self, NODE, running},
    record::{cgroup_sum, cgtrace, free_port, lines, windows},
    scratch::{Scratch, path_str},
    workload::{self, cpus},
};
use serde_json::Value;

/// The Python with opentelemetry-proto that `scripts/setup.sh` installs.
const PYTHON: &str = "/opt/cgtrace/otlp-venv/bin/python";
/// The OpenTelemetry Collector that `scripts/setup.sh` builds.
const OTELCOL: &str = "/opt/cgtrace/go/bin/otelcol-cgtrace";

/// The receiver on a free port, appending its JSON lines to `out`, once it accepts connections.
fn receiver(out: &Path) -> Result<(Killed, u16)> {
    anyhow::ensure!(
        Path::new(PYTHON).exists(),
        "{PYTHON} is missing: run scripts/setup.sh deps (a venv with opentelemetry-proto from PyPI)"
    );
    let _ = fs::remove_file(out);
    let port = free_port()?;
    let receiver = Killed(
        Command::new(PYTHON)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("otlp/receiver.py"))
            .arg(port.to_string())
            .arg(out)
            .stdout(Stdio::null())
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "the receiver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((receiver, port))
}

#[test]
fn otlp_histograms_decode_with_the_reference_protos_and_carry_the_busy_cgroup() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    anyhow::ensure!(
        Path::new(PYTHON).exists(),
        "{PYTHON} is missing: run scripts/setup.sh deps (a venv with opentelemetry-proto from PyPI)"
    );
    let out = std::env::temp_dir().join(format!("cgtrace-otlp-{}.jsonl", std::process::id()));
    let (_receiver, port) = receiver(&out)?;
    let busy = workload::busy("otlp-busy", cpus() + 1)?;
    let url = format!("http://127.0.0.1:{port}/v1/metrics");
    let (code, stdout, err) = cgtrace(&["stream", "--duration", "6", "--otlp", &url])?;
    assert_eq!(code, 0, "{err}");
    let stream = lines(&stdout)?;
    let waits = cgroup_sum(&windows(&stream), &busy.rel, "/runq/count");
    assert!(waits > 100, "{waits} waits in the stream");

    let got: Vec<Value> = fs::read_to_string(&out)
        .context("the receiver wrote nothing")?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let _ = fs::remove_file(&out);
    let hists: Vec<&Value> = got
        .iter()
        .filter(|p| {
            p["metric"] == "cgtrace_runq_wait_seconds"
                && p["attributes"]["cgroup"] == busy.rel.as_str()
        })
        .collect();
    assert!(!hists.is_empty(), "no run-queue histogram of {}", busy.rel);
    for p in &hists {
        let buckets: Vec<u64> = p["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .collect();
        assert_eq!(
            p["bounds"].as_array().unwrap().len(),
            26,
            "1.024 µs … 34.4 s"
        );
        assert_eq!(buckets.len(), 27);
        assert_eq!(buckets.iter().sum::<u64>(), p["count"].as_u64().unwrap());
        assert_eq!(p["unit"], "s");
        assert_eq!(p["temporality"], 2, "cumulative");
        assert_eq!(p["resource"]["service.name"], "cgtrace");
    }
    // Cumulative: the largest count of each kind, summed, is every wait the windows counted.
    let mut by_kind = std::collections::BTreeMap::new();
    for p in &hists {
        let k = p["attributes"]["kind"].as_str().unwrap_or("?").to_string();
        let c = p["count"].as_u64().unwrap();
        let e = by_kind.entry(k).or_insert(0u64);
        *e = (*e).max(c);
    }
    let pushed: u64 = by_kind.values().sum();
    eprintln!("stream {waits} waits, OTLP {pushed} by kind {by_kind:?}");
    assert_eq!(
        pushed, waits,
        "the last push holds every wait of every window"
    );
    Ok(())
}

/// A cgroup whose series expires (`--series-ttl 1`: removed, then gone for 4 s) and comes back
/// at the same path: its points after that carry a later `start_time_unix_nano`, and under each
/// start the count never goes down (with one start for both, a backend would see it drop).
#[test]
fn otlp_a_series_made_again_after_its_ttl_has_a_new_start_time() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let out = std::env::temp_dir().join(format!("cgtrace-otlp-ttl-{}.jsonl", std::process::id()));
    let (_receiver, port) = receiver(&out)?;
    let url = format!("http://127.0.0.1:{port}/v1/metrics");
    let mut stream = Killed(
        Command::new(cgtrace_tests::stream::cgtrace_bin())
            .args([
                "stream",
                "--duration",
                "12",
                "--interval",
                "500",
                "--series-ttl",
                "1",
            ])
            .args(["--otlp", &url])
            .stdout(Stdio::null())
            .spawn()?,
    );
    std::thread::sleep(Duration::from_secs(2));
    let rel = {
        let busy = workload::busy("otlp-again", cpus() + 1)?;
        std::thread::sleep(Duration::from_secs(3));
        busy.rel.clone()
    };
    std::thread::sleep(Duration::from_secs(4));
    let again = workload::busy("otlp-again", cpus() + 1)?;
    assert_eq!(again.rel, rel, "the same path again");
    std::thread::sleep(Duration::from_secs(3));
    let status = stream.0.wait()?;
    assert!(status.success(), "stream: {status}");
    drop(again);

    let got: Vec<Value> = fs::read_to_string(&out)
        .context("the receiver wrote nothing")?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let _ = fs::remove_file(&out);
    // (start, time, count) of the cgroup's wakeup histogram, in push order.
    let points: Vec<(u64, u64, u64)> = got
        .iter()
        .filter(|p| {
            p["metric"] == "cgtrace_runq_wait_seconds"
                && p["attributes"]["cgroup"] == rel.as_str()
                && p["attributes"]["kind"] == "wakeup"
        })
        .map(|p| {
            let n = |k: &str| p[k].as_u64().unwrap_or(0);
            (n("start"), n("time"), n("count"))
        })
        .collect();
    let mut starts: Vec<u64> = points.iter().map(|p| p.0).collect();
    starts.dedup();
    eprintln!(
        "{} points of {rel}, starts {starts:?}; counts {:?}",
        points.len(),
        points.iter().map(|p| p.2).collect::<Vec<_>>()
    );
    assert!(starts.len() >= 2, "one start for both lives: {points:?}");
    for w in points.windows(2) {
        let ((s0, t0, c0), (s1, _, c1)) = (w[0], w[1]);
        if s0 == s1 {
            assert!(c1 >= c0, "a count went down under one start: {points:?}");
        } else {
            assert!(
                s1 > s0 && s1 >= t0 - 1_000_000_000,
                "the new start is later: {points:?}"
            );
        }
    }
    Ok(())
}

/// The collector on a free port, its OTLP/HTTP exporter sending to the receiver at `to` and its
/// Prometheus exporter serving on `prom` (resource attributes as labels), once it accepts
/// connections.
fn collector(dir: &Path, to: u16, prom: u16) -> Result<(Killed, u16)> {
    anyhow::ensure!(
        Path::new(OTELCOL).exists(),
        "{OTELCOL} is missing: run scripts/setup.sh deps (the OpenTelemetry Collector, built from the Go module proxy)"
    );
    let port = free_port()?;
    let config = dir.join("otelcol.yaml");
    fs::write(
        &config,
        format!(
            "receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  otlphttp:
    endpoint: http://127.0.0.1:{to}
    compression: none
  prometheus:
    endpoint: 127.0.0.1:{prom}
    resource_to_telemetry_conversion:
      enabled: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [otlphttp, prometheus]
"
        ),
    )?;
    let log = fs::File::create(dir.join("otelcol.log"))?;
    let mut child = Killed(
        Command::new(OTELCOL)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() >= deadline || child.0.try_wait()?.is_some() {
            anyhow::bail!(
                "the collector did not start: {}",
                fs::read_to_string(dir.join("otelcol.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((child, port))
}

/// A small node (its throttled pods' busy threads, and busy loops beside them so every pod
/// waits) under `cgtrace stream --otlp` to a real collector: what the collector exports carries
/// each container's run-queue wait histogram under a resource with its `k8s.namespace.name`,
/// `k8s.pod.name`, `k8s.container.name` and `host.name`, and its last count is every wait the
/// stream's windows counted for that container.
#[test]
fn otlp_through_a_real_collector_names_pods_by_the_semantic_conventions() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("cgtrace-otelcol-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let out = dir.join("received.jsonl");
    let (_receiver, rport) = receiver(&out)?;
    let pport = free_port()?;
    let (_collector, cport) = collector(&dir, rport, pport)?;
    let scratch = Scratch::new("otelcol-node")?;
    let node = kubelet::Node::with_test_images(&scratch.0, &[])?;
    node.apply("busy", &kubelet::busy(cpus() - 1, 1))?;
    node.apply("throttled", &kubelet::throttled())?;
    node.apply("noisy", &kubelet::noisy(cpus() - 1))?;
    node.wait_for("the pods running", Duration::from_secs(60), |p| {
        ["busy", "throttled", "noisy"].iter().all(|n| running(p, n))
    })?;
    let url = format!("http://127.0.0.1:{cport}/v1/metrics");
    let state = node.containerd().state();
    let (code, stdout, err) = cgtrace(&[
        "stream",
        "--duration",
        "6",
        "--otlp",
        &url,
        "--containerd-state",
        path_str(&state),
    ])?;
    assert_eq!(code, 0, "{err}");
    let stream = lines(&stdout)?;
    let host = fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_string();
    // (namespace, pod, container, the container's path, its waits in the stream).
    let mut want: Vec<(String, String, String, String, u64)> = Vec::new();
    for (ns, pod, container) in [("shop", "busy", "app"), ("shop", "throttled", "worker")] {
        let pod = format!("{pod}-{NODE}");
        let name = format!("{ns}/{pod}/{container}");
        let path = windows(&stream)
            .iter()
            .flat_map(|w| w["cgroups"].as_array().into_iter().flatten())
            .find(|c| c["name"] == name.as_str())
            .and_then(|c| c["path"].as_str())
            .with_context(|| format!("{name} in no window"))?
            .to_string();
        let waits = cgroup_sum(&windows(&stream), &path, "/runq/count");
        want.push((ns.into(), pod, container.into(), path, waits));
    }
    // The collector exports on its own schedule: wait for the last push to come through.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got: Vec<Value> = fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let mut missing = Vec::new();
        for (ns, pod, container, rel, waits) in &want {
            // The largest count of each kind under this container's resource, summed.
            let mut by_kind = std::collections::BTreeMap::new();
            for p in got.iter().filter(|p| {
                let r = &p["resource"];
                p["metric"] == "cgtrace_runq_wait_seconds"
                    && r["k8s.namespace.name"] == ns.as_str()
                    && r["k8s.pod.name"] == pod.as_str()
                    && r["k8s.container.name"] == container.as_str()
                    && r["host.name"] == host.as_str()
                    && r["service.name"] == "cgtrace"
                    && p["attributes"]["cgroup"] == rel.as_str()
            }) {
                assert!(
                    p["attributes"].get("pod").is_none(),
                    "the pod is the resource's, not the point's: {p}"
                );
                let k = p["attributes"]["kind"].as_str().unwrap_or("?").to_string();
                let c = p["count"].as_u64().unwrap_or(0);
                let e = by_kind.entry(k).or_insert(0u64);
                *e = (*e).max(c);
            }
            let pushed: u64 = by_kind.values().sum();
            if pushed != *waits || *waits == 0 {
                missing.push(format!(
                    "{ns}/{pod}/{container}: {pushed} waits through the collector, {waits} in the stream"
                ));
            }
        }
        if missing.is_empty() {
            eprintln!(
                "through the collector: {:?}",
                want.iter()
                    .map(|w| format!("{}/{}/{} {} waits", w.0, w.1, w.2, w.4))
                    .collect::<Vec<_>>()
            );
            break;
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{missing:?}; collector log: {}",
                fs::read_to_string(dir.join("otelcol.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // What a Prometheus scrapes from the collector (its Prometheus exporter, resource
    // attributes as labels): the same counts under the pods' names.
    let body = cgtrace_tests::cri::run(
        Command::new("curl")
            .args(["-sSf", "--max-time", "5"])
            .arg(format!("http://127.0.0.1:{pport}/metrics")),
    )?;
    for (ns, pod, container, _, waits) in &want {
        let labels = [
            format!("k8s_namespace_name=\"{ns}\""),
            format!("k8s_pod_name=\"{pod}\""),
            format!("k8s_container_name=\"{container}\""),
            format!("host_name=\"{host}\""),
        ];
        let lines: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("cgtrace_runq_wait_seconds_count{"))
            .filter(|l| labels.iter().all(|x| l.contains(x.as_str())))
            .collect();
        let scraped: u64 = lines
            .iter()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum();
        eprintln!(
            "{ns}/{pod}/{container}: {scraped} waits scraped from the collector's Prometheus exporter"
        );
        anyhow::ensure!(
            scraped == *waits,
            "{ns}/{pod}/{container}: {scraped} scraped, {waits} in the stream: {lines:?}\n{}",
            body.lines()
                .filter(|l| l.starts_with("cgtrace_runq_wait_seconds_count"))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    drop(node);
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}
