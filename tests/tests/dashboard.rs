//! The shipped Grafana dashboard (`deploy/grafana/cgtrace.json`) against a real Prometheus
//! (Debian's `prometheus`) scraping `cgtrace serve`, with three workloads: a busy one, one
//! throttled by its quota, one reading memory.stat. Twice: as pods on a Kubernetes node
//! (cgroupfs-driver paths, kubelet's log directories for their names) and on a host without
//! Kubernetes (a Docker container, systemd services), where no series has a `namespace` or `pod`.
//! Every query of every panel, its template variables at their "All" value, must return data,
//! and the per-cgroup ones must name the test's workloads. And the "who delays whom" panel on a
//! host without Kubernetes names a hog and a victim cgroup on one CPU, the panel's pair hog →
//! victim at the rate the stream charged.
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

/// One of the test's three workloads: its cgroup directories (cpu hierarchy first, then cpuacct
/// when mounted apart) and the `name` label cgtrace must give it.
struct Workload {
    name: String,
    dirs: Vec<PathBuf>,
}

/// Where the test's workloads live: a Kubernetes node (kubelet's cgroupfs paths, named by its
/// log directories) or a host without Kubernetes (a Docker container named by its
/// `config.v2.json`, systemd services).
#[derive(Clone, Copy, PartialEq)]
enum Host {
    Kubernetes,
    Plain,
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

/// Workload `n` (`role`: busy, batch, agent) on `host`, with its names planted where the real
/// thing keeps them.
fn workload(
    tree: &mut Tree,
    planted: &mut Planted,
    mounts: &[PathBuf],
    host: Host,
    ns: &str,
    role: &str,
    n: u32,
) -> Result<Workload> {
    let pid = std::process::id();
    let cid = format!("{:064x}", u64::from(pid) * 1000 + u64::from(n));
    match host {
        Host::Kubernetes => {
            let uid = format!("{pid:08x}-0000-4000-8000-{n:012x}");
            let pod = format!("{role}-0");
            let dirs = cgroup_dirs(tree, mounts, &format!("/kubepods/burstable/pod{uid}/{cid}"))?;
            plant_names(planted, ns, &pod, &uid, &cid)?;
            Ok(Workload {
                name: format!("{ns}/{pod}/main"),
                dirs,
            })
        }
        // The batch job a Docker container, the others systemd services.
        Host::Plain if role == "batch" => {
            let name = format!("{ns}-{role}");
            let dir = Path::new("/var/lib/docker/containers").join(&cid);
            plant_dir(planted, &dir)?;
            let config = dir.join("config.v2.json");
            fs::write(
                &config,
                format!("{{\"ID\":\"{cid}\",\"Name\":\"/{name}\"}}"),
            )?;
            planted.0.push(config);
            let dirs = cgroup_dirs(tree, mounts, &format!("/docker/{cid}"))?;
            Ok(Workload { name, dirs })
        }
        Host::Plain => {
            let name = format!("{ns}-{role}.service");
            let dirs = cgroup_dirs(tree, mounts, &format!("/system.slice/{name}"))?;
            Ok(Workload { name, dirs })
        }
    }
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

/// kubelet's names for the pod: `/var/log/pods/<ns>_<pod>_<uid>/` and
/// `/var/log/containers/<pod>_<ns>_<container>-<id>.log`.
fn plant_names(planted: &mut Planted, ns: &str, pod: &str, uid: &str, cid: &str) -> Result<()> {
    plant_dir(
        planted,
        &Path::new("/var/log/pods").join(format!("{ns}_{pod}_{uid}")),
    )?;
    let containers = Path::new("/var/log/containers");
    plant_dir(planted, containers)?;
    let cf = containers.join(format!("{pod}_{ns}_main-{cid}.log"));
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

/// The value a template variable takes at "All".
fn all_value(dash: &Value, var: &str) -> Result<String> {
    dash["templating"]["list"]
        .as_array()
        .context("templating")?
        .iter()
        .find(|v| v["name"] == var)
        .and_then(|v| v["allValue"].as_str())
        .map(str::to_string)
        .with_context(|| format!("variable {var} has no allValue"))
}

#[test]
fn every_dashboard_query_returns_data_on_a_kubernetes_node() -> Result<()> {
    every_query_returns_data(Host::Kubernetes)
}

/// A new user's first try on a host without Kubernetes: no `namespace` or `pod` label on any
/// series, the variables at "All".
#[test]
fn every_dashboard_query_returns_data_on_a_host_without_kubernetes() -> Result<()> {
    every_query_returns_data(Host::Plain)
}

/// Three workloads on `host` (busy, throttled by its quota, reading memory.stat); every query of
/// every panel, its variables at "All", returns data from a real Prometheus scraping
/// `cgtrace serve`, and every per-cgroup one names the test's workloads.
fn every_query_returns_data(host: Host) -> Result<()> {
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
    let mut make = |role, n| workload(&mut tree, &mut planted, &mounts, host, &ns, role, n);
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

    // Every panel's queries, variables at their "All" value, the rate interval 30 s.
    let (all_ns, all_pods) = (all_value(&dash, "namespace")?, all_value(&dash, "pod")?);
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
    assert!(exprs.len() >= 12, "{} queries", exprs.len());
    let ours = [&busy.name, &batch.name, &agent.name];
    // Wait until every query has data (rates need two scrapes inside 30 s), at most 90 s; a
    // per-cgroup query (it filters by namespace/pod) must name one of ours, a Kubernetes one
    // with our namespace.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<String>;
    loop {
        std::thread::sleep(Duration::from_secs(5));
        missing = Vec::new();
        for (title, e) in &exprs {
            let r = query(&prom, e).unwrap_or_default();
            let per_cgroup = e.contains("pod=~");
            let named = r.iter().any(|s| {
                ours.iter().any(|n| s["metric"]["name"] == n.as_str())
                    && (host == Host::Plain || s["metric"]["namespace"] == ns.as_str())
            });
            if r.is_empty() || (per_cgroup && !named) {
                missing.push(format!("{title}: {e}"));
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            break;
        }
    }
    assert!(
        missing.is_empty(),
        "queries without data (or without the test's cgroups by name) after 90 s:\n{}",
        missing.join("\n")
    );
    for (title, e) in &exprs {
        eprintln!("{title}: {} series", query(&prom, e)?.len());
    }
    // Every workload by name; on the node the variables' values are the test's namespace and
    // pods, elsewhere there are none (and "All" still matched everything above).
    let names = query(
        &prom,
        "count by (name, namespace, pod) (cgtrace_runq_wait_seconds_count)",
    )?;
    let has = |n: &str| names.iter().any(|s| s["metric"]["name"] == n);
    for n in ours {
        assert!(has(n), "{n} not among the names: {names:?}");
    }
    let pods: Vec<&str> = names
        .iter()
        .filter(|s| s["metric"]["namespace"] == ns.as_str())
        .filter_map(|s| s["metric"]["pod"].as_str())
        .collect();
    match host {
        Host::Kubernetes => {
            for p in ["busy-0", "batch-0", "agent-0"] {
                assert!(pods.contains(&p), "pod {p} in {pods:?}");
            }
        }
        Host::Plain => assert!(pods.is_empty(), "pods on a host without any: {pods:?}"),
    }
    // The throttled workload's share of periods throttled is high (the dashboard's panel).
    let share_expr = &exprs
        .iter()
        .find(|(t, _)| t == "Throttled share of periods")
        .context("no throttled share panel")?
        .1;
    let share = query(&prom, share_expr)?;
    let batch_share = share
        .iter()
        .find(|s| s["metric"]["name"] == batch.name.as_str())
        .and_then(|s| s["value"][1].as_str())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("{}'s throttled share in {share:?}", batch.name))?;
    eprintln!("{} throttled share {batch_share}", batch.name);
    assert!(
        batch_share > 0.9,
        "{} throttled share {batch_share}",
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
