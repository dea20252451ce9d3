//! Waits read from the kernel's own stamps (`sched_info`), for the `sched_switch_stamps`
//! programs (6.18+): no wakeup program, no start of ours.
use cgtrace_common::{
    counters::{self, Counters},
    runq::{RunqStart, WaitKind},
};

use super::charge;
use crate::{
    kernel::{layout, read_unchecked, task_nivcsw, task_rq_clock},
    maps::{RUNQ_START_TASK, count},
};

/// `next` is switched in, waits read from the kernel's own stamps: `sched_switch` runs before
/// `sched_info_switch`, so `next`'s `sched_info.run_delay` does not have the ending wait yet and
/// `last_queued` is when its last queued stretch began (in `rq.clock`, which the scheduler
/// updated for this switch). The wait is everything `run_delay` will have gained since the
/// task's previous switch-in — the stretches it spent queued on other CPUs before a migration
/// included — so the waits add up to the kernel's `run_delay` by construction. A task seen for
/// the first time has only its last stretch, and its wait counts as a wakeup. Kind: the task
/// left the CPU still runnable (its `nivcsw` rose since its previous switch-in) — preempted, or
/// throttled when that switch-out was marked — else it slept and was woken.
#[inline(always)]
pub(super) fn end_wait_sched_info<const DIRECT: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
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
    let clock = task_rq_clock::<DIRECT>(next);
    let stretch = if last_queued != 0 {
        clock.saturating_sub(last_queued)
    } else {
        0
    };
    let total = run_delay + stretch;
    // The words this mode keeps in the storage (see `RunqStart`): `leaf_cfs_rq` is run_delay and
    // `thr_clock` nivcsw at the last switch-in, `rq_clock_lo` the throttled switch-out's mark.
    // SAFETY: the task's own storage value, written under the rq lock of its switch-in.
    let (seen, before, nivcsw_before, mark, thr_cfs_rq) = unsafe {
        let seen = (*p).ts_ns != 0;
        let v = (
            seen,
            (*p).leaf_cfs_rq,
            (*p).thr_clock,
            u64::from((*p).rq_clock_lo),
            (*p).throttle_cfs_rq,
        );
        (*p).ts_ns = now;
        (*p).leaf_cfs_rq = total;
        (*p).thr_clock = nivcsw;
        v
    };
    let wait_ns = if seen {
        total.saturating_sub(before)
    } else {
        stretch
    };
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
    let start = RunqStart::new(now - wait_ns, kind as u32, throttle_cfs_rq, 0, 0);
    // 6.18+: `bpf_loop` is there (5.17+).
    charge::<DIRECT, true>(c, next, pid, now, known_cgroup, &start, p);
}
