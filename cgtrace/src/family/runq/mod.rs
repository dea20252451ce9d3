//! `runq` in the daemon: run-queue waits per cgroup and wait kind. [`collect`] reads the
//! kernel's histograms once per window; here are the family's records (single waits), lines and
//! model types.

pub mod attach;
pub mod blame;
pub mod collect;
pub mod metrics;
pub mod model;

use cgtrace_common::runq::{RunqEvent, WaitKind};
use serde::{Deserialize, Serialize};

use crate::{
    decode::comm_str,
    family::{Describe, EventLine, FamilyInfo, LineHead, Room},
    hist::Hist,
    model::{CgroupWindow, Flag},
};

pub const INFO: FamilyInfo = FamilyInfo {
    name: "runq",
    first_kind: 0x100,
    event_kind: cgtrace_common::event::KIND_RUNQ_WAIT,
    event_line: "runq_wait",
    start: collect::start,
    lines_offline: true,
    flags,
    mark: 1,
};

/// Window deltas of one cgroup, by wait kind.
pub type KindHists = [Hist; cgtrace_common::runq::NR_WAIT_KINDS];

/// A cgroup is flagged `runq_long_waits` when its window p99 is at least this long…
pub const FLAG_P99_US: f64 = 10_000.0;
/// …over at least this many waits (a handful of long waits is noise, not a diagnosis).
pub const FLAG_MIN_WAITS: u64 = 20;

/// The family's diagnosis: long run-queue waits, and what they were mostly (throttling,
/// preemption, wakeups onto busy CPUs).
pub fn flags(cg: &CgroupWindow, _duration_ms: u64, out: &mut Vec<Flag>) {
    let all = &cg.runq.all;
    if all.count < FLAG_MIN_WAITS || all.p99_us < FLAG_P99_US {
        return;
    }
    let share = |k: &str| cg.runq.kinds.get(k).map_or(0.0, |h| h.sum_us) / all.sum_us.max(1e-9);
    let v1 = cg.hierarchy == "cpu";
    let weight = if v1 { "cpu.shares" } else { "cpu.weight" };
    let quota = if v1 { "cpu.cfs_quota_us" } else { "cpu.max" };
    let (cause, advice) = if share("throttled") >= 0.5 {
        (
            "mostly CFS throttling",
            format!("raise or remove its CPU quota ({quota})"),
        )
    } else if share("preempt") >= 0.5 {
        (
            "mostly after preemption: its tasks are CPU-bound and time-sliced",
            format!(
                "give it more CPU ({weight}, or a cpuset away from busy neighbours) or run fewer runnable threads"
            ),
        )
    } else {
        (
            "mostly after wakeups: its tasks woke to find the CPUs busy",
            format!(
                "raise its {weight} relative to its neighbours, or move the busiest neighbours (sort by WAIT/s) to other CPUs"
            ),
        )
    };
    out.push(Flag {
        family: INFO.name.into(),
        code: "runq_long_waits".into(),
        message: format!(
            "waits for a CPU: p99 {} over {} waits, {cause}",
            crate::hist::micros(all.p99_us),
            all.count
        ),
        suggestion: advice,
    });
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

    pub fn lines(&mut self, describe: &mut Describe<'_>, out: &mut Vec<EventLine>) {
        for ev in self.waits.drain(..) {
            let (path, name) = describe(ev.cgroup_id);
            out.push(EventLine::RunqWait(wait_line(&ev, path, name)));
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
