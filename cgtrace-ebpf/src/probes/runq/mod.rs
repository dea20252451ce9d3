//! `runq`: run-queue latency per cgroup and wait kind.
//!
//! A wait starts at `sched_wakeup`/`sched_wakeup_new` (kind wakeup) or when a task is switched out
//! still runnable (kind preempt: `prev_state == TASK_RUNNING`, or the `preempt` flag set — not the
//! flag alone, which is 0 for most involuntary preemptions on preempt=none kernels, while a task
//! preempted on its way to sleep on preempt=full kernels has a sleeping state but stays queued).
//! It ends when the task is switched in, and is charged to that task's cgroup — the task that
//! waited, never `current`.
//!
//! The programs are in `sched.rs` (one `sched_switch`, one `sched_wakeup` entry for every
//! family); these are the run-queue parts they call.
//!
//! The files, one job each:
//! - `start.rs`: where an open wait's start is kept (the task's own storage, or the `RUNQ_START`
//!   hash on kernels before 6.1);
//! - `stamps.rs`: waits read from the kernel's own stamps instead (6.18+, the
//!   `sched_switch_stamps` and `sched_wakeup_stamps` programs);
//! - `thr_clock.rs`: the throttled clock the kernel keeps per `cfs_rq` (before 6.18), whose
//!   advance over a wait is the wait's throttled part;
//! - `hists.rs`: the latency histograms a wait is added to;
//! - `blame.rs`: the blame ledger: each CPU's ring of recent slices, and who a wait is charged to;
//! - this file: a task switched out or in, and the charge of a wait that ended (with its
//!   throttled part, and whose quota that was).
mod blame;
mod hists;
mod stamps;
mod start;
mod thr_clock;

use cgtrace_common::{
    counters::{self, Counters},
    event::KIND_RUNQ_WAIT,
    runq::{RqClockOffset, RunqEvent, RunqStart, SwitchOut, WaitKind},
};

pub use blame::{blame_min_ns, slice_switch};
pub use stamps::woken as woken_stamps;
pub use start::start_wait;
pub use thr_clock::thr_clock;

use crate::{
    helpers::{config, event_header},
    kernel::{RqClock, layout, read, task_cgroup_id, task_comm, task_nivcsw, task_tgid},
    maps::{RUNQ_START, RUNQ_START_TASK, THROTTLE_LAST_CLOSE, count, emit},
};
use blame::{blame, blame_short};
use hists::{Stale, add_to_hist, hists_of};
use stamps::end_wait_sched_info;
use start::{take_start, task_storage};

/// A task switched out ([`SwitchOut`]): still queued, its wait starts (`throttled_cfs_rq`: the
/// throttled `cfs_rq` above it, when its hierarchy is throttled); exiting, a wait it may have left
/// open (woken while still running) goes.
#[inline(always)]
pub fn switched_out<const DIRECT: bool, const STAMPS: bool>(
    c: *mut Counters,
    task: *const u8,
    pid: u32,
    out: SwitchOut,
    now: u64,
    rq: RqClock,
    throttled_cfs_rq: Option<u64>,
) {
    if STAMPS {
        // The kernel stamps the wait itself; only a switch-out into a throttled hierarchy is
        // marked, with the switch count that identifies it at the switch-in.
        if let (SwitchOut::Queued, Some(cfs_rq)) = (out, throttled_cfs_rq) {
            let p = RUNQ_START_TASK.get(task, true);
            if p.is_null() {
                count(c, counters::RUNQ_START_FULL);
                return;
            }
            // SAFETY: the task's own storage value (see `start_wait`).
            unsafe {
                (*p).throttle_cfs_rq = cfs_rq;
                // The mark: the low half of nivcsw after this switch-out (see `RunqStart`).
                (*p).rq_clock_lo = task_nivcsw::<DIRECT>(task) as u32;
            }
        }
        return;
    }
    match out {
        // Replaces any older stamp (a wakeup that came while it still ran).
        SwitchOut::Queued => match throttled_cfs_rq {
            Some(cfs_rq) => {
                start_wait::<DIRECT>(c, task, pid, WaitKind::Throttled, now, rq, cfs_rq)
            }
            None => start_wait::<DIRECT>(c, task, pid, WaitKind::Preempt, now, rq, 0),
        },
        // A task woken while still running can exit with a wait recorded that never ends (task
        // storage goes with the task).
        SwitchOut::Exited => {
            if !task_storage() {
                let _ = RUNQ_START.remove(&pid);
            }
        }
        SwitchOut::Sleeps => {}
    }
}

/// `next` is switched in: its wait, if any, ends now and is charged to its cgroup
/// (`known_cgroup`: already read for the slice ring). `STAMPS`: the wait is read from the
/// kernel's own stamps (the `sched_switch_stamps` programs, 6.18+), not from a start of ours.
/// `offset`: this CPU's `RqClockOffset`, with how stale the run queue's clock `rq` is at this
/// switch.
#[inline(always)]
pub fn end_wait<const DIRECT: bool, const STAMPS: bool, const LOOP: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
    rq: RqClock,
    offset: *const RqClockOffset,
    known_cgroup: Option<u64>,
) {
    if STAMPS {
        let stale = Stale::of(offset, u64::MAX);
        end_wait_sched_info::<DIRECT>(c, next, pid, now, rq.clock, stale, known_cgroup);
        return;
    }
    let Some((mut start, storage)) = take_start::<DIRECT>(c, next, pid, now, rq) else {
        return;
    };
    if now < start.ts_ns {
        return;
    }
    // In the run queue's clock when the wait began on this CPU's run queue (the kernel's own
    // clock of run-queue waits, see `RunqStart::rq_cpu`), else in ktime; from here on the start
    // is where that wait began as ktime sees it. Only a wait timed in that clock misses its
    // staleness.
    let (wait_ns, in_rq_clock) = start.wait_ns_in(now, rq.cpu as u32, rq.clock);
    start.ts_ns = now - wait_ns;
    // Left out before 5.18 (see `add_to_hist`).
    let stale = Stale::of(offset, in_rq_clock);
    charge::<DIRECT, LOOP>(c, next, pid, now, stale, known_cgroup, &start, storage);
}

/// Charges the wait that began at `start` and ended now to `next`'s cgroup: histograms (split
/// at its throttled part), blame, and an event when it is long enough. The part that ends now
/// goes into its histogram with `stale` added (what the task waited beyond the run queue's
/// clock, kept apart in the histogram's `stale_ns`); its sum, the blame and the event have the
/// wait as the kernel's clock has it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn charge<const DIRECT: bool, const LOOP: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
    stale: Stale,
    known_cgroup: Option<u64>,
    start: &RunqStart,
    storage: *mut RunqStart,
) {
    let wait_ns = now - start.ts_ns;
    let cgroup_id = match known_cgroup.or_else(|| task_cgroup_id::<DIRECT>(next)) {
        Some(id) => id,
        None => {
            count(c, counters::CGROUP_UNREADABLE);
            0
        }
    };
    let hists = hists_of(storage, cgroup_id);
    let mut kind = start.kind;
    // The wait's throttled part, and whether it was the group's own quota.
    let mut throttled_ns = 0u64;
    let mut rest_from = start.ts_ns;
    if start.leaf_cfs_rq != 0 {
        // Before 6.18: the kernel's throttled clock splits the wait into its throttled part and
        // the rest, which keeps the kind it began with (a switch-out into a throttled hierarchy
        // becomes queueing once the group runs again).
        let throttled = throttled_part::<DIRECT>(next, start).min(wait_ns);
        throttled_ns = throttled;
        let rest_kind = if start.kind == WaitKind::Throttled as u32 {
            WaitKind::Preempt as u32
        } else {
            start.kind
        };
        // The staleness goes with the part after the throttled one (none: it is left out, a
        // few microseconds of a wait that was all throttled, rather than one more branch).
        if throttled > 0 {
            add_to_hist::<LOOP>(c, hists, WaitKind::Throttled as u32, throttled, Stale::NONE);
        }
        if throttled == 0 || wait_ns > throttled {
            add_to_hist::<LOOP>(c, hists, rest_kind, wait_ns - throttled, stale);
        }
        kind = if throttled * 2 > wait_ns {
            WaitKind::Throttled as u32
        } else {
            rest_kind
        };
    } else if start.kind == WaitKind::Throttled as u32 {
        // 6.18+: split at the unthrottle: the throttled part, then queueing behind other tasks.
        // SAFETY: the value is copied out.
        let closed = unsafe { THROTTLE_LAST_CLOSE.get(&start.throttle_cfs_rq) }.copied();
        match closed {
            Some(at) if at > start.ts_ns && at < now => {
                throttled_ns = at - start.ts_ns;
                rest_from = at;
                add_to_hist::<LOOP>(
                    c,
                    hists,
                    WaitKind::Throttled as u32,
                    throttled_ns,
                    Stale::NONE,
                );
                add_to_hist::<LOOP>(c, hists, WaitKind::Preempt as u32, now - at, stale);
            }
            _ => {
                throttled_ns = wait_ns;
                add_to_hist::<LOOP>(c, hists, WaitKind::Throttled as u32, wait_ns, stale);
            }
        }
    } else {
        add_to_hist::<LOOP>(c, hists, start.kind, wait_ns, stale);
    }
    if wait_ns >= config!(runq_event_min_ns) {
        emit_event::<DIRECT>(c, next, pid, cgroup_id, kind, wait_ns, now);
    }
    // The blame ledger last: its short and walked paths end the program rather than each
    // carrying the event's code after them (with `--event-min-ms 0` the verifier then walked the
    // event once per path, and 6.18 took 30 s to refuse the direct-read program).
    let blame_min = blame_min_ns();
    // A short wait (5.18+ programs) is charged to the slice it waited behind when it lies within
    // it; else, like a long one, by a walk of the ring.
    let walk = wait_ns >= blame_min
        || (LOOP
            && blame_min != u64::MAX
            && (throttled_ns > 0 || !blame_short(c, cgroup_id, start.ts_ns, now)));
    if walk {
        let own = throttled_ns > 0 && own_quota::<DIRECT>(next, start);
        blame::<DIRECT, LOOP>(
            c,
            next,
            cgroup_id,
            (start.ts_ns, rest_from, now),
            throttled_ns,
            own,
        );
    }
}

/// How much of the wait that began at `start` was spent throttled, by the advance of the
/// throttled clock of the `cfs_rq` it began on (read through the helper when `next` has moved
/// to another CPU or group meanwhile: that pointer is no longer the typed one).
///
/// Here, not in `thr_clock.rs`: under that module's path LLVM inlined it in another order and
/// the `sched_switch` programs changed (see "Moving code" in `probes/mod.rs`).
#[inline(always)]
fn throttled_part<const DIRECT: bool>(next: *const u8, start: &RunqStart) -> u64 {
    let clock = match read::<*const u8, DIRECT>(next, layout!(task_se_cfs_rq)) {
        Some(cfs_rq) if cfs_rq as u64 == start.leaf_cfs_rq => thr_clock::<DIRECT>(cfs_rq),
        _ => thr_clock::<false>(start.leaf_cfs_rq as *const u8),
    };
    clock.saturating_sub(start.thr_clock)
}

/// Whether a wait's throttled part was the task's own group's quota: 6.18+, the throttled
/// `cfs_rq` it was switched out under is its own; before, its own group has a quota (when an
/// ancestor has one too, the clock cannot tell which level ran out: charged as its own).
#[inline(always)]
fn own_quota<const DIRECT: bool>(next: *const u8, start: &RunqStart) -> bool {
    let Some(cfs_rq) = read::<*const u8, DIRECT>(next, layout!(task_se_cfs_rq)) else {
        return true;
    };
    if start.leaf_cfs_rq == 0 {
        return start.throttle_cfs_rq == cfs_rq as u64;
    }
    read::<i32, DIRECT>(cfs_rq, layout!(cfs_rq_runtime_enabled)).unwrap_or(1) != 0
}

#[inline(always)]
pub(super) fn emit_event<const DIRECT: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    cgroup_id: u64,
    kind: u32,
    wait_ns: u64,
    now: u64,
) {
    let ev = RunqEvent {
        header: event_header(KIND_RUNQ_WAIT, now),
        cgroup_id,
        wait_ns,
        pid,
        tgid: task_tgid::<DIRECT>(next).unwrap_or(0),
        kind,
        _pad: 0,
        comm: task_comm(next),
    };
    emit(c, &ev);
}
