//! Where the start of a task's open wait is kept: in the task's own storage (6.1+, see
//! `Config::runq_start_task`), or in the `RUNQ_START` hash (kernels before 6.1).
use cgtrace_common::{
    counters::{self, Counters},
    layout::{ABSENT, THR_CLOCK_NONE},
    runq::{EVENT_KIND_ASLEEP, RunqStart, WaitKind, dated_back},
};

use super::{emit_event, thr_clock::thr_clock_of_task};
use crate::{
    helpers::config,
    kernel::{RqClock, layout, read_unchecked, task_cgroup_id},
    maps::{RUNQ_START, RUNQ_START_TASK, count},
};

/// A wait of `pid` (`task`) starts now, on the run queue `rq`.
#[inline(always)]
pub fn start_wait<const DIRECT: bool>(
    c: *mut Counters,
    task: *const u8,
    pid: u32,
    kind: WaitKind,
    now: u64,
    rq: RqClock,
    throttle_cfs_rq: u64,
) {
    let wakeup = kind as u32 == WaitKind::Wakeup as u32;
    let (leaf_cfs_rq, thr_clock) = thr_clock_of_task::<DIRECT>(task);
    // Where no throttled clock is kept, `thr_clock` keeps the kernel's total at the start instead
    // (see `RunqStart`).
    let free = layout!(thr_clock_kind) == THR_CLOCK_NONE;
    // Where the kernel's `sched_info` is known: for a wakeup, its total wait as of now and when it
    // stamped the task queued (0: not queued).
    let (total, queued) = if wakeup {
        kernel_total::<DIRECT>(task, rq.clock)
    } else {
        (0, 0)
    };
    // This wakeup enqueued the task when the kernel stamped it with the clock the enqueue used.
    let enqueued_now = queued != 0 && queued == rq.clock;
    if task_storage() {
        let p = RUNQ_START_TASK.get(task, true);
        if p.is_null() {
            count(c, counters::RUNQ_START_FULL);
            return;
        }
        // SAFETY: the task's own storage value, written under the rq lock that serializes this
        // task's wakeup, switch-out and switch-in. Field by field, the slot cache left as it is:
        // a whole-struct store became a byte-wise memmove call the verifier refuses (a partial
        // fill of a spilled register).
        let base = unsafe {
            // A task switched out still queued and woken before it ran again (preempted on its
            // way to sleep; `ttwu_runnable`) has waited since the switch-out, as the kernel's
            // `run_delay` counts it: the wakeup keeps that start. Re-stamped here, a few such waits
            // of milliseconds read as 0 (own stamps 0.9912 of `run_delay` on `perf bench sched
            // pipe` beside busy loops; 0.9993 with this). An open wakeup start is not kept: it can
            // only be stale (woken while still running, then slept). Nor one of a task this wakeup
            // enqueued: it left the run queue since, so it ran and slept (on 6.18 a switch-in
            // now and then fires no `sched_switch` at all; the start it left open then took a
            // whole sleep for a wait, see docs/accuracy.md).
            if kind as u32 == WaitKind::Wakeup as u32
                && (*p).ts_ns != 0
                && (*p).kind != WaitKind::Wakeup as u32
                && !enqueued_now
            {
                return;
            }
            let open = (*p).ts_ns != 0;
            let kept = (*p).thr_clock;
            let total = if !wakeup && free {
                kernel_total::<DIRECT>(task, rq.clock).0
            } else {
                total
            };
            // A task switched out with a start of ours still open was switched in without a
            // `sched_switch` since (seen on 6.18, docs/accuracy.md): the kernel counted that wait
            // up to there, what its total gained since the start. The new start is dated back
            // by it, so its wait is the kernel's.
            let missed = if !wakeup && free && open {
                total.wrapping_sub(kept)
            } else {
                0
            };
            let (ts_ns, clock) = dated_back(now, rq.clock, missed);
            (*p).ts_ns = ts_ns;
            (*p).kind = kind as u32;
            (*p).throttle_cfs_rq = throttle_cfs_rq;
            (*p).leaf_cfs_rq = leaf_cfs_rq;
            (*p).thr_clock = if free { total } else { thr_clock };
            (*p).rq_cpu = rq.cpu as u32;
            (*p).rq_clock_lo = clock as u32;
            // The kernel's total at the task's last switch-in, while no start of ours is open
            // since (see `take_start`).
            if open { 0 } else { kept }
        };
        asleep_before::<DIRECT>(c, task, pid, now, (total, base), rq.clock, queued);
        return;
    }
    // The same rule as above: a wakeup keeps a queued task's switch-out start.
    if kind as u32 == WaitKind::Wakeup as u32
        // SAFETY: the value is only read.
        && unsafe { RUNQ_START.get(&pid) }.is_some_and(|s| s.kind != WaitKind::Wakeup as u32)
        && !enqueued_now
    {
        return;
    }
    let start = RunqStart::new(now, kind as u32, throttle_cfs_rq, leaf_cfs_rq, thr_clock)
        .on_rq(rq.cpu as u32, rq.clock as u32);
    if RUNQ_START.insert(&pid, &start, 0).is_err() {
        count(c, counters::RUNQ_START_FULL);
    }
    asleep_before::<DIRECT>(c, task, pid, now, (total, 0), rq.clock, queued);
}

/// `sched_info.last_queued` of `task`: the run queue's clock when the kernel last stamped it
/// queued, 0 while it is not (or where `sched_info` is not known). A wakeup that enqueues the
/// task stamps it with the clock of `rq` the enqueue used; a task woken while still queued
/// (`ttwu_runnable`) is not enqueued again.
#[inline(always)]
fn last_queued<const DIRECT: bool>(task: *const u8) -> u64 {
    if layout!(task_last_queued) == ABSENT {
        return 0;
    }
    read_unchecked::<DIRECT, true>(task, layout!(task_last_queued))
}

/// A wakeup of a task the kernel counted queued while it slept (6.12+, delayed dequeue: a task
/// that went to sleep still queued and was moved to another CPU is stamped queued there; the
/// move closes the stretch on the CPU it left into `run_delay`, and its wakeup keeps the new
/// stamp). The wait starts at the wakeup, as on the kernel-stamps path; the sleep is reported
/// apart as an `EVENT_KIND_ASLEEP` record (the cgroup's `run_delay_asleep_us`), counted as
/// `RUNQ_ASLEEP_STAMPED`, so waits plus that part are still `run_delay`. The sleep is what the
/// kernel's total (`total`: `run_delay` and the stretch open now) gained since the task's last
/// switch-in (`base`, 0: not known — a task seen for the first time, the hash of kernels before
/// 6.1); without `base`, the stretch open since `queued`, stamped before this wakeup's clock
/// `rq_clock`, alone.
#[inline(always)]
fn asleep_before<const DIRECT: bool>(
    c: *mut Counters,
    task: *const u8,
    pid: u32,
    now: u64,
    (total, base): (u64, u64),
    rq_clock: u64,
    queued: u64,
) {
    let asleep = if base != 0 && total > base {
        total - base
    } else if queued != 0 {
        rq_clock.wrapping_sub(queued)
    } else {
        return;
    };
    if asleep == 0 || asleep >= now {
        return;
    }
    count(c, counters::RUNQ_ASLEEP_STAMPED);
    let cgroup_id = task_cgroup_id::<DIRECT>(task).unwrap_or(0);
    emit_event::<DIRECT>(c, task, pid, cgroup_id, EVENT_KIND_ASLEEP, asleep, now);
}

/// Whether wait starts are kept in task-local storage (else in the `RUNQ_START` hash).
#[inline(always)]
pub(super) fn task_storage() -> bool {
    config!(runq_start_task) != 0
}

/// Takes the open wait start of `task` (`pid`), switched in `now` on `rq`, if any, with the
/// task's storage (null: the hash is used).
///
/// In task storage, a task with no start of ours that the kernel has queued since
/// `sched_info.last_queued` (in `rq`'s clock) gets the kernel's wait as a wakeup's: enqueued
/// without a `sched_wakeup` the program saw (on the node simulator ~1 % of the kernel's waits:
/// tasks that slept and were queued ~50 ms later, and wakeups that never reached the program,
/// see docs/accuracy.md). Counted as `RUNQ_KERNEL_STAMPED`. For it, every switch-in leaves the
/// kernel's total in `thr_clock` (free until the next start).
#[inline(always)]
pub(super) fn take_start<const DIRECT: bool>(
    c: *mut Counters,
    task: *const u8,
    pid: u32,
    now: u64,
    rq: RqClock,
) -> Option<(RunqStart, *mut RunqStart)> {
    if task_storage() {
        let p = RUNQ_START_TASK.get(task, false);
        if p.is_null() {
            return None;
        }
        let (total, queued) = kernel_total::<DIRECT>(task, rq.clock);
        // SAFETY: as in `start_wait`; copied out, then marked closed.
        unsafe {
            let ts_ns = (*p).ts_ns;
            if ts_ns == 0 {
                let base = (*p).thr_clock;
                (*p).thr_clock = total;
                return kernel_start(c, now, rq, queued, total, base).map(|s| (s, p));
            }
            (*p).ts_ns = 0;
            let start = RunqStart::new(
                ts_ns,
                (*p).kind,
                (*p).throttle_cfs_rq,
                (*p).leaf_cfs_rq,
                (*p).thr_clock,
            )
            .on_rq((*p).rq_cpu, (*p).rq_clock_lo);
            (*p).thr_clock = total;
            Some((start, p))
        }
    } else {
        // SAFETY: the value is copied out before the entry is removed.
        let start = (unsafe { RUNQ_START.get(&pid) }).copied()?;
        let _ = RUNQ_START.remove(&pid);
        Some((start, core::ptr::null_mut()))
    }
}

/// The kernel's total run-queue wait of `task` as of its switch-in now, and its
/// `sched_info.last_queued`: `run_delay` plus the stretch still open (in the clock `rq_clock`),
/// which `sched_info_switch` adds right after this tracepoint. (0, 0) where `sched_info` is not
/// known.
#[inline(always)]
fn kernel_total<const DIRECT: bool>(task: *const u8, rq_clock: u64) -> (u64, u64) {
    if layout!(task_run_delay) == ABSENT {
        return (0, 0);
    }
    let queued = last_queued::<DIRECT>(task);
    let run_delay = read_unchecked::<DIRECT, true>(task, layout!(task_run_delay));
    let stretch = if queued != 0 {
        rq_clock.wrapping_sub(queued)
    } else {
        0
    };
    (run_delay.wrapping_add(stretch), queued)
}

/// The start of a wait only the kernel stamped (see [`take_start`]), in ktime: `now` less what
/// the kernel's total gained since the task's previous switch-in (`base`, 0: not known) — the
/// stretch still open since `queued` and any it closed meanwhile (a move to another CPU closes
/// one and stamps the task queued again there) — or, without `base`, the open stretch alone.
#[inline(always)]
fn kernel_start(
    c: *mut Counters,
    now: u64,
    rq: RqClock,
    queued: u64,
    total: u64,
    base: u64,
) -> Option<RunqStart> {
    let stretch = rq.clock.wrapping_sub(queued);
    if queued == 0 || rq.cpu == 0 || stretch > now {
        return None;
    }
    let gained = total.wrapping_sub(base);
    let wait = if base != 0 && gained >= stretch && gained <= now {
        gained
    } else {
        stretch
    };
    count(c, counters::RUNQ_KERNEL_STAMPED);
    Some(RunqStart::new(now - wait, WaitKind::Wakeup as u32, 0, 0, 0))
}
