//! `reads` in the daemon: pseudo-file reads per (reader cgroup, comm, file), memcg targets with
//! their flush cost, dying memcgs and cgroup churn. [`collect`] is the live collector: its
//! [`reader`](collect::reader) reads the kernel's maps, `files` names the files read, [`dying`] counts dying memcgs; here
//! are the family's model types, records (slow reads, churn) and diagnoses.

use std::collections::{BTreeMap, HashMap as StdHashMap};

use cgtrace_common::reads::{CHURN_MKDIR, CgroupChurnEvent, SlowReadEvent};
use serde::{Deserialize, Serialize};

use crate::{
    decode::comm_str,
    family::info::{FamilyInfo, LineHead, Room},
    model::{
        CgroupWindow, Flag,
        flag::{Change, ChangeKind, Expected},
    },
};

pub mod attach;
pub mod collect;
pub mod dying;
mod files;
pub mod metrics;
pub mod model;

pub use model::{Churn, ChurnActor, DyingMemcgs, FileReads, MemcgTarget, ReadFile, Target};

pub const INFO: FamilyInfo = FamilyInfo {
    name: "reads",
    first_kind: 0x300,
    event_kind: cgtrace_common::event::KIND_SLOW_READ,
    event_line: "slow_read",
    lines_offline: true,
    flags,
    mark: 4,
};

/// What `reads`' collector is started with.
#[derive(Clone, Copy, Debug)]
pub struct StartOptions {
    /// Cgroup creations and removals are traced, so the v1 directory count follows them.
    pub churn_traced: bool,
}

/// A read this slow is worth a flag (the field reports are of seconds).
const SLOW_READ_US: f64 = 100_000.0;
/// Time in reads above this share of the window is worth a flag.
const BUSY_SHARE: f64 = 0.10;

/// The family's diagnosis: a cgroup spending a tenth of the window in pseudo-file reads, or with
/// a read of 100 ms or more, and whether rstat flushing, a FUSE file or the files themselves are
/// why.
pub fn flags(cg: &CgroupWindow, duration_ms: u64, out: &mut Vec<Flag>) {
    let Some(files) = cg.reads.as_deref() else {
        return;
    };
    let total: f64 = files.iter().map(|f| f.total_us).sum();
    let flush: f64 = files.iter().map(|f| f.flush_us + f.lock_wait_us).sum();
    let slowest = files
        .iter()
        .max_by(|a, b| a.latency.max_us.total_cmp(&b.latency.max_us));
    let busy = total >= BUSY_SHARE * (duration_ms.max(1) as f64 / 1e3) * 1e6;
    let Some(worst) = slowest else { return };
    if !busy && worst.latency.max_us < SLOW_READ_US {
        return;
    }
    let share = |us: f64| if total > 0.0 { us / total * 100.0 } else { 0.0 };
    let count: u64 = files.iter().map(|f| f.count).sum();
    let dying = files.iter().filter_map(|f| f.dying_memcgs).max();
    let who = format!("{} [{}]", worst.comm, worst.pid);
    let (code, advice, change, expected) =
        if flush > 0.5 * total {
            (
            "reads_rstat_flush",
            "most of it is memcg stat flushing: count dying memcgs (the stream's dying_memcgs and \
             memcgs) and find who creates and removes cgroups (churn); fewer memory.stat readers, \
             or a longer scrape interval, helps meanwhile"
                .to_string(),
            vec![
                Change::new(ChangeKind::Runtime, format!("{who}'s read interval"), "longer"),
                Change::new(
                    ChangeKind::Move,
                    "dying memcgs (whoever creates and removes cgroups: churn)",
                    "",
                ),
            ],
            Some(Expected {
                metric: "reads_us".into(),
                change_percent: -share(flush),
                words: format!(
                    "time in reads −{:.0} % (the flushing part) per read saved",
                    share(flush)
                ),
            }),
        )
        } else if worst.fs == "fuse" {
            (
                "reads_fuse",
                "a FUSE file (lxcfs?) is slow: its daemon's own reads show which cgroup files it \
             waits on"
                    .to_string(),
                vec![Change::new(
                    ChangeKind::Move,
                    format!("the FUSE daemon serving {}", worst.file),
                    "",
                )],
                None,
            )
        } else {
            (
                "reads_slow",
                "check which pseudo-files are read in a loop (cpufreq sysfs files block per CPU; \
             tools like lscpu/htop read them)"
                    .to_string(),
                vec![Change::new(
                    ChangeKind::Runtime,
                    format!("{who}'s reads of {}", worst.file),
                    "fewer",
                )],
                None,
            )
        };
    out.push(Flag {
        family: INFO.name.into(),
        code: code.into(),
        message: format!(
            "{} in pseudo-file reads ({:.0} % flush); slowest {} of {} by {}",
            crate::hist::micros(total),
            share(flush),
            crate::hist::micros(worst.latency.max_us),
            worst.file,
            worst.comm
        ),
        evidence: format!(
            "{count} reads took {} in a {} ms window ({:.0} % flushing memcg stats{}); slowest {} of {} by {who}",
            crate::hist::micros(total),
            duration_ms,
            share(flush),
            dying.map_or(String::new(), |d| format!(", {d} dying memcgs below the target")),
            crate::hist::micros(worst.latency.max_us),
            worst.file,
        ),
        suggestion: advice,
        change,
        expected,
    });
}

/// `reads` records between two windows: slow reads kept for event lines, and cgroup churn.
#[derive(Debug, Default)]
pub struct Records {
    pub keep_lines: bool,
    slow_reads: Vec<SlowReadEvent>,
    pub churn: ChurnCounter,
}

impl Records {
    pub fn slow_read(&mut self, ev: &SlowReadEvent, room: &mut Room<'_>) {
        if self.keep_lines && room.fits(&self.slow_reads) {
            self.slow_reads.push(*ev);
        }
    }

    /// The slow reads kept for event lines (named by the live reader: [`collect::reader::ReadsReader::slow_read`]).
    pub fn take_slow_reads(&mut self) -> Vec<SlowReadEvent> {
        std::mem::take(&mut self.slow_reads)
    }
}

/// A read at or above `--slow-read-ms` (`--events`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlowRead {
    /// Its cgroup is the reader's.
    #[serde(flatten)]
    pub head: LineHead,
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    pub file: String,
    pub fs: String,
    pub target: Option<Target>,
    pub duration_us: f64,
    pub flush_us: f64,
    pub lock_wait_us: f64,
    pub flush_locks: u64,
    pub contended: u64,
    pub flushed: bool,
    pub dying_memcgs: Option<u32>,
    /// Bytes returned, or a negative errno.
    pub ret: i64,
}

impl SlowRead {
    /// The line of one slow read whose file is `file` (live: named by the tracer's file table;
    /// replay: by the recorded one); the reader's cgroup is named by the caller.
    pub fn from_event(ev: &SlowReadEvent, file: &ReadFile) -> Self {
        Self {
            head: LineHead::new(&INFO, &ev.header, ev.key.cgroup_id),
            pid: ev.pid,
            tgid: ev.tgid,
            comm: comm_str(&ev.key.comm),
            file: file.path.clone(),
            fs: file.fs.clone(),
            target: match (&file.hierarchy, &file.dir) {
                (Some(h), Some(p)) => Some(Target {
                    hierarchy: h.clone(),
                    id: ev.target_cgroup,
                    path: p.clone(),
                }),
                _ => None,
            },
            duration_us: ev.duration_ns as f64 / 1e3,
            flush_us: ev.flush_ns as f64 / 1e3,
            lock_wait_us: ev.lock_wait_ns as f64 / 1e3,
            flush_locks: ev.flush_locks,
            contended: ev.contended,
            flushed: ev.needs_flush != 0,
            dying_memcgs: (ev.target_cgroup != 0).then_some(ev.target_dying),
            ret: ev.ret,
        }
    }
}

/// Memcg stat files whose read flushes rstat.
pub fn is_memcg_stat_file(name: &str) -> bool {
    matches!(
        name,
        "memory.stat" | "memory.numa_stat" | "memory.events" | "memory.events.local"
    ) || name.starts_with("memory.") && name.ends_with("usage_in_bytes")
}

/// A NUL-terminated name from a kernel buffer.
pub(crate) fn name_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Cgroup churn collected from events between windows.
#[derive(Default, Debug)]
pub struct ChurnCounter {
    by_hierarchy: BTreeMap<u32, [u64; 2]>,
    actors: StdHashMap<(String, u32, u64), (u64, u64, String)>,
    /// Ids of the cgroups removed since the last window (any hierarchy), so the reads kept for
    /// their files can go with them.
    removed_ids: std::collections::HashSet<u64>,
}

/// Actors kept per window (the rest still count in the totals).
const MAX_ACTORS: usize = 1024;
/// Removed ids kept per window; beyond it the keys of the rest age out (`IDLE_WINDOWS`).
const MAX_REMOVED_IDS: usize = 1 << 16;

impl ChurnCounter {
    pub fn add(&mut self, ev: &CgroupChurnEvent) {
        let op = usize::from(ev.op != CHURN_MKDIR);
        self.by_hierarchy.entry(ev.hierarchy_id).or_default()[op] += 1;
        if op == 1 && self.removed_ids.len() < MAX_REMOVED_IDS {
            self.removed_ids.insert(ev.cgroup_id);
        }
        let key = (comm_str(&ev.comm), ev.tgid, ev.actor_cgroup);
        if self.actors.len() >= MAX_ACTORS && !self.actors.contains_key(&key) {
            return;
        }
        let e = self.actors.entry(key).or_default();
        if op == 0 {
            e.0 += 1;
            if e.2.is_empty() {
                e.2 = name_str(&ev.path);
            }
        } else {
            e.1 += 1;
        }
    }

    /// The ids of the cgroups removed since the last call.
    pub fn take_removed(&mut self) -> std::collections::HashSet<u64> {
        std::mem::take(&mut self.removed_ids)
    }

    /// The window's churn; `None` when nothing happened.
    pub fn take(&mut self, hierarchy_name: impl Fn(u32) -> String) -> Option<Churn> {
        if self.by_hierarchy.is_empty() {
            return None;
        }
        let by = std::mem::take(&mut self.by_hierarchy);
        // One mkdir in the v1 world is one event per hierarchy it is made in: count the busiest.
        let created = by.values().map(|v| v[0]).max().unwrap_or(0);
        let removed = by.values().map(|v| v[1]).max().unwrap_or(0);
        let mut actors: Vec<ChurnActor> = std::mem::take(&mut self.actors)
            .into_iter()
            .map(|((comm, pid, cgroup_id), (c, r, example))| ChurnActor {
                comm,
                pid,
                cgroup_id,
                created: c,
                removed: r,
                example,
            })
            .collect();
        actors.sort_by_key(|a| std::cmp::Reverse(a.created + a.removed));
        actors.truncate(10);
        Some(Churn {
            created,
            removed,
            by_hierarchy: by
                .into_iter()
                .map(|(h, v)| (hierarchy_name(h), v))
                .collect(),
            actors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn churn_counts_and_ranks_actors() {
        let mut c = ChurnCounter::default();
        let mut ev = CgroupChurnEvent {
            header: cgtrace_common::event::EventHeader {
                kind: cgtrace_common::event::KIND_CGROUP_CHURN,
                cpu: 0,
                ts_ns: 1,
            },
            hierarchy_id: 3,
            op: CHURN_MKDIR,
            cgroup_id: 9,
            level: 1,
            pid: 7,
            tgid: 7,
            _pad: 0,
            actor_cgroup: 1,
            comm: *b"systemd\0\0\0\0\0\0\0\0\0",
            path: [0; cgtrace_common::reads::CHURN_PATH_LEN],
        };
        ev.path[..3].copy_from_slice(b"/x1");
        c.add(&ev);
        c.add(&ev);
        ev.op = cgtrace_common::reads::CHURN_RMDIR;
        c.add(&ev);
        let w = c.take(|h| format!("h{h}")).expect("churn");
        assert_eq!((w.created, w.removed), (2, 1));
        assert_eq!(w.by_hierarchy["h3"], [2, 1]);
        assert_eq!(w.actors[0].comm, "systemd");
        assert_eq!(w.actors[0].example, "/x1");
        assert!(c.take(|h| format!("h{h}")).is_none());
    }
}
