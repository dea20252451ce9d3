//! A private, real `lxcfs` (FUSE) for the slow-reads tests: its `proc/meminfo`, `proc/cpuinfo`,
//! `proc/stat`, … are computed per reader from the reader's cgroups, on every read.
use std::{
    fs,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::fuse::{fusermount_unmount, is_mounted, lazy_unmount};

/// The lxcfs binary (Debian package `lxcfs`).
pub const LXCFS_BIN: &str = "/usr/bin/lxcfs";

/// A running `lxcfs -f --pidfile=… DIR`, stopped and unmounted on drop.
pub struct Lxcfs {
    /// The mount: `<mount>/proc/meminfo` etc.
    pub mount: PathBuf,
    /// Its own pidfile (not `/run/lxcfs.pid`, so a system lxcfs is left alone).
    pub pidfile: PathBuf,
    /// lxcfs's stderr goes here.
    pub log: PathBuf,
    child: Child,
}

impl Lxcfs {
    /// Runs lxcfs in the foreground as a child on a fresh `/var/lib/cgtrace-lxcfs-<pid>` and waits
    /// (up to 15 s) until `<mount>/proc/meminfo` is readable.
    pub fn start() -> Result<Self> {
        if !Path::new(LXCFS_BIN).exists() {
            bail!("{LXCFS_BIN} missing: install the Debian package lxcfs");
        }
        let pid = std::process::id();
        let mount = PathBuf::from(format!("/var/lib/cgtrace-lxcfs-{pid}"));
        let pidfile = PathBuf::from(format!("/run/cgtrace-lxcfs-{pid}.pid"));
        let log = PathBuf::from(format!("/tmp/cgtrace-lxcfs-{pid}.log"));
        lazy_unmount(&mount);
        let _ = fs::remove_dir(&mount);
        fs::create_dir_all(&mount).with_context(|| format!("mkdir {}", mount.display()))?;
        let _ = fs::remove_file(&pidfile);
        let err = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(LXCFS_BIN)
            .arg("-f")
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(&mount)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .context("starting lxcfs")?;
        let mut l = Self {
            mount,
            pidfile,
            log,
            child,
        };
        let meminfo = l.path("proc/meminfo");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if is_mounted(&l.mount, "fuse.lxcfs")?
                && fs::read_to_string(&meminfo).is_ok_and(|s| s.contains("MemTotal"))
            {
                return Ok(l);
            }
            if let Some(status) = l.child.try_wait()? {
                bail!(
                    "lxcfs exited before mounting ({status}): {}",
                    fs::read_to_string(&l.log).unwrap_or_default().trim()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "lxcfs: {} not readable after 15 s: {}",
                    meminfo.display(),
                    fs::read_to_string(&l.log).unwrap_or_default().trim()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The lxcfs process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A file of the mount, e.g. `proc/meminfo`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mount.join(rel)
    }
}

impl Drop for Lxcfs {
    fn drop(&mut self) {
        // SIGTERM lets lxcfs's FUSE loop end and unmount; SIGKILL after 3 s.
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        crate::reap(&mut self.child, Duration::from_secs(3));
        fusermount_unmount(&self.mount);
        lazy_unmount(&self.mount);
        let _ = fs::remove_dir(&self.mount);
        let _ = fs::remove_file(&self.pidfile);
        let _ = fs::remove_file(&self.log);
    }
}

/// Reads `path` with `cat` run inside the cgroups whose `cgroup.procs` (or v1 `tasks`) files are
/// `procs` (the child joins them before exec), as a process in a container would.
pub fn read_in_cgroups(procs: &[&Path], path: &Path) -> Result<String> {
    let procs: Vec<PathBuf> = procs.iter().map(|p| p.to_path_buf()).collect();
    let mut cmd = Command::new("cat");
    cmd.arg(path);
    // SAFETY: the closure only opens and writes files (async-signal-safe system calls) before exec.
    unsafe {
        cmd.pre_exec(move || {
            for p in &procs {
                fs::write(p, b"0\n")?;
            }
            Ok(())
        });
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cat {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "cat {} in cgroups failed ({}): {}",
            path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `MemTotal` of a meminfo text, in bytes.
pub fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let kib = l
            .strip_prefix("MemTotal:")?
            .trim()
            .strip_suffix("kB")?
            .trim();
        kib.parse::<u64>().ok().map(|k| k * 1024)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_mem_total() {
        let t = "MemTotal:         262144 kB\nMemFree:  1 kB\n";
        assert_eq!(super::mem_total_bytes(t), Some(256 << 20));
    }
}
