//! The shipped Grafana dashboard (`deploy/grafana/cgtrace.json`) against a real Prometheus
//! (Debian's `prometheus`): `tests/tests/dashboard.rs` on a host without Kubernetes,
//! `tests/tests/kubelet.rs` on a real node.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::record::free_port;

/// Debian's `prometheus`, or why the test cannot run.
pub fn prometheus_bin() -> Result<&'static str> {
    ["/usr/bin/prometheus", "prometheus"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .context("Debian's prometheus is not installed (apt-get install prometheus)")
}

/// The shipped dashboard.
pub fn dashboard() -> Result<Value> {
    Ok(serde_json::from_str(&fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/cgtrace.json"),
    )?)?)
}

/// A running Prometheus and its data directory, removed after it stops.
pub struct Prometheus {
    child: std::process::Child,
    dir: PathBuf,
    pub addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A Prometheus scraping `target` every second, its data in a directory of its own (`name`).
pub fn start_prometheus(bin: &str, name: &str, target: &str) -> Result<Prometheus> {
    let dir = std::env::temp_dir().join(format!("cgtrace-prom-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let config = dir.join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cgtrace\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )?;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting prometheus")?;
    Ok(Prometheus { child, dir, addr })
}

/// Prometheus' answer to an instant query.
pub fn query(prom: &str, expr: &str) -> Result<Vec<Value>> {
    query_at(prom, expr, None)
}

/// An instant query evaluated at `at` (seconds since the epoch), or now.
pub fn query_at(prom: &str, expr: &str, at: Option<f64>) -> Result<Vec<Value>> {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "10", "-G"])
        .arg(format!("http://{prom}/api/v1/query"))
        .arg("--data-urlencode")
        .arg(format!("query={expr}"));
    if let Some(at) = at {
        curl.arg("--data-urlencode").arg(format!("time={at:.3}"));
    }
    let out = curl.output().context("curl")?;
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("prometheus said: {}", String::from_utf8_lossy(&out.stdout)))?;
    if v["status"] != "success" {
        bail!("query failed: {expr}: {v}");
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The value a template variable takes at "All".
pub fn all_value(dash: &Value, var: &str) -> Result<String> {
    dash["templating"]["list"]
        .as_array()
        .context("templating")?
        .iter()
        .find(|v| v["name"] == var)
        .and_then(|v| v["allValue"].as_str())
        .map(str::to_string)
        .with_context(|| format!("variable {var} has no allValue"))
}

/// Every panel's queries, `(title, expr)`, the variables at their "All" value, the rate interval
/// 30 s.
pub fn queries(dash: &Value) -> Result<Vec<(String, String)>> {
    let (all_ns, all_pods) = (all_value(dash, "namespace")?, all_value(dash, "pod")?);
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().context("panels")? {
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().context("expr")?;
            let e = e
                .replace("$namespace", &all_ns)
                .replace("$pod", &all_pods)
                .replace("$__rate_interval", "30s");
            exprs.push((p["title"].as_str().unwrap_or("?").to_string(), e));
        }
    }
    ensure!(exprs.len() >= 12, "{} queries", exprs.len());
    Ok(exprs)
}

/// Waits (at most 90 s: rates need two scrapes inside 30 s) until every query returns data and
/// every per-cgroup one (it filters by namespace/pod) names one of `ours` (`name` label), in
/// namespace `ns` when given; prints each query's series count.
pub fn every_query_has_data(
    prom: &str,
    exprs: &[(String, String)],
    ours: &[String],
    ns: Option<&str>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<String>;
    loop {
        std::thread::sleep(Duration::from_secs(5));
        missing = Vec::new();
        for (title, e) in exprs {
            let r = query(prom, e).unwrap_or_default();
            let per_cgroup = e.contains("pod=~");
            let named = r.iter().any(|s| {
                ours.iter().any(|n| s["metric"]["name"] == n.as_str())
                    && ns.is_none_or(|ns| s["metric"]["namespace"] == ns)
            });
            if r.is_empty() || (per_cgroup && !named) {
                missing.push(format!("{title}: {e}"));
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            break;
        }
    }
    ensure!(
        missing.is_empty(),
        "queries without data (or without the test's cgroups by name) after 90 s:\n{}",
        missing.join("\n")
    );
    for (title, e) in exprs {
        eprintln!("{title}: {} series", query(prom, e)?.len());
    }
    Ok(())
}

/// The "Throttled share of periods" panel's value for the cgroup named `name`, and the same
/// expression over the kernel's `cpu.stat` counters cgtrace exports beside its own
/// (`cgtrace_kernel_*`), both evaluated at one instant over the same samples.
pub fn throttled_share(prom: &str, exprs: &[(String, String)], name: &str) -> Result<(f64, f64)> {
    let e = &exprs
        .iter()
        .find(|(t, _)| t == "Throttled share of periods")
        .context("no throttled share panel")?
        .1;
    let kernel = e
        .replace(
            "cgtrace_throttled_periods_total",
            "cgtrace_kernel_throttled_periods_total",
        )
        .replace(
            "cgtrace_throttle_periods_total",
            "cgtrace_kernel_periods_total",
        );
    ensure!(kernel != *e, "the throttled share panel changed: {e}");
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let value = |expr: &str| -> Result<f64> {
        let share = query_at(prom, expr, Some(at))?;
        share
            .iter()
            .find(|s| s["metric"]["name"] == name)
            .and_then(|s| s["value"][1].as_str())
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("{name}'s throttled share in {share:?} ({expr})"))
    };
    Ok((value(e)?, value(&kernel)?))
}
