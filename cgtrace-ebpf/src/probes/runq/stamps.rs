//! Waits read from the kernel's own stamps (`sched_info`), for the `sched_switch_stamps` and
//! `sched_wakeup_stamps` programs (6.18+): no start of ours.
//!
//! The kernel stamps a stretch when it queues a task (`sched_info.last_queued`), and since 6.12
//! it queues some sleeping ones: a task that went to sleep is kept on its run queue for a while
//! (delayed dequeue), and moved from there to another CPU (its CPUs changed, or the balancer)
//! it is queued again, stamped, and its stretch runs on through the sleep (or until the new CPU
//! picks and dequeues it) — the kernel's `run_delay` counts the sleep as waiting (a 300 ms sleep
//! moved right after it began: up to 300 ms of `run_delay`). The wakeup program marks such a
//! task; its switch-in times the wait from the wakeup and reports the sleep as its own part.
use cgtrace_common::{
    counters::{self, Counters},
    runq::{EVENT_KIND_ASLEEP, RunqStart, WaitKind},
};

use super::{charge, emit_event, hists::Stale};
use crate::{
    kernel::{layout, read_unchecked, task_cgroup_id, task_nivcsw, task_rq_clock},
    maps::{self, RUNQ_START_TASK, count},
};

/// A task woken (`sched_wakeup`), waits read from the kernel's stamps: the enqueue of this
/// wakeup stamped it at the clock's value now, so a stamp older than that began before the
/// wakeup — while it slept, or (a wakeup of a task preempted on its way to sleep, still queued)
/// while it waited, which its switch-in tells apart by its kind. Else, when the kernel's
/// `run_delay` grew since the task's last switch-in, a stretch queued while it slept has already
/// been closed (a sleeper kept queued, moved to another CPU, then dequeued there when picked:
/// its stretch ran from the move to the pick). Only in those cases is the storage written: the
/// kernel's total (`run_delay` plus the open stretch) as of now. Nothing else runs here, not
/// even the wakeup counter: this program runs at every wakeup.
#[inline(always)]
pub fn woken<const DIRECT: bool>(p: *const u8) {
    let last_queued = read_unchecked::<DIRECT, true>(p, layout!(task_last_queued));
    let clock = task_rq_clock::<DIRECT>(p);
    let run_delay = read_unchecked::<DIRECT, true>(p, layout!(task_run_delay));
    if last_queued != 0 && last_queued < clock {
        let s = RUNQ_START_TASK.get(p, true);
        if s.is_null() {
            count(maps::counters(), counters::RUNQ_START_FULL);
            return;
        }
        mark_wakeup(s, run_delay + (clock - last_queued));
        return;
    }
    // A task never switched in by a program of ours has no storage and nothing to compare.
    let s = RUNQ_START_TASK.get(p, false);
    if s.is_null() {
        return;
    }
    // SAFETY: as in `mark_wakeup`; `leaf_cfs_rq` is the kernel's total at the last switch-in.
    let grew = unsafe { (*s).ts_ns != 0 && run_delay > (*s).leaf_cfs_rq };
    if grew {
        mark_wakeup(s, run_delay);
    }
}

/// Keeps the kernel's total at a wakeup in the task's storage (`kind` and `rq_cpu` in this
/// mode) for its switch-in.
#[inline(always)]
fn mark_wakeup(s: *mut RunqStart, total: u64) {
    // SAFETY: the task's own storage value (see `start_wait`), written under its rq lock.
    unsafe {
        (*s).kind = total as u32;
        (*s).rq_cpu = (total >> 32) as u32;
    }
}

/// `next` is switched in, waits read from the kernel's own stamps: `sched_switch` runs before
/// `sched_info_switch`, so `next`'s `sched_info.run_delay` does not have the ending wait yet and
/// `last_queued` is when its last queued stretch began (in `rq.clock`, which the scheduler
/// updated for this switch). The wait is everything `run_delay` will have gained since the
/// task's previous switch-in — the stretches it spent queued on other CPUs before a migration
/// included — so the waits add up to the kernel's `run_delay` by construction. A task seen for
/// the first time has only its last stretch, and its wait counts as a wakeup. Kind: the task
/// left the CPU still runnable (its `nivcsw` rose since its previous switch-in) — preempted, or
/// throttled when that switch-out was marked — else it slept and was woken, and when its wakeup
/// found the kernel counting queued time from before it (see `woken`), the wait is timed from
/// the wakeup and the rest is reported as asleep (an `EVENT_KIND_ASLEEP` record).
#[inline(always)]
pub(super) fn end_wait_sched_info<const DIRECT: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
    clock: u64,
    stale: Stale,
    known_cgroup: Option<u64>,
) {
    let p = RUNQ_START_TASK.get(next, true);
    if p.is_null() {
        count(c, counters::RUNQ_START_FULL);
        return;
    }
    let last_queued = read_unchecked::<DIRECT, true>(next, layout!(task_last_queued));
    let run_delay = read_unchecked::<DIRECT, true>(next, layout!(task_run_delay));
    let nivcsw = task_nivcsw::<DIRECT>(next);
    let stretch = if last_queued != 0 {
        clock.saturating_sub(last_queued)
    } else {
        0
    };
    let total = run_delay + stretch;
    // The words this mode keeps in the storage (see `RunqStart`): `leaf_cfs_rq` is run_delay and
    // `thr_clock` nivcsw at the last switch-in, `rq_clock_lo` the throttled switch-out's mark.
    // SAFETY: the task's own storage value, written under the rq lock of its switch-in.
    let (seen, before, nivcsw_before, mark, thr_cfs_rq, at_wakeup) = unsafe {
        let seen = (*p).ts_ns != 0;
        let at_wakeup = u64::from((*p).kind) | (u64::from((*p).rq_cpu) << 32);
        let v = (
            seen,
            (*p).leaf_cfs_rq,
            (*p).thr_clock,
            u64::from((*p).rq_clock_lo),
            (*p).throttle_cfs_rq,
            at_wakeup,
        );
        (*p).ts_ns = now;
        (*p).leaf_cfs_rq = total;
        (*p).thr_clock = nivcsw;
        if at_wakeup != 0 {
            (*p).kind = 0;
            (*p).rq_cpu = 0;
        }
        v
    };
    // The kernel's total the wait is measured from: at the previous switch-in, or for a task
    // seen for the first time before its last stretch.
    let base = if seen { before } else { run_delay };
    let mut wait_ns = total.saturating_sub(base);
    // The kernel counts an arrival (`pcount`) wherever a stretch was open; a wait of 0 is real:
    // where the switch-in skips the clock update (a wakeup that preempts has just updated it),
    // the kernel's own wait is 0, and the histograms count it as such.
    let arrived = last_queued != 0 || (seen && total != before);
    if !arrived || wait_ns > now {
        return;
    }
    let kind = if !seen || nivcsw == nivcsw_before {
        WaitKind::Wakeup
    } else if mark == (nivcsw & 0xffff_ffff) && thr_cfs_rq != 0 {
        WaitKind::Throttled
    } else {
        WaitKind::Preempt
    };
    let throttle_cfs_rq = if kind == WaitKind::Throttled {
        thr_cfs_rq
    } else {
        0
    };
    let mut known_cgroup = known_cgroup;
    if kind == WaitKind::Wakeup && at_wakeup > base && at_wakeup <= total {
        // Its stretch began before its wakeup: what the kernel counted up to the wakeup was
        // sleep.
        let asleep = at_wakeup - base;
        wait_ns = total - at_wakeup;
        count(c, counters::RUNQ_ASLEEP_STAMPED);
        let cgroup_id = known_cgroup.or_else(|| task_cgroup_id::<DIRECT>(next));
        known_cgroup = cgroup_id;
        emit_event::<DIRECT>(
            c,
            next,
            pid,
            cgroup_id.unwrap_or(0),
            EVENT_KIND_ASLEEP,
            asleep,
            now,
        );
    }
    let start = RunqStart::new(now - wait_ns, kind as u32, throttle_cfs_rq, 0, 0);
    // 6.18+: `bpf_loop` is there (5.17+).
    charge::<DIRECT, true>(c, next, pid, now, stale, known_cgroup, &start, p);
}
