//! `throttle`, hook modes: fentry/fexit (preferred) or kprobe/kretprobe twins on
//! `throttle_cfs_rq(cfs_rq)` and `unthrottle_cfs_rq(cfs_rq)`.
//!
//! After `throttle_cfs_rq` returns, `cfs_rq->throttled` is re-checked (the function is `bool`
//! since 5.8 and `void` before, and may decline to throttle); that opens the episode. Around
//! `unthrottle_cfs_rq` the change of `tg->cfs_bandwidth.throttled_time` is the kernel's own
//! accounting of the episode, reported next to ours. Periods are still counted by the
//! `hrtimer_expire_entry` program of `probes::throttle`.
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use cgtrace_common::{
    counters,
    event::{EventHeader, KIND_THROTTLE},
    throttle::{CLOSE_UNTHROTTLE, HookEpisode, ThrottleEvent, WATCH_NS},
};

use crate::{
    kernel::{layout, read},
    maps::{
        EVENTS, THROTTLE_ARG, THROTTLE_EPISODES, THROTTLE_LAST_CLOSE, THROTTLE_WATCH, count,
        counters,
    },
    probes::{
        runq::wakeup_flags,
        throttle::{cfs_rq_throttled, tg_cgroup_id},
    },
};

/// `THROTTLE_ARG` slots: a throttle can nest inside an unthrottle (enqueue → throttle check).
const ARG_THROTTLE: u32 = 0;
const ARG_UNTHROTTLE: u32 = 1;

/// `tg->cfs_bandwidth.throttled_time` of the group of `cfs_rq`.
#[inline(always)]
fn kernel_throttled_time<const DIRECT: bool>(cfs_rq: *const u8) -> u64 {
    let Some(tg) = read::<*const u8, DIRECT>(cfs_rq, layout!(cfs_rq_tg)) else {
        return 0;
    };
    let off = layout!(tg_cfs_bandwidth).wrapping_add(layout!(cfs_b_throttled_time));
    read::<u64, DIRECT>(tg, off).unwrap_or(0)
}

/// After `throttle_cfs_rq`: opens the episode if the cfs_rq is now throttled.
#[inline(always)]
fn throttled<const DIRECT: bool>(cfs_rq: *const u8) {
    if cfs_rq.is_null() || !cfs_rq_throttled::<DIRECT>(cfs_rq) {
        return;
    }
    // SAFETY: helpers without preconditions.
    let (now, cpu) = unsafe { (bpf_ktime_get_ns(), bpf_get_smp_processor_id()) };
    let tg: *const u8 = read::<_, DIRECT>(cfs_rq, layout!(cfs_rq_tg)).unwrap_or(core::ptr::null());
    let cgroup_id = tg_cgroup_id::<DIRECT>(tg).unwrap_or(0);
    let ep = HookEpisode {
        start_ns: now,
        cgroup_id,
        kernel_before: 0,
        unthrottle_ns: 0,
        runnable: read::<u32, DIRECT>(cfs_rq, layout!(cfs_rq_h_nr)).unwrap_or(0),
        cpu,
    };
    if THROTTLE_EPISODES
        .insert(&(cfs_rq as u64), &ep, u64::from(BPF_NOEXIST))
        .is_err()
        // SAFETY: lookup only, to tell "already open" from "map full".
        && unsafe { THROTTLE_EPISODES.get(&(cfs_rq as u64)) }.is_none()
    {
        count(counters(), counters::THROTTLE_SLOTS_FULL);
    }
    let _ = THROTTLE_WATCH.insert(&cgroup_id, &(now + WATCH_NS), 0);
}

/// At `unthrottle_cfs_rq` entry: remember the kernel's throttled time so far.
#[inline(always)]
fn unthrottle_entry<const DIRECT: bool>(cfs_rq: *const u8) {
    let Some(ep) = THROTTLE_EPISODES.get_ptr_mut(&(cfs_rq as u64)) else {
        return;
    };
    let before = kernel_throttled_time::<DIRECT>(cfs_rq);
    // SAFETY: live map value; this cfs_rq's rq lock serialises its episode. The helper has no
    // preconditions.
    unsafe {
        (*ep).kernel_before = before;
        (*ep).unthrottle_ns = bpf_ktime_get_ns();
    }
}

/// After `unthrottle_cfs_rq`: closes the episode if the cfs_rq is no longer throttled.
#[inline(always)]
fn unthrottled<const DIRECT: bool>(cfs_rq: *const u8) {
    let key = cfs_rq as u64;
    // SAFETY: the value is copied out before the entry is removed.
    let Some(ep) = (unsafe { THROTTLE_EPISODES.get(&key) }).copied() else {
        return;
    };
    if cfs_rq_throttled::<DIRECT>(cfs_rq) {
        return;
    }
    let _ = THROTTLE_EPISODES.remove(&key);
    // SAFETY: helpers without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let after = kernel_throttled_time::<DIRECT>(cfs_rq);
    let end = if ep.unthrottle_ns >= ep.start_ns {
        ep.unthrottle_ns
    } else {
        now
    };
    let ev = ThrottleEvent {
        header: EventHeader {
            kind: KIND_THROTTLE,
            cpu: ep.cpu,
            ts_ns: now,
        },
        cgroup_id: ep.cgroup_id,
        start_ns: ep.start_ns,
        duration_ns: end - ep.start_ns,
        tasks: 0,
        runnable: ep.runnable,
        closed_by: CLOSE_UNTHROTTLE,
        _pad: 0,
        kernel_ns: after.saturating_sub(ep.kernel_before),
    };
    let _ = THROTTLE_LAST_CLOSE.insert(&key, &end, 0);
    if EVENTS.output(&ev, wakeup_flags()).is_err() {
        count(counters(), counters::RINGBUF_FULL);
    }
}

#[fexit(function = "throttle_cfs_rq")]
pub fn throttle_cfs_rq_fexit(ctx: FExitContext) -> u32 {
    throttled::<true>(ctx.arg(0));
    0
}

#[fentry(function = "unthrottle_cfs_rq")]
pub fn unthrottle_cfs_rq_fentry(ctx: FEntryContext) -> u32 {
    unthrottle_entry::<true>(ctx.arg(0));
    0
}

#[fexit(function = "unthrottle_cfs_rq")]
pub fn unthrottle_cfs_rq_fexit(ctx: FExitContext) -> u32 {
    unthrottled::<true>(ctx.arg(0));
    0
}

#[inline(always)]
fn stash(slot: u32, v: u64) {
    if let Some(p) = THROTTLE_ARG.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot.
        unsafe { *p = v };
    }
}

#[inline(always)]
fn stashed(slot: u32) -> *const u8 {
    THROTTLE_ARG.get(slot).copied().unwrap_or(0) as *const u8
}

#[kprobe]
pub fn throttle_cfs_rq_kprobe(ctx: ProbeContext) -> u32 {
    stash(ARG_THROTTLE, ctx.arg::<u64>(0).unwrap_or(0));
    0
}

#[kretprobe]
pub fn throttle_cfs_rq_kretprobe(_ctx: RetProbeContext) -> u32 {
    throttled::<false>(stashed(ARG_THROTTLE));
    0
}

#[kprobe]
pub fn unthrottle_cfs_rq_kprobe(ctx: ProbeContext) -> u32 {
    let cfs_rq = ctx.arg::<u64>(0).unwrap_or(0);
    stash(ARG_UNTHROTTLE, cfs_rq);
    unthrottle_entry::<false>(cfs_rq as *const u8);
    0
}

#[kretprobe]
pub fn unthrottle_cfs_rq_kretprobe(_ctx: RetProbeContext) -> u32 {
    unthrottled::<false>(stashed(ARG_UNTHROTTLE));
    0
}
