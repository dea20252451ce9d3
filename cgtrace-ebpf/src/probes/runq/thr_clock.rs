//! The throttled clock the kernel keeps per `cfs_rq` (before 6.18): its advance over a wait is
//! the wait's throttled part (see `throttled_part` in `mod.rs`).
use cgtrace_common::layout::{ABSENT, THR_CLOCK_NONE};

use crate::kernel::{layout, read};

/// Kernels before task-based throttling (6.18) dequeue a whole group at throttle: its queued
/// tasks keep waiting under their wakeup or preempt stamp. The kernel keeps, per `cfs_rq`, a
/// clock of the time it spent in a throttled hierarchy (`LAYOUT.cfs_rq_thr_clock_time`); its
/// advance over a wait is the wait's throttled part. Returns the task's own `cfs_rq` and that
/// clock now, `(0, 0)` where the split is off (6.18+: the switch-out marks throttled waits).
#[inline(always)]
pub(super) fn thr_clock_of_task<const DIRECT: bool>(task: *const u8) -> (u64, u64) {
    if layout!(thr_clock_kind) == THR_CLOCK_NONE {
        return (0, 0);
    }
    match read::<*const u8, DIRECT>(task, layout!(task_se_cfs_rq)) {
        Some(cfs_rq) if !cfs_rq.is_null() => (cfs_rq as u64, thr_clock::<DIRECT>(cfs_rq)),
        _ => (0, 0),
    }
}

/// The kernel's throttled clock of `cfs_rq` now: the closed intervals' total, plus the open one
/// while its hierarchy is throttled (measured against its `rq`'s clock, which the scheduler has
/// just updated wherever this is called).
#[inline(always)]
pub fn thr_clock<const DIRECT: bool>(cfs_rq: *const u8) -> u64 {
    let total = read::<u64, DIRECT>(cfs_rq, layout!(cfs_rq_thr_clock_time)).unwrap_or(0);
    if read::<i32, DIRECT>(cfs_rq, layout!(cfs_rq_throttle_count)).unwrap_or(0) <= 0 {
        return total;
    }
    let since = read::<u64, DIRECT>(cfs_rq, layout!(cfs_rq_thr_clock)).unwrap_or(0);
    if since == 0 {
        return total;
    }
    let Some(rq) = read::<*const u8, DIRECT>(cfs_rq, layout!(cfs_rq_rq)) else {
        return total;
    };
    let mut clock = read::<u64, DIRECT>(rq, layout!(rq_thr_clock)).unwrap_or(0);
    if layout!(rq_thr_clock_sub) != ABSENT {
        clock = clock.wrapping_sub(read::<u64, DIRECT>(rq, layout!(rq_thr_clock_sub)).unwrap_or(0));
    }
    total + clock.saturating_sub(since)
}
