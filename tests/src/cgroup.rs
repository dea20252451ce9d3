//! Test cgroups in the hierarchy cgtrace keys run-queue waits by (v1 `cpu`, else cgroup2),
//! removed (after killing their tasks) when dropped.
use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result};

/// The mount of the hierarchy run-queue waits are keyed by, and its name in the stream.
pub fn runq_mount() -> (PathBuf, &'static str) {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.shares").exists() {
        (v1.to_path_buf(), "cpu")
    } else {
        (PathBuf::from("/sys/fs/cgroup"), "cgroup2")
    }
}

pub struct TestCgroup {
    pub dir: PathBuf,
    /// Path relative to the mount, as the stream shows it (`/cgtrace-test-…`).
    pub rel: String,
    removed: bool,
}

impl TestCgroup {
    /// Creates `<mount>/cgtrace-test-<name>-<pid>`.
    pub fn new(name: &str) -> Result<Self> {
        let (mount, _) = runq_mount();
        let rel = format!("/cgtrace-test-{name}-{}", std::process::id());
        let dir = mount.join(&rel[1..]);
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        Ok(Self {
            dir,
            rel,
            removed: false,
        })
    }

    /// The cgroup `rel` (e.g. `/cgtrace-test-x-1`) in another hierarchy mounted at `mount`.
    pub fn at(mount: &Path, rel: &str) -> Result<Self> {
        let dir = mount.join(rel.trim_start_matches('/'));
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        Ok(Self {
            dir,
            rel: rel.to_string(),
            removed: false,
        })
    }

    /// A child cgroup `<self>/<name>`, removed before its parent.
    pub fn child(&self, name: &str) -> Result<Self> {
        let dir = self.dir.join(name);
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        Ok(Self {
            dir,
            rel: format!("{}/{name}", self.rel),
            removed: false,
        })
    }

    /// CFS bandwidth: `quota_us` per `period_us` (v1 `cpu.cfs_*`, v2 `cpu.max`).
    pub fn set_quota(&self, quota_us: u64, period_us: u64) -> Result<()> {
        if self.dir.join("cpu.cfs_quota_us").exists() {
            fs::write(self.dir.join("cpu.cfs_period_us"), period_us.to_string())?;
            fs::write(self.dir.join("cpu.cfs_quota_us"), quota_us.to_string())?;
        } else {
            fs::write(self.dir.join("cpu.max"), format!("{quota_us} {period_us}"))?;
        }
        Ok(())
    }

    /// On cgroup v1 usage comes from the cpuacct hierarchy: the same path there (systemd, Docker
    /// and kubelet create both), which the test's processes must join too. On v2 (or where
    /// cpuacct shares the cpu mount) there is nothing to make.
    pub fn cpuacct_twin(&self) -> Result<Option<TestCgroup>> {
        let acct = Path::new("/sys/fs/cgroup/cpuacct");
        if !acct.join("cpuacct.usage").exists() || self.dir.starts_with("/sys/fs/cgroup/cpuacct") {
            return Ok(None);
        }
        Ok(Some(TestCgroup::at(acct, &self.rel)?))
    }

    /// `(nr_throttled, throttled time in µs)` from the kernel's `cpu.stat`.
    pub fn kernel_throttling(&self) -> Result<(u64, f64)> {
        let (_, throttled, us) =
            cpu_stat_throttling(&fs::read_to_string(self.dir.join("cpu.stat"))?);
        Ok((throttled, us))
    }

    /// The directory's inode: the id the stream reports.
    pub fn id(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(&self.dir).map(|m| m.ino()).unwrap_or(0)
    }

    /// The smallest CPU weight: v1 `cpu.shares` 2, v2 `cpu.weight` 1.
    pub fn set_lowest_weight(&self) -> Result<()> {
        let (file, value) = if self.dir.join("cpu.shares").exists() {
            ("cpu.shares", "2")
        } else {
            ("cpu.weight", "1")
        };
        fs::write(self.dir.join(file), value).with_context(|| format!("writing {file}"))
    }

    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Kills every task in it and removes it.
    pub fn remove(&mut self) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        for _ in 0..50 {
            let procs = fs::read_to_string(self.procs_file()).unwrap_or_default();
            let pids: Vec<i32> = procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => {
                    self.removed = true;
                    return Ok(());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        fs::remove_dir(&self.dir).with_context(|| format!("rmdir {}", self.dir.display()))?;
        self.removed = true;
        Ok(())
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// `(nr_periods, nr_throttled, throttled time in µs)` from a cgroup v1 or v2 `cpu.stat`'s text.
pub fn cpu_stat_throttling(stat: &str) -> (u64, u64, f64) {
    let get = |k: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let us = if stat.contains("throttled_usec") {
        get("throttled_usec ") as f64
    } else {
        get("throttled_time ") as f64 / 1e3
    };
    (get("nr_periods "), get("nr_throttled "), us)
}
