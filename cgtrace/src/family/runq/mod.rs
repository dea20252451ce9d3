//! `runq` in the daemon: run-queue waits per cgroup and wait kind. [`collect`] reads the
//! kernel's histograms once per window; here are the family's records (single waits), lines and
//! model types.

pub mod attach;
pub mod blame;
pub mod collect;
pub mod metrics;
pub mod model;
pub mod pairs;
pub mod starts;

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
    if let Some((message, suggestion)) = cg
        .runq
        .blame
        .as_ref()
        .and_then(|b| blame_diagnosis(b, all.sum_us, weight, quota))
    {
        out.push(Flag {
            family: INFO.name.into(),
            code: "runq_long_waits".into(),
            message: format!(
                "{message} (p99 {} over {} waits)",
                crate::hist::micros(all.p99_us),
                all.count
            ),
            suggestion,
        });
        return;
    }
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

/// The blame ledger's account of a long wait: "waited 1.2 s: 80 % behind /kubepods/…/batch-job,
/// 15 % its own quota" (the parts of at least 10 %, largest first), and the change the largest
/// part asks for. `None` when the ledger attributed less than half of the wait.
pub fn blame_diagnosis(
    b: &blame::Blame,
    wait_us: f64,
    weight: &str,
    quota: &str,
) -> Option<(String, String)> {
    if wait_us <= 0.0 || b.unattributed_us * 2.0 > wait_us {
        return None;
    }
    let label = |p: &blame::Party| {
        p.path
            .clone()
            .or_else(|| p.name.clone())
            .unwrap_or_else(|| format!("cgroup {}", p.id))
    };
    // (µs, what it is, the change it asks for)
    let mut parts: Vec<(f64, String, String)> = vec![
        (
            b.throttled_own_us,
            "its own quota".into(),
            format!("raise or remove its CPU quota ({quota})"),
        ),
        match b.throttled_ancestors.first() {
            Some(a) => {
                let who = label(a);
                (
                    b.throttled_ancestor_us,
                    format!("the quota of its ancestor {who}"),
                    format!(
                        "its ancestor {who} ran out of CPU quota: raise that cgroup's {quota}{} \
                         (or move this one out from under it)",
                        a.cpu_max
                            .as_ref()
                            .map(|m| format!(" (now {m})"))
                            .unwrap_or_default()
                    ),
                )
            }
            None => (
                b.throttled_ancestor_us,
                "an ancestor's quota".into(),
                format!("raise the CPU quota ({quota}) of the parent whose quota ran out"),
            ),
        },
        (
            b.siblings_us,
            "its own other threads".into(),
            format!("it has more runnable threads than CPU: run fewer, or give it more ({weight})"),
        ),
        (
            b.neighbours_other_us,
            "other cgroups".into(),
            format!("its CPUs are oversubscribed: raise its {weight} or move it to less busy CPUs"),
        ),
        (
            b.kernel_us,
            "kernel threads and host processes".into(),
            "the root cgroup held its CPUs (kernel threads such as ksoftirqd or kworkers, or \
             host processes outside any cgroup): find them with `top`/`perf top` on its CPUs, \
             move interrupt load (irqbalance, RPS) or give it CPUs the host does not use (cpuset)"
                .into(),
        ),
        (
            b.idle_us,
            "its CPU waking from idle".into(),
            "its CPU was idle and slow to wake (idle states, a halted vCPU): limit deep idle \
             states (cpuidle, `idle=poll` for latency-critical hosts) or keep it on busy CPUs"
                .into(),
        ),
        (
            b.idle_elsewhere_us.unwrap_or(0.0),
            "an idle CPU elsewhere".into(),
            "its allowed CPUs include idle ones: a balancing or affinity problem, not capacity: \
             check its cpuset, CPU affinity (taskset) and isolcpus/nohz_full, not its CPU share"
                .into(),
        ),
        (
            b.irq_us.unwrap_or(0.0),
            "interrupts".into(),
            "its CPU was busy with hard and soft interrupts: spread the interrupt load (IRQ \
             affinity in /proc/irq/*/smp_affinity, irqbalance, RPS/RFS) or move it off the CPUs \
             that take them (cpuset)"
                .into(),
        ),
        (
            b.steal_us.unwrap_or(0.0),
            "hypervisor steal".into(),
            "the VM's host ran other work on its vCPUs (steal): a larger or dedicated instance, \
             or fewer vCPUs overcommitted on the host"
                .into(),
        ),
    ];
    for n in &b.neighbours {
        let who = label(n);
        parts.push((
            n.wait_us,
            format!("behind {who}"),
            format!(
                "{who} held its CPUs: lower that cgroup's {weight} or move it to other CPUs (cpuset), or raise this one's {weight}"
            ),
        ));
    }
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    let shown: Vec<String> = parts
        .iter()
        .filter(|p| p.0 >= 0.1 * wait_us)
        .take(3)
        .map(|p| format!("{:.0} % {}", p.0 / wait_us * 100.0, p.1))
        .collect();
    let (_, _, advice) = parts.into_iter().next()?;
    Some((
        format!(
            "waited {} for a CPU: {}",
            crate::hist::micros(wait_us),
            shown.join(", ")
        ),
        advice,
    ))
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
