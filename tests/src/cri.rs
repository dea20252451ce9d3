//! A real container runtime for the tests: containerd v2 with its CRI plugin (built by
//! `scripts/setup.sh` from the Go module proxy, Debian's runc underneath), on its own socket and
//! directories, and images built here with podman (`FROM scratch`, static musl binaries; nothing
//! is pulled). `tests/tests/cri.rs` drives it with crictl, `tests/tests/kubelet.rs` with a real
//! kubelet.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};

use crate::{Killed, scratch::path_str as s};

/// Where `scripts/setup.sh` puts the Go-built binaries.
pub const BIN: &str = "/opt/cgtrace/go/bin";

/// The sandbox's binary: kubelet's pause, but waking every 20 ms so that its cgroup shows in
/// cgtrace's windows (a cgroup that never runs is never listed).
pub const PAUSE_C: &str = r#"#include <signal.h>
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

/// The workloads' binary: `spin` a busy loop; `spin cpu N` the same pinned to CPU N; `spin wait
/// MS` wakes every 20 ms for MS milliseconds and exits 0 (an init container); `spin read` reads
/// its memory cgroup's `memory.stat` every 20 ms (what a metrics agent does).
pub const SPIN_C: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static void bye(int s) { (void)s; exit(0); }
int main(int argc, char **argv) {
    signal(SIGTERM, bye);
    if (argc == 2 && strcmp(argv[1], "read") == 0) {
        static char buf[65536];
        struct timespec t = {0, 20000000};
        for (;;) {
            int fd = open("/sys/fs/cgroup/memory/memory.stat", O_RDONLY);
            if (fd < 0) fd = open("/sys/fs/cgroup/memory.stat", O_RDONLY);
            if (fd < 0) return 1;
            while (read(fd, buf, sizeof buf) > 0) {}
            close(fd);
            nanosleep(&t, 0);
        }
    }
    if (argc == 3 && strcmp(argv[1], "wait") == 0) {
        long n = atol(argv[2]) / 20;
        struct timespec t = {0, 20000000};
        for (long i = 0; i < n; i++) nanosleep(&t, 0);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "cpu") == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(atoi(argv[2]), &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) return 1;
    }
    volatile unsigned long n = 0;
    for (;;) n++;
}
"#;

/// Runs `cmd`; its stdout, trimmed, or an error with everything it said.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Says which of the Go-built binaries `names` is missing, and how to build it.
pub fn require(names: &[&str]) -> Result<()> {
    for b in names {
        ensure!(
            Path::new(BIN).join(b).exists(),
            "{BIN}/{b} is missing: run scripts/setup.sh deps (built from the Go module proxy)"
        );
    }
    Ok(())
}

/// A static binary from `c` in a `FROM scratch` image `tag`, saved as an OCI archive.
pub fn image(dir: &Path, name: &str, c: &str, tag: &str) -> Result<PathBuf> {
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
    save(dir, name, tag, true)
}

/// Podman's image `tag` saved as `<dir>/<name>.tar` (an OCI archive), then removed from podman's
/// store when `remove`.
pub fn save(dir: &Path, name: &str, tag: &str, remove: bool) -> Result<PathBuf> {
    let archive = dir.join(format!("{name}.tar"));
    let _ = fs::remove_file(&archive);
    let saved = run(Command::new("podman")
        .args(["save", "--format", "oci-archive", "-o"])
        .arg(&archive)
        .arg(tag));
    if remove {
        let _ = Command::new("podman")
            .args(["rmi", "-f", tag])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    saved?;
    Ok(archive)
}

/// containerd on its own socket and directories under `dir`, the CRI plugin on runc with the
/// cgroupfs driver; `restrict_oom_score_adj` because this host's root lacks CAP_SYS_RESOURCE (a
/// sandbox's -998 is refused otherwise). The sandbox image is `pause`.
pub fn config(dir: &Path, pause: &str) -> String {
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
      sandbox = "{pause}"
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

/// A running containerd (stopped on drop, after every pod it still runs is stopped and removed).
pub struct Containerd {
    pub dir: PathBuf,
    child: Option<Killed>,
}

impl Containerd {
    /// containerd with its files under `dir`, once it answers; `pause` is the sandbox image.
    pub fn start(dir: &Path, pause: &str) -> Result<Self> {
        fs::write(dir.join("config.toml"), config(dir, pause))?;
        let path = format!(
            "{BIN}:/usr/sbin:{}",
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Killed(
            Command::new(format!("{BIN}/containerd"))
                .arg("--config")
                .arg(dir.join("config.toml"))
                .env("PATH", &path)
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.join("containerd.log"))?)
                .spawn()?,
        );
        let c = Self {
            dir: dir.to_path_buf(),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.ctr(&["version"]).is_err() {
            if Instant::now() > deadline {
                bail!("containerd did not start: {}", c.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(c)
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// Where containerd keeps its tasks' bundles (cgtrace's `--containerd-state`).
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// `ctr` in the CRI's namespace.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        run(Command::new(format!("{BIN}/ctr"))
            .arg("--address")
            .arg(self.socket())
            .args(["-n", "k8s.io"])
            .args(args))
    }

    pub fn import(&self, archive: &Path) -> Result<()> {
        self.ctr(&["images", "import", s(archive)]).map(drop)
    }

    /// `crictl` against this containerd.
    pub fn crictl(&self, args: &[&str]) -> Result<String> {
        let endpoint = format!("unix://{}", self.socket().display());
        run(Command::new(format!("{BIN}/crictl"))
            .args([
                "--runtime-endpoint",
                &endpoint,
                "--image-endpoint",
                &endpoint,
            ])
            .args(["--timeout", "30s"])
            .args(args))
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Ok(pods) = self.crictl(&["pods", "-q"]) {
            for pod in pods.lines().filter(|l| !l.is_empty()) {
                let _ = self.crictl(&["stopp", pod]);
                let _ = self.crictl(&["rmp", "-f", pod]);
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = crate::signal(c.0.id(), 15);
            crate::reap(&mut c.0, Duration::from_secs(10));
        }
    }
}

/// Removes the cgroup directory `dir` and everything under it in every hierarchy (children
/// first); `rel` is relative to each hierarchy's mount (`kubepods/burstable/pod<uid>`).
pub fn remove_cgroup_tree(rel: &str) {
    fn rm(d: &Path) {
        if let Ok(children) = fs::read_dir(d) {
            for c in children.flatten().filter(|c| c.path().is_dir()) {
                rm(&c.path());
            }
        }
        let _ = fs::remove_dir(d);
    }
    for h in fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        rm(&h.path().join(rel));
    }
}
