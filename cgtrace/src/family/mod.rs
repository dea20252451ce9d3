//! Event families in the daemon: one folder each, with the same name as
//! `cgtrace-common/src/<family>.rs` (the ABI) and `cgtrace-ebpf/src/probes/<family>.rs` (the
//! kernel side). Each folder holds what its records become between two windows ([`Records`]),
//! its part of a window, its event lines and its diagnoses; [`FAMILIES`] is the one list every
//! place that needs the families reads.

pub mod reads;
pub mod runq;
pub mod select;
pub mod throttle;

use serde::{Deserialize, Serialize};

use std::collections::{HashMap, HashSet};

use crate::{
    decode::Record,
    model::{CgroupWindow, Flag, Window},
};

/// A family as every part of cgtrace names it.
#[derive(Clone, Copy)]
pub struct FamilyInfo {
    /// Its name in the stream, `hello.families`, `--events`, metrics and the view.
    pub name: &'static str,
    /// First event kind of its range (`cgtrace_common::event`); each range is 0x100 wide.
    pub first_kind: u32,
    /// The kind of its single event (the one `--events` prints as a line and a recording marks
    /// for seeking); the family's other kinds feed its windows only.
    pub event_kind: u32,
    /// What its single event line is called (`type` in the stream).
    pub event_line: &'static str,
    /// Its bit in a recording's window index (seek targets).
    pub mark: u32,
    /// Its event lines can be made again from a recording (`replay --stream`): false when naming
    /// them needs the live tracer's tables.
    pub lines_offline: bool,
    /// Its diagnoses of one cgroup's window (`duration_ms` long), appended to `out`: made in the
    /// daemon, so the stream, recordings, report, metrics and the view all have them.
    pub flags: fn(&CgroupWindow, u64, &mut Vec<Flag>),
    /// Its live collector, once its programs are attached.
    pub start: fn(&mut Start<'_>) -> anyhow::Result<Box<dyn Collector>>,
}

/// What a family's collector is started with.
pub struct Start<'a> {
    /// The loaded programs and maps (a collector takes its maps).
    pub ebpf: &'a mut aya::Ebpf,
    pub cgroups: &'a crate::cgroup::Cgroups,
    /// The hierarchy cgroup ids belong to (v1 `cpu`, or cgroup2).
    pub runq_hierarchy: &'a crate::cgroup::Hierarchy,
    /// `--max-cgroups`: what a family's tables may hold.
    pub max_cgroups: usize,
    /// `--below-quota-fraction` and the like.
    pub flag_rules: throttle::FlagRules,
    /// Cgroup creations and removals are traced.
    pub churn_traced: bool,
    /// The blame ledger is on (`--blame`).
    pub blame: bool,
    /// Where run-queue wait starts went (and so `runq`'s histograms: slots or a hash).
    pub runq_start: runq::attach::WaitStarts,
}

/// Takes a map out of the loaded object.
pub fn take_map(ebpf: &mut aya::Ebpf, name: &'static str) -> anyhow::Result<aya::maps::Map> {
    Ok(ebpf
        .take_map(name)
        .ok_or(crate::bpf::attach::LoadError::MissingMap(name))?)
}

impl std::fmt::Debug for FamilyInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for FamilyInfo {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// Every family's diagnoses of one cgroup's window.
pub fn flags(cg: &CgroupWindow, duration_ms: u64) -> Vec<Flag> {
    let mut out = Vec::new();
    for f in FAMILIES {
        (f.flags)(cg, duration_ms, &mut out);
    }
    out
}

/// Fills in the diagnoses of every cgroup of a window that has none: a window recorded before
/// the daemon made them all. The same as the daemon's, as each family's diagnosis is a function
/// of the window alone (throttle's are copied from `throttle.flags`).
pub fn diagnose(w: &mut Window) {
    for cg in w.cgroups.iter_mut().filter(|c| c.flags.is_empty()) {
        cg.flags = flags(cg, w.duration_ms);
    }
}

/// Every family this build knows, in display order: the one list.
pub const FAMILIES: &[FamilyInfo] = &[runq::INFO, throttle::INFO, reads::INFO];

/// Mark of event kinds of no family this build knows.
pub const MARK_OTHER: u32 = 1 << 31;

/// The family an event kind belongs to, by its range.
pub fn of_kind(kind: u32) -> Option<&'static FamilyInfo> {
    FAMILIES
        .iter()
        .find(|f| (f.first_kind..f.first_kind + 0x100).contains(&kind))
}

/// The family called `name`.
pub fn by_name(name: &str) -> Option<&'static FamilyInfo> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The seek mark of an event kind: its family's mark for the family's single event, nothing for
/// its other kinds, [`MARK_OTHER`] for kinds of no known family.
pub fn mark_of_kind(kind: u32) -> u32 {
    match of_kind(kind) {
        Some(f) if f.event_kind == kind => f.mark,
        Some(_) => 0,
        None => MARK_OTHER,
    }
}

/// The live side of a family: its kernel maps, read once per window. The session holds one per
/// attached family and calls them in registry order.
pub trait Collector: Send {
    fn info(&self) -> &'static FamilyInfo;
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
    /// A cgroup is gone: drop its kernel entries and remembered readings.
    fn forget(&mut self, _cgroup_id: u64) {}
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
    /// Run-queue wait charged to whoever held the CPU, ns by (waiting cgroup, culprit); `None`
    /// when the ledger is off (`--blame`).
    pub blame: Option<HashMap<cgtrace_common::runq::BlameKey, u64>>,
    pub periods: HashMap<u64, throttle::PeriodDelta>,
    pub episodes: HashMap<u64, throttle::Episodes>,
    /// Throttled periods and who burned them, by cgroup.
    pub burned: HashMap<u64, Vec<throttle::burners::ThrottledPeriod>>,
    pub events: crate::model::EventCounts,
    /// Pseudo-file reads by reader cgroup.
    pub reads: HashMap<u64, Vec<reads::FileReads>>,
}

impl WindowInput {
    /// Every cgroup some family has data for.
    pub(crate) fn ids(&self) -> HashSet<u64> {
        // A cgroup that only made others wait is in the window too (its `caused`).
        let culprits = self
            .blame
            .iter()
            .flat_map(|b| b.keys())
            .map(|k| k.culprit)
            .filter(|&c| c != 0 && !runq::blame::is_marker(c));
        self.runq
            .keys()
            .copied()
            .chain(culprits)
            .chain(self.periods.keys().copied())
            .chain(self.episodes.keys().copied())
            .chain(self.reads.keys().copied())
            .collect()
    }
}

/// A single-event line of any family, as the stream prints it.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum EventLine {
    RunqWait(runq::RunqWait),
    Throttle(throttle::ThrottleLine),
    SlowRead(reads::SlowRead),
}

impl EventLine {
    /// What every line starts with.
    pub fn head(&mut self) -> &mut LineHead {
        match self {
            Self::RunqWait(l) => &mut l.head,
            Self::Throttle(l) => &mut l.head,
            Self::SlowRead(l) => &mut l.head,
        }
    }
}

/// The fields every event line starts with: its type, when and where, and its cgroup.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LineHead {
    /// The family's `event_line`: `runq_wait`, `throttle`, `slow_read`.
    #[serde(rename = "type")]
    pub kind: String,
    /// CLOCK_MONOTONIC (ns) when the event ended.
    pub ts_ns: u64,
    pub cpu: u32,
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
}

impl LineHead {
    /// The head of a line of `family` from a record's header, its cgroup not yet named.
    pub fn new(
        family: &FamilyInfo,
        header: &cgtrace_common::event::EventHeader,
        cgroup_id: u64,
    ) -> Self {
        Self {
            kind: family.event_line.into(),
            ts_ns: header.ts_ns,
            cpu: header.cpu,
            cgroup_id,
            path: None,
            name: None,
        }
    }

    /// Names the line's cgroup.
    pub fn named(mut self, (path, name): (Option<String>, Option<String>)) -> Self {
        (self.path, self.name) = (path, name);
        self
    }
}

/// Path and name of a cgroup id, for event lines: from the live cgroup table, or from the names
/// a recording kept.
pub type Describe<'a> = dyn FnMut(u64) -> (Option<String>, Option<String>) + 'a;

/// Event lines kept between two takes at most (beyond, they are counted as dropped).
pub const MAX_PENDING_LINES: usize = 100_000;

/// What the records drained between two windows became, per family: the same live (from the
/// ring buffer) and offline (from a recording).
#[derive(Debug, Default)]
pub struct Records {
    pub runq: runq::Records,
    pub throttle: throttle::Records,
    pub reads: reads::Records,
    /// Records that did not decode.
    pub undecodable: u64,
    /// Event lines not kept because nobody took them in time.
    pub lines_dropped: u64,
    /// Records a collector made at a window's end (kernel sums read from a map), in the drain
    /// queue's format: the recorder keeps them with the ring buffer's, so a replay reads what
    /// the live run read.
    pub made: Vec<u8>,
}

impl Records {
    /// Keeps the event lines of the families `keep` names (`--events`).
    pub fn with_lines(keep: impl Fn(&str) -> bool) -> Self {
        let mut r = Self::default();
        r.set_lines(keep);
        r
    }

    /// Keeps the event lines of the families `keep` names from now on.
    pub fn set_lines(&mut self, keep: impl Fn(&str) -> bool) {
        self.runq.keep_lines = keep(runq::INFO.name);
        self.throttle.keep_lines = keep(throttle::INFO.name);
        self.reads.keep_lines = keep(reads::INFO.name);
    }

    /// Decodes one ring-buffer record and hands it to its family.
    pub fn consume(&mut self, bytes: &[u8]) {
        match Record::from_bytes(bytes) {
            Ok(rec) => self.record(&rec),
            Err(_) => self.undecodable += 1,
        }
    }

    /// A record a collector made (see `made`): consumed like a ring-buffer one, and kept.
    pub fn make(&mut self, bytes: &[u8]) {
        crate::decode::append(&mut self.made, bytes);
        self.consume(bytes);
    }

    /// The end of a run (live or replayed): what waited for a later window goes out.
    pub fn finish(&mut self) {
        self.throttle.finish();
    }

    pub fn record(&mut self, rec: &Record) {
        let mut room = Room(&mut self.lines_dropped);
        match rec {
            Record::RunqWait(ev) => self.runq.wait(ev, &mut room),
            Record::Throttle(ev) => self.throttle.episode(ev, &mut room),
            Record::ThrottleSlice(ev) => self.throttle.burners.slice(ev),
            Record::ThrottlePeriod(ev) => self.throttle.burners.period(ev),
            Record::SlowRead(ev) => self.reads.slow_read(ev, &mut room),
            Record::CgroupChurn(ev) => self.reads.churn.add(ev),
        }
    }

    /// The event lines kept so far, runq then throttle, named by `describe`. Slow reads need the
    /// live reads reader to name their files: they stay in `reads` (see
    /// [`reads::Records::take_slow_reads`]).
    pub fn take_lines(&mut self, describe: &mut Describe<'_>, out: &mut Vec<EventLine>) {
        self.runq.lines(describe, out);
        self.throttle.lines(describe, out);
    }

    /// A window ended at `mono_ns`: what it took from the records is gone (live, the session's
    /// window took it; offline, the recorded window already holds it).
    pub fn window_ended(&mut self, mono_ns: u64) {
        let _ = self.throttle.take_window(mono_ns);
    }
}

/// The room left for event lines: a family keeps a line only if it may.
pub struct Room<'a>(&'a mut u64);

impl Room<'_> {
    /// Whether one more line fits in `pending`; counts it as dropped when not.
    pub fn fits<T>(&mut self, pending: &[T]) -> bool {
        if pending.len() < MAX_PENDING_LINES {
            true
        } else {
            *self.0 += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_families_and_marks() {
        assert_eq!(of_kind(0x305).map(|f| f.name), Some("reads"));
        assert_eq!(of_kind(0x900), None);
        assert_eq!(mark_of_kind(0x100), runq::INFO.mark);
        assert_eq!(mark_of_kind(0x200), throttle::INFO.mark);
        assert_eq!(mark_of_kind(0x201), 0, "a slice is no throttle episode");
        assert_eq!(mark_of_kind(0x300), reads::INFO.mark);
        assert_eq!(mark_of_kind(0x900), MARK_OTHER);
        let marks: Vec<u32> = FAMILIES.iter().map(|f| f.mark).collect();
        assert!(
            marks
                .iter()
                .all(|m| m.count_ones() == 1 && m & MARK_OTHER == 0)
        );
        assert_eq!(
            marks.iter().fold(0, |a, m| a | m).count_ones() as usize,
            FAMILIES.len(),
            "one bit each"
        );
        assert_eq!(by_name("throttle"), Some(&throttle::INFO));
    }
}
