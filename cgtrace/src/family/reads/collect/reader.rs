//! The kernel's read statistics (`READ_STATS`), read once per window: per-key deltas grouped by
//! the reading cgroup and by the memcg whose statistics were read, the slow reads' files named,
//! and idle or removed keys and unreferenced file names deleted from the maps.

use std::{
    collections::{BTreeMap, HashMap as StdHashMap, HashSet},
    path::PathBuf,
};

use aya::maps::{HashMap, MapData};
use cgtrace_common::reads::{
    FILE_NAME_HASH, FILE_RSTAT_FLUSH, FileKey, FileNames, PROC_SUPER_MAGIC, ReadKey, ReadStats,
    SlowReadEvent,
};

use crate::family::reads::{
    FileReads, MemcgTarget, ReadFile, SlowRead, Target,
    files::{FileInfo, Mount, file_info, mounts_by_dev},
};
use crate::{decode::comm_str, hist::Hist};

/// Cumulative values of one key at the last reading.
struct Prev {
    stats: Box<ReadStats>,
    unchanged_windows: u32,
}

/// What one window of reads produced.
#[derive(Default, Debug)]
pub struct ReadsWindow {
    /// By reader cgroup.
    pub by_cgroup: StdHashMap<u64, Vec<FileReads>>,
    pub memcgs: Vec<MemcgTarget>,
}

/// The `READ_FILES` key of a read key.
fn file_key(key: &ReadKey) -> FileKey {
    FileKey {
        file: key.file,
        dev: key.dev,
        _pad: 0,
    }
}

/// Reads `READ_STATS`/`READ_FILES` once per window.
pub struct ReadsReader {
    stats: HashMap<MapData, ReadKey, ReadStats>,
    files: HashMap<MapData, FileKey, FileNames>,
    prev: StdHashMap<ReadKey, Prev>,
    info: StdHashMap<FileKey, FileInfo>,
    mounts: StdHashMap<u32, Mount>,
    mountinfo: PathBuf,
    /// `READ_FILES` entries no key referred to at the last sweep: deleted if still so at the next.
    orphan_files: HashSet<FileKey>,
    windows: u64,
}

/// `READ_FILES` is swept for names no `READ_STATS` key refers to every this many windows.
const FILES_SWEEP_WINDOWS: u64 = 10;

/// Keys idle this many windows are deleted from the kernel map (their last delta was reported).
const IDLE_WINDOWS: u32 = 30;

impl ReadsReader {
    pub fn new(
        stats: HashMap<MapData, ReadKey, ReadStats>,
        files: HashMap<MapData, FileKey, FileNames>,
    ) -> Self {
        let mountinfo = PathBuf::from("/proc/self/mountinfo");
        let mounts = std::fs::read_to_string(&mountinfo)
            .map(|t| mounts_by_dev(&t))
            .unwrap_or_default();
        Self {
            stats,
            files,
            prev: StdHashMap::new(),
            info: StdHashMap::new(),
            mounts,
            mountinfo,
            orphan_files: HashSet::new(),
            windows: 0,
        }
    }

    /// After a window's deltas were taken: deletes the kernel entries of keys whose reader or
    /// target cgroup was removed (`removed`: ids from the window's churn, any hierarchy; their
    /// last reads were just reported), and, every [`FILES_SWEEP_WINDOWS`], the file names no key
    /// has referred to for a whole sweep. Returns the keys and files deleted.
    pub fn age(&mut self, removed: &HashSet<u64>) -> (usize, usize) {
        let mut keys = 0;
        if !removed.is_empty() {
            let gone: Vec<ReadKey> = self
                .prev
                .iter()
                .filter(|(k, p)| {
                    removed.contains(&k.cgroup_id)
                        || (p.stats.target_cgroup != 0 && removed.contains(&p.stats.target_cgroup))
                })
                .map(|(k, _)| *k)
                .collect();
            for k in gone {
                let _ = self.stats.remove(&k);
                self.prev.remove(&k);
                keys += 1;
            }
        }
        self.windows += 1;
        if !self.windows.is_multiple_of(FILES_SWEEP_WINDOWS) {
            return (keys, 0);
        }
        let referenced: HashSet<FileKey> = self.prev.keys().map(file_key).collect();
        let orphans: HashSet<FileKey> = self
            .files
            .keys()
            .filter_map(Result::ok)
            .filter(|f| !referenced.contains(f))
            .collect();
        let mut files = 0;
        for f in orphans.intersection(&self.orphan_files) {
            let _ = self.files.remove(f);
            self.info.remove(f);
            files += 1;
        }
        self.orphan_files = orphans;
        (keys, files)
    }

    fn info_of(&mut self, key: &ReadKey) -> FileInfo {
        if key.file == FILE_RSTAT_FLUSH {
            return FileInfo {
                path: "<rstat flush>".into(),
                fs: "rstat",
                cgroup: None,
                memcg_stat: false,
            };
        }
        let fk = file_key(key);
        if let Some(i) = self.info.get(&fk) {
            return i.clone();
        }
        let Ok(names) = self.files.get(&fk, 0) else {
            return FileInfo {
                path: ReadFile::unknown(key.file, key.dev).path,
                fs: "other",
                cgroup: None,
                memcg_stat: false,
            };
        };
        if !self.mounts.contains_key(&key.dev)
            && let Ok(t) = std::fs::read_to_string(&self.mountinfo)
        {
            self.mounts = mounts_by_dev(&t);
        }
        let info = file_info(
            &names,
            self.mounts.get(&key.dev),
            key.file & FILE_NAME_HASH != 0 && names.magic == PROC_SUPER_MAGIC,
        );
        if self.info.len() > 65_536 {
            self.info.clear();
        }
        self.info.insert(fk, info.clone());
        info
    }

    /// Ends the window: deltas since the last call, grouped by reader cgroup and by memcg target.
    pub fn read_window(&mut self) -> ReadsWindow {
        let mut out = ReadsWindow::default();
        let entries: Vec<(ReadKey, ReadStats)> = self.stats.iter().filter_map(Result::ok).collect();
        let mut seen = HashSet::with_capacity(entries.len());
        let mut targets: BTreeMap<(String, u64), (MemcgTarget, BTreeMap<String, f64>)> =
            BTreeMap::new();
        for (key, cur) in entries {
            seen.insert(key);
            // A count that went backwards is an entry re-created in between: count from zero.
            let prev_count = self
                .prev
                .get(&key)
                .map(|p| p.stats.count)
                .filter(|&c| c <= cur.count);
            let count = cur.count - prev_count.unwrap_or(0);
            if count == 0 {
                if let Some(p) = self.prev.get_mut(&key) {
                    p.unchanged_windows += 1;
                    if p.unchanged_windows >= IDLE_WINDOWS {
                        let _ = self.stats.remove(&key);
                        self.prev.remove(&key);
                    }
                }
                continue;
            }
            let info = self.info_of(&key);
            let base = self
                .prev
                .get(&key)
                .filter(|p| p.stats.count <= cur.count)
                .map(|p| &*p.stats);
            let d = |f: fn(&ReadStats) -> u64| f(&cur).saturating_sub(base.map_or(0, f));
            let mut hist = Hist::delta(
                cur.count,
                cur.total_ns,
                &cur.buckets,
                base.map(|b| (b.count, b.total_ns, &b.buckets)),
            );
            if base.is_none_or(|b| cur.max_ns > b.max_ns) || hist.count == cur.count {
                hist.max_ns = cur.max_ns;
            } else {
                // The kernel keeps a since-start maximum only: bound this window's by its top
                // bucket and its sum.
                hist.max_ns = hist.top_bucket_upper_ns().min(cur.max_ns).min(hist.sum_ns);
            }
            let target = info.cgroup.as_ref().map(|(h, p)| Target {
                hierarchy: h.clone(),
                id: cur.target_cgroup,
                path: p.clone(),
            });
            let line = FileReads {
                comm: comm_str(&key.comm),
                pid: cur.last_tgid,
                file: info.path.clone(),
                fs: info.fs.to_string(),
                target: target.clone(),
                count,
                total_us: d(|s| s.total_ns) as f64 / 1e3,
                flush_us: d(|s| s.flush_ns) as f64 / 1e3,
                lock_wait_us: d(|s| s.lock_wait_ns) as f64 / 1e3,
                flushed_reads: d(|s| s.flushed_reads),
                flush_locks: d(|s| s.flush_locks),
                contended: d(|s| s.contended),
                bytes: d(|s| s.bytes),
                dying_memcgs: target.as_ref().map(|_| cur.target_dying),
                latency: hist.summary(),
            };
            if info.memcg_stat
                && let Some(t) = &target
            {
                let (m, readers) =
                    targets
                        .entry((t.hierarchy.clone(), t.id))
                        .or_insert_with(|| {
                            (
                                MemcgTarget {
                                    hierarchy: t.hierarchy.clone(),
                                    id: t.id,
                                    path: t.path.clone(),
                                    stat_reads: 0,
                                    read_us: 0.0,
                                    flush_us: 0.0,
                                    lock_wait_us: 0.0,
                                    flushed_reads: 0,
                                    dying_memcgs: 0,
                                    readers: Vec::new(),
                                },
                                BTreeMap::new(),
                            )
                        });
                m.stat_reads += line.count;
                m.read_us += line.total_us;
                m.flush_us += line.flush_us;
                m.lock_wait_us += line.lock_wait_us;
                m.flushed_reads += line.flushed_reads;
                m.dying_memcgs = cur.target_dying;
                *readers.entry(line.comm.clone()).or_default() += line.total_us;
            }
            out.by_cgroup.entry(key.cgroup_id).or_default().push(line);
            match self.prev.get_mut(&key) {
                Some(p) => {
                    *p.stats = cur;
                    p.unchanged_windows = 0;
                }
                None => {
                    self.prev.insert(
                        key,
                        Prev {
                            stats: Box::new(cur),
                            unchanged_windows: 0,
                        },
                    );
                }
            }
        }
        // Entries the kernel no longer has (deleted above) are forgotten.
        self.prev.retain(|k, _| seen.contains(k));
        for lines in out.by_cgroup.values_mut() {
            lines.sort_by(|a, b| b.total_us.total_cmp(&a.total_us));
        }
        out.memcgs = targets
            .into_values()
            .map(|(mut m, readers)| {
                let mut r: Vec<(String, f64)> = readers.into_iter().collect();
                r.sort_by(|a, b| b.1.total_cmp(&a.1));
                m.readers = r.into_iter().take(5).map(|(c, _)| c).collect();
                m
            })
            .collect();
        out.memcgs.sort_by(|a, b| b.read_us.total_cmp(&a.read_us));
        out
    }

    /// The event line of one slow read (paths resolved here; the reader's cgroup by the caller).
    pub fn slow_read(&mut self, ev: &SlowReadEvent) -> SlowRead {
        SlowRead::from_event(ev, &self.read_file(&ev.key))
    }

    /// The name of the file a read key refers to, as the stream shows it.
    pub fn read_file(&mut self, key: &ReadKey) -> ReadFile {
        let info = self.info_of(key);
        let (hierarchy, dir) = info
            .cgroup
            .map_or((None, None), |(h, p)| (Some(h), Some(p)));
        ReadFile {
            file: key.file,
            dev: key.dev,
            path: info.path,
            fs: info.fs.to_string(),
            hierarchy,
            dir,
        }
    }

    /// The hierarchy name of a v1 hierarchy id (cgroup_root.hierarchy_id), from the mounts.
    pub fn hierarchy_name(&self, hierarchy_id: u32, subsystems: &[(String, u32)]) -> String {
        if hierarchy_id == 0 {
            return "cgroup2".into();
        }
        let names: Vec<&str> = subsystems
            .iter()
            .filter(|(_, h)| *h == hierarchy_id)
            .map(|(n, _)| n.as_str())
            .collect();
        if names.is_empty() {
            format!("hierarchy{hierarchy_id}")
        } else {
            names.join(",")
        }
    }
}
