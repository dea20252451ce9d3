//! `runq` in the daemon: run-queue waits per cgroup and wait kind. [`collect`] reads the
//! kernel's histograms once per window; here are the family's records (single waits), lines and
//! model types.

pub mod advice;
pub mod attach;
pub mod blame;
pub mod collect;
pub mod metrics;
pub mod model;
pub mod pairs;
pub mod starts;

pub use advice::{FLAG_MIN_WAITS, FLAG_P99_US};

use cgtrace_common::runq::{RunqEvent, WaitKind};
use serde::{Deserialize, Serialize};

use crate::{
    decode::comm_str,
    family::info::{Describe, FamilyInfo, LineHead, Room},
    hist::SparseHist,
    model::{CgroupWindow, Flag},
};

pub const INFO: FamilyInfo = FamilyInfo {
    name: "runq",
    first_kind: 0x100,
    event_kind: cgtrace_common::event::KIND_RUNQ_WAIT,
    event_line: "runq_wait",
    lines_offline: true,
    flags,
    mark: 1,
};

/// What `runq`'s collector is started with.
#[derive(Clone, Copy, Debug)]
pub struct StartOptions {
    /// The blame ledger is on (`--blame`): its map is read.
    pub blame: bool,
    /// Where the wait starts went, and so the histograms: array slots or a hash.
    pub starts: starts::WaitStarts,
    /// Which of the ledger's kernel-dependent parts this kernel can tell.
    pub caps: model::BlameCaps,
}

/// One cgroup's waits by wait kind (a window's deltas, or its totals since start), each kept
/// sparse: most cgroups wait in one or two kinds and a few buckets, and a dense histogram is
/// 1.1 KiB, so at 10 000 cgroups dense ones were 60 MiB of the daemon's heap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindHists([SparseHist; cgtrace_common::runq::NR_WAIT_KINDS]);

impl KindHists {
    /// The waits of `kind`, if any.
    pub fn get(&self, kind: WaitKind) -> Option<&SparseHist> {
        Some(&self.0[kind as usize]).filter(|h| !h.is_empty())
    }

    /// Adds one wait of `kind`.
    pub fn record(&mut self, kind: WaitKind, ns: u64) {
        self.0[kind as usize].record(ns);
    }

    pub fn set(&mut self, kind: WaitKind, h: SparseHist) {
        self.0[kind as usize] = h;
    }

    /// Adds `other`'s waits kind by kind.
    pub fn merge(&mut self, other: &KindHists) {
        for (kind, h) in other.iter() {
            self.0[kind as usize].merge(h);
        }
    }

    /// The kinds with waits, in [`WaitKind::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (WaitKind, &SparseHist)> {
        WaitKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).filter(|h| !h.is_empty()).map(|h| (k, h)))
    }
}

/// The family's diagnoses of a cgroup's window (see [`advice::long_waits`]).
pub fn flags(cg: &CgroupWindow, duration_ms: u64, out: &mut Vec<Flag>) {
    out.extend(advice::long_waits(cg, duration_ms).map(|f| Flag {
        family: INFO.name.into(),
        ..f
    }));
}

/// `runq` records between two windows: waits of at least `--event-min-ms`, kept for event lines.
#[derive(Debug, Default)]
pub struct Records {
    pub keep_lines: bool,
    /// Waits received (kept or not).
    pub events: u64,
    waits: Vec<RunqEvent>,
}

impl Records {
    pub fn wait(&mut self, ev: &RunqEvent, room: &mut Room<'_>) {
        self.events += 1;
        if self.keep_lines && room.fits(&self.waits) {
            self.waits.push(*ev);
        }
    }

    pub fn lines(&mut self, describe: &mut Describe<'_>, out: &mut Vec<RunqWait>) {
        for ev in self.waits.drain(..) {
            let (path, name) = describe(ev.cgroup_id);
            out.push(wait_line(&ev, path, name));
        }
    }
}

/// The event line of one run-queue wait of the cgroup at `path`.
pub fn wait_line(ev: &RunqEvent, path: Option<String>, name: Option<String>) -> RunqWait {
    RunqWait {
        head: LineHead::new(&INFO, &ev.header, ev.cgroup_id).named((path, name)),
        pid: ev.pid,
        tgid: ev.tgid,
        comm: comm_str(&ev.comm),
        wait_kind: WaitKind::try_from(ev.kind)
            .map_or("unknown", |k| k.name())
            .to_string(),
        wait_us: ev.wait_ns as f64 / 1e3,
    }
}

/// A single run-queue wait at or above `--event-min-ms` (`--events`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunqWait {
    #[serde(flatten)]
    pub head: LineHead,
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    /// `wakeup`, `preempt` or `throttled`.
    pub wait_kind: String,
    pub wait_us: f64,
}
