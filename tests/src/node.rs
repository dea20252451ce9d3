//! A simulated Kubernetes node: kubelet's cgroup tree (cgroupfs or systemd driver) on every
//! hierarchy of this host, pods whose containers are real processes joined to each hierarchy as
//! runc joins them ([`podproc`](../bin/podproc.rs)), a mix of quiet, bursty, request/response and
//! quota-bound busy workloads, pod churn at a set rate, a kubelet/cAdvisor-like reader of every
//! container's stat files and a node_exporter-like reader of sysfs and procfs. Names come from
//! kubelet's log directories, as on a node.
//!
//! Long-lived pods (never replaced) are the ones the checks compare with the kernel: the
//! quota-bound ones against their `cpu.stat`, the sampled ones against the per-thread
//! `schedstat` run_delay of their processes.
use std::{
    collections::{HashMap, VecDeque},
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::workload::bin;

/// kubelet's `--cgroup-driver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

impl std::str::FromStr for Driver {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cgroupfs" => Ok(Self::Cgroupfs),
            "systemd" => Ok(Self::Systemd),
            _ => Err(format!(
                "unknown cgroup driver {s:?}: use cgroupfs or systemd"
            )),
        }
    }
}

/// What the node runs. Every size is a field.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Pods alive at any time (the long-lived ones included).
    pub pods: usize,
    /// Containers per pod.
    pub containers: usize,
    /// Pod replacements per minute (one pod removed, a new one made).
    pub replace_per_min: f64,
    /// Long-lived pods under a CPU limit that their busy threads exceed (throttled every period).
    pub throttled_pods: usize,
    /// CPU limit of each throttled pod, in millicores.
    pub throttled_millicores: u64,
    /// Busy threads in each throttled pod's container.
    pub throttled_threads: u64,
    /// Long-lived pods whose run-queue wait is compared with the kernel's schedstat.
    pub sampled_pods: usize,
    /// How often the kubelet/cAdvisor-like reader reads every container's stat files.
    pub stats_every: Duration,
    /// How often the node_exporter-like reader reads sysfs and procfs.
    pub sysfs_every: Duration,
    /// KiB of page cache each new container writes (so removed pods leave dying memcgs).
    pub cache_kib: usize,
    pub driver: Driver,
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            pods: 200,
            containers: 1,
            replace_per_min: 60.0,
            throttled_pods: 3,
            throttled_millicores: 100,
            throttled_threads: 2,
            sampled_pods: 4,
            stats_every: Duration::from_secs(10),
            sysfs_every: Duration::from_secs(10),
            cache_kib: 64,
            driver: Driver::Cgroupfs,
        }
    }
}

/// A mounted cgroup hierarchy the simulated runtime joins.
#[derive(Clone, Debug)]
struct Hierarchy {
    mount: PathBuf,
    /// cgroup2 (the unified tree: controllers enabled per level).
    v2: bool,
    cpuset: bool,
}

/// The hierarchy run-queue waits are keyed by (v1 `cpu`, else cgroup2) comes first.
fn hierarchies() -> Result<Vec<Hierarchy>> {
    let info = fs::read_to_string("/proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut r = right.split_whitespace();
        let fstype = r.next().unwrap_or("");
        let opts = r.nth(1).unwrap_or("");
        let mount = PathBuf::from(left.split_whitespace().nth(4).unwrap_or(""));
        match fstype {
            "cgroup2" => out.push(Hierarchy {
                mount,
                v2: true,
                cpuset: false,
            }),
            "cgroup" => out.push(Hierarchy {
                mount,
                v2: false,
                cpuset: opts.split(',').any(|o| o == "cpuset"),
            }),
            _ => {}
        }
    }
    let (runq, _) = crate::cgroup::runq_mount();
    out.sort_by_key(|h| h.mount != runq);
    out.dedup_by(|a, b| a.mount == b.mount);
    if out.first().is_none_or(|h| h.mount != runq) {
        bail!("the run-queue hierarchy {} is not mounted", runq.display());
    }
    Ok(out)
}

/// What a pod's containers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Wakes every 50 ms.
    Quiet,
    /// One thread spins 20 ms every 400 ms.
    Bursty,
    /// Request/response pairs over pipes.
    PingPong,
    /// Busy threads under a CPU limit (long-lived).
    Throttled,
}

/// One container: its cgroup in each hierarchy and its process.
pub struct Container {
    pub name: String,
    pub cid: String,
    /// Directory in each hierarchy, run-queue hierarchy first.
    pub dirs: Vec<PathBuf>,
    /// Path in the run-queue hierarchy, as the stream shows it.
    pub rel: String,
    /// `kernfs_node.id` in the run-queue hierarchy.
    pub id: u64,
    child: Child,
}

impl Container {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub role: Role,
    pub long_lived: bool,
    /// Directory in each hierarchy, run-queue hierarchy first.
    pub dirs: Vec<PathBuf>,
    pub rel: String,
    pub id: u64,
    pub containers: Vec<Container>,
    planted: Vec<PathBuf>,
    cache: Vec<PathBuf>,
}

impl Pod {
    /// The stream's name of one of its containers: `ns/pod/container`.
    pub fn container_display(&self, c: &Container) -> String {
        format!("{}/{}/{}", self.namespace, self.name, c.name)
    }
}

/// The node: its tree, pods, churn and readers. Dropping it removes everything it made.
pub struct Node {
    spec: Spec,
    hier: Vec<Hierarchy>,
    /// Directories made for the kubelet tree itself (`kubepods`, QoS levels), removed last.
    base: Vec<PathBuf>,
    base_planted: Vec<PathBuf>,
    cache_dir: PathBuf,
    pods: Arc<Mutex<VecDeque<Pod>>>,
    /// Removed pods (kept only as counts) and pods made.
    pub made: Arc<AtomicU64>,
    pub removed: Arc<AtomicU64>,
    /// Cgroup ids of removed pods and their containers, with when they were removed.
    pub gone: Arc<Mutex<Vec<(u64, Instant)>>>,
    /// Reads the readers made, and failures other than a file vanishing with its pod.
    pub stat_reads: Arc<AtomicU64>,
    pub sysfs_reads: Arc<AtomicU64>,
    pub errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    seq: Arc<AtomicU64>,
}

const NAMESPACES: [&str; 4] = ["default", "payments", "batch", "kube-system"];

fn uid_for(n: u64) -> String {
    let pid = std::process::id();
    format!("{pid:08x}-5e1a-4000-8000-{n:012x}")
}

fn cid_for(n: u64, c: usize) -> String {
    format!(
        "{:016x}{:048x}",
        u64::from(std::process::id()) << 20 | n,
        c as u64 + 1
    )
}

fn ino(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(p).map(|m| m.ino()).unwrap_or(0)
}

impl Node {
    /// Builds the tree and starts every pod, the churn and the readers.
    pub fn start(spec: Spec) -> Result<Node> {
        let hier = hierarchies()?;
        let top = match spec.driver {
            Driver::Cgroupfs => "kubepods",
            Driver::Systemd => "kubepods.slice",
        };
        for h in &hier {
            if h.mount.join(top).exists() {
                bail!(
                    "{} already exists: the simulator makes its own kubelet tree and will not mix with a real one",
                    h.mount.join(top).display()
                );
            }
        }
        let cache_dir = std::env::temp_dir().join(format!("cgtrace-node-{}", std::process::id()));
        fs::create_dir_all(&cache_dir)?;
        let mut node = Node {
            spec,
            hier,
            base: Vec::new(),
            base_planted: Vec::new(),
            cache_dir,
            pods: Arc::default(),
            made: Arc::default(),
            removed: Arc::default(),
            gone: Arc::default(),
            stat_reads: Arc::default(),
            sysfs_reads: Arc::default(),
            errors: Arc::default(),
            stop: Arc::default(),
            threads: Vec::new(),
            seq: Arc::default(),
        };
        node.make_base()?;
        let spec = &node.spec;
        let mut roles = Vec::new();
        roles.extend(std::iter::repeat_n(
            (Role::Throttled, true),
            spec.throttled_pods,
        ));
        for i in 0..spec.sampled_pods {
            let role = if i % 2 == 0 {
                Role::Bursty
            } else {
                Role::Quiet
            };
            roles.push((role, true));
        }
        let fixed = roles.len();
        for i in 0..spec.pods.saturating_sub(fixed) {
            roles.push((churn_role(i as u64), false));
        }
        let ctx = node.ctx();
        for (role, long_lived) in roles {
            let pod = ctx.make_pod(role, long_lived)?;
            node.pods.lock().unwrap().push_back(pod);
        }
        node.spawn_churn();
        node.spawn_stat_reader();
        node.spawn_sysfs_reader();
        Ok(node)
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            spec: self.spec.clone(),
            hier: self.hier.clone(),
            cache_dir: self.cache_dir.clone(),
            seq: self.seq.clone(),
            made: self.made.clone(),
        }
    }

    /// `kubepods` and its QoS levels in every hierarchy, and kubelet's log directories.
    fn make_base(&mut self) -> Result<()> {
        for rel in qos_dirs(self.spec.driver) {
            for h in &self.hier {
                let dir = h.mount.join(&rel);
                if !dir.exists() {
                    make_cgroup(h, &dir)?;
                    self.base.push(dir);
                }
            }
        }
        for d in ["/var/log/pods", "/var/log/containers"] {
            if !Path::new(d).exists() {
                fs::create_dir_all(d)?;
                self.base_planted.push(PathBuf::from(d));
            }
        }
        Ok(())
    }

    fn spawn_churn(&mut self) {
        if self.spec.replace_per_min <= 0.0 {
            return;
        }
        let every = Duration::from_secs_f64(60.0 / self.spec.replace_per_min);
        let (pods, stop, ctx) = (self.pods.clone(), self.stop.clone(), self.ctx());
        let (removed, gone, errors) =
            (self.removed.clone(), self.gone.clone(), self.errors.clone());
        self.threads.push(std::thread::spawn(move || {
            let mut next = Instant::now() + every;
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now < next {
                    std::thread::sleep((next - now).min(Duration::from_millis(100)));
                    continue;
                }
                next += every;
                // The oldest churnable pod goes; a new one with the same role comes.
                let old = {
                    let mut p = pods.lock().unwrap();
                    let i = p.iter().position(|p| !p.long_lived);
                    i.and_then(|i| p.remove(i))
                };
                if let Some(old) = old {
                    let role = old.role;
                    let mut ids = vec![old.id];
                    ids.extend(old.containers.iter().map(|c| c.id));
                    if let Err(e) = remove_pod(old) {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("removing a pod: {e:#}"));
                    }
                    removed.fetch_add(1, Ordering::Relaxed);
                    let now = Instant::now();
                    gone.lock()
                        .unwrap()
                        .extend(ids.into_iter().map(|id| (id, now)));
                    match ctx.make_pod(role, false) {
                        Ok(pod) => pods.lock().unwrap().push_back(pod),
                        Err(e) => errors.lock().unwrap().push(format!("making a pod: {e:#}")),
                    }
                } else {
                    let role = churn_role(k);
                    match ctx.make_pod(role, false) {
                        Ok(pod) => pods.lock().unwrap().push_back(pod),
                        Err(e) => errors.lock().unwrap().push(format!("making a pod: {e:#}")),
                    }
                }
                k += 1;
            }
        }));
    }

    /// kubelet/cAdvisor: every container's and pod's `cpu.stat`, `memory.stat` and memory usage,
    /// every `stats_every`, from a thread named `cadvisor`.
    fn spawn_stat_reader(&mut self) {
        let (pods, reads) = (self.pods.clone(), self.stat_reads.clone());
        let errors = self.errors.clone();
        let every = self.spec.stats_every;
        let v2 = self.hier[0].v2;
        let mem = self
            .hier
            .iter()
            .position(|h| h.v2 || h.mount.ends_with("memory"));
        self.spawn_every("cadvisor", "spawning the stat reader", every, move || {
            let dirs: Vec<(PathBuf, Option<PathBuf>)> = {
                let p = pods.lock().unwrap();
                p.iter()
                    .flat_map(|pod| {
                        std::iter::once(&pod.dirs).chain(pod.containers.iter().map(|c| &c.dirs))
                    })
                    .map(|d| (d[0].clone(), mem.map(|m| d[m].clone())))
                    .collect()
            };
            for (cpu, mem) in dirs {
                let mut files = vec![cpu.join("cpu.stat")];
                if let Some(m) = mem {
                    files.push(m.join("memory.stat"));
                    files.push(m.join(if v2 {
                        "memory.current"
                    } else {
                        "memory.usage_in_bytes"
                    }));
                }
                for f in files {
                    match fs::read(&f) {
                        Ok(_) => {
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        // The pod went between the listing and the read.
                        Err(_) if !f.parent().is_some_and(Path::exists) => {}
                        Err(e) => errors
                            .lock()
                            .unwrap()
                            .push(format!("reading {}: {e}", f.display())),
                    }
                }
            }
        });
    }

    /// node_exporter: per-CPU sysfs files, `/proc/stat`, `/proc/meminfo` and the root's
    /// `memory.stat`, every `sysfs_every`, from a thread named `node_exporter`.
    fn spawn_sysfs_reader(&mut self) {
        let reads = self.sysfs_reads.clone();
        let every = self.spec.sysfs_every;
        let mut files: Vec<PathBuf> = vec![
            "/proc/stat".into(),
            "/proc/meminfo".into(),
            "/proc/loadavg".into(),
            "/proc/pressure/cpu".into(),
        ];
        if let Ok(cpus) = fs::read_dir("/sys/devices/system/cpu") {
            for c in cpus.flatten() {
                let name = c.file_name().to_string_lossy().into_owned();
                if !name.starts_with("cpu") || !name[3..].chars().all(|ch| ch.is_ascii_digit()) {
                    continue;
                }
                for sub in ["topology", "cpufreq", "cache/index0"] {
                    if let Ok(entries) = fs::read_dir(c.path().join(sub)) {
                        files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
                    }
                }
            }
        }
        self.spawn_every(
            "node_exporter",
            "spawning the sysfs reader",
            every,
            move || {
                for f in &files {
                    if fs::read(f).is_ok() {
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            },
        );
    }

    /// Starts a thread named `name` that runs `tick` every `every` (the first at once, then on
    /// schedule, looking every 50 ms) until the node stops; panics with `what` if it cannot start.
    fn spawn_every(
        &mut self,
        name: &str,
        what: &str,
        every: Duration,
        mut tick: impl FnMut() + Send + 'static,
    ) {
        let stop = self.stop.clone();
        self.threads.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        if Instant::now() < next {
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                        next += every;
                        tick();
                    }
                })
                .expect(what),
        );
    }

    /// The pods now (a snapshot under the lock: `f` sees them all).
    pub fn with_pods<T>(&self, f: impl FnOnce(&VecDeque<Pod>) -> T) -> T {
        f(&self.pods.lock().unwrap())
    }

    /// Stops the churn and the readers; the pods keep running.
    pub fn stop_churn(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_churn();
        let pods: Vec<Pod> = self.pods.lock().unwrap().drain(..).collect();
        for p in pods {
            let _ = remove_pod(p);
        }
        for d in self.base.iter().rev() {
            for _ in 0..50 {
                if fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for p in self.base_planted.iter().rev() {
            let _ = fs::remove_dir(p);
        }
        let _ = fs::remove_dir_all(&self.cache_dir);
    }
}

/// What the churn thread needs to make a pod.
struct Ctx {
    spec: Spec,
    hier: Vec<Hierarchy>,
    cache_dir: PathBuf,
    seq: Arc<AtomicU64>,
    made: Arc<AtomicU64>,
}

fn churn_role(k: u64) -> Role {
    match k % 10 {
        0 | 5 => Role::Bursty,
        3 => Role::PingPong,
        _ => Role::Quiet,
    }
}

fn qos_dirs(driver: Driver) -> Vec<String> {
    match driver {
        Driver::Cgroupfs => vec![
            "kubepods".into(),
            "kubepods/burstable".into(),
            "kubepods/besteffort".into(),
        ],
        Driver::Systemd => vec![
            "kubepods.slice".into(),
            "kubepods.slice/kubepods-burstable.slice".into(),
            "kubepods.slice/kubepods-besteffort.slice".into(),
        ],
    }
}

/// mkdir, with what the hierarchy needs before a task can join (cpuset's CPUs and memory nodes;
/// cgroup2's controllers enabled in the parent).
fn make_cgroup(h: &Hierarchy, dir: &Path) -> Result<()> {
    if h.v2
        && let Some(parent) = dir.parent()
    {
        let want = fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
        let on = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
        for c in ["cpu", "memory", "pids"] {
            if want.split_whitespace().any(|w| w == c) && !on.split_whitespace().any(|w| w == c) {
                fs::write(parent.join("cgroup.subtree_control"), format!("+{c}"))
                    .with_context(|| format!("enabling {c} in {}", parent.display()))?;
            }
        }
    }
    fs::create_dir(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    if h.cpuset
        && let Some(parent) = dir.parent()
    {
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let v = fs::read_to_string(parent.join(f)).unwrap_or_default();
            fs::write(dir.join(f), v.trim()).with_context(|| format!("writing {f}"))?;
        }
    }
    Ok(())
}

fn set_quota(h: &Hierarchy, dir: &Path, quota_us: u64, period_us: u64) -> Result<()> {
    if h.v2 {
        fs::write(dir.join("cpu.max"), format!("{quota_us} {period_us}"))?;
    } else {
        fs::write(dir.join("cpu.cfs_period_us"), period_us.to_string())?;
        fs::write(dir.join("cpu.cfs_quota_us"), quota_us.to_string())?;
    }
    Ok(())
}

impl Ctx {
    fn make_pod(&self, role: Role, long_lived: bool) -> Result<Pod> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let uid = uid_for(n);
        let namespace = NAMESPACES[(n as usize) % NAMESPACES.len()].to_string();
        let name = format!(
            "{}-{n}",
            match role {
                Role::Quiet => "web",
                Role::Bursty => "api",
                Role::PingPong => "cache",
                Role::Throttled => "batch",
            }
        );
        let guaranteed = role == Role::Throttled;
        let qos = if guaranteed {
            ""
        } else if n.is_multiple_of(3) {
            "besteffort"
        } else {
            "burstable"
        };
        let rel = match self.spec.driver {
            Driver::Cgroupfs if guaranteed => format!("kubepods/pod{uid}"),
            Driver::Cgroupfs => format!("kubepods/{qos}/pod{uid}"),
            Driver::Systemd => {
                let us = uid.replace('-', "_");
                if guaranteed {
                    format!("kubepods.slice/kubepods-pod{us}.slice")
                } else {
                    format!("kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{us}.slice")
                }
            }
        };
        // kubelet: the pod's log directory first, then its cgroup, then the containers.
        let mut planted = Vec::new();
        let pod_logs = PathBuf::from(format!("/var/log/pods/{namespace}_{name}_{uid}"));
        fs::create_dir_all(&pod_logs)?;
        planted.push(pod_logs);
        let mut dirs = Vec::new();
        for h in &self.hier {
            let d = h.mount.join(&rel);
            make_cgroup(h, &d)?;
            dirs.push(d);
        }
        let mut pod = Pod {
            namespace,
            name,
            uid,
            role,
            long_lived,
            id: ino(&dirs[0]),
            rel: format!("/{rel}"),
            dirs,
            containers: Vec::new(),
            planted,
            cache: Vec::new(),
        };
        let period = 100_000;
        let quota = self.spec.throttled_millicores * period / 1000;
        if guaranteed {
            set_quota(
                &self.hier[0],
                &pod.dirs[0],
                quota * self.spec.containers as u64,
                period,
            )?;
        }
        for c in 0..self.spec.containers {
            let cid = cid_for(n, c);
            let cname = if c == 0 {
                "main".to_string()
            } else {
                format!("sidecar{c}")
            };
            let leaf = match self.spec.driver {
                Driver::Cgroupfs => cid.clone(),
                Driver::Systemd => format!("cri-containerd-{cid}.scope"),
            };
            let log = PathBuf::from(format!(
                "/var/log/containers/{}_{}_{cname}-{cid}.log",
                pod.name, pod.namespace
            ));
            fs::write(&log, b"")?;
            pod.planted.push(log);
            let mut cdirs = Vec::new();
            for (h, pd) in self.hier.iter().zip(&pod.dirs) {
                let d = pd.join(&leaf);
                make_cgroup(h, &d)?;
                cdirs.push(d);
            }
            if guaranteed {
                set_quota(&self.hier[0], &cdirs[0], quota, period)?;
            }
            let mut cmd = Command::new(bin("podproc"));
            match role {
                Role::Quiet => cmd.args(["sleep", "50"]),
                Role::Bursty => cmd.args(["burst", "1", "20", "400"]),
                Role::PingPong => cmd.args(["pipe", "50", "20"]),
                Role::Throttled => cmd.args(["busy", &self.spec.throttled_threads.to_string()]),
            };
            let join: Vec<String> = cdirs.iter().map(|d| d.display().to_string()).collect();
            cmd.env("CGTRACE_JOIN", join.join(":"));
            if self.spec.cache_kib > 0 {
                let f = self.cache_dir.join(format!("{cid}.log"));
                cmd.env(
                    "CGTRACE_CACHE",
                    format!("{}:{}", f.display(), self.spec.cache_kib),
                );
                pod.cache.push(f);
            }
            cmd.stdin(Stdio::null()).stdout(Stdio::null());
            let child = cmd.spawn().context("starting podproc")?;
            let rel_c = format!("{}/{leaf}", pod.rel);
            pod.containers.push(Container {
                name: cname,
                id: ino(&cdirs[0]),
                cid,
                dirs: cdirs,
                rel: rel_c,
                child,
            });
        }
        self.made.fetch_add(1, Ordering::Relaxed);
        Ok(pod)
    }
}

/// Kills the pod's processes, removes its containers' and its own cgroups in every hierarchy and
/// its log names; the page cache it wrote stays charged (a dying memcg, as on a node).
fn remove_pod(mut pod: Pod) -> Result<()> {
    for c in &mut pod.containers {
        let _ = c.child.kill();
        let _ = c.child.wait();
    }
    let mut dirs: Vec<PathBuf> = pod
        .containers
        .iter()
        .flat_map(|c| c.dirs.iter().cloned())
        .collect();
    dirs.extend(pod.dirs.iter().cloned());
    let mut last = Ok(());
    for d in dirs {
        let mut ok = false;
        for _ in 0..100 {
            if fs::remove_dir(&d).is_ok() || !d.exists() {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !ok {
            last = Err(anyhow::anyhow!("rmdir {}", d.display()));
        }
    }
    for p in pod.planted.iter().rev() {
        let _ = fs::remove_file(p).or_else(|_| fs::remove_dir(p));
    }
    last
}

/// Per-thread `run_delay` (ns, the second field of `/proc/PID/task/TID/schedstat`) summed over a
/// process's threads.
pub fn run_delay_ns(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// The daemon's resident set (KiB) and CPU time (ticks: utime + stime) from procfs.
pub fn proc_usage(pid: u32) -> (u64, u64) {
    let rss = status_kib(pid, "VmRSS").unwrap_or(0);
    let cpu = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            // After the comm: state is not a number, so utime/stime are fields 11 and 12 here.
            Some(f.get(10)? + f.get(11)?)
        })
        .unwrap_or(0);
    (rss, cpu)
}

/// A KiB field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Node {
    /// run_delay of every long-lived pod's containers, by container cgroup id.
    pub fn sample_run_delay(&self) -> HashMap<u64, u64> {
        self.with_pods(|pods| {
            pods.iter()
                .filter(|p| p.long_lived && p.role != Role::Throttled)
                .flat_map(|p| p.containers.iter())
                .map(|c| (c.id, run_delay_ns(c.pid())))
                .collect()
        })
    }
}
