//! `reads`' parts of a window (`CgroupWindow::reads`, `Window::{memcgs, dying_memcgs, churn}`):
//! types only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hist::HistSummary;

/// A file a slow read read, as the live tracer named it: recorded (`Tag::Files`) so a replay
/// names it too.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReadFile {
    /// `ReadKey::file` and `ReadKey::dev`.
    pub file: u64,
    pub dev: u32,
    pub path: String,
    pub fs: String,
    /// cgroupfs files: the hierarchy and the cgroup's path within it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hierarchy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

impl ReadFile {
    /// What is shown for a file the tracer could not name (its name left the kernel's table, or
    /// a recording without the file table).
    pub fn unknown(file: u64, dev: u32) -> Self {
        Self {
            file,
            dev,
            path: format!(
                "<unknown file {}:{} ino {}>",
                dev >> 20,
                dev & 0xfffff,
                file
            ),
            fs: "other".into(),
            hierarchy: None,
            dir: None,
        }
    }
}

/// Reads by one reader (cgroup + comm) of one file in one window.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FileReads {
    pub comm: String,
    /// The last reader's pid (thread group id).
    pub pid: u32,
    /// Full path (`/proc/<pid>/stat` for per-process proc files; `<rstat flush>` for flushes
    /// outside any traced read).
    pub file: String,
    /// `cgroup`, `cgroup2`, `sysfs`, `proc`, `fuse`, or `rstat`.
    pub fs: String,
    /// cgroupfs files: the cgroup whose file it is (hierarchy and path within it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    pub count: u64,
    pub total_us: f64,
    /// Time in rstat flushes (lock held) and waiting for the rstat lock.
    pub flush_us: f64,
    pub lock_wait_us: f64,
    /// Reads that flushed; rstat lock acquisitions (CPUs walked on 6.16+); of those, contended.
    pub flushed_reads: u64,
    pub flush_locks: u64,
    pub contended: u64,
    pub bytes: u64,
    /// cgroupfs files: the target cgroup's `nr_dying_descendants` at the last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dying_memcgs: Option<u32>,
    pub latency: HistSummary,
}

/// The cgroup a cgroupfs file belongs to.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// `memory`, `cpu,cpuacct`, … (v1 controllers) or `cgroup2`.
    pub hierarchy: String,
    pub id: u64,
    pub path: String,
}

/// A memory cgroup whose stat files were read in the window, and what that cost.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemcgTarget {
    pub hierarchy: String,
    pub id: u64,
    pub path: String,
    /// Reads of its `memory.stat` (and other memcg stat files: `memory.numa_stat`, …).
    pub stat_reads: u64,
    pub read_us: f64,
    pub flush_us: f64,
    pub lock_wait_us: f64,
    pub flushed_reads: u64,
    /// Its `nr_dying_descendants` at the last read (removed but not yet freed cgroups below it).
    pub dying_memcgs: u32,
    /// Who read it, most time first (comm).
    pub readers: Vec<String>,
}

/// Dying (removed, not yet freed) memory cgroups on the host.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DyingMemcgs {
    pub total: u64,
    /// `proc_cgroups` (v1: /proc/cgroups num_cgroups minus existing directories) or
    /// `cgroup.stat` (v2: the root's nr_dying_descendants).
    pub source: String,
}

/// Cgroups created and removed in the window, and by whom.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Churn {
    pub created: u64,
    pub removed: u64,
    /// By hierarchy name.
    pub by_hierarchy: BTreeMap<String, [u64; 2]>,
    /// Who made or removed them (comm and the actor's cgroup id), most first, at most 10.
    pub actors: Vec<ChurnActor>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChurnActor {
    pub comm: String,
    pub pid: u32,
    pub cgroup_id: u64,
    pub created: u64,
    pub removed: u64,
    /// One cgroup it created (an example path).
    pub example: String,
}
