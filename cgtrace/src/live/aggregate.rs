//! The aggregator: turns each window's per-cgroup deltas into a [`Window`], keeps since-start
//! run-queue histograms, and owns the bounded cgroup table (paths, names, removal, eviction).
//! Each family's collector adds its part of every cgroup ([`Collector::cgroup_part`]).

use std::collections::HashMap;

use crate::{
    cgroup::{Names, Resolver, name},
    family::collect::{Collector, WindowInput},
    family::runq::KindHists,
    hist::Hist,
    model::{CgroupWindow, RunqWindow, Window},
};

/// Cgroups checked for removal per window (round-robin over the table), so a table of 10 000
/// cgroups costs a few hundred `stat`s per window, not ten thousand.
const REMOVAL_CHECKS_PER_WINDOW: usize = 256;

/// Windows a removed cgroup's id is remembered for, so data that comes for it after it left
/// (a dying task's last switch, a kernel entry re-made behind the daemon's delete) does not bring
/// it back as an unnamed row.
const DEPARTED_WINDOWS: u64 = 60;

struct Entry {
    path: Option<String>,
    name: Option<name::Name>,
    /// Since start, by wait kind.
    total: KindHists,
    /// Since start: sleep the kernel's `run_delay` counted as waiting (ns).
    total_asleep_ns: u64,
    last_active_seq: u64,
}

/// Per-cgroup state across windows.
pub struct Aggregator {
    /// Shared by every window entry (one string, not one per cgroup per window).
    hierarchy: std::sync::Arc<str>,
    resolver: Resolver,
    names: Names,
    table: HashMap<u64, Entry>,
    max_cgroups: usize,
    evicted: u64,
    seq: u64,
    sweep_cursor: usize,
    /// Blame charges that came ahead of their waits (`--blame`).
    blame_carry: crate::family::runq::blame::Carry,
    /// Cgroups removed in the last [`DEPARTED_WINDOWS`] windows (id -> window it left in), at
    /// most `max_cgroups`: cgroup ids are not reused, so what comes for one of them later is
    /// dropped and counted (`after_removal`), and its kernel entries deleted again.
    departed: HashMap<u64, u64>,
}

/// A window and the cgroups that left the table while building it: removed, or evicted beyond
/// `--max-cgroups` (their kernel state can go).
pub struct WindowOutput {
    pub window: Window,
    pub removed: Vec<u64>,
}

impl Aggregator {
    pub fn new(hierarchy: String, resolver: Resolver, names: Names, max_cgroups: usize) -> Self {
        Self {
            hierarchy: hierarchy.into(),
            resolver,
            names,
            table: HashMap::new(),
            max_cgroups: max_cgroups.max(1),
            evicted: 0,
            seq: 0,
            sweep_cursor: 0,
            blame_carry: Default::default(),
            departed: HashMap::new(),
        }
    }

    /// Builds the next window: the run-queue part and each cgroup's entry here, every other
    /// part by its family's collector.
    pub fn window(
        &mut self,
        mut input: WindowInput,
        collectors: &mut [Box<dyn Collector>],
        end_unix_ms: u64,
        duration_ms: u64,
    ) -> WindowOutput {
        self.seq += 1;
        let seq = self.seq;
        let ids = input.ids();
        let mut removed = Vec::new();
        let mut cgroups = Vec::with_capacity(ids.len());
        let hierarchy = self.hierarchy.clone();
        let mut after_removal = 0;
        for id in ids {
            // Removed already: its late data goes, and so (again) does what the kernel holds.
            if self.departed.contains_key(&id) {
                if input.has_data(id) {
                    after_removal += 1;
                    removed.push(id);
                }
                continue;
            }
            // A cgroup that is only a culprit (its slices still in a CPU's ring or summaries,
            // charged for a wait that reached back to them) and was removed and forgotten is
            // not brought back: its victims name it.
            if !input.has_data(id) && !self.table.contains_key(&id) && self.describe(id).0.is_none()
            {
                continue;
            }
            let kinds = input.runq.remove(&id).unwrap_or_default();
            // Not resolved yet: try again (it may have been made just after a walk); removed
            // only when the resolver knows it is gone, never because it could not be named.
            // Resolved but a pod or container whose kubelet logs were not there yet (or not
            // rescanned yet): name it again (`Names` rescans at most every few seconds).
            let unresolved = id != 0
                && self.table.get(&id).is_some_and(|e| {
                    e.path.is_none() || e.name.as_ref().is_some_and(name::Name::awaits_metadata)
                });
            if unresolved {
                self.resolve_again(id);
            }
            let unnamed = id != 0 && self.entry(id).path.is_none();
            let gone = unnamed && self.resolver.gone(id);
            let entry = self.entry(id);
            entry.total.merge(&kinds);
            entry.last_active_seq = seq;
            let mut cg = CgroupWindow::new(
                id,
                hierarchy.clone(),
                entry.path.clone(),
                entry.name.as_ref(),
                runq_window(&kinds),
            );
            cg.removed = gone;
            if let Some(ns) = input.runq_asleep.remove(&id) {
                cg.runq.run_delay_asleep_us = ns as f64 / 1e3;
                let entry = self.entry(id);
                entry.total_asleep_ns = entry.total_asleep_ns.saturating_add(ns);
            }
            for c in collectors.iter_mut() {
                c.cgroup_part(&mut cg, &mut input, duration_ms);
            }
            cgroups.push(cg);
            if gone {
                removed.push(id);
            }
        }
        if let Some(blame) = input.blame.take() {
            let blame = self.blame_carry.settle(&cgroups, blame);
            crate::family::runq::blame::attach_named(
                &mut cgroups,
                &blame,
                input.blame_caps,
                |id| self.describe_display(id),
                |pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .ok()
                        .map(|s| s.trim_end_matches('\n').to_string())
                },
            );
        }
        // The diagnoses once the window is whole (the runq one names who held the CPU).
        for cg in &mut cgroups {
            cg.flags = crate::family::flags(cg, duration_ms);
        }
        // In place: a stable sort takes a scratch copy of the whole window (6 MB at 10 000
        // cgroups), and the order is total (ids are unique), so an unstable one gives the same.
        cgroups.sort_unstable_by(busiest_first);
        removed.extend(self.sweep());
        self.departed
            .retain(|_, at| seq.saturating_sub(*at) < DEPARTED_WINDOWS);
        for id in &removed {
            self.table.remove(id);
            self.resolver.forget(*id);
            if self.departed.len() < self.max_cgroups {
                self.departed.entry(*id).or_insert(seq);
            }
        }
        input
            .events
            .counters
            .insert("after_removal".into(), after_removal);
        if !removed.is_empty() {
            self.blame_carry.forget(&removed.iter().copied().collect());
        }
        removed.extend(self.enforce_bound());
        WindowOutput {
            window: Window {
                kind: "window".into(),
                seq: self.seq,
                end_unix_ms,
                duration_ms,
                events: input.events,
                cgroups_tracked: self.table.len(),
                cgroups_evicted: self.evicted,
                cgroups,
                memcgs: Vec::new(),
                dying_memcgs: None,
                churn: None,
                self_cost: None,
            },
            removed,
        }
    }

    /// Path and name of a cgroup, from the table or resolved now (without adding it).
    pub fn describe(&mut self, id: u64) -> (Option<String>, Option<name::Name>) {
        if let Some(e) = self.table.get(&id) {
            return (e.path.clone(), e.name.clone());
        }
        if id == 0 {
            return (None, None);
        }
        let path = self.resolver.path_of(id).map(|p| p.to_string());
        let name = path.as_deref().and_then(|p| self.names.name(p));
        (path, name)
    }

    /// [`describe`](Self::describe) with the name's display form only (what the ledger's
    /// parties show): the rest of a table entry's name is not copied.
    fn describe_display(&mut self, id: u64) -> (Option<String>, Option<String>) {
        if let Some(e) = self.table.get(&id) {
            return (e.path.clone(), e.name.as_ref().map(|n| n.display.clone()));
        }
        let (path, name) = self.describe(id);
        (path, name.map(|n| n.display))
    }

    /// Since-start histograms of every tracked cgroup, for the closing summary.
    pub fn totals(&self) -> Vec<CgroupWindow> {
        let mut v: Vec<_> = self
            .table
            .iter()
            .map(|(&id, e)| {
                let mut cg = CgroupWindow::new(
                    id,
                    self.hierarchy.clone(),
                    e.path.clone(),
                    e.name.as_ref(),
                    runq_window(&e.total),
                );
                cg.runq.run_delay_asleep_us = e.total_asleep_ns as f64 / 1e3;
                cg
            })
            .collect();
        v.sort_unstable_by(busiest_first);
        v
    }

    /// Resolves an entry's path and name again, if the resolver finds it now.
    fn resolve_again(&mut self, id: u64) {
        let Some(path) = self.resolver.path_of(id).map(|p| p.to_string()) else {
            return;
        };
        let name = self.names.name(&path);
        if let Some(e) = self.table.get_mut(&id) {
            e.path = Some(path);
            e.name = name;
        }
    }

    fn entry(&mut self, id: u64) -> &mut Entry {
        let (resolver, names) = (&mut self.resolver, &mut self.names);
        self.table.entry(id).or_insert_with(|| {
            let path = if id == 0 {
                None
            } else {
                resolver.path_of(id).map(|p| p.to_string())
            };
            let name = path.as_deref().and_then(|p| names.name(p));
            Entry {
                path,
                name,
                total: Default::default(),
                total_asleep_ns: 0,
                last_active_seq: 0,
            }
        })
    }

    /// Checks a slice of the table for cgroups that no longer exist.
    fn sweep(&mut self) -> Vec<u64> {
        if self.table.is_empty() {
            return Vec::new();
        }
        let mut ids: Vec<u64> = self.table.keys().copied().collect();
        ids.sort_unstable();
        let start = self.sweep_cursor % ids.len();
        let n = REMOVAL_CHECKS_PER_WINDOW.min(ids.len());
        self.sweep_cursor = start + n;
        ids.iter()
            .cycle()
            .skip(start)
            .take(n)
            .copied()
            .filter(|&id| id != 0 && self.table[&id].path.is_some() && !self.resolver.exists(id))
            .collect()
    }

    /// Evicts the least recently active cgroups beyond `max_cgroups`; returns them.
    fn enforce_bound(&mut self) -> Vec<u64> {
        if self.table.len() <= self.max_cgroups {
            return Vec::new();
        }
        let mut by_age: Vec<(u64, u64)> = self
            .table
            .iter()
            .map(|(&id, e)| (e.last_active_seq, id))
            .collect();
        by_age.sort_unstable();
        let excess = self.table.len() - self.max_cgroups;
        let evicted: Vec<u64> = by_age.iter().take(excess).map(|&(_, id)| id).collect();
        for &id in &evicted {
            self.table.remove(&id);
            self.resolver.forget(id);
            self.evicted += 1;
        }
        evicted
    }
}

/// Cgroups with the most waits first, then by id: a total order (ids are unique), so an
/// unstable sort, which needs no scratch copy, orders them the same every time.
fn busiest_first(a: &CgroupWindow, b: &CgroupWindow) -> std::cmp::Ordering {
    b.runq
        .all
        .count
        .cmp(&a.runq.all.count)
        .then(a.id.cmp(&b.id))
}

/// Window summary of one cgroup: all kinds merged, and each non-empty kind.
pub fn runq_window(kinds: &KindHists) -> RunqWindow {
    let mut all = Hist::default();
    // Sized to its kinds: grown one by one it would hold room for four (a `Vec`'s first
    // capacity), 0.4 KB more in each cgroup of every window.
    let mut by_kind = crate::model::kind_map::KindMap::with_capacity(kinds.iter().count());
    for (kind, h) in kinds.iter() {
        let h = h.to_hist();
        all.merge(&h);
        by_kind.insert(kind.name(), h.summary());
    }
    // A cgroup with waits of one kind (most of them) has that kind's summary as its whole.
    let all = match by_kind.iter().next() {
        Some((_, only)) if by_kind.len() == 1 => only.clone(),
        _ => all.summary(),
    };
    RunqWindow {
        all,
        kinds: by_kind,
        blame: None,
        run_delay_asleep_us: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use std::{os::unix::fs::MetadataExt, path::Path};

    use cgtrace_common::runq::WaitKind;

    use super::*;

    fn ino(p: &Path) -> u64 {
        std::fs::metadata(p).expect("stat").ino()
    }

    fn waits(n: u64, ns: u64) -> KindHists {
        let mut k = KindHists::default();
        for _ in 0..n {
            k.record(WaitKind::Wakeup, ns);
        }
        k.record(WaitKind::Preempt, ns * 10);
        k
    }

    fn runq_input<const N: usize>(runq: [(u64, KindHists); N]) -> WindowInput {
        WindowInput {
            runq: runq.into(),
            ..WindowInput::default()
        }
    }

    impl Aggregator {
        fn window_of(&mut self, input: WindowInput, end: u64, ms: u64) -> WindowOutput {
            self.window(input, &mut [], end, ms)
        }
    }

    fn aggregator(root: &Path, max: usize) -> Aggregator {
        let resolver = Resolver::new(root.to_path_buf(), 64).expect("resolver");
        let names = Names::new(root.join("no-logs"), root.join("no-docker"));
        Aggregator::new("cgroup2".into(), resolver, names, max)
    }

    /// A table of at most `max` cgroups over a temporary hierarchy holding `dirs`; their ids.
    fn table(max: usize, dirs: &[&str]) -> (tempfile::TempDir, Aggregator, Vec<u64>) {
        let tmp = tempfile::tempdir().expect("tmp");
        let ids = dirs
            .iter()
            .map(|d| {
                let p = tmp.path().join(d);
                std::fs::create_dir_all(&p).expect("mkdir");
                ino(&p)
            })
            .collect();
        let agg = aggregator(tmp.path(), max);
        (tmp, agg, ids)
    }

    #[test]
    fn a_window_of_one_kind_has_that_kind_as_its_whole_and_of_two_their_sum() {
        let mut one = KindHists::default();
        for ns in [900, 40_000, 2_000_000] {
            one.record(WaitKind::Preempt, ns);
        }
        let w = runq_window(&one);
        assert_eq!(w.all, w.kinds["preempt"]);
        let two = waits(3, 5_000);
        let w = runq_window(&two);
        let mut sum = Hist::default();
        for (_, h) in two.iter() {
            sum.merge(&h.to_hist());
        }
        assert_eq!(w.all, sum.summary());
        assert_eq!((w.all.count, w.kinds.len()), (4, 2));
    }

    #[test]
    fn windows_carry_paths_names_and_the_kind_split() {
        let (_tmp, mut agg, ids) = table(16, &["system.slice/nginx.service"]);
        let id = ids[0];
        let out = agg.window_of(runq_input([(id, waits(9, 5_000))]), 0, 1000);
        let cg = &out.window.cgroups[0];
        assert_eq!(cg.path.as_deref(), Some("/system.slice/nginx.service"));
        assert_eq!(cg.name.as_deref(), Some("nginx.service"));
        assert_eq!(cg.name_kind, Some(crate::cgroup::name::NameKind::Systemd));
        assert_eq!(cg.runq.all.count, 10);
        assert_eq!(cg.runq.kinds["wakeup"].count, 9);
        assert_eq!(cg.runq.kinds["preempt"].count, 1);
        assert_eq!(cg.runq.all.max_us, 50.0);
        assert!(!cg.runq.kinds.contains_key("throttled"));
        // Since-start totals add up over windows.
        agg.window_of(runq_input([(id, waits(1, 5_000))]), 0, 1000);
        assert_eq!(agg.totals()[0].runq.all.count, 12);
    }

    #[test]
    fn a_container_is_named_once_kubelet_logs_appear() {
        let uid = "0000679c-5e1a-4000-8000-000000000001";
        let cid = "0000000679c00001000000000000000000000000000000000000000000000001";
        let (tmp, _, ids) = table(16, &[&format!("kubepods/pod{uid}/{cid}")]);
        let mut names = Names::new(tmp.path().join("log"), tmp.path().join("no-docker"));
        names.set_refresh_interval(std::time::Duration::ZERO);
        let resolver = Resolver::new(tmp.path().to_path_buf(), 64).expect("resolver");
        let mut agg = Aggregator::new("cgroup2".into(), resolver, names, 16);
        let out = agg.window_of(runq_input([(ids[0], waits(1, 1000))]), 0, 1000);
        assert_eq!(out.window.cgroups[0].name.as_deref(), Some("0000000679c0"));
        // kubelet writes its logs after the cgroup is made: the next window has the name.
        let logs = tmp.path().join("log");
        std::fs::create_dir_all(logs.join(format!("pods/shop_web-1_{uid}/main"))).expect("mkdir");
        std::fs::create_dir_all(logs.join("containers")).expect("mkdir");
        std::fs::write(
            logs.join(format!("containers/web-1_shop_main-{cid}.log")),
            b"",
        )
        .expect("log");
        let out = agg.window_of(runq_input([(ids[0], waits(1, 1000))]), 0, 1000);
        assert_eq!(
            out.window.cgroups[0].name.as_deref(),
            Some("shop/web-1/main")
        );
    }

    #[test]
    fn removed_cgroups_leave_the_table() {
        let (tmp, mut agg, ids) = table(16, &["a"]);
        agg.window_of(runq_input([(ids[0], waits(1, 1000))]), 0, 1000);
        assert_eq!(agg.table.len(), 1);
        std::fs::remove_dir(tmp.path().join("a")).expect("rmdir");
        let out = agg.window_of(WindowInput::default(), 0, 1000);
        assert_eq!(out.removed, ids);
        assert_eq!(out.window.cgroups_tracked, 0);
    }

    #[test]
    fn a_removed_cgroup_does_not_come_back_with_late_data() {
        let (tmp, mut agg, ids) = table(16, &["a"]);
        agg.window_of(runq_input([(ids[0], waits(1, 1000))]), 0, 1000);
        std::fs::remove_dir(tmp.path().join("a")).expect("rmdir");
        let out = agg.window_of(WindowInput::default(), 0, 1000);
        assert_eq!(out.removed, ids);
        // A wait the kernel recorded for it after it went (a dying task's last switch): not an
        // unnamed cgroup in the window, counted, and its kernel entries deleted again.
        let out = agg.window_of(runq_input([(ids[0], waits(1, 1000))]), 0, 1000);
        assert!(out.window.cgroups.is_empty(), "{:?}", out.window.cgroups);
        assert_eq!(out.window.events.counters["after_removal"], 1);
        assert_eq!(out.removed, ids);
        assert_eq!(out.window.cgroups_tracked, 0);
    }

    #[test]
    fn the_table_is_bounded_and_evictions_are_counted() {
        let (_tmp, mut agg, ids) = table(3, &["c0", "c1", "c2", "c3", "c4"]);
        let mut evicted = Vec::new();
        for &id in &ids {
            let out = agg.window_of(runq_input([(id, waits(1, 1000))]), 0, 1000);
            assert!(out.window.cgroups_tracked <= 3);
            // Evicted ids leave with the window, so every family forgets their kernel state.
            evicted.extend(out.removed);
        }
        let out = agg.window_of(WindowInput::default(), 0, 1000);
        assert_eq!(out.window.cgroups_tracked, 3);
        assert_eq!(out.window.cgroups_evicted, 2);
        assert_eq!(evicted, ids[..2]);
        // The most recently active survive.
        let kept: Vec<u64> = agg.totals().iter().map(|c| c.id).collect();
        for id in &ids[2..] {
            assert!(kept.contains(id));
        }
    }

    #[test]
    fn a_cgroup_that_cannot_be_named_is_not_reported_removed() {
        // A live directory the resolver cannot name (outside the hierarchy it walks, as a host
        // cgroup is to a cgtrace in a cgroup namespace): unnamed, not removed, and kept.
        let tmp = tempfile::tempdir().expect("tmp");
        let (root, outside) = (tmp.path().join("root"), tmp.path().join("outside"));
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        let mut agg = aggregator(&root, 16);
        let id = ino(&outside);
        let out = agg.window_of(runq_input([(id, waits(1, 1000))]), 0, 1000);
        let cg = &out.window.cgroups[0];
        assert_eq!((cg.path.as_deref(), cg.removed), (None, false));
        assert!(out.removed.is_empty(), "{:?}", out.removed);
        assert_eq!(out.window.cgroups_tracked, 1);
    }
}
