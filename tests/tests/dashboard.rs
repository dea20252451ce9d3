//! The shipped Grafana dashboard (`deploy/grafana/cgtrace.json`) against a real Prometheus
//! (Debian's `prometheus`) scraping `cgtrace serve` on a host with three Kubernetes-shaped pods
//! (cgroupfs-driver paths, kubelet's log directories for their names): a busy one, one throttled
//! by its quota, one reading memory.stat. Every query of every panel, with its template variables
//! set to `.+`, must return data; the pod-level ones must name the test's pods. And the "who
//! delays whom" panel on a host without Kubernetes names: a hog and a victim cgroup on one CPU,
//! the panel's pair hog → victim at the rate the stream charged.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use cgtrace_tests::{
    Killed, can_trace,
    cgroup::{TestCgroup, runq_mount},
    record::free_port,
    stream::{Stream, cgtrace_bin},
    workload::{self, cpus},
};
use serde_json::Value;

/// Cgroups removed in the reverse order of creation (children first), also on panic.
#[derive(Default)]
struct Tree(Vec<TestCgroup>);

impl Drop for Tree {
    fn drop(&mut self) {
        while let Some(c) = self.0.pop() {
            drop(c);
        }
    }
}

/// Files and directories removed on drop.
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = fs::remove_file(p).or_else(|_| fs::remove_dir(p));
        }
    }
}

/// A pod with one container: its uid, container id and the container's cgroup directories
/// (cpu hierarchy first, then cpuacct when mounted apart).
struct Pod {
    name: &'static str,
    uid: String,
    cid: String,
    dirs: Vec<PathBuf>,
}

fn pod(tree: &mut Tree, mounts: &[PathBuf], name: &'static str, n: u32) -> Result<Pod> {
    let pid = std::process::id();
    let uid = format!("{pid:08x}-0000-4000-8000-{n:012x}");
    let cid = format!("{:064x}", u64::from(pid) * 1000 + u64::from(n));
    let mut dirs = Vec::new();
    for m in mounts {
        for rel in [
            "/kubepods".to_string(),
            "/kubepods/burstable".to_string(),
            format!("/kubepods/burstable/pod{uid}"),
            format!("/kubepods/burstable/pod{uid}/{cid}"),
        ] {
            if !m.join(&rel[1..]).exists() {
                tree.0.push(TestCgroup::at(m, &rel)?);
            }
        }
        dirs.push(m.join(format!("kubepods/burstable/pod{uid}/{cid}")));
    }
    Ok(Pod {
        name,
        uid,
        cid,
        dirs,
    })
}

/// Moves `pid` into the pod's container cgroups.
fn join(p: &Pod, pid: u32) -> Result<()> {
    for d in &p.dirs {
        fs::write(d.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", d.display()))?;
    }
    Ok(())
}

/// kubelet's names for the pod: `/var/log/pods/<ns>_<pod>_<uid>/` and
/// `/var/log/containers/<pod>_<ns>_<container>-<id>.log`.
fn plant_names(planted: &mut Planted, ns: &str, p: &Pod) -> Result<()> {
    let pods = Path::new("/var/log/pods");
    let containers = Path::new("/var/log/containers");
    for d in [pods, containers] {
        if !d.exists() {
            fs::create_dir_all(d)?;
            planted.0.push(d.to_path_buf());
        }
    }
    let pd = pods.join(format!("{ns}_{}_{}", p.name, p.uid));
    fs::create_dir_all(&pd)?;
    planted.0.push(pd);
    let cf = containers.join(format!("{}_{ns}_main-{}.log", p.name, p.cid));
    fs::write(&cf, b"")?;
    planted.0.push(cf);
    Ok(())
}

/// Debian's `prometheus`, or why the test cannot run.
fn prometheus_bin() -> Result<&'static str> {
    ["/usr/bin/prometheus", "prometheus"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .context("Debian's prometheus is not installed (apt-get install prometheus)")
}

/// The shipped dashboard.
fn dashboard() -> Result<Value> {
    Ok(serde_json::from_str(&fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/cgtrace.json"),
    )?)?)
}

/// A running Prometheus and its data directory, removed after it stops.
struct Prometheus {
    child: std::process::Child,
    dir: PathBuf,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A Prometheus scraping `target` every second, its data in a directory of its own (`name`).
fn start_prometheus(bin: &str, name: &str, target: &str) -> Result<Prometheus> {
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
fn query(prom: &str, expr: &str) -> Result<Vec<Value>> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-G"])
        .arg(format!("http://{prom}/api/v1/query"))
        .arg("--data-urlencode")
        .arg(format!("query={expr}"))
        .output()
        .context("curl")?;
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("prometheus said: {}", String::from_utf8_lossy(&out.stdout)))?;
    if v["status"] != "success" {
        bail!("query failed: {expr}: {v}");
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_prometheus() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let prometheus = prometheus_bin()?;
    let dash = dashboard()?;

    let ns = format!("cgt{}", std::process::id());
    let (cpu_mount, _) = runq_mount();
    let mut mounts = vec![cpu_mount.clone()];
    let acct = PathBuf::from("/sys/fs/cgroup/cpuacct");
    if acct.join("cpuacct.usage").exists() && !cpu_mount.starts_with(&acct) {
        mounts.push(acct);
    }
    let mut tree = Tree::default();
    let mut planted = Planted(Vec::new());
    let busy = pod(&mut tree, &mounts, "busy-0", 1)?;
    let batch = pod(&mut tree, &mounts, "batch-0", 2)?;
    let agent = pod(&mut tree, &mounts, "agent-0", 3)?;
    for p in [&busy, &batch, &agent] {
        plant_names(&mut planted, &ns, p)?;
    }
    let quota = if batch.dirs[0].join("cpu.cfs_quota_us").exists() {
        ("cpu.cfs_quota_us", "20000".to_string())
    } else {
        ("cpu.max", "20000 100000".to_string())
    };
    fs::write(batch.dirs[0].join(quota.0), quota.1)?;

    let metrics_port = free_port()?;
    let metrics = format!("127.0.0.1:{metrics_port}");
    let _cgtrace = Killed(
        Command::new(cgtrace_bin())
            .args([
                "serve",
                "--prometheus",
                &metrics,
                "--duration",
                "150",
                "--reads-mode",
                "syscall",
                "--blame",
            ])
            .stdout(Stdio::null())
            .spawn()?,
    );
    // Workloads after cgtrace is up, so their pods are named from their first window.
    std::thread::sleep(Duration::from_secs(3));
    let spin = |p: &Pod, threads: usize| -> Result<workload::Task> {
        let t = workload::Task::spawn(
            {
                let mut c = Command::new(workload::bin("spin"));
                c.arg(threads.to_string());
                c
            },
            None,
            None,
            false,
        )?;
        join(p, t.pid())?;
        Ok(t)
    };
    let _busy = spin(&busy, cpus() + 1)?;
    let _batch = spin(&batch, 3)?;
    let mut cmd = Command::new(workload::bin("reader"));
    cmd.args([
        "--count",
        "1000000",
        "--interval-ms",
        "20",
        "--comm",
        "agent",
        "--quiet",
    ]);
    for d in &agent.dirs {
        cmd.arg("--cgroup").arg(d);
    }
    let reader_file = if Path::new("/sys/fs/cgroup/memory/memory.stat").exists() {
        "/sys/fs/cgroup/memory/memory.stat"
    } else {
        "/sys/fs/cgroup/memory.stat"
    };
    cmd.args(["--file", reader_file]);
    let _reader = Killed(cmd.stdout(Stdio::null()).spawn()?);

    let prometheus = start_prometheus(prometheus, "all", &metrics)?;
    let prom = prometheus.addr.clone();

    // Every panel's queries, variables set to `.+`, the rate interval to 30 s.
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().context("panels")? {
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().context("expr")?;
            let e = e
                .replace("$namespace", ".+")
                .replace("$pod", ".+")
                .replace("$__rate_interval", "30s");
            exprs.push((p["title"].as_str().unwrap_or("?").to_string(), e));
        }
    }
    assert!(exprs.len() >= 12, "{} queries", exprs.len());
    // Wait until every query has data (rates need two scrapes inside 30 s), at most 90 s.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<String>;
    loop {
        std::thread::sleep(Duration::from_secs(5));
        missing = Vec::new();
        for (title, e) in &exprs {
            let r = query(&prom, e).unwrap_or_default();
            let pod_level = e.contains("pod=~");
            let ours = r.iter().any(|s| s["metric"]["namespace"] == ns.as_str());
            if r.is_empty() || (pod_level && !ours) {
                missing.push(format!("{title}: {e}"));
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            break;
        }
    }
    assert!(
        missing.is_empty(),
        "queries without data after 90 s:\n{}",
        missing.join("\n")
    );
    for (title, e) in &exprs {
        eprintln!("{title}: {} series", query(&prom, e)?.len());
    }
    // The template variables' values: the test's namespace and pods.
    let pods = query(
        &prom,
        &format!("count by (pod) (cgtrace_runq_wait_seconds_count{{namespace=\"{ns}\"}})"),
    )?;
    let names: Vec<&str> = pods
        .iter()
        .filter_map(|s| s["metric"]["pod"].as_str())
        .collect();
    for p in ["busy-0", "batch-0", "agent-0"] {
        assert!(names.contains(&p), "pod {p} in {names:?}");
    }
    // The throttled pod's share of periods throttled is high, the busy pod has none.
    let share = query(
        &prom,
        &format!(
            "sum by (pod) (rate(cgtrace_throttled_periods_total{{namespace=\"{ns}\"}}[30s])) / sum by (pod) (rate(cgtrace_throttle_periods_total{{namespace=\"{ns}\"}}[30s]))"
        ),
    )?;
    let batch_share = share
        .iter()
        .find(|s| s["metric"]["pod"] == "batch-0")
        .and_then(|s| s["value"][1].as_str())
        .and_then(|v| v.parse::<f64>().ok())
        .context("batch-0's throttled share")?;
    eprintln!("batch-0 throttled share {batch_share}");
    assert!(batch_share > 0.9, "batch-0 throttled share {batch_share}");
    drop(planted);
    drop(tree);
    Ok(())
}

/// The "who delays whom" panel's query, its rate interval set to `range`.
fn who_delays_whom(dash: &Value, range: &str) -> Result<String> {
    let p = dash["panels"]
        .as_array()
        .context("panels")?
        .iter()
        .find(|p| p["title"] == "Who delays whom")
        .context("no \"Who delays whom\" panel")?;
    let e = p["targets"][0]["expr"].as_str().context("expr")?;
    assert!(
        !e.contains("$namespace") && !e.contains("$pod"),
        "the panel must not need Kubernetes labels: {e}"
    );
    Ok(e.replace("$__rate_interval", range))
}

/// A hog and a victim cgroup, plain paths without Kubernetes names, one spinner each on the last
/// CPU: each waits about half the time, the ledger charging it to the other. The panel's query
/// against a real Prometheus names hog → victim at 90–110 % of the wait per second the stream charged the hog for in its windows of the same 10 s.
#[test]
fn who_delays_whom_panel_names_the_hog_and_its_victim() -> Result<()> {
    use cgtrace_tests::cgroup::TestCgroup;
    if !can_trace() {
        return Ok(());
    }
    let bin = prometheus_bin()?;
    let expr = who_delays_whom(&dashboard()?, "10s")?;
    let hog = TestCgroup::new("dash-hog")?;
    let victim = TestCgroup::new("dash-victim")?;
    let cpu = cpus() - 1;
    let metrics = format!("127.0.0.1:{}", free_port()?);
    let mut s = Stream::start(&["--interval", "1000", "--blame", "--prometheus", &metrics])?;
    let _tasks = [
        workload::spin(1, &hog.procs_file(), Some(cpu))?,
        workload::spin(1, &victim.procs_file(), Some(cpu))?,
    ];
    let prometheus = start_prometheus(bin, "pairs", &metrics)?;
    // Once Prometheus has the pair's series for the whole 10 s (its rate is not extrapolated
    // from part of the range), the panel's answer.
    let started = Instant::now();
    let full = format!(
        "count_over_time(cgtrace_runq_wait_delayed_by_seconds_total{{cgroup=\"{}\",culprit=\"{}\"}}[10s])",
        victim.rel, hog.rel
    );
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        s.windows(1)?;
        let n = query(&prometheus.addr, &full)
            .unwrap_or_default()
            .first()
            .and_then(|x| x["value"][1].as_str()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        if n >= 10.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus has {n} samples of the pair after 40 s: {full}"
        );
    }
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let answer = query(&prometheus.addr, &expr)?;
    let rate = |cgroup: &str, culprit: &str| {
        answer
            .iter()
            .find(|x| x["metric"]["cgroup"] == cgroup && x["metric"]["culprit"] == culprit)
            .and_then(|x| x["value"][1].as_str()?.parse::<f64>().ok())
    };
    let pair = rate(&victim.rel, &hog.rel).with_context(|| {
        format!(
            "no {} → {} pair from {expr}: {answer:?}",
            hog.rel, victim.rel
        )
    })?;
    // The stream's windows of the same 10 s (those that ended in it: the scrapes saw them).
    while s
        .seen
        .iter()
        .rev()
        .find(|w| w["type"] == "window")
        .and_then(|w| w["end_unix_ms"].as_u64())
        .is_none_or(|end| end <= at_ms)
    {
        s.windows(1)?;
    }
    let windows: Vec<&Value> = s
        .seen
        .iter()
        .filter(|w| w["type"] == "window")
        .filter(|w| {
            let end = w["end_unix_ms"].as_u64().unwrap_or(0);
            end + 10_000 > at_ms && end <= at_ms
        })
        .collect();
    assert!(windows.len() >= 8, "{} windows in the 10 s", windows.len());
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let (mut charged_us, mut by_hog_us, mut wait_us, mut ms) = (0.0, 0.0, 0.0, 0.0);
    for w in &windows {
        ms += f(w, "duration_ms");
        let Some(c) = w["cgroups"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["path"] == victim.rel.as_str())
        else {
            continue;
        };
        let b = &c["runq"]["blame"];
        let named = b["neighbours"].as_array().cloned().unwrap_or_default();
        charged_us +=
            named.iter().map(|n| f(n, "wait_us")).sum::<f64>() + f(b, "neighbours_other_us");
        by_hog_us += named
            .iter()
            .filter(|n| n["path"] == hog.rel.as_str())
            .map(|n| f(n, "wait_us"))
            .sum::<f64>();
        wait_us += f(&c["runq"], "sum_us");
    }
    let per_s = |us: f64| us / 1e6 / (ms / 1e3);
    let (charged, by_hog, wait) = (per_s(charged_us), per_s(by_hog_us), per_s(wait_us));
    eprintln!(
        "panel: {} → {} {pair:.3} s/s; stream over {} windows: victim waited {wait:.3} s/s, charged to neighbours {charged:.3} s/s, to the hog {by_hog:.3} s/s; {:.1} s in all",
        hog.rel,
        victim.rel,
        windows.len(),
        started.elapsed().as_secs_f64()
    );
    // The scene: the hog is most of the victim's wait (the rest is the host's own tasks on that
    // CPU, charged to `/`).
    assert!(
        by_hog > 0.2,
        "the victim waited behind the hog: {by_hog} s/s"
    );
    assert!(by_hog >= 0.5 * charged, "{by_hog} of {charged} s/s");
    // The panel says what the stream charged, and no more than the victim's wait.
    assert!(
        pair >= 0.9 * by_hog && pair <= 1.1 * by_hog,
        "panel {pair} s/s, stream {by_hog} s/s charged to the hog: {answer:?}"
    );
    assert!(
        pair <= 1.1 * wait,
        "panel {pair} s/s > the victim's whole wait {wait} s/s: {answer:?}"
    );
    drop(prometheus);
    let (code, _) = s.stop(libc::SIGINT).context("stopping cgtrace stream")?;
    assert_eq!(code, 0, "cgtrace stream's exit status after SIGINT");
    Ok(())
}
