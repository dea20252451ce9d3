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

use std::collections::HashMap;

use cgtrace_common::runq::{EVENT_KIND_ASLEEP, RunqEvent, WaitKind};
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
    /// The sleep the kernel's `run_delay` counted as waiting, ns by cgroup (`EVENT_KIND_ASLEEP`
    /// records, one per wait that had some): the window's `run_delay_asleep_us`.
    pub asleep: HashMap<u64, u64>,
}

impl Records {
    pub fn wait(&mut self, ev: &RunqEvent, room: &mut Room<'_>) {
        if ev.kind == EVENT_KIND_ASLEEP {
            let ns = self.asleep.entry(ev.cgroup_id).or_default();
            *ns = ns.saturating_add(ev.wait_ns);
            return;
        }
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

#[cfg(test)]
mod tests {
    use cgtrace_common::event::{EventHeader, KIND_RUNQ_WAIT};

    use super::*;

    fn record(cgroup_id: u64, kind: u32, wait_ns: u64) -> RunqEvent {
        RunqEvent {
            header: EventHeader {
                kind: KIND_RUNQ_WAIT,
                cpu: 0,
                ts_ns: 1,
            },
            cgroup_id,
            wait_ns,
            pid: 10,
            tgid: 10,
            kind,
            _pad: 0,
            comm: [0; 16],
        }
    }

    #[test]
    fn asleep_records_are_summed_per_cgroup_not_kept_as_waits() {
        let mut r = Records {
            keep_lines: true,
            ..Records::default()
        };
        let mut dropped = 0;
        for ev in [
            record(7, EVENT_KIND_ASLEEP, 300_000_000),
            record(7, WaitKind::Wakeup as u32, 2_000_000),
            record(7, EVENT_KIND_ASLEEP, 50_000),
            record(8, EVENT_KIND_ASLEEP, u64::MAX),
            record(8, EVENT_KIND_ASLEEP, 1),
        ] {
            r.wait(&ev, &mut Room::new(&mut dropped));
        }
        assert_eq!(r.events, 1);
        assert_eq!(r.waits.len(), 1);
        assert_eq!(r.asleep[&7], 300_050_000);
        assert_eq!(r.asleep[&8], u64::MAX);
    }
}
