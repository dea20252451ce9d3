//! The shipped Grafana dashboard (`deploy/grafana/cgtrace.json`) against a real Prometheus
//! (Debian's `prometheus`) scraping `cgtrace`, on a host without Kubernetes (a Docker container,
//! systemd services), where no series has a `namespace` or `pod`: every query of every panel, its
//! template variables at their "All" value, returns data, the per-cgroup ones naming the test's
//! workloads. And the "who delays whom" panel names a hog and a victim cgroup on one CPU, the
//! panel's pair hog → victim at the rate the stream charged. On a real node with its pods:
//! `tests/tests/kubelet.rs`.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    Killed, can_trace,
    cgroup::{TestCgroup, runq_mount},
    dashboard::{
        dashboard, every_query_has_data, prometheus_bin, queries, query, start_prometheus,
        throttled_share,
    },
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

/// One of the test's three workloads: its cgroup directories (cpu hierarchy first, then cpuacct
/// when mounted apart) and the `name` label cgtrace must give it.
struct Workload {
    name: String,
    dirs: Vec<PathBuf>,
}

/// The cgroup `rel` (and its parents) in every mount.
fn cgroup_dirs(tree: &mut Tree, mounts: &[PathBuf], rel: &str) -> Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for m in mounts {
        let mut at = String::new();
        for part in rel.trim_start_matches('/').split('/') {
            at = format!("{at}/{part}");
            if !m.join(&at[1..]).exists() {
                tree.0.push(TestCgroup::at(m, &at)?);
            }
        }
        dirs.push(m.join(&rel[1..]));
    }
    Ok(dirs)
}

/// Workload `n` (`role`: busy, batch, agent): the batch job a Docker container (named by the
/// `config.v2.json` Docker keeps), the others systemd services.
fn workload(
    tree: &mut Tree,
    planted: &mut Planted,
    mounts: &[PathBuf],
    prefix: &str,
    role: &str,
    n: u32,
) -> Result<Workload> {
    let pid = std::process::id();
    let cid = format!("{:064x}", u64::from(pid) * 1000 + u64::from(n));
    if role == "batch" {
        let name = format!("{prefix}-{role}");
        let dir = Path::new("/var/lib/docker/containers").join(&cid);
        plant_dir(planted, &dir)?;
        let config = dir.join("config.v2.json");
        fs::write(
            &config,
            format!("{{\"ID\":\"{cid}\",\"Name\":\"/{name}\"}}"),
        )?;
        planted.0.push(config);
        let dirs = cgroup_dirs(tree, mounts, &format!("/docker/{cid}"))?;
        return Ok(Workload { name, dirs });
    }
    let name = format!("{prefix}-{role}.service");
    let dirs = cgroup_dirs(tree, mounts, &format!("/system.slice/{name}"))?;
    Ok(Workload { name, dirs })
}

/// Moves `pid` into the workload's cgroups.
fn join(w: &Workload, pid: u32) -> Result<()> {
    for d in &w.dirs {
        fs::write(d.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", d.display()))?;
    }
    Ok(())
}

/// `dir` and the parents it lacked, made and remembered for removal.
fn plant_dir(planted: &mut Planted, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.exists() {
        missing.push(d.to_path_buf());
        d = d.parent().context("no parent")?;
    }
    fs::create_dir_all(dir)?;
    planted.0.extend(missing.into_iter().rev());
    Ok(())
}

/// A new user's first try on a host without Kubernetes (a Docker container, systemd services):
/// no `namespace` or `pod` label on any series, the variables at "All". Three workloads — busy,
/// throttled by its quota, reading memory.stat — and every query of every panel returns data
/// from a real Prometheus scraping `cgtrace serve`, every per-cgroup one naming the test's
/// workloads. (The same on a real node with its pods: `tests/tests/kubelet.rs`.)
#[test]
fn every_dashboard_query_returns_data_on_a_host_without_kubernetes() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let prometheus = prometheus_bin()?;
    let dash = dashboard()?;

    let prefix = format!("cgt{}", std::process::id());
    let (cpu_mount, _) = runq_mount();
    let mut mounts = vec![cpu_mount.clone()];
    let acct = PathBuf::from("/sys/fs/cgroup/cpuacct");
    if acct.join("cpuacct.usage").exists() && !cpu_mount.starts_with(&acct) {
        mounts.push(acct);
    }
    let mut tree = Tree::default();
    let mut planted = Planted(Vec::new());
    let mut make = |role, n| workload(&mut tree, &mut planted, &mounts, &prefix, role, n);
    let busy = make("busy", 1)?;
    let batch = make("batch", 2)?;
    let agent = make("agent", 3)?;
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
            ])
            .stdout(Stdio::null())
            .spawn()?,
    );
    // Workloads after cgtrace is up, so they are named from their first window.
    std::thread::sleep(Duration::from_secs(3));
    let spin = |w: &Workload, threads: usize| -> Result<workload::Task> {
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
        join(w, t.pid())?;
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
    let exprs = queries(&dash)?;
    let ours = [busy.name.clone(), batch.name.clone(), agent.name.clone()];
    every_query_has_data(&prom, &exprs, &ours, None)?;
    // Every workload by name, and no pods (the "All" value matched everything above).
    let names = query(
        &prom,
        "count by (name, namespace, pod) (cgtrace_runq_wait_seconds_count)",
    )?;
    for n in &ours {
        assert!(
            names.iter().any(|s| s["metric"]["name"] == n.as_str()),
            "{n} not among the names: {names:?}"
        );
    }
    assert!(
        names.iter().all(|s| s["metric"]["pod"].is_null()),
        "pods on a host without any: {names:?}"
    );
    let (share, kernel) = throttled_share(&prom, &exprs, &batch.name)?;
    eprintln!(
        "{} throttled share {share}, cpu.stat's {kernel}",
        batch.name
    );
    assert!(
        share > 0.9 && (share - kernel).abs() <= 0.05,
        "{} throttled share {share}, cpu.stat's {kernel}",
        batch.name
    );
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
