//! The live side of `reads`: per-window deltas of the kernel's cumulative read stats
//! (`READ_STATS`), file paths from the names the kernel recorded (`READ_FILES`) and the mount
//! table, memcg targets with their flush cost and dying descendants, the host's dying memcg
//! count, and the slow reads' event lines.

use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    path::{Path, PathBuf},
};

use aya::maps::{HashMap, MapData};
use cgtrace_common::reads::{
    CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, FILE_NAME_HASH, FILE_RSTAT_FLUSH, FUSE_SUPER_MAGIC,
    FileKey, FileNames, PROC_SUPER_MAGIC, ReadKey, ReadStats, SYSFS_MAGIC, SlowReadEvent,
};

use super::*;
use crate::{
    decode::comm_str,
    family::collect::{Collector, Start, WindowInput, take_map},
    family::{EventLine, FamilyInfo, Records},
    hist::Hist,
    model::{CgroupWindow, Window},
};

/// One mount: where a superblock is visible.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    point: PathBuf,
    /// `cgroup` mounts: the controllers (`memory`, `cpu,cpuacct`); `cgroup2` for cgroup2.
    hierarchy: Option<String>,
}

/// `s_dev` -> the mount showing that superblock's root (from /proc/self/mountinfo).
fn parse_mountinfo(text: &str) -> StdHashMap<u32, Mount> {
    let mut out: StdHashMap<u32, Mount> = StdHashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < sep + 4 || sep < 6 {
            continue;
        }
        let Some((maj, min)) = fields[2].split_once(':') else {
            continue;
        };
        let (Ok(maj), Ok(min)) = (maj.parse::<u32>(), min.parse::<u32>()) else {
            continue;
        };
        let dev = (maj << 20) | min;
        let root = fields[3];
        let point = PathBuf::from(unescape(fields[4]));
        let fstype = fields[sep + 1];
        let hierarchy = match fstype {
            "cgroup2" => Some("cgroup2".to_string()),
            "cgroup" => {
                let known = [
                    "cpu",
                    "cpuacct",
                    "cpuset",
                    "memory",
                    "blkio",
                    "io",
                    "pids",
                    "devices",
                    "freezer",
                    "net_cls",
                    "net_prio",
                    "perf_event",
                    "hugetlb",
                    "rdma",
                    "misc",
                ];
                let ctl: Vec<&str> = fields[sep + 3]
                    .split(',')
                    .filter(|o| known.contains(o) || o.starts_with("name="))
                    .collect();
                Some(ctl.join(","))
            }
            _ => None,
        };
        // Prefer the first mount of the superblock's root; a bind mount of a subdirectory
        // only gives the hierarchy (its point does not lead to the root).
        let have_root = out
            .get(&dev)
            .is_some_and(|m| !m.point.as_os_str().is_empty());
        if root == "/" && !have_root {
            out.insert(dev, Mount { point, hierarchy });
        } else {
            out.entry(dev).or_insert(Mount {
                point: PathBuf::new(),
                hierarchy,
            });
        }
    }
    out
}

/// mountinfo escapes spaces and the like as `\040`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn fs_name(magic: u64) -> &'static str {
    match magic {
        CGROUP_SUPER_MAGIC => "cgroup",
        CGROUP2_SUPER_MAGIC => "cgroup2",
        SYSFS_MAGIC => "sysfs",
        PROC_SUPER_MAGIC => "proc",
        FUSE_SUPER_MAGIC => "fuse",
        _ => "other",
    }
}

/// What a file is, resolved once.
#[derive(Clone, Debug)]
struct FileInfo {
    path: String,
    fs: &'static str,
    /// cgroupfs: (hierarchy, path of the file's directory within it), and whether the file is
    /// a memcg stat file.
    cgroup: Option<(String, String)>,
    memcg_stat: bool,
}

/// Builds a file's path from its name chain and its mount.
fn file_info(names: &FileNames, mount: Option<&Mount>, name_hashed: bool) -> FileInfo {
    let depth = (names.depth as usize).min(names.names.len());
    let mut parts: Vec<String> = names.names[..depth]
        .iter()
        .rev()
        .map(|n| name_str(n))
        .collect();
    if name_hashed {
        for p in &mut parts {
            if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) {
                *p = "<pid>".into();
            }
        }
    }
    let inner = if names.complete != 0 {
        format!("/{}", parts.join("/"))
    } else {
        format!("/…/{}", parts.join("/"))
    };
    let fs = fs_name(names.magic);
    let point = mount
        .map(|m| m.point.to_string_lossy().into_owned())
        .filter(|p| !p.is_empty() && p != "/")
        .unwrap_or_default();
    let path = format!("{point}{inner}");
    let cgroup =
        (names.magic == CGROUP_SUPER_MAGIC || names.magic == CGROUP2_SUPER_MAGIC).then(|| {
            let hierarchy = mount
                .and_then(|m| m.hierarchy.clone())
                .unwrap_or_else(|| fs.to_string());
            let dir = match inner.rfind('/') {
                Some(0) | None => "/".to_string(),
                Some(i) => inner[..i].to_string(),
            };
            (hierarchy, dir)
        });
    let file_name = parts.last().cloned().unwrap_or_default();
    FileInfo {
        path,
        fs,
        memcg_stat: cgroup.is_some() && is_memcg_stat_file(&file_name),
        cgroup,
    }
}

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
    orphan_files: std::collections::HashSet<FileKey>,
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
            .map(|t| parse_mountinfo(&t))
            .unwrap_or_default();
        Self {
            stats,
            files,
            prev: StdHashMap::new(),
            info: StdHashMap::new(),
            mounts,
            mountinfo,
            orphan_files: std::collections::HashSet::new(),
            windows: 0,
        }
    }

    /// After a window's deltas were taken: deletes the kernel entries of keys whose reader or
    /// target cgroup was removed (`removed`: ids from the window's churn, any hierarchy; their
    /// last reads were just reported), and, every [`FILES_SWEEP_WINDOWS`], the file names no key
    /// has referred to for a whole sweep. Returns the keys and files deleted.
    pub fn age(&mut self, removed: &std::collections::HashSet<u64>) -> (usize, usize) {
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
        let referenced: std::collections::HashSet<FileKey> =
            self.prev.keys().map(file_key).collect();
        let orphans: std::collections::HashSet<FileKey> = self
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
            self.mounts = parse_mountinfo(&t);
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
        let mut seen = std::collections::HashSet::with_capacity(entries.len());
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

/// Directory walks of a v1 memory hierarchy are at least this far apart; in between the count
/// follows the cgroups created and removed (churn events).
const DIR_WALK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Dying memcgs on the host: v2 from the root's `cgroup.stat`; v1 from /proc/cgroups minus the
/// directories of the memory hierarchy. On v1 the directories are counted by a walk every
/// [`DIR_WALK_EVERY`] and, between walks, by the window's churn in that hierarchy, so a host
/// with thousands of cgroups is not walked every second.
pub struct DyingCounter {
    mount: PathBuf,
    v2: bool,
    /// Directories at the last walk, adjusted by churn since, and when that walk was.
    dirs: Option<(i64, std::time::Instant)>,
}

impl DyingCounter {
    pub fn new(mount: PathBuf, v2: bool) -> Self {
        Self {
            mount,
            v2,
            dirs: None,
        }
    }

    /// The count at the end of a window; `churn` is that window's (created, removed) in the memory
    /// hierarchy, `None` when churn is not traced (then every window walks).
    pub fn read(&mut self, proc_cgroups: &Path, churn: Option<(u64, u64)>) -> Option<DyingMemcgs> {
        if self.v2 {
            let text = std::fs::read_to_string(self.mount.join("cgroup.stat")).ok()?;
            let total = text.lines().find_map(|l| {
                l.strip_prefix("nr_dying_descendants ")
                    .and_then(|v| v.trim().parse().ok())
            })?;
            return Some(DyingMemcgs {
                total,
                source: "cgroup.stat".into(),
            });
        }
        let num = crate::cgroup::hierarchy::num_cgroups(proc_cgroups, "memory")?;
        let dirs = match (self.dirs, churn) {
            (Some((n, at)), Some((created, removed))) if at.elapsed() < DIR_WALK_EVERY => {
                n + created as i64 - removed as i64
            }
            _ => {
                self.dirs = None;
                count_dirs(&self.mount) as i64
            }
        };
        self.dirs = Some((
            dirs,
            self.dirs.map_or_else(std::time::Instant::now, |d| d.1),
        ));
        Some(DyingMemcgs {
            total: (num as i64 - dirs).max(0) as u64,
            source: "proc_cgroups".into(),
        })
    }
}

/// Directories in a cgroup hierarchy, its root included.
fn count_dirs(root: &Path) -> u64 {
    let mut n = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        n += 1;
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    n
}

/// The reads family's collector: its map reader, where dying memcgs are counted, and how churn
/// events name their hierarchies.
pub struct Reads {
    pub reader: ReadsReader,
    /// Counts dying memcgs (`None`: no memory controller).
    pub dying: Option<DyingCounter>,
    /// Cgroup churn is traced, so the v1 directory count can follow it between walks.
    pub churn_traced: bool,
    /// v1 controllers by hierarchy id, to name churn events' hierarchies.
    pub subsystems: Vec<(String, u32)>,
    /// Memcg targets of the window being built.
    memcgs: Vec<MemcgTarget>,
}

impl Reads {
    pub fn new(
        reader: ReadsReader,
        dying: Option<DyingCounter>,
        churn_traced: bool,
        subsystems: Vec<(String, u32)>,
    ) -> Self {
        Self {
            reader,
            dying,
            churn_traced,
            subsystems,
            memcgs: Vec::new(),
        }
    }
}

/// Takes `READ_STATS` and `READ_FILES`; dying memcgs are counted in the memory hierarchy (v1)
/// or cgroup2.
pub fn start(ctx: &mut Start<'_>) -> anyhow::Result<Box<dyn Collector>> {
    let stats: HashMap<MapData, _, _> = take_map(ctx.ebpf, "READ_STATS")?.try_into()?;
    let files: HashMap<MapData, _, _> = take_map(ctx.ebpf, "READ_FILES")?.try_into()?;
    let cgroups = ctx.cgroups;
    let dying = match cgroups.for_controller("memory") {
        Some(h) => Some(DyingCounter::new(
            h.mount.clone(),
            matches!(h.version, crate::cgroup::Version::V2),
        )),
        None => cgroups
            .v2()
            .map(|h| DyingCounter::new(h.mount.clone(), true)),
    };
    Ok(Box::new(Reads::new(
        ReadsReader::new(stats, files),
        dying,
        ctx.churn_traced,
        cgroups
            .subsystems
            .iter()
            .map(|s| (s.name.clone(), s.hierarchy))
            .collect(),
    )))
}

impl Collector for Reads {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    fn read_window(
        &mut self,
        records: &mut Records,
        input: &mut WindowInput,
    ) -> anyhow::Result<()> {
        let w = self.reader.read_window();
        self.reader.age(&records.reads.churn.take_removed());
        input.reads = w.by_cgroup;
        self.memcgs = w.memcgs;
        Ok(())
    }

    fn cgroup_part(&mut self, cg: &mut CgroupWindow, input: &mut WindowInput, _: u64) {
        cg.reads = input.reads.remove(&cg.id);
    }

    fn finish_window(&mut self, records: &mut Records, window: &mut Window) {
        window.memcgs = std::mem::take(&mut self.memcgs);
        let (reader, subsystems) = (&self.reader, &self.subsystems);
        window.churn = records
            .reads
            .churn
            .take(|h| reader.hierarchy_name(h, subsystems));
        // The memory hierarchy's churn keeps the v1 directory count current between walks.
        let churn = self.churn_traced.then(|| {
            window.churn.as_ref().map_or((0, 0), |c| {
                c.by_hierarchy
                    .iter()
                    .filter(|(name, _)| name.split(',').any(|n| n == "memory"))
                    .fold((0, 0), |acc, (_, v)| (acc.0 + v[0], acc.1 + v[1]))
            })
        });
        window.dying_memcgs = self
            .dying
            .as_mut()
            .and_then(|d| d.read("/proc/cgroups".as_ref(), churn));
    }

    fn lines(&mut self, records: &mut Records, out: &mut Vec<EventLine>) {
        for ev in records.reads.take_slow_reads() {
            out.push(EventLine::SlowRead(self.reader.slow_read(&ev)));
        }
    }

    fn read_file(&mut self, key: &ReadKey) -> Option<ReadFile> {
        Some(self.reader.read_file(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cgtrace_common::reads::{NAME_DEPTH, NAME_LEN};

    fn names(magic: u64, chain: &[&str], complete: bool) -> FileNames {
        let mut n = FileNames {
            magic,
            depth: chain.len() as u32,
            complete: u32::from(complete),
            names: [[0; NAME_LEN]; NAME_DEPTH],
        };
        for (i, s) in chain.iter().enumerate() {
            n.names[i][..s.len()].copy_from_slice(s.as_bytes());
        }
        n
    }

    const MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
24 1 0:22 / /sys rw - sysfs sysfs rw
30 24 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
31 24 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 1 0:50 / /var/lib/lxc\\040fs rw - fuse.lxcfs lxcfs rw,user_id=0
41 1 0:50 /proc/meminfo /other/meminfo rw - fuse.lxcfs lxcfs rw
";

    #[test]
    fn mountinfo_maps_devices_to_mounts_and_hierarchies() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m[&26].point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(m[&26].hierarchy.as_deref(), Some("memory"));
        assert_eq!(m[&27].hierarchy.as_deref(), Some("cpu,cpuacct"));
        assert_eq!(m[&50].point, PathBuf::from("/var/lib/lxc fs"));
        assert_eq!(m[&21].hierarchy, None);
    }

    #[test]
    fn paths_are_built_from_the_name_chain() {
        let m = parse_mountinfo(MOUNTINFO);
        let i = file_info(
            &names(CGROUP_SUPER_MAGIC, &["memory.stat", "b", "a"], true),
            m.get(&26),
            false,
        );
        assert_eq!(i.path, "/sys/fs/cgroup/memory/a/b/memory.stat");
        assert!(i.memcg_stat);
        assert_eq!(i.cgroup, Some(("memory".into(), "/a/b".into())));
        let root = file_info(
            &names(CGROUP_SUPER_MAGIC, &["memory.stat"], true),
            m.get(&26),
            false,
        );
        assert_eq!(root.cgroup, Some(("memory".into(), "/".into())));
        let p = file_info(
            &names(PROC_SUPER_MAGIC, &["stat", "4242"], true),
            m.get(&21),
            true,
        );
        assert_eq!(p.path, "/proc/<pid>/stat");
        assert_eq!(p.fs, "proc");
        let cut = file_info(
            &names(SYSFS_MAGIC, &["scaling_cur_freq", "cpufreq"], false),
            m.get(&22),
            false,
        );
        assert_eq!(cut.path, "/sys/…/cpufreq/scaling_cur_freq");
        let fuse = file_info(
            &names(FUSE_SUPER_MAGIC, &["meminfo", "proc"], true),
            m.get(&50),
            false,
        );
        assert_eq!(fuse.path, "/var/lib/lxc fs/proc/meminfo");
        assert!(!fuse.memcg_stat);
    }

    #[test]
    fn v1_dying_count_walks_then_follows_churn() {
        let root = tempfile::tempdir().expect("tempdir");
        let mount = root.path().join("memory");
        for d in ["a", "a/b", "c"] {
            std::fs::create_dir_all(mount.join(d)).expect("mkdir");
        }
        let proc_cgroups = root.path().join("cgroups");
        let write = |n: u64| {
            std::fs::write(
                &proc_cgroups,
                format!("#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t4\t{n}\t1\n"),
            )
            .expect("write");
        };
        let mut c = DyingCounter::new(mount.clone(), false);
        // 4 directories (root included), 10 cgroups: 6 dying.
        write(10);
        assert_eq!(
            c.read(&proc_cgroups, Some((0, 0))).map(|d| d.total),
            Some(6)
        );
        // Two made and one removed since (not walked again): 11 cgroups, 5 directories.
        std::fs::create_dir(mount.join("d")).expect("mkdir");
        write(11);
        assert_eq!(
            c.read(&proc_cgroups, Some((2, 1))).map(|d| d.total),
            Some(6)
        );
        // Without churn every read walks: the real 5 directories.
        assert_eq!(c.read(&proc_cgroups, None).map(|d| d.total), Some(6));
        let mut fresh = DyingCounter::new(mount, false);
        assert_eq!(fresh.read(&proc_cgroups, None).map(|d| d.total), Some(6));
    }
}
