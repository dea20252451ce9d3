//! The live side of every family: what a family's collector is started with ([`Start`]), what
//! it does once per window ([`Collector`]) and what the kernel delivered for one window
//! ([`WindowInput`]). Offline code never imports this.

use std::collections::{HashMap, HashSet};

use crate::{
    family::{EventLine, Records, reads, runq, throttle},
    model::{CgroupWindow, Window},
};

/// What a family's collector is started with: what every family gets, then each family's own
/// options (their types live in the family).
pub struct Start<'a> {
    /// The loaded programs and maps (a collector takes its maps).
    pub ebpf: &'a mut aya::Ebpf,
    pub cgroups: &'a crate::cgroup::Cgroups,
    /// The hierarchy cgroup ids belong to (v1 `cpu`, or cgroup2).
    pub hierarchy: &'a crate::cgroup::Hierarchy,
    /// `--max-cgroups`: what a family's tables may hold.
    pub max_cgroups: usize,
    pub runq: runq::StartOptions,
    /// `--below-quota-fraction` and the like.
    pub throttle: throttle::FlagRules,
    pub reads: reads::StartOptions,
}

/// Takes a map out of the loaded object.
pub fn take_map(ebpf: &mut aya::Ebpf, name: &'static str) -> anyhow::Result<aya::maps::Map> {
    Ok(ebpf
        .take_map(name)
        .ok_or(crate::bpf::attach::LoadError::MissingMap(name))?)
}

/// The live side of a family: its kernel maps, read once per window. The session holds one per
/// attached family and calls them in registry order.
pub trait Collector: Send {
    /// Before the aggregator builds the window: the family's per-cgroup deltas since the last
    /// window (from its maps, and from what its records gathered) go into `input`.
    fn read_window(&mut self, records: &mut Records, input: &mut WindowInput)
    -> anyhow::Result<()>;
    /// While the aggregator builds the window: the family's part of one active cgroup (its path
    /// and name are set), from what [`Collector::read_window`] put in `input`.
    fn cgroup_part(&mut self, _cg: &mut CgroupWindow, _input: &mut WindowInput, _duration_ms: u64) {
    }
    /// After: the family's window-level parts (not per cgroup).
    fn finish_window(&mut self, _records: &mut Records, _window: &mut Window) {}
    /// Event lines that need the live tracer to be made (a slow read's file name is in the
    /// kernel's file table), unnamed: the session adds the cgroup's path and name.
    fn lines(&mut self, _records: &mut Records, _out: &mut Vec<EventLine>) {}
    /// Cgroups are gone (a window's removed and evicted, all at once, so tables keyed by pairs
    /// are walked once, not once per cgroup): drop their kernel entries and remembered readings.
    fn forget(&mut self, _gone: &std::collections::HashSet<u64>) {}
    /// The name of the file a read record refers to (the reads family; recorded so a replay
    /// names slow reads as the live stream did).
    fn read_file(&mut self, _key: &cgtrace_common::reads::ReadKey) -> Option<reads::ReadFile> {
        None
    }
}

/// Everything the kernel delivered for one window.
#[derive(Default)]
pub struct WindowInput {
    pub runq: HashMap<u64, runq::KindHists>,
    /// The sleep the kernel's `run_delay` counted as waiting, ns by cgroup (kernel stamps only).
    pub runq_asleep: HashMap<u64, u64>,
    /// Run-queue wait charged to whoever held the CPU, ns by (waiting cgroup, culprit); `None`
    /// when the ledger is off (`--blame`).
    pub blame: Option<HashMap<cgtrace_common::runq::BlameKey, u64>>,
    /// Which of the ledger's kernel-dependent parts this kernel can tell (with `blame`).
    pub blame_caps: runq::model::BlameCaps,
    pub periods: HashMap<u64, throttle::PeriodDelta>,
    pub episodes: HashMap<u64, throttle::Episodes>,
    /// Throttled periods and who burned them, by cgroup.
    pub burned: HashMap<u64, throttle::burners::Taken>,
    pub events: crate::model::EventCounts,
    /// Pseudo-file reads by reader cgroup.
    pub reads: HashMap<u64, Vec<reads::FileReads>>,
}

impl WindowInput {
    /// Whether some family has data of cgroup `id` besides the ledger's charges to it.
    pub(crate) fn has_data(&self, id: u64) -> bool {
        self.runq.contains_key(&id)
            || self.runq_asleep.contains_key(&id)
            || self.periods.contains_key(&id)
            || self.episodes.contains_key(&id)
            || self.reads.contains_key(&id)
    }

    /// Every cgroup some family has data for.
    pub(crate) fn ids(&self) -> HashSet<u64> {
        // A cgroup that only made others wait is in the window too (its `caused`); a
        // root-cgroup task, as the root cgroup.
        let root = self.blame_caps.root_cgroup;
        let culprits = self
            .blame
            .iter()
            .flat_map(|b| b.keys())
            .filter_map(move |k| runq::blame::culprit_cgroup(k.culprit, root));
        self.runq
            .keys()
            .copied()
            .chain(culprits)
            .chain(self.runq_asleep.keys().copied())
            .chain(self.periods.keys().copied())
            .chain(self.episodes.keys().copied())
            .chain(self.reads.keys().copied())
            .collect()
    }
}
