//! The live side of `throttle`: period counters from `THROTTLE_STATS` and the kernel's own
//! counters (`cpu.stat`, quota, period, burst, usage) read from cgroupfs.

use std::{
    collections::{BTreeMap, HashMap as StdHashMap, VecDeque},
    path::{Path, PathBuf},
};

use aya::maps::{HashMap, MapData};
use cgtrace_common::{
    event::{EventHeader, KIND_THROTTLE_SLICE},
    throttle::{HookEpisode, SliceEvent, SliceKey, SliceSum, ThrottleStats},
};

use super::{FlagRules, KernelCpu, PeriodDelta, ThrottleWindow};
use crate::{
    bpf::maps::batch::WholeHashMap,
    cgroup::Version,
    family::Records,
    family::collect::{Collector, Start, WindowInput, take_map},
    model::CgroupWindow,
    units::monotonic_ns,
};

/// Sums per `BPF_MAP_LOOKUP_BATCH` call.
const SUMS_BATCH: usize = 1024;

/// Where the kernel's CPU counter files of a cgroup are.
#[derive(Clone, Debug)]
pub struct CpuFiles {
    /// Mount of the hierarchy the ids belong to (v1 `cpu`, or cgroup2).
    pub mount: PathBuf,
    pub version: Version,
    /// v1: the `cpuacct` hierarchy's mount (usage), which may be the cpu mount itself.
    pub cpuacct_mount: Option<PathBuf>,
}

impl CpuFiles {
    fn read(&self, rel: &str) -> Option<KernelCpu> {
        let rel = rel.trim_start_matches('/');
        let dir = self.mount.join(rel);
        let acct = self.cpuacct_mount.as_ref().map(|m| m.join(rel));
        let mut k = read_kernel_cpu(&dir, self.version, acct.as_deref())?;
        k.at_ns = monotonic_ns();
        Some(k)
    }
}

/// `dir` relative to `mount`, as `/a/b` (`/` for the mount itself).
fn rel_path(mount: &Path, dir: &Path) -> String {
    match dir.strip_prefix(mount) {
        Ok(r) if r.as_os_str().is_empty() => "/".to_string(),
        Ok(r) => format!("/{}", r.display()),
        Err(_) => dir.display().to_string(),
    }
}

/// The throttle family's collector: period counters from the kernel map, episodes and burners from
/// the records, and each throttled cgroup's own kernel counters for the same window.
pub struct Throttle {
    reader: ThrottleReader,
    /// `THROTTLE_SLICE_SUMS`: threads' slices per period, summed in the kernel.
    sums: Option<SliceSums>,
    files: Option<CpuFiles>,
    rules: FlagRules,
    /// The kernel's counters of each throttled cgroup at the end of the last window that read
    /// them (at most `max_cgroups`).
    kernel: StdHashMap<u64, KernelCpu>,
    /// Each throttled cgroup's most CPU held off in one throttled period, in its last
    /// [`HELD_OFF_WINDOWS`] windows with throttling (at most `max_cgroups`).
    held_off: StdHashMap<u64, VecDeque<f64>>,
    max_cgroups: usize,
}

/// How many windows with throttling the burst advice looks back over.
pub const HELD_OFF_WINDOWS: usize = 30;

impl Throttle {
    pub fn new(
        reader: ThrottleReader,
        files: Option<CpuFiles>,
        mut rules: FlagRules,
        max_cgroups: usize,
    ) -> Self {
        rules.v1 = files.as_ref().is_some_and(|f| f.version == Version::V1);
        rules.burst = super::advice::has_burst(
            &std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default(),
        );
        let mut t = Self {
            reader,
            sums: None,
            files,
            rules,
            kernel: StdHashMap::new(),
            held_off: StdHashMap::new(),
            max_cgroups: max_cgroups.max(1),
        };
        t.prime_quota_baselines();
        t
    }

    /// Reads the kernel counters of every cgroup that has a CPU quota now, so their first window
    /// already has a baseline. One walk of the hierarchy, at start.
    fn prime_quota_baselines(&mut self) {
        let Some(files) = self.files.clone() else {
            return;
        };
        let mut stack = vec![files.mount.clone()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > self.max_cgroups * 4 {
                break;
            }
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            let rel = rel_path(&files.mount, &dir);
            let Some(k) = files.read(&rel).filter(|k| k.quota_us.is_some()) else {
                continue;
            };
            use std::os::unix::fs::MetadataExt;
            let Ok(id) = std::fs::metadata(&dir).map(|m| m.ino()) else {
                continue;
            };
            if self.kernel.len() < self.max_cgroups {
                self.kernel.insert(id, k);
                // Our counters' baseline at the same moment: the programs count from attach,
                // which came earlier; the first window compares the same span with the kernel.
                self.reader.prime(id);
            }
        }
    }
}

/// Takes `THROTTLE_STATS`; the kernel's counters are read from the cgroups' own files.
pub fn start(ctx: &mut Start<'_>) -> anyhow::Result<Box<dyn Collector>> {
    let stats: HashMap<MapData, u64, _> = take_map(ctx.ebpf, "THROTTLE_STATS")?.try_into()?;
    let episodes: HashMap<MapData, u64, HookEpisode> =
        take_map(ctx.ebpf, "THROTTLE_EPISODES")?.try_into()?;
    let hier = ctx.hierarchy;
    let files = CpuFiles {
        mount: hier.mount.clone(),
        version: hier.version,
        cpuacct_mount: match hier.version {
            Version::V1 => ctx
                .cgroups
                .for_controller("cpuacct")
                .map(|h| h.mount.clone()),
            Version::V2 => None,
        },
    };
    let sums: HashMap<MapData, SliceKey, SliceSum> =
        take_map(ctx.ebpf, "THROTTLE_SLICE_SUMS")?.try_into()?;
    let mut t = Throttle::new(
        ThrottleReader::new(stats).with_episodes(episodes),
        Some(files),
        ctx.throttle,
        ctx.max_cgroups,
    );
    t.sums = Some(SliceSums::new(sums));
    Ok(Box::new(t))
}

/// The window's end for `THROTTLE_SLICE_SUMS`: the sums of ended periods that no thread sent
/// (it has not run since) are handed to the records as the ring buffer's would have been, and
/// sums whose period is complete, or that nobody updated for `FORGET_NS`, are deleted.
pub struct SliceSums {
    map: WholeHashMap<SliceKey, SliceSum>,
    /// This window's reading.
    seen: Vec<(SliceKey, SliceSum)>,
}

impl SliceSums {
    pub fn new(map: HashMap<MapData, SliceKey, SliceSum>) -> Self {
        Self {
            map: WholeHashMap::new(map, SUMS_BATCH),
            seen: Vec::new(),
        }
    }

    /// Before the records' window is taken: hands over the sums of ended periods not seen yet.
    pub fn hand_over(&mut self, records: &mut Records, now_ns: u64) {
        let mut seen = std::mem::take(&mut self.seen);
        seen.clear();
        self.map.for_each(|k, v| seen.push((*k, *v)));
        for (k, s) in &seen {
            let burners = &records.throttle.burners;
            if !burners.wants_sum(k.cgroup_id, k.tid, s.period, s.first_ns, s.runtime_ns) {
                continue;
            }
            let ev = SliceEvent {
                header: EventHeader {
                    kind: KIND_THROTTLE_SLICE,
                    cpu: s.last_cpu,
                    ts_ns: now_ns,
                },
                cgroup_id: k.cgroup_id,
                runtime_ns: s.runtime_ns,
                pid: k.tid,
                tgid: s.tgid,
                comm: s.comm,
                period: s.period,
                slices: s.slices,
                cpus: s.cpus,
                flags: 0,
                first_ns: s.first_ns,
            };
            records.make(crate::decode::slice_bytes(&ev));
        }
        self.seen = seen;
    }

    /// After the window was taken: deletes the sums it no longer needs, each only if it is
    /// still the sum read (a thread that ran meanwhile keeps its new one).
    pub fn delete_done(&mut self, records: &Records, now_ns: u64) {
        let burners = &records.throttle.burners;
        for (k, s) in &self.seen {
            let stale = now_ns.saturating_sub(s.last_ns) > super::burners::FORGET_NS;
            if !stale && !burners.is_done(k.cgroup_id, s.period) {
                continue;
            }
            if self
                .map
                .get(k)
                .is_some_and(|cur| (cur.period, cur.first_ns) == (s.period, s.first_ns))
            {
                self.map.remove(k);
            }
        }
    }
}

impl Throttle {
    /// Notes what `w` held off per throttled period and returns the most over the cgroup's
    /// recent windows with throttling (`None` without throttling now or before).
    fn held_off_recent(&mut self, id: u64, w: &ThrottleWindow) -> Option<f64> {
        if let Some(now) = w.held_off_p99_us()
            && (self.held_off.len() < self.max_cgroups || self.held_off.contains_key(&id))
        {
            let recent = self.held_off.entry(id).or_default();
            if recent.len() == HELD_OFF_WINDOWS {
                recent.pop_front();
            }
            recent.push_back(now);
        }
        self.held_off
            .get(&id)
            .and_then(|r| r.iter().copied().reduce(f64::max))
    }
}

impl Collector for Throttle {
    fn read_window(
        &mut self,
        records: &mut Records,
        input: &mut WindowInput,
    ) -> anyhow::Result<()> {
        input.periods = self.reader.read_window();
        self.reader.drop_gone_episodes();
        let now = monotonic_ns();
        if let Some(sums) = self.sums.as_mut() {
            sums.hand_over(records, now);
        }
        (input.episodes, input.burned) = records.throttle.take_window(now);
        if let Some(sums) = self.sums.as_mut() {
            sums.delete_done(records, now);
        }
        Ok(())
    }

    fn cgroup_part(&mut self, cg: &mut CgroupWindow, input: &mut WindowInput, duration_ms: u64) {
        let id = cg.id;
        if !input.periods.contains_key(&id) && !input.episodes.contains_key(&id) {
            return;
        }
        // The kernel's counters at both ends of the window, when its files can be read.
        let (prev, cur) = match (&self.files, cg.path.as_deref()) {
            (Some(files), Some(path)) => {
                let cur = files.read(path);
                let prev = match cur {
                    Some(k)
                        if self.kernel.len() < self.max_cgroups
                            || self.kernel.contains_key(&id) =>
                    {
                        self.kernel.insert(id, k)
                    }
                    Some(_) => None,
                    None => self.kernel.remove(&id),
                };
                (prev, cur)
            }
            _ => (None, None),
        };
        let mut w = super::window(
            input.periods.get(&id).copied().unwrap_or_default(),
            input.episodes.get(&id),
            input.burned.remove(&id).unwrap_or_default(),
            prev.as_ref(),
            cur.as_ref(),
            duration_ms,
        );
        w.held_off_recent_us = self.held_off_recent(id, &w);
        super::set_flags(&mut w, &self.rules);
        cg.throttle = Some(Box::new(w));
    }

    fn forget(&mut self, gone: &std::collections::HashSet<u64>) {
        for &cgroup_id in gone {
            self.reader.forget(cgroup_id);
            self.kernel.remove(&cgroup_id);
            self.held_off.remove(&cgroup_id);
        }
    }
}

/// Reads `THROTTLE_STATS` and returns per-cgroup deltas.
pub struct ThrottleReader {
    stats: HashMap<MapData, u64, ThrottleStats>,
    prev: StdHashMap<u64, ThrottleStats>,
    /// The hook modes' open episodes (keyed by `cfs_rq`): those of removed cgroups are deleted.
    episodes: Option<HashMap<MapData, u64, HookEpisode>>,
    /// Cgroups removed since the last sweep of `episodes`.
    gone: std::collections::HashSet<u64>,
}

impl ThrottleReader {
    pub fn new(stats: HashMap<MapData, u64, ThrottleStats>) -> Self {
        Self {
            stats,
            prev: StdHashMap::new(),
            episodes: None,
            gone: std::collections::HashSet::new(),
        }
    }

    pub fn with_episodes(mut self, episodes: HashMap<MapData, u64, HookEpisode>) -> Self {
        self.episodes = Some(episodes);
        self
    }

    /// Deletes the open episodes of cgroups removed since the last call: a group removed while
    /// throttled is never unthrottled, and its freed `cfs_rq` may be reused by a new group (the
    /// programs also check the owner when they close an episode). Returns how many went.
    pub fn drop_gone_episodes(&mut self) -> usize {
        let (Some(map), false) = (self.episodes.as_mut(), self.gone.is_empty()) else {
            return 0;
        };
        let stale: Vec<u64> = map
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, ep)| self.gone.contains(&ep.cgroup_id))
            .map(|(k, _)| k)
            .collect();
        for k in &stale {
            let _ = map.remove(k);
        }
        self.gone.clear();
        stale.len()
    }

    /// Deltas since the last call, for cgroups whose bandwidth timer ran.
    pub fn read_window(&mut self) -> StdHashMap<u64, PeriodDelta> {
        let mut out = StdHashMap::new();
        for entry in self.stats.iter() {
            let Ok((id, cur)) = entry else { continue };
            let prev = self.prev.insert(id, cur).unwrap_or_default();
            let d = PeriodDelta {
                nr_periods: cur.nr_periods.saturating_sub(prev.nr_periods),
                nr_throttled: cur.nr_throttled.saturating_sub(prev.nr_throttled),
            };
            if d != PeriodDelta::default() {
                out.insert(id, d);
            }
        }
        out
    }

    /// Takes `cgroup_id`'s counters now as the baseline of its next delta.
    pub fn prime(&mut self, cgroup_id: u64) {
        if let Ok(cur) = self.stats.get(&cgroup_id, 0) {
            self.prev.insert(cgroup_id, cur);
        }
    }

    pub fn forget(&mut self, cgroup_id: u64) {
        let _ = self.stats.remove(&cgroup_id);
        self.prev.remove(&cgroup_id);
        if self.episodes.is_some() && self.gone.len() < 1 << 16 {
            self.gone.insert(cgroup_id);
        }
    }
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

fn keyed(text: &str) -> BTreeMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// Reads the kernel's counters of the cgroup directory `dir`. On v1, `cpuacct_dir` is the same
/// cgroup in the cpuacct hierarchy (it may be `dir` itself when cpu and cpuacct are co-mounted).
/// `None` if the cgroup is gone.
pub fn read_kernel_cpu(
    dir: &Path,
    version: Version,
    cpuacct_dir: Option<&Path>,
) -> Option<KernelCpu> {
    let stat_text = read(dir, "cpu.stat")?;
    let stat = keyed(&stat_text);
    let get = |k: &str| stat.get(k).copied().unwrap_or(0);
    let mut k = KernelCpu {
        nr_periods: get("nr_periods"),
        nr_throttled: get("nr_throttled"),
        nr_bursts: get("nr_bursts"),
        ..KernelCpu::default()
    };
    match version {
        Version::V1 => {
            let quota: i64 = read(dir, "cpu.cfs_quota_us")?.trim().parse().ok()?;
            k.quota_us = u64::try_from(quota).ok();
            k.period_us = read(dir, "cpu.cfs_period_us")?.trim().parse().ok()?;
            k.burst_us = read(dir, "cpu.cfs_burst_us")
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            k.throttled_ns = get("throttled_time");
            k.burst_ns = get("burst_time");
            k.usage_ns = cpuacct_dir
                .and_then(|d| read(d, "cpuacct.usage"))
                .and_then(|s| s.trim().parse().ok());
        }
        Version::V2 => {
            let max = read(dir, "cpu.max")?;
            let mut f = max.split_whitespace();
            k.quota_us = f.next().and_then(|q| q.parse().ok());
            k.period_us = f.next().and_then(|p| p.parse().ok()).unwrap_or(100_000);
            k.burst_us = read(dir, "cpu.max.burst")
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            k.throttled_ns = get("throttled_usec") * 1000;
            k.burst_ns = get("burst_usec") * 1000;
            k.usage_ns = stat.get("usage_usec").map(|u| u * 1000);
        }
    }
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v1_and_v2_counter_files() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        std::fs::write(d.join("cpu.stat"), "nr_periods 10\nnr_throttled 4\nthrottled_time 123456789\nnr_bursts 1\nburst_time 5000\n").expect("w");
        std::fs::write(d.join("cpu.cfs_quota_us"), "20000\n").expect("w");
        std::fs::write(d.join("cpu.cfs_period_us"), "100000\n").expect("w");
        std::fs::write(d.join("cpuacct.usage"), "987654321\n").expect("w");
        let k = read_kernel_cpu(d, Version::V1, Some(d)).expect("v1");
        assert_eq!(k.quota_us, Some(20000));
        assert_eq!(
            (k.nr_periods, k.nr_throttled, k.throttled_ns),
            (10, 4, 123_456_789)
        );
        assert_eq!(k.usage_ns, Some(987_654_321));
        std::fs::write(d.join("cpu.cfs_quota_us"), "-1\n").expect("w");
        assert_eq!(
            read_kernel_cpu(d, Version::V1, None).expect("v1").quota_us,
            None
        );

        std::fs::write(d.join("cpu.stat"), "usage_usec 5000\nuser_usec 1\nsystem_usec 1\nnr_periods 7\nnr_throttled 2\nthrottled_usec 300\nnr_bursts 0\nburst_usec 0\n").expect("w");
        std::fs::write(d.join("cpu.max"), "50000 100000\n").expect("w");
        let k = read_kernel_cpu(d, Version::V2, None).expect("v2");
        assert_eq!((k.quota_us, k.period_us), (Some(50000), 100_000));
        assert_eq!((k.throttled_ns, k.usage_ns), (300_000, Some(5_000_000)));
        std::fs::write(d.join("cpu.max"), "max 100000\n").expect("w");
        assert_eq!(
            read_kernel_cpu(d, Version::V2, None).expect("v2").quota_us,
            None
        );
        assert!(read_kernel_cpu(&d.join("gone"), Version::V2, None).is_none());
    }
}
