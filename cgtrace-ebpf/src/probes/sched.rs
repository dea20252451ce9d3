//! The scheduler tracepoints, once for every family: `sched_wakeup`, `sched_wakeup_new` and
//! `sched_switch` take one timestamp and call the run-queue part (`runq`) and the throttle part
//! (`throttle`: late closes, slices of watched groups, tasks switched out into a throttled
//! hierarchy). Neither part imports the other.
//!
//! Every program exists twice: reading kernel fields directly through BTF-typed pointers (the
//! loader tries these first) and through `bpf_probe_read_kernel` (`*_probe`, the fallback); and
//! `sched_switch` once more for kernels before 5.18, whose tracepoint has no `prev_state`.
use cgtrace_common::{
    counters,
    runq::{STATE_UNKNOWN, SwitchOut, WaitKind},
};

use crate::{
    helpers::now,
    kernel::{task_cgroup_id, task_pid, task_rq_cpu_clock, task_state},
    maps::{RQ_CLOCK_OFFSET, count, counters},
    probes::{runq, throttle, twice},
};

twice!("sched_wakeup", sched_wakeup, sched_wakeup_probe, wakeup, ctx => ctx.arg(0));
twice!("sched_wakeup_new", sched_wakeup_new, sched_wakeup_new_probe, wakeup, ctx => ctx.arg(0));
// `sched_switch(preempt, prev, next, prev_state)`, kernels 5.18+.
// Its blame walk runs in `bpf_loop` (5.17+).
twice!("sched_switch", sched_switch, sched_switch_probe, switch::<false, true>,
    ctx => ctx.arg::<u8>(0) != 0, ctx.arg(1), ctx.arg(2), Some(u64::from(ctx.arg::<u32>(3))));
// `sched_switch(preempt, prev, next)`, kernels before 5.18: prev's state is read from the task.
// A bounded blame walk (`bpf_loop` is 5.17+).
twice!("sched_switch", sched_switch_noprevstate, sched_switch_noprevstate_probe, switch::<false, false>,
    ctx => ctx.arg::<u8>(0) != 0, ctx.arg(1), ctx.arg(2), None);
// Waits read from the kernel's own stamps (6.18+; see `runq::end_wait`): programs of their own,
// so older kernels never verify this path. Its wakeup program only marks a task the kernel
// counted as queued while it slept (see `runq::woken_stamps`); no wait starts there.
twice!("sched_switch", sched_switch_stamps, sched_switch_stamps_probe, switch::<true, true>,
    ctx => ctx.arg::<u8>(0) != 0, ctx.arg(1), ctx.arg(2), Some(u64::from(ctx.arg::<u32>(3))));
twice!("sched_wakeup", sched_wakeup_stamps, sched_wakeup_stamps_probe, wakeup_stamps, ctx => ctx.arg(0));

#[inline(always)]
fn wakeup_stamps<const DIRECT: bool>(p: *const u8) {
    runq::woken_stamps::<DIRECT>(p);
}

#[inline(always)]
fn wakeup<const DIRECT: bool>(p: *const u8) {
    let c = counters();
    count(c, counters::SCHED_WAKEUP);
    if let Some(pid) = task_pid::<DIRECT>(p).filter(|&pid| pid != 0) {
        runq::start_wait::<DIRECT>(
            c,
            p,
            pid,
            WaitKind::Wakeup,
            now(),
            // The run queue it was just queued on, whose clock the enqueue updated.
            task_rq_cpu_clock::<DIRECT>(p),
            0,
        );
    }
}

#[inline(always)]
fn switch<const DIRECT: bool, const STAMPS: bool, const LOOP: bool>(
    preempt: bool,
    prev: *const u8,
    next: *const u8,
    prev_state: Option<u64>,
) {
    let c = counters();
    count(c, counters::SCHED_SWITCH);
    // One timestamp for the switch: the end of next's wait and the start of prev's, taken before
    // any other work so a wait is not lengthened by what this program does first.
    let now = now();
    // The run queue clock's staleness is only used by the 5.18+ programs (see
    // `runq::add_to_hist`): older kernels neither look it up nor estimate it. The lookup ends
    // the path rather than branching around it (never fails: a per-CPU array's one entry).
    let offset = if LOOP {
        let Some(offset) = RQ_CLOCK_OFFSET.get_ptr_mut(0) else {
            return;
        };
        offset
    } else {
        core::ptr::null_mut()
    };
    throttle::close_late::<DIRECT>(c);
    // This CPU's run queue and its clock as the scheduler stamped the switch with: prev and next
    // are both on it, and prev leads to it even when it is the idle task (its `se.cfs_rq` is its
    // CPU's root `cfs_rq`). How stale that clock is: what next waited beyond it.
    let rq = task_rq_cpu_clock::<DIRECT>(prev);
    if LOOP {
        // Kept in the map and read back where a wait is added (see `runq::Stale`).
        // SAFETY: this CPU's own value, written only by this program (no preemption inside it).
        unsafe { (*offset).switch(now, rq.clock) };
    }
    // The idle task (pid 0) always switches out as runnable: never a wait.
    if let Some(prev_pid) = task_pid::<DIRECT>(prev).filter(|&pid| pid != 0) {
        // Who burned the quota: only while some group is watched.
        if throttle::watching(now) {
            throttle::slice_out::<DIRECT>(c, prev, prev_pid);
        }
        let state = match prev_state {
            Some(s) => s,
            None => task_state::<DIRECT>(prev).unwrap_or(STATE_UNKNOWN),
        };
        let out = SwitchOut::of(preempt, state);
        let throttled = if out == SwitchOut::Queued {
            throttle::switched_out_runnable::<DIRECT>(c, prev, now)
        } else {
            None
        };
        runq::switched_out::<DIRECT, STAMPS>(c, prev, prev_pid, out, now, rq, throttled);
    }
    let next_pid = task_pid::<DIRECT>(next).filter(|&pid| pid != 0);
    // The blame ledger: the slice that ends now goes into this CPU's ring before next's wait is
    // charged, so the wait sees who ran last. next's cgroup is read once for both.
    let mut next_cgroup = None;
    if runq::blame_min_ns() != u64::MAX {
        next_cgroup = match next_pid {
            Some(_) => task_cgroup_id::<DIRECT>(next),
            None => Some(0),
        };
        runq::slice_switch::<DIRECT, LOOP>(next, now, next_cgroup.unwrap_or(0));
    }
    if let Some(next_pid) = next_pid {
        runq::end_wait::<DIRECT, STAMPS, LOOP>(c, next, next_pid, now, rq, offset, next_cgroup);
    }
}
