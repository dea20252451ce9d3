//! Who delayed whom ([`WhoDelayedWhom`]): every window's blame ledger (`runq.blame` on the
//! victim's side, `caused` on the culprit's) summed per cgroup and per (victim, culprit), then
//! cut to the [`TOP`] victims and culprits. What is kept is bounded by the report's [`Budget`]:
//! a cgroup or pair past it is left out of the matrix and counted (its wait stays in the node's).

use std::collections::{BTreeMap, HashMap, hash_map::Entry};

use super::budget::{self, Budget};
use crate::{
    model::CgroupWindow,
    report::model::{
        AncestorQuota, Cell, Culprit, KernelTaskTotal, LeftOut, PARTS, TOP, Victim, WhoDelayedWhom,
    },
};

/// One cgroup's ledger over the recording, as a victim and as a culprit.
#[derive(Debug, Default)]
struct Tally {
    path: Option<String>,
    name: Option<String>,
    /// As a victim: [`PARTS`] in order (`None`: no window told it: the kernel cannot), the named
    /// neighbours (culprit id → wait) and the rest.
    parts: Vec<Option<f64>>,
    /// The ancestors whose quota throttled it (path → wait).
    ancestors: BTreeMap<String, f64>,
    neighbours: HashMap<u64, f64>,
    neighbours_other_us: f64,
    /// As a culprit: its `caused`.
    caused_us: f64,
}

impl Tally {
    fn charged_to_others_us(&self) -> f64 {
        self.neighbours.values().sum::<f64>() + self.neighbours_other_us
    }

    fn wait_us(&self) -> f64 {
        self.parts.iter().flatten().sum::<f64>() + self.charged_to_others_us()
    }
}

#[derive(Debug, Default)]
pub(super) struct WhoDelayed {
    ledger: bool,
    ms: u64,
    node_wait_us: f64,
    by_id: HashMap<u64, Tally>,
    /// Root-cgroup tasks by pid: their last name and the wait they cost others.
    kernel_tasks: HashMap<u32, (Option<String>, f64)>,
    untallied: u64,
}

impl WhoDelayed {
    /// `ledger`: the recording says it was made with the ledger on (its hello).
    pub(super) fn new(ledger: bool) -> Self {
        Self {
            ledger,
            ..Self::default()
        }
    }

    /// A window's length (what `_per_s` divides by).
    pub(super) fn window(&mut self, duration_ms: u64) {
        self.ms = self.ms.saturating_add(duration_ms);
    }

    /// Sums a cgroup's ledger of one window.
    pub(super) fn add(&mut self, c: &CgroupWindow, budget: &mut Budget) {
        let wait = c.runq.all.sum_us;
        if wait.is_finite() && wait > 0.0 {
            self.node_wait_us += wait;
        }
        let blame = c.runq.blame.as_ref();
        let caused = c.caused.as_ref().filter(|c| c.wait_us > 0.0);
        if blame.is_none() && caused.is_none() {
            return;
        }
        self.ledger = true;
        let t = match self.by_id.entry(c.id) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let bytes = size_of::<(u64, Tally)>()
                    + PARTS.len() * size_of::<f64>()
                    + budget::len(&c.path)
                    + budget::len(&c.name);
                if !budget.take(bytes) {
                    self.untallied += 1;
                    return;
                }
                e.insert(Tally {
                    path: c.path.clone(),
                    name: c.name.clone(),
                    parts: vec![None; PARTS.len()],
                    ..Tally::default()
                })
            }
        };
        // The last name seen (a window without one does not forget it).
        if c.path.is_some() {
            budget.set(&mut t.path, &c.path);
        }
        if c.name.is_some() {
            budget.set(&mut t.name, &c.name);
        }
        if let Some(c) = caused {
            t.caused_us += finite(c.wait_us);
        }
        let Some(b) = blame else {
            return;
        };
        for (sum, part) in t.parts.iter_mut().zip(PARTS) {
            if let Some(us) = (part.of)(b) {
                *sum.get_or_insert(0.0) += finite(us);
            }
        }
        for a in &b.throttled_ancestors {
            let Some(path) = &a.path else {
                continue;
            };
            match t.ancestors.get_mut(path) {
                Some(us) => *us += finite(a.wait_us),
                None => {
                    if budget.take(size_of::<(String, f64)>() + path.len()) {
                        t.ancestors.insert(path.clone(), finite(a.wait_us));
                    } else {
                        self.untallied += 1;
                    }
                }
            }
        }
        for k in &b.kernel_tasks {
            let us = finite(k.wait_us);
            match self.kernel_tasks.entry(k.pid) {
                Entry::Occupied(e) => {
                    let e = e.into_mut();
                    e.1 += us;
                    if k.comm.is_some() {
                        budget.set(&mut e.0, &k.comm);
                    }
                }
                Entry::Vacant(e) => {
                    if budget.take(size_of::<(u32, (Option<String>, f64))>() + budget::len(&k.comm))
                    {
                        e.insert((k.comm.clone(), us));
                    } else {
                        self.untallied += 1;
                    }
                }
            }
        }
        t.neighbours_other_us += finite(b.neighbours_other_us);
        for n in &b.neighbours {
            let us = finite(n.wait_us);
            match t.neighbours.entry(n.id) {
                Entry::Occupied(e) => *e.into_mut() += us,
                Entry::Vacant(e) => {
                    if budget.take(size_of::<(u64, f64)>()) {
                        e.insert(us);
                    } else {
                        // Still charged to others, not to a named one.
                        self.untallied += 1;
                        t.neighbours_other_us += us;
                    }
                }
            }
        }
    }

    /// The matrix of the [`TOP`] victims and culprits, and what it leaves out.
    pub(super) fn finish(self) -> WhoDelayedWhom {
        let seconds = self.ms as f64 / 1e3;
        let per_s = |us: f64| if seconds > 0.0 { us / seconds } else { 0.0 };
        let mut out = WhoDelayedWhom {
            ledger: self.ledger,
            seconds,
            node_wait_us: self.node_wait_us,
            left_out: LeftOut {
                untallied: self.untallied,
                ..LeftOut::default()
            },
            ..WhoDelayedWhom::default()
        };
        // Culprits by the wait they caused: their `caused`, or what their victims' ledgers name
        // them for when that is more (a forged or partial file).
        let mut named: HashMap<u64, f64> = HashMap::new();
        for t in self.by_id.values() {
            for (&id, &us) in &t.neighbours {
                *named.entry(id).or_default() += us;
            }
        }
        let mut culprits: Vec<(u64, f64)> = named
            .iter()
            .map(|(&id, &us)| {
                let caused = self.by_id.get(&id).map_or(0.0, |t| t.caused_us);
                (id, us.max(caused))
            })
            .chain(
                self.by_id
                    .iter()
                    .filter(|(id, _)| !named.contains_key(id))
                    .map(|(&id, t)| (id, t.caused_us)),
            )
            .filter(|c| c.1 > 0.0)
            .collect();
        culprits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut victims: Vec<(u64, &Tally)> = self
            .by_id
            .iter()
            .map(|(&id, t)| (id, t))
            .filter(|(_, t)| t.charged_to_others_us() > 0.0)
            .collect();
        victims.sort_by(|a, b| {
            b.1.charged_to_others_us()
                .total_cmp(&a.1.charged_to_others_us())
                .then(a.0.cmp(&b.0))
        });
        for (_, t) in victims.iter().skip(TOP) {
            out.left_out.victims += 1;
            out.left_out.victims_charged_to_others_us += t.charged_to_others_us();
        }
        for &(_, us) in culprits.iter().skip(TOP) {
            out.left_out.culprits += 1;
            out.left_out.culprits_caused_us += us;
        }
        culprits.truncate(TOP);
        victims.truncate(TOP);
        for &(id, us) in &culprits {
            let t = self.by_id.get(&id);
            out.culprits.push(Culprit {
                id,
                path: t.and_then(|t| t.path.clone()),
                name: t.and_then(|t| t.name.clone()),
                caused_us: us,
                caused_us_per_s: per_s(us),
            });
        }
        for (vi, &(id, t)) in victims.iter().enumerate() {
            let mut shown = 0.0;
            for (ci, &(culprit, _)) in culprits.iter().enumerate() {
                let us = t.neighbours.get(&culprit).copied().unwrap_or(0.0);
                if us > 0.0 {
                    shown += us;
                    out.cells.push(Cell {
                        victim: vi,
                        culprit: ci,
                        wait_us: us,
                        wait_us_per_s: per_s(us),
                    });
                }
            }
            out.explained_us += shown;
            let wait = t.wait_us();
            out.victims.push(Victim {
                id,
                path: t.path.clone(),
                name: t.name.clone(),
                wait_us: wait,
                wait_us_per_s: per_s(wait),
                charged_to_others_us: t.charged_to_others_us(),
                other_neighbours_us: t.charged_to_others_us() - shown,
                parts: PARTS
                    .iter()
                    .zip(&t.parts)
                    .map(|(p, &us)| (p.key, us))
                    .collect::<BTreeMap<_, _>>(),
                throttled_ancestors: {
                    let mut a: Vec<AncestorQuota> = t
                        .ancestors
                        .iter()
                        .map(|(path, &wait_us)| AncestorQuota {
                            path: path.clone(),
                            wait_us,
                        })
                        .collect();
                    a.sort_by(|x, y| y.wait_us.total_cmp(&x.wait_us));
                    a
                },
            });
        }
        let mut tasks: Vec<KernelTaskTotal> = self
            .kernel_tasks
            .into_iter()
            .filter(|(_, (_, us))| *us > 0.0)
            .map(|(pid, (comm, wait_us))| KernelTaskTotal { pid, comm, wait_us })
            .collect();
        tasks.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us).then(a.pid.cmp(&b.pid)));
        tasks.truncate(TOP);
        out.kernel_tasks = tasks;
        if out.node_wait_us > 0.0 {
            out.explained_share = (out.explained_us / out.node_wait_us).min(1.0);
        }
        out
    }
}

/// A ledger figure as summed: a forged NaN, infinity or negative counts as nothing.
fn finite(us: f64) -> f64 {
    if us.is_finite() && us > 0.0 { us } else { 0.0 }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{
        family::runq::model::{Blame, Caused, KernelTask, Party},
        model::RunqWindow,
    };

    /// A name a tenant chose to break terminals and pages.
    pub(crate) const HOSTILE: &str = "we<b>\u{202e}\x1b[2Jevil";

    fn party(id: u64, ms: f64) -> Party {
        Party {
            id,
            path: Some(format!("/c{id}")),
            name: None,
            wait_us: ms * 1e3,
            cpu_max: None,
        }
    }

    /// Cgroup `id` waited `wait_ms`, split as `blame` says (in ms), and caused `caused_ms`.
    pub(crate) fn cg(id: u64, wait_ms: f64, blame: Option<Blame>, caused_ms: f64) -> CgroupWindow {
        let mut runq = RunqWindow::default();
        runq.all.sum_us = wait_ms * 1e3;
        runq.blame = blame;
        let mut c = CgroupWindow::new(id, "cgroup2", Some(format!("/c{id}")), None, runq);
        if caused_ms > 0.0 {
            c.caused = Some(Caused {
                wait_us: caused_ms * 1e3,
                victims: Vec::new(),
            });
        }
        c
    }

    fn blame(parts: [f64; 4], neighbours: &[(u64, f64)], other_ms: f64) -> Blame {
        Blame {
            throttled_own_us: parts[0] * 1e3,
            throttled_ancestor_us: parts[1] * 1e3,
            siblings_us: parts[2] * 1e3,
            neighbours: neighbours.iter().map(|&(id, ms)| party(id, ms)).collect(),
            neighbours_other_us: other_ms * 1e3,
            unattributed_us: parts[3] * 1e3,
            ..Blame::default()
        }
    }

    /// Two 1 s windows: victim 10 (a hostile name) behind hog 20 and cgroup 11, victim 11 behind
    /// the hog, cgroup 30 waiting with nothing charged to anyone. Times in ms.
    pub(crate) fn two_windows() -> WhoDelayedWhom {
        let mut who = WhoDelayed::new(true);
        let mut budget = Budget::default();
        let mut a1 = cg(
            10,
            1000.0,
            Some(blame(
                [100.0, 0.0, 50.0, 20.0],
                &[(20, 600.0), (11, 200.0)],
                30.0,
            )),
            0.0,
        );
        a1.name = Some(HOSTILE.into());
        let a2 = cg(10, 500.0, Some(blame([0.0; 4], &[(20, 400.0)], 0.0)), 0.0);
        let mut a2 = a2;
        a2.runq.blame.as_mut().unwrap().unattributed_us = 100e3;
        // Victim 11: 50 ms under its parent's quota, named; this kernel tells steal (none).
        let mut b1 = cg(
            11,
            300.0,
            Some(blame([0.0, 50.0, 0.0, 0.0], &[(20, 250.0)], 0.0)),
            200.0,
        );
        if let Some(b) = b1.runq.blame.as_mut() {
            b.throttled_ancestors = vec![Party {
                id: 5,
                path: Some("/kubepods/pod-q".into()),
                name: None,
                wait_us: 50e3,
                cpu_max: None,
            }];
            b.steal_us = Some(0.0);
        }
        let hog1 = cg(20, 0.0, None, 850.0);
        let hog2 = cg(20, 0.0, None, 400.0);
        // Cgroup 30: 50 ms of its 200 behind the root cgroup's tasks (a kernel thread, and a
        // host process with a hostile name), the rest never charged.
        let mut quiet = cg(
            30,
            200.0,
            Some(blame([0.0, 0.0, 0.0, 150.0], &[], 0.0)),
            0.0,
        );
        if let Some(b) = quiet.runq.blame.as_mut() {
            b.kernel_us = 50e3;
            b.kernel_tasks = vec![
                KernelTask {
                    pid: 16,
                    comm: Some("ksoftirqd/1".into()),
                    wait_us: 30e3,
                },
                KernelTask {
                    pid: 99,
                    comm: Some(HOSTILE.into()),
                    wait_us: 20e3,
                },
            ];
        }
        who.window(1000);
        for c in [&a1, &b1, &hog1, &quiet] {
            who.add(c, &mut budget);
        }
        who.window(1000);
        for c in [&a2, &hog2] {
            who.add(c, &mut budget);
        }
        who.finish()
    }

    #[test]
    fn cells_rows_and_share_come_from_the_ledger() {
        let m = two_windows();
        assert!(m.ledger);
        assert_eq!(m.seconds, 2.0);
        assert_eq!(m.node_wait_us, 2000e3, "1000 + 500 + 300 + 200 ms");
        let ids = |v: Vec<u64>| v;
        assert_eq!(ids(m.victims.iter().map(|v| v.id).collect()), [10, 11]);
        assert_eq!(ids(m.culprits.iter().map(|c| c.id).collect()), [20, 11]);
        // The hog: 600 + 400 ms to 10, 250 to 11 (its `caused` says the same, 850 + 400).
        assert_eq!(m.culprits[0].caused_us, 1250e3);
        assert_eq!(m.culprits[0].caused_us_per_s, 625e3);
        let cells: Vec<(usize, usize, f64, f64)> = m
            .cells
            .iter()
            .map(|c| (c.victim, c.culprit, c.wait_us, c.wait_us_per_s))
            .collect();
        assert_eq!(
            cells,
            [
                (0, 0, 1000e3, 500e3),
                (0, 1, 200e3, 100e3),
                (1, 0, 250e3, 125e3)
            ]
        );
        let a = &m.victims[0];
        assert_eq!(a.name.as_deref(), Some(HOSTILE));
        assert_eq!(a.charged_to_others_us, 1230e3);
        assert_eq!(a.other_neighbours_us, 30e3);
        assert_eq!(a.parts["throttled_own_us"], Some(100e3));
        assert_eq!(a.parts["throttled_ancestor_us"], Some(0.0));
        assert_eq!(a.parts["siblings_us"], Some(50e3));
        assert_eq!(a.parts["unattributed_us"], Some(120e3));
        // Parts no window told (this ledger's kernel could not): unknown, not 0.
        assert_eq!(a.parts["irq_us"], None);
        // The row adds up to the victim's wait, 1000 + 500 ms.
        let row = 1200e3 + a.other_neighbours_us + a.parts.values().flatten().sum::<f64>();
        assert_eq!((a.wait_us, row), (1500e3, 1500e3));
        assert_eq!(a.wait_us_per_s, 750e3);
        assert_eq!(m.victims[1].wait_us, 300e3);
        let anc = &m.victims[1].throttled_ancestors;
        assert_eq!(
            (anc.len(), anc[0].path.as_str(), anc[0].wait_us),
            (1, "/kubepods/pod-q", 50e3)
        );
        assert_eq!(m.victims[1].parts["steal_us"], Some(0.0));
        assert_eq!(m.victims[1].parts["irq_us"], None);
        assert_eq!(m.explained_us, 1450e3);
        assert_eq!(m.explained_share, 0.725);
        assert_eq!(m.left_out, LeftOut::default());
        // The root cgroup's tasks, over every victim: most first.
        let tasks: Vec<_> = m
            .kernel_tasks
            .iter()
            .map(|t| (t.pid, t.comm.as_deref(), t.wait_us))
            .collect();
        assert_eq!(
            tasks,
            [(16, Some("ksoftirqd/1"), 30e3), (99, Some(HOSTILE), 20e3)]
        );
    }

    #[test]
    fn the_matrix_keeps_ten_of_each_and_says_what_it_left_out() {
        let mut who = WhoDelayed::new(true);
        let mut budget = Budget::default();
        who.window(1000);
        // Victims 100..112 each behind their own culprit 200..212, 1..12 ms.
        for i in 0..12u64 {
            let ms = (i + 1) as f64;
            let v = cg(
                100 + i,
                ms,
                Some(blame([0.0; 4], &[(200 + i, ms)], 0.0)),
                0.0,
            );
            who.add(&v, &mut budget);
            who.add(&cg(200 + i, 0.0, None, ms), &mut budget);
        }
        let m = who.finish();
        assert_eq!(m.victims.len(), TOP);
        assert_eq!(m.culprits.len(), TOP);
        assert_eq!(m.victims[0].id, 111);
        assert_eq!(m.culprits[0].id, 211);
        assert_eq!(m.cells.len(), TOP, "each victim's own culprit");
        assert_eq!(
            m.left_out,
            LeftOut {
                victims: 2,
                victims_charged_to_others_us: 3e3,
                culprits: 2,
                culprits_caused_us: 3e3,
                untallied: 0
            }
        );
        // Ten columns still fit 100 of a terminal's, and what was left out is said.
        let mut o = String::new();
        crate::report::who_text::render(&mut o, &m);
        assert!(o.lines().all(|l| l.chars().count() <= 100), "{o}");
        assert!(
            o.contains(
                "2 more victims (3.0 ms charged to others), 2 more culprits (3.0 ms caused)"
            ),
            "{o}"
        );
    }

    #[test]
    fn past_the_memory_bound_cgroups_are_counted_not_kept() {
        let mut who = WhoDelayed::new(true);
        let mut budget = Budget::new(0);
        let v = cg(1, 5.0, Some(blame([0.0; 4], &[(2, 5.0)], 0.0)), 0.0);
        who.add(&v, &mut budget);
        who.add(&cg(2, 0.0, None, 5.0), &mut budget);
        who.add(&cg(3, 7.0, None, 0.0), &mut budget);
        let m = who.finish();
        assert!(m.victims.is_empty() && m.culprits.is_empty());
        assert_eq!(m.left_out.untallied, 2, "cgroup 3 had no ledger to keep");
        assert_eq!(budget.refused, 2);
        assert_eq!(m.node_wait_us, 12e3, "the node's wait is still all of it");
        assert_eq!(m.explained_share, 0.0);
    }

    #[test]
    fn without_a_ledger_nothing_is_claimed() {
        let mut who = WhoDelayed::new(false);
        who.window(1000);
        who.add(&cg(1, 5.0, None, 0.0), &mut Budget::default());
        let m = who.finish();
        assert!(!m.ledger && m.victims.is_empty());
        assert_eq!(m.node_wait_us, 5e3);
    }
}
