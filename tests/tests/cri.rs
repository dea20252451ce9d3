//! Names from a real container runtime: containerd v2 with its CRI plugin (built by
//! `scripts/setup.sh` from the Go module proxy, Debian's runc underneath), driven by crictl as
//! kubelet drives it, runs a pod — its sandbox and one container — from images built here with
//! podman (`FROM scratch`, static binaries; nothing is pulled) under kubelet's cgroupfs layout
//! (`/kubepods/burstable/pod<uid>/<container id>`). No kubelet runs, so no
//! `/var/log/containers` link names a container: cgtrace must name the container and the
//! sandbox from containerd's own CRI metadata (`--containerd-state`).
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use cgtrace_tests::{
    Killed, can_trace,
    record::{cgtrace, lines, windows},
    scratch::{Scratch, path_str as s},
};
use serde_json::Value;

const BIN: &str = "/opt/cgtrace/go/bin";

/// The sandbox's binary: kubelet's pause, but waking every 20 ms so that its cgroup shows in
/// cgtrace's windows (a cgroup that never runs is never listed).
const PAUSE_C: &str = r#"#include <signal.h>
#include <stdlib.h>
#include <time.h>
static void bye(int s) { (void)s; exit(0); }
int main(void) {
    signal(SIGTERM, bye);
    signal(SIGINT, bye);
    struct timespec t = {0, 20000000};
    for (;;) nanosleep(&t, 0);
}
"#;

/// The container's binary: a busy loop.
const SPIN_C: &str = r#"#include <signal.h>
#include <stdlib.h>
static void bye(int s) { (void)s; exit(0); }
int main(void) {
    signal(SIGTERM, bye);
    volatile unsigned long n = 0;
    for (;;) n++;
}
"#;

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A static binary from `c` in a `FROM scratch` image `tag`, saved as an OCI archive.
fn image(dir: &Path, name: &str, c: &str, tag: &str) -> Result<PathBuf> {
    let ctx = dir.join(name);
    fs::create_dir_all(&ctx)?;
    fs::write(ctx.join("main.c"), c)?;
    run(Command::new("musl-gcc")
        .args(["-static", "-O2", "-o"])
        .arg(ctx.join(name))
        .arg(ctx.join("main.c")))?;
    fs::write(
        ctx.join("Containerfile"),
        format!("FROM scratch\nCOPY {name} /{name}\nENTRYPOINT [\"/{name}\"]\n"),
    )?;
    run(Command::new("podman")
        .args(["build", "-q", "-t", tag])
        .arg(&ctx))?;
    let archive = dir.join(format!("{name}.tar"));
    let _ = fs::remove_file(&archive);
    let saved = run(Command::new("podman")
        .args(["save", "--format", "oci-archive", "-o"])
        .arg(&archive)
        .arg(tag));
    let _ = Command::new("podman")
        .args(["rmi", "-f", tag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    saved?;
    Ok(archive)
}

/// containerd on its own socket and directories under `dir`, the CRI plugin on runc with the
/// cgroupfs driver; `restrict_oom_score_adj` because this host's root lacks CAP_SYS_RESOURCE (a
/// sandbox's -998 is refused otherwise).
fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 3
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.btrfs"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = "{d}/debug.sock"
[metrics]
  address = ""
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{d}/opt"
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "{d}/shim"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "localhost/cgtrace-pause:test"
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    disable_apparmor = true
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "/usr/sbin/runc"
          Root = "{d}/runc"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{d}/cni/bin"]
      conf_dir = "{d}/cni/net.d"
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"#
    )
}

/// What the test made outside its scratch directory, undone on drop (also when it fails): the
/// pod stopped and removed, containerd stopped, the pod's cgroups and log directory removed.
struct Node {
    containerd: Option<Killed>,
    crictl: Vec<String>,
    pod: Option<String>,
    uid: String,
}

impl Node {
    fn crictl(&self, args: &[&str]) -> Result<String> {
        run(Command::new(format!("{BIN}/crictl"))
            .args(&self.crictl)
            .args(args))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(pod) = self.pod.take() {
            let _ = self.crictl(&["stopp", &pod]);
            let _ = self.crictl(&["rmp", "-f", &pod]);
        }
        if let Some(mut c) = self.containerd.take() {
            let _ = cgtrace_tests::signal(c.0.id(), 15);
            cgtrace_tests::reap(&mut c.0, Duration::from_secs(10));
        }
        for h in fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let pod = h.path().join(format!("kubepods/burstable/pod{}", self.uid));
            if let Ok(children) = fs::read_dir(&pod) {
                for c in children.flatten().filter(|c| c.path().is_dir()) {
                    let _ = fs::remove_dir(c.path());
                }
            }
            for d in [
                pod.clone(),
                h.path().join("kubepods/burstable"),
                h.path().join("kubepods"),
            ] {
                let _ = fs::remove_dir(d);
            }
        }
        let _ = fs::remove_dir_all(format!("/var/log/pods/default_web-0_{}", self.uid));
        let _ = fs::remove_dir("/var/log/pods");
    }
}

#[test]
fn a_real_cri_pods_sandbox_and_container_are_named_from_containerd() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    for b in ["containerd", "containerd-shim-runc-v2", "ctr", "crictl"] {
        ensure!(
            Path::new(BIN).join(b).exists(),
            "{BIN}/{b} is missing: run scripts/setup.sh deps (containerd and crictl, built from the Go module proxy)"
        );
    }
    let scratch = Scratch::new("cri")?;
    let dir = scratch.0.clone();
    let pause = image(&dir, "pause", PAUSE_C, "localhost/cgtrace-pause:test")?;
    let spin = image(&dir, "spin", SPIN_C, "localhost/cgtrace-spin:test")?;
    fs::write(dir.join("config.toml"), config(&dir))?;
    let sock = dir.join("containerd.sock");
    let path = format!("{BIN}:{}", std::env::var("PATH").unwrap_or_default());
    let uid = format!(
        "{:08x}-c0de-4000-8000-{:012x}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() as u64 & 0xffff_ffff_ffff
    );
    let mut node = Node {
        containerd: None,
        crictl: vec![
            "--runtime-endpoint".into(),
            format!("unix://{}", sock.display()),
            "--image-endpoint".into(),
            format!("unix://{}", sock.display()),
            "--timeout".into(),
            "30s".into(),
        ],
        pod: None,
        uid: uid.clone(),
    };
    node.containerd = Some(Killed(
        Command::new(format!("{BIN}/containerd"))
            .arg("--config")
            .arg(dir.join("config.toml"))
            .env("PATH", &path)
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("containerd.log"))?)
            .spawn()?,
    ));
    let ctr = |args: &[&str]| {
        run(Command::new(format!("{BIN}/ctr"))
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io"])
            .args(args))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while ctr(&["version"]).is_err() {
        if Instant::now() > deadline {
            bail!(
                "containerd did not start: {}",
                fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for archive in [&pause, &spin] {
        ctr(&["images", "import", s(archive)])?;
    }
    let pod_json = dir.join("pod.json");
    fs::write(
        &pod_json,
        serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "default", "uid": uid, "attempt": 0},
            "log_directory": format!("/var/log/pods/default_web-0_{uid}"),
            "linux": {
                "cgroup_parent": format!("/kubepods/burstable/pod{uid}"),
                "security_context": {"namespace_options": {"network": 2}}
            }
        })
        .to_string(),
    )?;
    let ctr_json = dir.join("container.json");
    fs::write(
        &ctr_json,
        serde_json::json!({
            "metadata": {"name": "main", "attempt": 0},
            "image": {"image": "localhost/cgtrace-spin:test"},
            "log_path": "main/0.log",
            "linux": {"resources": {"cpu_shares": 512, "cpu_period": 100000, "cpu_quota": 20000}}
        })
        .to_string(),
    )?;
    let pod = node.crictl(&["runp", s(&pod_json)]).map_err(|e| {
        anyhow::anyhow!(
            "{e}; containerd: {}",
            fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
        )
    })?;
    node.pod = Some(pod.clone());
    let container = node.crictl(&["create", &pod, s(&ctr_json), s(&pod_json)])?;
    node.crictl(&["start", &container])?;

    let (code, stdout, err) = cgtrace(&[
        "stream",
        "--duration",
        "3",
        "--containerd-state",
        s(&dir.join("state")),
    ])?;
    assert_eq!(code, 0, "{err}");
    let stream = lines(&stdout)?;
    let named = |id: &str| -> Option<(String, Value)> {
        windows(&stream)
            .iter()
            .flat_map(|w| w["cgroups"].as_array().into_iter().flatten())
            .find(|c| {
                c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(&format!("/pod{uid}/{id}")))
            })
            .map(|c| (c["name"].as_str().unwrap_or("").to_string(), c.clone()))
    };
    let (main, c) = named(&container).context("the container's cgroup in the windows")?;
    let (sandbox, _) = named(&pod).context("the sandbox's cgroup in the windows")?;
    eprintln!("containerd's pod: container {main:?}, sandbox {sandbox:?}");
    assert_eq!(main, "default/web-0/main", "{c}");
    assert_eq!(sandbox, "default/web-0/POD");
    Ok(())
}
