//! `--otlp URL` against a receiver built on the reference protobuf definitions (PyPI's
//! `opentelemetry-proto`, `tests/otlp/receiver.py`): the histograms it decodes carry the busy
//! cgroup's run-queue waits, with cgtrace's bounds and exact counts, and the last push equals
//! what the stream's windows summed to.
use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    Killed, can_trace,
    record::{cgroup_sum, cgtrace, free_port, lines, windows},
    workload::{self, cpus},
};
use serde_json::Value;

/// The Python with opentelemetry-proto that `scripts/setup.sh` installs.
const PYTHON: &str = "/opt/cgtrace/otlp-venv/bin/python";

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
