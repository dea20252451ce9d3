//! The blame ledger of `runq`: who delayed whom. The kernel charges each wait to whoever held
//! the CPU meanwhile (`BLAME`, ns per (waiting cgroup, culprit) per window; waits shorter than
//! `--blame-min-us` through each CPU's `BLAME_SHORT` on 5.18+, and not at all before); here the
//! window's charges become each cgroup's `runq.blame` (parts that add up to its wait) and, on
//! the culprit's side, `caused`.

use std::collections::{HashMap as StdHashMap, hash_map::Entry};

pub use super::model::{Blame, BlameCaps, Caused, KernelTask, NoisyNeighbour, Party, TOP};
use crate::model::CgroupWindow;
use cgtrace_common::runq::{
    BlameKey, CULPRIT_HISTORY, CULPRIT_IDLE, CULPRIT_IDLE_ELSEWHERE, CULPRIT_IRQ, CULPRIT_MARKERS,
    CULPRIT_OLDER_OTHERS, CULPRIT_OTHER_NEIGHBOURS, CULPRIT_OTHER_TASKS, CULPRIT_STEAL,
    CULPRIT_THROTTLED_ANCESTOR, CULPRIT_THROTTLED_OWN, culprit_task_tgid,
};

/// The window's own maps and sets of ids (never keyed by what a tenant controls).
type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Whether a culprit id is a marker rather than a cgroup.
pub fn is_marker(culprit: u64) -> bool {
    culprit >= CULPRIT_MARKERS
}

/// The cgroup a culprit is: itself, the root cgroup `root` for a root-cgroup task (`None` when
/// the root is not known), `None` for a marker or 0.
pub fn culprit_cgroup(culprit: u64, root: u64) -> Option<u64> {
    match culprit_task_tgid(culprit) {
        Some(_) => (root != 0).then_some(root),
        None => (culprit != 0 && !is_marker(culprit)).then_some(culprit),
    }
}

/// Windows a charge may wait for its wait to reach the histograms before it is dropped.
const CARRY_WINDOWS: u32 = 2;

/// Charges that came ahead of their waits. The histograms are read before the ledger, so a wait
/// that ends between the two reads is charged in this window's ledger and counted in the next
/// window's histograms (on a 64-vCPU QEMU guest the reads were far enough apart that 0.65 s of a
/// throttled loop's 1.48 s window went that way). A victim's charges beyond its wait in this
/// window are carried to the next one instead of scaled away, so that window's parts still add
/// up to its wait and the next one finds the charge beside its wait.
#[derive(Debug, Default)]
pub struct Carry {
    /// (victim, culprit) -> ns carried, and in how many windows so far.
    pending: StdHashMap<BlameKey, (u64, u32)>,
}

impl Carry {
    /// This window's ledger: `deltas` plus what was carried, less each victim's charges beyond
    /// its wait in `cgroups` (no wait if it is not there), which are carried on.
    pub fn settle(
        &mut self,
        cgroups: &[CgroupWindow],
        mut ledger: StdHashMap<BlameKey, u64>,
    ) -> StdHashMap<BlameKey, u64> {
        let mut age = StdHashMap::new();
        for (key, (ns, windows)) in self.pending.drain() {
            *ledger.entry(key).or_insert(0) += ns;
            age.insert(key, windows);
        }
        let waits: StdHashMap<u64, f64> = cgroups
            .iter()
            .map(|c| (c.id, c.runq.all.sum_us * 1e3))
            .collect();
        let mut charged: StdHashMap<u64, u64> = StdHashMap::new();
        for (key, &ns) in &ledger {
            *charged.entry(key.victim).or_insert(0) += ns;
        }
        for (key, ns) in ledger.iter_mut() {
            let total = charged[&key.victim] as f64;
            let wait = waits.get(&key.victim).copied().unwrap_or(0.0);
            if total <= wait {
                continue;
            }
            let keep = (*ns as f64 * wait / total).floor() as u64;
            let excess = *ns - keep.min(*ns);
            *ns = keep.min(*ns);
            let windows = age.get(key).copied().unwrap_or(0) + 1;
            if excess > 0 && windows <= CARRY_WINDOWS {
                self.pending.insert(*key, (excess, windows));
            }
        }
        ledger.retain(|_, ns| *ns > 0);
        ledger
    }

    /// Drops what was carried for or against removed cgroups (one walk).
    pub fn forget(&mut self, gone: &std::collections::HashSet<u64>) {
        self.pending
            .retain(|k, _| !gone.contains(&k.victim) && !gone.contains(&k.culprit));
    }
}

/// Fills `runq.blame` of every cgroup that waited and `caused` of every cgroup that held a CPU
/// someone waited for, from the window's deltas (the ledger is on); `describe` names a cgroup id.
/// A cgroup that waited with nothing charged (before 5.18 every wait below `--blame-min-us`, or
/// charged in the window before) has all its wait unattributed. The parts `caps` says this kernel cannot tell
/// are `None` (unknown), never 0. The root cgroup's tasks, which the kernel charges by process,
/// are `kernel_us` (unnamed: see [`attach_named`]) and `caused` of the root cgroup.
pub fn attach(
    cgroups: &mut [CgroupWindow],
    blame: &StdHashMap<BlameKey, u64>,
    caps: BlameCaps,
    describe: impl FnMut(u64) -> (Option<String>, Option<String>),
) {
    attach_named(cgroups, blame, caps, describe, |_| None);
}

/// [`attach`], with the root cgroup's tasks in `kernel_tasks` named by `comm` (`None`: it has
/// exited).
pub fn attach_named(
    cgroups: &mut [CgroupWindow],
    blame: &StdHashMap<BlameKey, u64>,
    caps: BlameCaps,
    mut describe: impl FnMut(u64) -> (Option<String>, Option<String>),
    mut comm: impl FnMut(u32) -> Option<String>,
) {
    // Lists, not pair maps: at 10 000 cgroups a window holds hundreds of thousands of pairs.
    let mut by_victim: FastMap<u64, Vec<(u64, u64)>> = FastMap::default();
    let mut by_culprit: FastMap<u64, Vec<(u64, u64)>> = FastMap::default();
    for (k, &ns) in blame {
        by_victim.entry(k.victim).or_default().push((k.culprit, ns));
        // A root-cgroup task's charge is the root cgroup's doing (several tasks' charges to one
        // victim are merged below).
        if let Some(culprit) = culprit_cgroup(k.culprit, caps.root_cgroup)
            && culprit != k.victim
        {
            by_culprit.entry(culprit).or_default().push((k.victim, ns));
        }
    }
    let mut comms: FastMap<u32, Option<String>> = FastMap::default();
    // The root cgroup: kernel threads and host processes outside any cgroup (`kernel_us`).
    // Each culprit is looked at once, not once per victim it delayed (at 10 000 cgroups that
    // was a path copied per pair).
    let mut seen: FastSet<u64> = FastSet::default();
    let roots: FastSet<u64> = by_victim
        .values()
        .flatten()
        .map(|&(c, _)| c)
        .filter(|&c| {
            // A task culprit is no cgroup: never looked up (an unknown id costs a walk).
            !is_marker(c) && c != 0 && culprit_task_tgid(c).is_none() && seen.insert(c)
        })
        .filter(|&c| describe(c).0.as_deref() == Some("/"))
        .collect();
    let is_root = |c: u64| roots.contains(&c);
    let mut party = |id: u64, ns: u64| {
        let (path, name) = describe(id);
        Party {
            id,
            path,
            name,
            wait_us: ns as f64 / 1e3,
            cpu_max: None,
        }
    };
    let throttled = throttled_by_path(cgroups);
    for cg in cgroups.iter_mut() {
        let parts = by_victim.get(&cg.id);
        if parts.is_some() || cg.runq.all.sum_us > 0.0 {
            let mut b = Blame {
                irq_us: caps.irq.then_some(0.0),
                steal_us: caps.steal.then_some(0.0),
                idle_elsewhere_us: caps.idle_elsewhere.then_some(0.0),
                ..Blame::default()
            };
            let mut others: Vec<(u64, u64)> = Vec::new();
            let mut tasks: Vec<(u32, u64)> = Vec::new();
            let mut charged = 0.0;
            for &(culprit, ns) in parts.into_iter().flatten() {
                let us = ns as f64 / 1e3;
                charged += us;
                match culprit {
                    CULPRIT_THROTTLED_OWN => b.throttled_own_us += us,
                    CULPRIT_THROTTLED_ANCESTOR => b.throttled_ancestor_us += us,
                    CULPRIT_IDLE => b.idle_us += us,
                    // Charged, so told (whatever the caps guessed).
                    CULPRIT_IRQ => *b.irq_us.get_or_insert(0.0) += us,
                    CULPRIT_STEAL => *b.steal_us.get_or_insert(0.0) += us,
                    CULPRIT_IDLE_ELSEWHERE => *b.idle_elsewhere_us.get_or_insert(0.0) += us,
                    CULPRIT_OLDER_OTHERS => b.older_others_us += us,
                    // Beyond the culprits a walked wait names (`WALK_TOP`).
                    CULPRIT_OTHER_NEIGHBOURS => b.neighbours_other_us += us,
                    CULPRIT_OTHER_TASKS if cg.id == caps.root_cgroup => b.siblings_us += us,
                    CULPRIT_OTHER_TASKS => b.kernel_us += us,
                    CULPRIT_HISTORY => {
                        // Charged by the kernel, but to nobody: unattributed, with its reason.
                        charged -= us;
                        b.unattributed_history_us += us;
                    }
                    // The root cgroup's own tasks wait behind each other.
                    c if c == cg.id => b.siblings_us += us,
                    c if culprit_task_tgid(c).is_some() && cg.id == caps.root_cgroup => {
                        b.siblings_us += us
                    }
                    c if let Some(tgid) = culprit_task_tgid(c) => {
                        b.kernel_us += us;
                        tasks.push((tgid, ns));
                    }
                    c if is_root(c) => b.kernel_us += us,
                    c => others.push((c, ns)),
                }
            }
            others.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for (i, &(id, ns)) in others.iter().enumerate() {
                if i < TOP {
                    b.neighbours.push(party(id, ns));
                } else {
                    b.neighbours_other_us += ns as f64 / 1e3;
                }
            }
            tasks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            b.kernel_tasks = tasks
                .iter()
                .take(TOP)
                .map(|&(pid, ns)| KernelTask {
                    pid,
                    comm: comms.entry(pid).or_insert_with(|| comm(pid)).clone(),
                    wait_us: ns as f64 / 1e3,
                })
                .collect();
            // `Carry::settle` has already moved charges beyond the wait to the next window; a
            // ledger that did not go through it is scaled to the wait here, so the parts always
            // add up to the wait.
            let wait = cg.runq.all.sum_us;
            let history = b.unattributed_history_us;
            if charged + history > wait && charged + history > 0.0 {
                b.unattributed_us = history;
                b.scale(wait / (charged + history));
            } else {
                b.unattributed_us = wait - charged;
            }
            if b.throttled_ancestor_us > 0.0 {
                b.throttled_ancestors =
                    name_ancestors(cg.path.as_deref(), b.throttled_ancestor_us, &throttled);
            }
            cg.runq.blame = Some(b);
        }
        if let Some(victims) = by_culprit.get_mut(&cg.id) {
            victims.sort_unstable_by_key(|v| v.0);
            victims.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    kept.1 += later.1;
                }
                same
            });
            victims.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let total: u64 = victims.iter().map(|v| v.1).sum();
            cg.caused = Some(Caused {
                wait_us: total as f64 / 1e3,
                victims: victims
                    .iter()
                    .take(TOP)
                    .map(|&(id, ns)| party(id, ns))
                    .collect(),
            });
        }
    }
}

/// The window's cgroups the throttle family saw throttled, by path, each as a [`Party`] whose
/// `wait_us` is its throttled time (the kernel's, else our episodes'; 0 when only
/// `nr_throttled` says so) and `cpu_max` its quota.
fn throttled_by_path(cgroups: &[CgroupWindow]) -> StdHashMap<String, Party> {
    cgroups
        .iter()
        .filter_map(|c| {
            let t = c.throttle.as_ref()?;
            let kernel = t.kernel.as_ref();
            let us = kernel
                .map(|k| k.throttled_us)
                .filter(|&us| us > 0.0)
                .unwrap_or(t.throttled_us);
            let throttled =
                us > 0.0 || t.nr_throttled > 0 || kernel.is_some_and(|k| k.nr_throttled > 0);
            let path = c.path.clone()?;
            throttled.then(|| {
                let party = Party {
                    id: c.id,
                    path: Some(path.clone()),
                    name: c.name.clone(),
                    wait_us: us.max(0.0),
                    cpu_max: t.quota_us.map(|q| format!("{q} {}", t.period_us)),
                };
                (path, party)
            })
        })
        .collect()
}

/// The ancestors of the cgroup at `path` that were throttled in the window, `us` split across
/// them by their throttled time (evenly when none has any), most first, nearest first when equal.
fn name_ancestors(
    path: Option<&str>,
    us: f64,
    throttled: &StdHashMap<String, Party>,
) -> Vec<Party> {
    let Some(path) = path else {
        return Vec::new();
    };
    // Nearest first: "/a/b/c" → "/a/b", "/a".
    let mut found: Vec<Party> = Vec::new();
    let mut at = path.trim_end_matches('/');
    while let Some(i) = at.rfind('/') {
        at = &at[..i];
        if at.is_empty() {
            break;
        }
        if let Some(p) = throttled.get(at) {
            found.push(p.clone());
        }
    }
    let total: f64 = found.iter().map(|p| p.wait_us).sum();
    let n = found.len() as f64;
    for p in &mut found {
        p.wait_us = if total > 0.0 {
            us * p.wait_us / total
        } else {
            us / n
        };
    }
    // A stable sort keeps the nearest first among equals.
    found.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us));
    found
}

/// Noisy neighbours over a recording: every window's `caused`, summed per culprit.
#[derive(Debug, Default)]
pub struct Noisy {
    culprits: StdHashMap<u64, (NoisyNeighbour, StdHashMap<u64, Party>)>,
}

/// Room for `bytes` more of a tally, asked of whoever bounds what is kept (the report's budget).
pub type Room<'a> = &'a mut dyn FnMut(usize) -> bool;

/// `slot = new` when there is `room` for what it grows by.
fn set(slot: &mut Option<String>, new: &Option<String>, room: Room<'_>) {
    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    if slot != new && room(len(new).saturating_sub(len(slot))) {
        slot.clone_from(new);
    }
}

impl Noisy {
    /// Sums a cgroup's `caused` of one window; a culprit or victim not yet kept is kept only when
    /// `room` says there is room for it.
    pub fn add(&mut self, c: &CgroupWindow, room: Room<'_>) {
        let Some(caused) = &c.caused else {
            return;
        };
        let (n, victims) = match self.culprits.entry(c.id) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                if !room(size_of::<(u64, (NoisyNeighbour, StdHashMap<u64, Party>))>()) {
                    return;
                }
                e.insert(Default::default())
            }
        };
        n.id = c.id;
        set(&mut n.path, &c.path, room);
        set(&mut n.name, &c.name, room);
        n.caused_us += caused.wait_us;
        n.windows += 1;
        for v in &caused.victims {
            let e = match victims.entry(v.id) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    if !room(size_of::<(u64, Party)>()) {
                        continue;
                    }
                    e.insert(Party {
                        id: v.id,
                        path: None,
                        name: None,
                        wait_us: 0.0,
                        cpu_max: None,
                    })
                }
            };
            set(&mut e.path, &v.path, room);
            set(&mut e.name, &v.name, room);
            e.wait_us += v.wait_us;
        }
    }

    /// The `top` that caused the most, each with its [`TOP`] most delayed victims.
    pub fn finish(self, top: usize) -> Vec<NoisyNeighbour> {
        let mut out: Vec<NoisyNeighbour> = self
            .culprits
            .into_values()
            .map(|(mut n, victims)| {
                let mut v: Vec<Party> = victims.into_values().collect();
                v.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us).then(a.id.cmp(&b.id)));
                v.truncate(TOP);
                n.victims = v;
                n
            })
            .filter(|n| n.caused_us > 0.0)
            .collect();
        out.sort_by(|a, b| b.caused_us.total_cmp(&a.caused_us).then(a.id.cmp(&b.id)));
        out.truncate(top);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::runq::advice::{Advice, Knobs, blame_diagnosis};
    use crate::model::RunqWindow;

    fn cg(id: u64, wait_us: f64) -> CgroupWindow {
        let mut runq = RunqWindow::default();
        runq.all.sum_us = wait_us;
        CgroupWindow::new(id, "cgroup2", Some(format!("/c{id}")), None, runq)
    }

    #[test]
    fn root_idle_and_history_are_parts_of_their_own() {
        // Victim 5 waited 10 ms: 4 ms behind the root cgroup (kernel threads), 1 ms behind a pod,
        // 2 ms its CPU idle, 2.5 ms older than the ring, 0.5 ms never charged.
        let mut blame = StdHashMap::new();
        let mut put = |culprit, us: u64| {
            blame.insert(BlameKey { victim: 5, culprit }, us * 1000);
        };
        put(1, 4000);
        put(20, 1000);
        put(CULPRIT_IDLE, 2000);
        put(CULPRIT_HISTORY, 2500);
        let path = |id: u64| match id {
            1 => Some("/".to_string()),
            id => Some(format!("/pod{id}")),
        };
        let mut cgs = vec![cg(5, 10_000.0), cg(1, 0.0)];
        attach(&mut cgs, &blame, BlameCaps::default(), |id| {
            (path(id), None)
        });
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!((b.kernel_us, b.idle_us), (4000.0, 2000.0));
        assert_eq!(b.neighbours.iter().map(|p| p.id).collect::<Vec<_>>(), [20]);
        assert_eq!(
            (b.unattributed_us, b.unattributed_history_us),
            (3000.0, 2500.0)
        );
        let sum = b.total_us();
        assert!((sum - 10_000.0).abs() < 1e-6, "{sum}");
        // The root cgroup still sees whom it delayed.
        assert_eq!(cgs[1].caused.as_ref().expect("caused").wait_us, 4000.0);
        // Charged beyond a wait of 8 ms: every part, history included, scaled to it.
        let mut cgs = vec![cg(5, 8_000.0)];
        attach(&mut cgs, &blame, BlameCaps::default(), |id| {
            (path(id), None)
        });
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        let sum = b.total_us();
        assert!((sum - 8_000.0).abs() < 1e-6, "{sum}");
        assert!((b.unattributed_history_us - 2500.0 * 8.0 / 9.5).abs() < 1e-6);
        assert_eq!(b.unattributed_us, b.unattributed_history_us);
    }

    #[test]
    fn root_cgroup_tasks_are_kernel_named_and_the_root_caused_it() {
        use cgtrace_common::runq::culprit_task;
        // Victim 5 waited 10 ms: 6 ms behind root-cgroup tasks (ksoftirqd 4, kworker 1.5, an
        // exited process 0.5), 4 ms behind pod 20. The root cgroup (1) waited 1 ms behind
        // ksoftirqd itself: its siblings, not kernel.
        let mut blame = StdHashMap::new();
        for (victim, culprit, us) in [
            (5, culprit_task(16), 4000u64),
            (5, culprit_task(77), 1500),
            (5, culprit_task(4_000_000), 500),
            (5, 20, 4000),
            (1, culprit_task(16), 1000),
        ] {
            blame.insert(BlameKey { victim, culprit }, us * 1000);
        }
        let caps = BlameCaps {
            root_cgroup: 1,
            ..BlameCaps::default()
        };
        let mut cgs = vec![cg(5, 10_000.0), cg(1, 1000.0), cg(20, 0.0)];
        let mut asked = Vec::new();
        attach_named(
            &mut cgs,
            &blame,
            caps,
            |id| (Some(format!("/c{id}")), None),
            |pid| {
                asked.push(pid);
                match pid {
                    16 => Some("ksoftirqd/1".into()),
                    77 => Some("kworker/1:2".into()),
                    _ => None,
                }
            },
        );
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!(b.kernel_us, 6000.0);
        let named: Vec<_> = b
            .kernel_tasks
            .iter()
            .map(|t| (t.pid, t.comm.as_deref(), t.wait_us))
            .collect();
        assert_eq!(
            named,
            [
                (16, Some("ksoftirqd/1"), 4000.0),
                (77, Some("kworker/1:2"), 1500.0),
                (4_000_000, None, 500.0)
            ]
        );
        assert!((b.total_us() - 10_000.0).abs() < 1e-6);
        assert!(b.neighbours.iter().all(|n| n.id == 20));
        // The root cgroup: its wait behind its own task is siblings; it caused the victim's 6 ms.
        let root = &cgs[1];
        let rb = root.runq.blame.as_ref().expect("root blame");
        assert_eq!((rb.siblings_us, rb.kernel_us), (1000.0, 0.0));
        let caused = root.caused.as_ref().expect("caused");
        assert_eq!(caused.wait_us, 6000.0);
        assert_eq!(caused.victims.iter().map(|v| v.id).collect::<Vec<_>>(), [5]);
        // Each process named once a window, only the ones listed.
        asked.sort_unstable();
        assert_eq!(asked, [16, 77, 4_000_000]);
        // A window's cgroups take a task culprit as the root cgroup, never as a cgroup of its
        // own (it would be looked up, and reported removed).
        let input = crate::family::collect::WindowInput {
            blame: Some(blame.clone()),
            blame_caps: caps,
            ..Default::default()
        };
        let mut ids: Vec<u64> = input.ids().into_iter().collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 20]);
        assert_eq!(culprit_cgroup(culprit_task(16), 0), None);
        assert_eq!(culprit_cgroup(CULPRIT_IDLE, 1), None);
        assert_eq!(culprit_cgroup(20, 1), Some(20));
        // Without a known root (an old recording's replay has none), still kernel, unnamed root.
        let mut cgs = vec![cg(5, 10_000.0)];
        attach(&mut cgs, &blame, BlameCaps::default(), |_| (None, None));
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!(b.kernel_us, 6000.0);
        assert!(b.kernel_tasks.iter().all(|t| t.comm.is_none()));
    }

    #[test]
    fn culprits_beyond_a_walks_top_are_other_neighbours_or_kernel() {
        let root = 1;
        let mut blame = StdHashMap::new();
        let mut put = |victim, culprit, us: u64| {
            blame.insert(BlameKey { victim, culprit }, us * 1000);
        };
        put(5, 10, 1000);
        put(5, CULPRIT_OTHER_NEIGHBOURS, 700);
        put(5, CULPRIT_OTHER_TASKS, 300);
        // The root cgroup's own tasks wait behind each other: siblings.
        put(root, CULPRIT_OTHER_TASKS, 400);
        let caps = BlameCaps {
            root_cgroup: root,
            ..BlameCaps::default()
        };
        let mut cgs = vec![cg(5, 2000.0), cg(root, 400.0), cg(10, 0.0)];
        attach(&mut cgs, &blame, caps, |id| (Some(format!("/c{id}")), None));
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!(
            (b.neighbours_other_us, b.kernel_us, b.unattributed_us),
            (700.0, 300.0, 0.0)
        );
        assert_eq!(b.neighbours.len(), 1);
        let rb = cgs[1].runq.blame.as_ref().expect("root blame");
        assert_eq!((rb.siblings_us, rb.kernel_us), (400.0, 0.0));
        // A marker is no culprit: it caused nothing.
        assert!(cgs[2].caused.as_ref().is_some_and(|c| c.wait_us == 1000.0));
        assert!(is_marker(CULPRIT_OTHER_NEIGHBOURS) && is_marker(CULPRIT_OTHER_TASKS));
    }

    #[test]
    fn parts_add_up_to_the_wait_and_culprits_see_their_victims() {
        // Victim 1 waited 10 ms: 2 ms own quota, 1 ms siblings, 6 neighbours (3, 2, 1, 0.5, 0.25,
        // 0.1 ms), the rest unattributed.
        let mut blame = StdHashMap::new();
        let mut put = |victim, culprit, us: u64| {
            blame.insert(BlameKey { victim, culprit }, us * 1000);
        };
        put(1, CULPRIT_THROTTLED_OWN, 2000);
        put(1, 1, 1000);
        for (c, us) in [
            (10, 3000),
            (11, 2000),
            (12, 1000),
            (13, 500),
            (14, 250),
            (15, 100),
        ] {
            put(1, c, us);
        }
        put(2, 10, 700);
        let mut cgs = vec![cg(1, 10_000.0), cg(2, 1000.0), cg(10, 0.0)];
        attach(&mut cgs, &blame, BlameCaps::default(), |id| {
            (Some(format!("/c{id}")), None)
        });
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!((b.throttled_own_us, b.siblings_us), (2000.0, 1000.0));
        let ids: Vec<u64> = b.neighbours.iter().map(|p| p.id).collect();
        assert_eq!(ids, [10, 11, 12, 13, 14]);
        assert_eq!(b.neighbours_other_us, 100.0);
        let named: f64 = b.neighbours.iter().map(|p| p.wait_us).sum();
        let sum = b.throttled_own_us
            + b.throttled_ancestor_us
            + b.siblings_us
            + named
            + b.neighbours_other_us
            + b.unattributed_us;
        assert!((sum - 10_000.0).abs() < 1e-6, "{sum}");
        assert!((b.unattributed_us - 150.0).abs() < 1e-6);
        // Cgroup 2's charges (700 µs) exceed its wait (500 µs in this reading): scaled to it.
        let mut cgs2 = vec![cg(2, 500.0)];
        attach(&mut cgs2, &blame, BlameCaps::default(), |_| (None, None));
        let b2 = cgs2[0].runq.blame.as_ref().expect("blame");
        assert!((b2.neighbours[0].wait_us - 500.0).abs() < 1e-9);
        assert_eq!(b2.unattributed_us, 0.0);
        // Cgroup 3 waited 56 µs with nothing charged (below --blame-min-us): all unattributed,
        // in a window whose ledger has charges and in one whose ledger is empty.
        for ledger in [blame.clone(), StdHashMap::new()] {
            let mut cgs3 = vec![cg(3, 56.0), cg(4, 0.0)];
            attach(&mut cgs3, &ledger, BlameCaps::default(), |_| (None, None));
            let b3 = cgs3[0]
                .runq
                .blame
                .as_ref()
                .expect("blame of a wait never charged");
            assert_eq!((b3.unattributed_us, b3.neighbours.len()), (56.0, 0));
            assert!(cgs3[1].runq.blame.is_none(), "cgroup 4 never waited");
        }
        // Cgroup 10 delayed 1 and 2; it never waited itself.
        let caused = cgs[2].caused.as_ref().expect("caused");
        assert_eq!(caused.wait_us, 3700.0);
        let victims: Vec<u64> = caused.victims.iter().map(|p| p.id).collect();
        assert_eq!(victims, [1, 2]);
        assert!(cgs[2].runq.blame.is_none());
        assert_eq!(
            cgs[2].caused.as_ref().unwrap().victims[0].path.as_deref(),
            Some("/c1")
        );
    }

    /// A wait that ended between the histogram read and the ledger read: its charge is carried
    /// to the window whose histograms have it (without the carry: scaled away in the first
    /// window, 500 µs unattributed in the second); a charge whose wait never comes is dropped.
    #[test]
    fn charges_ahead_of_their_wait_are_carried_to_the_next_window() {
        let key = |victim, culprit| BlameKey { victim, culprit };
        let mut carry = Carry::default();
        let mut first = StdHashMap::new();
        first.insert(key(1, CULPRIT_THROTTLED_ANCESTOR), 1_500_000);
        first.insert(key(2, 10), 200_000);
        let mut w1 = vec![cg(1, 1000.0), cg(10, 0.0)];
        let ledger = carry.settle(&w1, first);
        attach(&mut w1, &ledger, BlameCaps::default(), |_| (None, None));
        let b = w1[0].runq.blame.as_ref().expect("blame");
        assert_eq!((b.throttled_ancestor_us, b.unattributed_us), (1000.0, 0.0));
        assert!(w1[1].caused.is_none(), "2's charge waits for its wait");
        let mut w2 = vec![cg(1, 500.0), cg(2, 200.0), cg(10, 0.0)];
        let ledger = carry.settle(&w2, StdHashMap::new());
        attach(&mut w2, &ledger, BlameCaps::default(), |_| (None, None));
        let b = w2[0].runq.blame.as_ref().expect("blame");
        assert_eq!((b.throttled_ancestor_us, b.unattributed_us), (500.0, 0.0));
        let b2 = w2[1].runq.blame.as_ref().expect("blame");
        assert_eq!((b2.neighbours[0].id, b2.neighbours[0].wait_us), (10, 200.0));
        assert_eq!(w2[2].caused.as_ref().expect("caused").wait_us, 200.0);
        // 3 is charged but its wait never shows: carried twice, then dropped.
        let mut only = StdHashMap::new();
        only.insert(key(3, 10), 100_000);
        let mut left = carry.settle(&[], only);
        for _ in 0..CARRY_WINDOWS {
            assert!(left.is_empty());
            left = carry.settle(&[], StdHashMap::new());
        }
        assert!(left.is_empty() && carry.pending.is_empty());
    }

    /// The cgroups that left in a window are forgotten together: every carried charge for or
    /// against any of them goes, the others stay.
    #[test]
    fn forgetting_gone_cgroups_drops_their_carried_charges_as_victim_or_culprit() {
        let key = |victim, culprit| BlameKey { victim, culprit };
        let mut carry = Carry::default();
        let mut ledger = StdHashMap::new();
        for (v, c) in [(1, 10), (2, 11), (3, 12), (4, 1)] {
            ledger.insert(key(v, c), 100_000);
        }
        // No waits in the window: every charge is carried.
        assert!(carry.settle(&[], ledger).is_empty());
        assert_eq!(carry.pending.len(), 4);
        carry.forget(&[1, 12].into_iter().collect());
        let mut left: Vec<_> = carry
            .pending
            .keys()
            .map(|k| (k.victim, k.culprit))
            .collect();
        left.sort_unstable();
        assert_eq!(left, [(2, 11)]);
    }

    /// A window's cgroups: victim 1 waited 1 s (80 % behind 10, 15 % its own quota, the rest
    /// unattributed), 10 and 11 caused it.
    fn blamed_window() -> Vec<CgroupWindow> {
        let mut blame = StdHashMap::new();
        let mut put = |victim, culprit, us: u64| {
            blame.insert(BlameKey { victim, culprit }, us * 1000);
        };
        put(1, 10, 800_000);
        put(1, CULPRIT_THROTTLED_OWN, 150_000);
        put(1, 11, 20_000);
        let mut cgs = vec![cg(1, 1_000_000.0), cg(10, 0.0), cg(11, 0.0)];
        attach(&mut cgs, &blame, BlameCaps::default(), |id| {
            (Some(format!("/kubepods/c{id}")), None)
        });
        cgs
    }

    #[test]
    fn the_diagnosis_names_the_neighbour_and_the_quota() {
        let cgs = blamed_window();
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        let Advice {
            message,
            suggestion: advice,
            ..
        } = blame_diagnosis(b, 1_000_000.0, &Knobs::V2, None).expect("one");
        assert_eq!(
            message,
            "waited 1.00s for a CPU: 80 % behind /kubepods/c10, 15 % its own quota"
        );
        assert!(
            advice.starts_with("/kubepods/c10 held its CPUs"),
            "{advice}"
        );
        // The change moves the neighbour, and takes its 80 % away.
        let a = blame_diagnosis(b, 1_000_000.0, &Knobs::V2, None).expect("one");
        assert_eq!(
            a.change[0].words(),
            "move /kubepods/c10 → other CPUs (its cpuset.cpus)"
        );
        assert_eq!(a.change[1].words(), "/kubepods/c10/cpu.weight = lower");
        let e = a.expected.expect("expected");
        assert_eq!(
            (e.metric.as_str(), e.change_percent),
            ("runq_wait_us", -80.0)
        );
        assert!(
            a.evidence.contains("800ms behind /kubepods/c10"),
            "{}",
            a.evidence
        );
        // Its own quota first when it is the larger part.
        let mut own = b.clone();
        std::mem::swap(&mut own.throttled_own_us, &mut own.neighbours[0].wait_us);
        let Advice {
            message,
            suggestion: advice,
            ..
        } = blame_diagnosis(&own, 1_000_000.0, &Knobs::V2, None).unwrap();
        assert!(message.ends_with(": 80 % its own quota, 15 % behind /kubepods/c10"));
        assert!(advice.contains("cpu.max"), "{advice}");
        // With the quota its throttling asked for, the exact value, v1 and v2.
        let a = blame_diagnosis(&own, 1_000_000.0, &Knobs::V2, Some((45_000, 100_000))).unwrap();
        let words: Vec<String> = a.change.iter().map(|c| c.words()).collect();
        assert_eq!(
            words,
            ["cpu.max = 45000 100000", "resources.limits.cpu = 450m"]
        );
        let a = blame_diagnosis(&own, 1_000_000.0, &Knobs::V1, Some((45_000, 100_000))).unwrap();
        assert_eq!(a.change[0].words(), "cpu.cfs_quota_us = 45000");
        // Mostly unattributed: no account to give.
        let mut little = b.clone();
        little.unattributed_us = 600_000.0;
        assert!(blame_diagnosis(&little, 1_000_000.0, &Knobs::V2, None).is_none());
    }

    #[test]
    fn noisy_neighbours_sum_the_windows_by_culprit() {
        let mut noisy = Noisy::default();
        for _ in 0..3 {
            for c in &blamed_window() {
                noisy.add(c, &mut |_| true);
            }
        }
        let top = noisy.finish(10);
        let ids: Vec<u64> = top.iter().map(|n| n.id).collect();
        assert_eq!(ids, [10, 11]);
        assert_eq!((top[0].caused_us, top[0].windows), (2_400_000.0, 3));
        assert_eq!(top[0].victims.len(), 1);
        assert_eq!(top[0].victims[0].wait_us, 2_400_000.0);
        assert_eq!(top[0].victims[0].path.as_deref(), Some("/kubepods/c1"));
        assert_eq!(Noisy::default().finish(10), Vec::new());
    }

    /// Interrupts, steal and an idle CPU elsewhere are parts of their own; a part the kernel
    /// cannot tell is unknown (`null`), not 0, and the parts still add up to the wait.
    #[test]
    fn irq_steal_and_idle_elsewhere_are_parts_and_unknown_is_not_zero() {
        // Victim 5 waited 10 ms: 3 ms interrupts, 1 ms steal, 2 ms an idle CPU it may use,
        // 4 ms behind a pod.
        let mut blame = StdHashMap::new();
        for (culprit, us) in [
            (CULPRIT_IRQ, 3000),
            (CULPRIT_STEAL, 1000),
            (CULPRIT_IDLE_ELSEWHERE, 2000),
            (20, 4000),
        ] {
            blame.insert(BlameKey { victim: 5, culprit }, us * 1000);
        }
        let all = BlameCaps {
            irq: true,
            steal: true,
            idle_elsewhere: true,
            before_5_18: false,
            root_cgroup: 0,
        };
        let mut cgs = vec![cg(5, 10_000.0), cg(6, 500.0)];
        attach(&mut cgs, &blame, all, |id| (Some(format!("/c{id}")), None));
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!(
            (b.irq_us, b.steal_us, b.idle_elsewhere_us),
            (Some(3000.0), Some(1000.0), Some(2000.0))
        );
        assert_eq!(b.unattributed_us, 0.0);
        assert!((b.total_us() - 10_000.0).abs() < 1e-6);
        // Told but none charged: 0, truly.
        let b6 = cgs[1].runq.blame.as_ref().expect("blame");
        assert_eq!(b6.irq_us, Some(0.0));
        // A kernel that cannot tell interrupts: unknown, serialized as null; the rest as before.
        blame.remove(&BlameKey {
            victim: 5,
            culprit: CULPRIT_IRQ,
        });
        let no_irq = BlameCaps { irq: false, ..all };
        let mut cgs = vec![cg(5, 10_000.0)];
        attach(&mut cgs, &blame, no_irq, |_| (None, None));
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert_eq!(b.irq_us, None);
        assert_eq!(b.unattributed_us, 3000.0);
        assert!((b.total_us() - 10_000.0).abs() < 1e-6);
        let json = serde_json::to_value(b).expect("json");
        assert!(json["irq_us"].is_null(), "{json}");
        assert_eq!(json["steal_us"], 1000.0);
        // An old recording without the fields still loads, with the parts unknown.
        let mut old = json.clone();
        for k in ["irq_us", "steal_us", "idle_elsewhere_us"] {
            old.as_object_mut().expect("object").remove(k);
        }
        let back: Blame = serde_json::from_value(old).expect("old blame");
        assert_eq!((back.irq_us, back.steal_us), (None, None));
        // Charged beyond the wait: the new parts are scaled with the rest.
        let mut cgs = vec![cg(5, 3_500.0)];
        attach(&mut cgs, &blame, all, |_| (None, None));
        let b = cgs[0].runq.blame.as_ref().expect("blame");
        assert!((b.total_us() - 3_500.0).abs() < 1e-6);
        assert!((b.steal_us.expect("steal") - 500.0).abs() < 1e-6);
        // The diagnosis names an idle CPU elsewhere as balancing, not capacity.
        let mut idle = Blame {
            idle_elsewhere_us: Some(9_000.0),
            unattributed_us: 1_000.0,
            ..Blame::default()
        };
        let Advice {
            message,
            suggestion: advice,
            ..
        } = blame_diagnosis(&idle, 10_000.0, &Knobs::V2, None).expect("one");
        assert!(message.contains("90 % an idle CPU elsewhere"), "{message}");
        assert!(advice.contains("affinity"), "{advice}");
        idle.idle_elsewhere_us = None;
        idle.irq_us = Some(9_000.0);
        let Advice {
            suggestion: advice, ..
        } = blame_diagnosis(&idle, 10_000.0, &Knobs::V2, None).expect("one");
        assert!(advice.contains("RPS"), "{advice}");
    }

    /// `throttled_ancestor_us` names the ancestors the throttle family saw throttled in the
    /// window, split by their throttled time; a cousin or the victim itself is not one of them.
    #[test]
    fn the_ancestor_whose_quota_ran_out_is_named() {
        use crate::family::throttle::model::{KernelDelta, ThrottleWindow};
        let at = |id: u64, path: &str, wait_us: f64, throttled_us: Option<f64>| {
            let mut c = cg(id, wait_us);
            c.path = Some(path.to_string());
            c.throttle = throttled_us.map(|us| {
                Box::new(ThrottleWindow {
                    quota_us: Some(20_000),
                    period_us: 100_000,
                    nr_throttled: 3,
                    kernel: Some(KernelDelta {
                        nr_throttled: 3,
                        throttled_us: us,
                        ..KernelDelta::default()
                    }),
                    ..ThrottleWindow::default()
                })
            });
            c
        };
        let mut blame = StdHashMap::new();
        blame.insert(
            BlameKey {
                victim: 4,
                culprit: CULPRIT_THROTTLED_ANCESTOR,
            },
            9_000_000,
        );
        let mut cgs = vec![
            at(1, "/kubepods", 0.0, Some(10_000.0)),
            at(2, "/kubepods/pod-a", 0.0, Some(20_000.0)),
            at(3, "/kubepods/pod-b", 0.0, Some(50_000.0)),
            at(4, "/kubepods/pod-a/app", 10_000.0, Some(70_000.0)),
        ];
        attach(&mut cgs, &blame, BlameCaps::default(), |_| (None, None));
        let b = cgs[3].runq.blame.as_ref().expect("blame");
        let named: Vec<(&str, f64)> = b
            .throttled_ancestors
            .iter()
            .map(|a| (a.path.as_deref().unwrap_or("?"), a.wait_us))
            .collect();
        assert_eq!(
            named,
            [("/kubepods/pod-a", 6_000.0), ("/kubepods", 3_000.0)]
        );
        let Advice {
            message,
            suggestion: advice,
            ..
        } = blame_diagnosis(b, 10_000.0, &Knobs::V2, None).expect("one");
        assert!(
            message.contains("90 % the quota of its ancestor /kubepods/pod-a"),
            "{message}"
        );
        assert!(
            advice.contains("/kubepods/pod-a ran out of CPU quota"),
            "{advice}"
        );
        // Equal throttled time: split evenly, nearest first; none throttled: none named.
        for c in &mut cgs[..2] {
            c.throttle
                .as_mut()
                .unwrap()
                .kernel
                .as_mut()
                .unwrap()
                .throttled_us = 1.0;
        }
        attach(&mut cgs, &blame, BlameCaps::default(), |_| (None, None));
        let b = cgs[3].runq.blame.as_ref().expect("blame");
        let paths: Vec<_> = b
            .throttled_ancestors
            .iter()
            .map(|a| a.path.clone())
            .collect();
        assert_eq!(
            paths,
            [Some("/kubepods/pod-a".into()), Some("/kubepods".into())]
        );
        assert_eq!(b.throttled_ancestors[0].wait_us, 4_500.0);
        for c in &mut cgs[..2] {
            c.throttle = None;
        }
        attach(&mut cgs, &blame, BlameCaps::default(), |_| (None, None));
        let b = cgs[3].runq.blame.as_ref().expect("blame");
        assert!(b.throttled_ancestors.is_empty());
        assert_eq!(b.throttled_ancestor_us, 9_000.0);
    }

    #[test]
    fn markers_are_not_cgroups() {
        assert!(is_marker(CULPRIT_THROTTLED_OWN) && is_marker(CULPRIT_THROTTLED_ANCESTOR));
        assert!(!is_marker(7));
    }
}
