//! `throttle`, hook modes: fentry/fexit (preferred) or kprobe/kretprobe twins on
//! `throttle_cfs_rq(cfs_rq)` and `unthrottle_cfs_rq(cfs_rq)`.
//!
//! After `throttle_cfs_rq` returns, `cfs_rq->throttled` is re-checked (the function is `bool`
//! since 5.8 and `void` before, and may decline to throttle); that opens the episode. Around
//! `unthrottle_cfs_rq` the change of `tg->cfs_bandwidth.throttled_time` is the kernel's own
//! accounting of the episode, reported next to ours (a group-wide counter: unthrottles running at
//! the same moment on other CPUs add to it too). Periods are still counted by the timer
//! programs of `periods.rs`.
//!
//! Kernels that keep `throttled_clock_self_time` (6.7–6.17) leave out of `cpu.stat` the time a
//! cfs_rq is throttled with no task on it (throttled as its last task blocked, until the next
//! enqueue): there an episode's duration is the advance of that clock, the kernel's own count.
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use cgtrace_common::{
    counters,
    event::{EventHeader, KIND_THROTTLE},
    layout::THR_CLOCK_SELF,
    throttle::{CLOSE_UNTHROTTLE, HookEpisode, MAX_EPISODE_NS, ThrottleEvent},
};

use super::{cfs_rq_tg, cfs_rq_throttled, periods::seed_period_counts, tg_cgroup_id, watch};
use crate::{
    helpers::{cpu, now},
    kernel::{layout, read},
    maps::{THROTTLE_ARG, THROTTLE_EPISODES, THROTTLE_LAST_CLOSE, count, counters, emit},
    probes::runq::thr_clock,
};

/// The cfs_rq's throttled-with-tasks clock, on kernels with `throttled_clock_self_time`.
#[inline(always)]
fn self_clock(cfs_rq: *const u8) -> Option<u64> {
    (layout!(thr_clock_kind) == THR_CLOCK_SELF).then(|| thr_clock::<false>(cfs_rq))
}

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
    open::<DIRECT>(cfs_rq);
}

/// Opens the episode of `cfs_rq` (unless one is open).
#[inline(always)]
fn open<const DIRECT: bool>(cfs_rq: *const u8) {
    let (now, cpu) = (now(), cpu());
    let tg = cfs_rq_tg::<DIRECT>(cfs_rq);
    let cgroup_id = tg_cgroup_id::<DIRECT>(tg).unwrap_or(0);
    let ep = HookEpisode {
        start_ns: now,
        cgroup_id,
        kernel_before: 0,
        unthrottle_ns: 0,
        runnable: read::<u32, DIRECT>(cfs_rq, layout!(cfs_rq_h_nr)).unwrap_or(0),
        cpu,
        self_before: self_clock(cfs_rq).unwrap_or(0),
    };
    let key = cfs_rq as u64;
    if THROTTLE_EPISODES
        .insert(&key, &ep, u64::from(BPF_NOEXIST))
        .is_err()
    {
        // SAFETY: the value is copied out.
        match unsafe { THROTTLE_EPISODES.get(&key) }.copied() {
            None => count(counters(), counters::THROTTLE_SLOTS_FULL),
            // An entry left by a group whose cfs_rq this one reuses, or one whose close was
            // missed long ago: replace it.
            Some(old)
                if old.cgroup_id != cgroup_id
                    || now.saturating_sub(old.start_ns) > MAX_EPISODE_NS =>
            {
                count(counters(), counters::THROTTLE_STALE);
                let _ = THROTTLE_EPISODES.insert(&key, &ep, 0);
            }
            Some(_) => {}
        }
    }
    watch(cgroup_id, now);
    seed_period_counts(tg, cgroup_id);
}

/// At `unthrottle_cfs_rq` entry: remember the kernel's throttled time so far.
#[inline(always)]
fn unthrottle_entry<const DIRECT: bool>(cfs_rq: *const u8) {
    let Some(ep) = THROTTLE_EPISODES.get_ptr_mut(&(cfs_rq as u64)) else {
        return;
    };
    let before = kernel_throttled_time::<DIRECT>(cfs_rq);
    // SAFETY: live map value; this cfs_rq's rq lock serialises its episode.
    unsafe {
        (*ep).kernel_before = before;
        (*ep).unthrottle_ns = now();
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
    let now = now();
    // The cfs_rq must still be the group's that opened the episode, and the episode not stale.
    let tg = cfs_rq_tg::<DIRECT>(cfs_rq);
    if (ep.cgroup_id != 0 && tg_cgroup_id::<DIRECT>(tg).unwrap_or(0) != ep.cgroup_id)
        || now.saturating_sub(ep.start_ns) > MAX_EPISODE_NS
    {
        count(counters(), counters::THROTTLE_STALE);
        return;
    }
    let after = kernel_throttled_time::<DIRECT>(cfs_rq);
    let end = if ep.unthrottle_ns >= ep.start_ns {
        ep.unthrottle_ns
    } else {
        now
    };
    let duration_ns = match self_clock(cfs_rq) {
        Some(clock) => clock.saturating_sub(ep.self_before),
        None => end - ep.start_ns,
    };
    let ev = ThrottleEvent {
        header: EventHeader {
            kind: KIND_THROTTLE,
            cpu: ep.cpu,
            ts_ns: now,
        },
        cgroup_id: ep.cgroup_id,
        start_ns: ep.start_ns,
        duration_ns,
        tasks: 0,
        runnable: ep.runnable,
        closed_by: CLOSE_UNTHROTTLE,
        _pad: 0,
        // Only meaningful when the unthrottle_cfs_rq entry hook recorded the "before" value.
        kernel_ns: if ep.unthrottle_ns != 0 {
            after.saturating_sub(ep.kernel_before)
        } else {
            0
        },
    };
    let _ = THROTTLE_LAST_CLOSE.insert(&key, &end, 0);
    emit(counters(), &ev);
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

/// tg-walk mode: `cfs_rq` of task group `tg` on the CPU of run queue `rq`, and that of its parent.
#[inline(always)]
fn tg_cfs_rqs(tg: *const u8, rq: *const u8) -> Option<(*const u8, *const u8)> {
    let cpu = read::<i32, false>(rq, layout!(rq_cpu))? as usize;
    let slot = cpu.checked_mul(8)? as u32;
    let arr: *const u8 = read::<_, false>(tg, layout!(tg_cfs_rq))?;
    let cfs_rq: *const u8 = read::<_, false>(arr, slot)?;
    let parent: *const u8 = read::<_, false>(tg, layout!(tg_parent))?;
    let parr: *const u8 = read::<_, false>(parent, layout!(tg_cfs_rq))?;
    let pcfs_rq: *const u8 = read::<_, false>(parr, slot)?;
    Some((cfs_rq, pcfs_rq))
}

/// `tg_throttle_down(tg, rq)` runs pre-order over the throttled group's subtree: the group whose
/// parent is not throttled on this CPU is the one whose quota ran out.
#[inline(always)]
fn tg_down(tg: *const u8, rq: *const u8) {
    let Some((cfs_rq, parent)) = tg_cfs_rqs(tg, rq) else {
        return;
    };
    if read::<i32, false>(parent, layout!(cfs_rq_throttle_count)).unwrap_or(1) == 0 {
        open::<false>(cfs_rq);
    }
}

/// `tg_unthrottle_up(tg, rq)`: the walk after `unthrottle_cfs_rq` cleared `throttled`.
#[inline(always)]
fn tg_up(tg: *const u8, rq: *const u8) {
    if let Some((cfs_rq, _)) = tg_cfs_rqs(tg, rq) {
        unthrottled::<false>(cfs_rq);
    }
}

#[fentry(function = "tg_throttle_down")]
pub fn tg_throttle_down_fentry(ctx: FEntryContext) -> u32 {
    tg_down(ctx.arg(0), ctx.arg(1));
    0
}

#[fentry(function = "tg_unthrottle_up")]
pub fn tg_unthrottle_up_fentry(ctx: FEntryContext) -> u32 {
    tg_up(ctx.arg(0), ctx.arg(1));
    0
}

#[kprobe]
pub fn tg_throttle_down_kprobe(ctx: ProbeContext) -> u32 {
    let (tg, rq): (u64, u64) = (ctx.arg(0).unwrap_or(0), ctx.arg(1).unwrap_or(0));
    tg_down(tg as *const u8, rq as *const u8);
    0
}

#[kprobe]
pub fn tg_unthrottle_up_kprobe(ctx: ProbeContext) -> u32 {
    let (tg, rq): (u64, u64) = (ctx.arg(0).unwrap_or(0), ctx.arg(1).unwrap_or(0));
    tg_up(tg as *const u8, rq as *const u8);
    0
}
