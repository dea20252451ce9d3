//! A real single-node Kubernetes for the tests: kubelet v1.37 (built by `scripts/setup.sh` from
//! the Go module proxy) in standalone mode — no API server; pods are static, from manifests in a
//! directory it watches — over a real containerd ([`crate::cri`]), with kubelet's cgroupfs driver
//! and QoS cgroups (`/kubepods`, `/kubepods/burstable`, `/kubepods/besteffort`). Pods use the
//! host's network (no CNI). Read through kubelet's read-only port (`/pods`), as a node agent
//! without credentials would.
//!
//! kubelet changes four kernel settings when it starts (`kernel.panic`, `kernel.panic_on_oops`,
//! `vm.overcommit_memory`, `vm.panic_on_oom`: its `protectKernelDefaults: false` behaviour): they
//! are saved before and written back after, with everything else kubelet leaves on the host (its
//! QoS cgroups, `/var/lib/kubelet/device-plugins`, the pods' log directories, the bind mount of
//! its root directory).
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{
    Killed,
    cri::{BIN, Containerd, PAUSE_C, SPIN_C, image, remove_cgroup_tree, require, run},
    record::free_port,
};

// The test pods' images (`cri::image` of `cri::PAUSE_C`, `cri::SPIN_C`) and manifests.
pub const PAUSE: &str = "localhost/cgtrace-pause:test";
pub const SPIN: &str = "localhost/cgtrace-spin:test";

/// The busy pod: BestEffort, pinned to `cpu`, after an init container that runs 3 s. `gen`
/// goes into an annotation: a changed manifest is a new pod to kubelet (a new uid).
pub fn busy(cpu: usize, generation: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: busy
  namespace: shop
  annotations:
    cgtrace.test/generation: "{generation}"
spec:
  hostNetwork: true
  initContainers:
  - name: setup
    image: {SPIN}
    imagePullPolicy: Never
    command: ["/spin", "wait", "3000"]
  containers:
  - name: app
    image: {SPIN}
    imagePullPolicy: Never
    command: ["/spin", "cpu", "{cpu}"]
"#
    )
}

/// A CPU limit of 200m with requests equal: Guaranteed, throttled at 20 ms per 100 ms.
pub fn throttled() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: throttled
  namespace: shop
spec:
  hostNetwork: true
  containers:
  - name: worker
    image: {SPIN}
    imagePullPolicy: Never
    resources:
      limits: {{cpu: 200m, memory: 64Mi}}
      requests: {{cpu: 200m, memory: 64Mi}}
"#
    )
}

/// Burstable (a request, no limit) on the busy pod's CPU, with fifty times its weight.
pub fn noisy(cpu: usize) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: noisy
  namespace: batch
spec:
  hostNetwork: true
  containers:
  - name: hog
    image: {SPIN}
    imagePullPolicy: Never
    command: ["/spin", "cpu", "{cpu}"]
    resources:
      requests: {{cpu: 100m}}
"#
    )
}

/// A pod that reads its memory cgroup's `memory.stat` every 20 ms (BestEffort).
pub fn agent() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: agent
  namespace: shop
spec:
  hostNetwork: true
  containers:
  - name: reader
    image: {SPIN}
    imagePullPolicy: Never
    command: ["/spin", "read"]
"#
    )
}

/// The node's name: static pods are named `<pod>-<node>`.
pub const NODE: &str = "cgtrace-node";

/// The settings kubelet writes at start-up.
const SYSCTLS: [&str; 4] = [
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
];

/// Host directories kubelet or its pods make, removed after if the node made them.
const HOST_DIRS: [&str; 3] = ["/var/lib/kubelet", "/var/log/pods", "/var/log/containers"];

/// A running kubelet and its containerd; everything undone on drop (also when a test fails):
/// the manifests removed and the pods let go, kubelet and containerd stopped, the pods'
/// cgroups, logs and kubelet's directories removed, the kernel settings written back.
pub struct Node {
    pub dir: PathBuf,
    pub manifests: PathBuf,
    /// kubelet's read-only endpoint, `127.0.0.1:PORT`.
    pub read_only: String,
    containerd: Option<Containerd>,
    kubelet: Option<Killed>,
    sysctls: Vec<(&'static str, String)>,
    made: Vec<&'static str>,
}

/// kubelet's configuration: standalone, cgroupfs driver, QoS cgroups, read-only port, no
/// eviction (a test host's disk is not a node's), cgroup v1 allowed (this host).
fn config(dir: &Path, sock: &Path, port: u16, read_only: u16) -> String {
    let d = dir.display();
    let sock = sock.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
staticPodPath: {d}/manifests
fileCheckFrequency: 1s
syncFrequency: 5s
containerRuntimeEndpoint: unix://{sock}
imageServiceEndpoint: unix://{sock}
address: 127.0.0.1
port: {port}
readOnlyPort: {read_only}
healthzPort: 0
enableServer: true
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupsPerQOS: true
enforceNodeAllocatable: []
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  imagefs.available: "0%"
  nodefs.inodesFree: "0%"
localStorageCapacityIsolation: false
resolvConf: ""
registerNode: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#
    )
}

impl Node {
    /// containerd and kubelet with their files under `dir` (`pause`: the sandbox image; `images`:
    /// OCI archives imported before kubelet starts), once kubelet answers on its read-only port.
    pub fn start(dir: &Path, pause: &str, images: &[PathBuf]) -> Result<Self> {
        let sysctls = SYSCTLS
            .iter()
            .map(|k| {
                let v = fs::read_to_string(Path::new("/proc/sys").join(k))?;
                Ok((*k, v.trim().to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let made = HOST_DIRS
            .into_iter()
            .filter(|d| !Path::new(d).exists())
            .collect();
        let manifests = dir.join("manifests");
        fs::create_dir_all(&manifests)?;
        let (port, read_only) = (free_port()?, free_port()?);
        let mut node = Self {
            dir: dir.to_path_buf(),
            manifests,
            read_only: format!("127.0.0.1:{read_only}"),
            containerd: None,
            kubelet: None,
            sysctls,
            made,
        };
        let containerd = Containerd::start(dir, pause)?;
        for i in images {
            containerd.import(i)?;
        }
        fs::write(
            dir.join("kubelet.yaml"),
            config(dir, &containerd.socket(), port, read_only),
        )?;
        node.containerd = Some(containerd);
        let path = format!(
            "{BIN}:/usr/sbin:{}",
            std::env::var("PATH").unwrap_or_default()
        );
        node.kubelet = Some(Killed(
            Command::new(format!("{BIN}/kubelet"))
                .arg("--config")
                .arg(dir.join("kubelet.yaml"))
                .arg("--root-dir")
                .arg(dir.join("kubelet"))
                .arg("--cert-dir")
                .arg(dir.join("pki"))
                .args(["--hostname-override", NODE, "-v=2"])
                .env("PATH", &path)
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.join("kubelet.log"))?)
                .spawn()
                .context("starting kubelet")?,
        ));
        let deadline = Instant::now() + Duration::from_secs(60);
        while node.pods().is_err() {
            if Instant::now() > deadline {
                bail!("kubelet did not answer in 60 s: {}", node.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(node)
    }

    /// A node with the test pods' images (pause, spin: built here) and the archives `extra`
    /// imported, its files under `dir`; says first which Go-built program is missing.
    pub fn with_test_images(dir: &Path, extra: &[PathBuf]) -> Result<Self> {
        require(&[
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "crictl",
            "kubelet",
        ])?;
        let mut images = vec![
            image(dir, "pause", PAUSE_C, PAUSE)?,
            image(dir, "spin", SPIN_C, SPIN)?,
        ];
        images.extend_from_slice(extra);
        Self::start(dir, PAUSE, &images)
    }

    pub fn containerd(&self) -> &Containerd {
        self.containerd.as_ref().expect("started")
    }

    /// The last 40 lines of kubelet's log.
    pub fn log(&self) -> String {
        let l = fs::read_to_string(self.dir.join("kubelet.log")).unwrap_or_default();
        let lines: Vec<&str> = l.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// kubelet's pods (`GET /pods` on its read-only port).
    pub fn pods(&self) -> Result<Vec<Value>> {
        let out = run(Command::new("curl")
            .args(["-sSf", "--max-time", "5"])
            .arg(format!("http://{}/pods", self.read_only)))?;
        let v: Value = serde_json::from_str(&out)?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// The static pod `name` (without the node suffix) as kubelet has it.
    pub fn pod(&self, name: &str) -> Result<Option<Value>> {
        let full = format!("{name}-{NODE}");
        Ok(self
            .pods()?
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str()))
    }

    /// Writes the static pod manifest `name.yaml`.
    pub fn apply(&self, name: &str, yaml: &str) -> Result<()> {
        let tmp = self.dir.join(format!(".{name}.yaml"));
        fs::write(&tmp, yaml)?;
        // Renamed in, so kubelet never reads half a manifest.
        fs::rename(&tmp, self.manifests.join(format!("{name}.yaml")))?;
        Ok(())
    }

    /// Removes the static pod manifest `name.yaml`: kubelet stops and deletes the pod.
    pub fn delete(&self, name: &str) -> Result<()> {
        fs::remove_file(self.manifests.join(format!("{name}.yaml")))?;
        Ok(())
    }

    /// Waits until `ok` holds for kubelet's pods, at most `timeout`.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&[Value]) -> bool,
    ) -> Result<Vec<Value>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(pods) = self.pods()
                && ok(&pods)
            {
                return Ok(pods);
            }
            if Instant::now() > deadline {
                bail!(
                    "kubelet: {what} not within {timeout:?}; pods: {}\ncontainers' logs:\n{}\nkubelet log:\n{}",
                    self.pods()
                        .map(|p| summary(&p))
                        .unwrap_or_else(|e| e.to_string()),
                    container_logs(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The static pods' container logs (`/var/log/pods/<ns>_<pod>-<node>_<uid>/<container>/N.log`),
/// the last 10 lines of each.
pub fn container_logs() -> String {
    let mut out = String::new();
    for pod in fs::read_dir("/var/log/pods")
        .into_iter()
        .flatten()
        .flatten()
    {
        if !pod
            .file_name()
            .to_string_lossy()
            .contains(&format!("-{NODE}_"))
        {
            continue;
        }
        for c in fs::read_dir(pod.path()).into_iter().flatten().flatten() {
            for log in fs::read_dir(c.path()).into_iter().flatten().flatten() {
                let text = fs::read_to_string(log.path()).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                out += &format!(
                    "{}:\n{}\n",
                    log.path().display(),
                    lines[lines.len().saturating_sub(10)..].join("\n")
                );
            }
        }
    }
    out
}

/// A pod's state in one line: each container's name and state.
pub fn summary(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            let st = &p["status"];
            let cs: Vec<String> = ["initContainerStatuses", "containerStatuses"]
                .iter()
                .flat_map(|k| st[*k].as_array().cloned().unwrap_or_default())
                .map(|c| {
                    let state = c["state"]
                        .as_object()
                        .and_then(|o| o.keys().next().cloned())
                        .unwrap_or_default();
                    format!("{}={state}", c["name"].as_str().unwrap_or("?"))
                })
                .collect();
            format!(
                "{} {} [{}]",
                p["metadata"]["name"].as_str().unwrap_or("?"),
                st["phase"].as_str().unwrap_or("?"),
                cs.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether every container of the static pod `name` runs (its init containers done).
pub fn running(pods: &[Value], name: &str) -> bool {
    let full = format!("{name}-{NODE}");
    pods.iter()
        .filter(|p| p["metadata"]["name"] == full.as_str())
        .any(|p| {
            let cs = p["status"]["containerStatuses"].as_array();
            cs.is_some_and(|cs| {
                !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object())
            })
        })
}

impl Drop for Node {
    fn drop(&mut self) {
        // The pods let go by kubelet (it stops their containers), then kubelet stopped.
        if let Ok(entries) = fs::read_dir(&self.manifests) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        if self.kubelet.is_some() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.pods().is_ok_and(|p| !p.is_empty()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        if let Some(mut k) = self.kubelet.take() {
            let _ = crate::signal(k.0.id(), 15);
            crate::reap(&mut k.0, Duration::from_secs(10));
        }
        // containerd removes what pods are left, then stops.
        drop(self.containerd.take());
        let root = self.dir.join("kubelet");
        for _ in 0..3 {
            if Command::new("umount")
                .arg(&root)
                .stderr(Stdio::null())
                .status()
                .map(|s| !s.success())
                .unwrap_or(true)
            {
                break;
            }
        }
        remove_cgroup_tree("kubepods");
        // The static pods' logs (named `<ns>_<pod>-<node>_<uid>`, `<pod>-<node>_<ns>_…`), where
        // the directories were there before.
        for d in ["/var/log/pods", "/var/log/containers"] {
            for e in fs::read_dir(d).into_iter().flatten().flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .contains(&format!("-{NODE}_"))
                {
                    let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
                }
            }
        }
        for d in &self.made {
            let _ = fs::remove_dir_all(d);
        }
        for (k, v) in &self.sysctls {
            let _ = fs::write(Path::new("/proc/sys").join(k), v);
        }
    }
}
