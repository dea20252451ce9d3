//! Tracepoint mode: open episodes live in per-CPU slots. An episode belongs to one `cfs_rq`,
//! hence one CPU, and is only ever opened and closed on that CPU, so no two CPUs race on it.
//! Opened from `sched_switch` when a task is switched out into a throttled hierarchy; closed
//! when its `cfs_rq` is found unthrottled: after the bandwidth timer (`periods.rs`), after the
//! unthrottle CSD (`throttle_csd_exit`), or late, at the next switch on the CPU.
use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use cgtrace_common::{
    counters::{self, Counters},
    event::{EventHeader, KIND_THROTTLE},
    layout::ABSENT,
    throttle::{
        CLOSE_CSD, CLOSE_LATE, MAX_EPISODE_NS, MAX_OPEN_PER_CPU, MODE_TRACEPOINT, ThrottleEvent,
    },
};

use super::{cfs_rq_tg, cfs_rq_throttled, periods::seed_period_counts, tg_cgroup_id, watch};
use crate::{
    helpers::{cpu, now},
    kernel::{layout, read},
    maps::{THROTTLE_LAST_CLOSE, THROTTLE_MODE, THROTTLE_OPEN, count, counters, emit},
};

/// Hierarchy levels walked from a task up to its throttled `cfs_rq`.
const MAX_DEPTH: usize = 8;

/// The innermost throttled `cfs_rq` above a task that was just switched out still runnable, if
/// its hierarchy is throttled (6.18+: the task is in the limbo list, `p->throttled`; before: some
/// ancestor has `throttle_count`). With `open` (tracepoint mode) every throttled level on the way
/// up opens its episode on this CPU or counts the task into it: a pod and its container both
/// throttled are two episodes, as the kernel's `cpu.stat` counts them.
#[inline(always)]
fn throttled_cfs_rq_of<const DIRECT: bool>(
    c: *mut Counters,
    task: *const u8,
    now: u64,
    open: bool,
) -> Option<*const u8> {
    if layout!(cfs_rq_throttled) == ABSENT {
        return None;
    }
    let mut cfs_rq: *const u8 = read::<_, DIRECT>(task, layout!(task_se_cfs_rq))?;
    if layout!(task_throttled) != ABSENT {
        if read::<u8, DIRECT>(task, layout!(task_throttled)).unwrap_or(0) == 0 {
            return None;
        }
    } else if read::<i32, DIRECT>(cfs_rq, layout!(cfs_rq_throttle_count)).unwrap_or(0) <= 0 {
        return None;
    }
    // Walk up: this task's cfs_rq, then the cfs_rq of each ancestor group entity. The two
    // innermost throttled levels are kept (a container and its pod); a third throttled level
    // above them is counted as `throttle_slots_full` (one more in the verifier's budget would
    // not load).
    let mut levels: [*const u8; 2] = [core::ptr::null(); 2];
    let mut found = 0usize;
    let mut se: *const u8 = task.wrapping_add(layout!(task_se) as usize);
    for _ in 0..MAX_DEPTH {
        if cfs_rq.is_null() {
            break;
        }
        if cfs_rq_throttled::<DIRECT>(cfs_rq) {
            if found >= 2 {
                count(c, counters::THROTTLE_SLOTS_FULL);
                break;
            }
            levels[found & 1] = cfs_rq;
            found += 1;
            if !open {
                break;
            }
        }
        let Some(parent) = read::<*const u8, DIRECT>(se, layout!(se_parent)) else {
            break;
        };
        if parent.is_null() {
            break;
        }
        se = parent;
        let Some(next) = read::<*const u8, DIRECT>(se, layout!(se_cfs_rq)) else {
            break;
        };
        cfs_rq = next;
    }
    if found == 0 {
        return None;
    }
    if open {
        task_throttled::<DIRECT>(c, levels[0], now);
        if found > 1 {
            task_throttled::<DIRECT>(c, levels[1], now);
        }
    }
    Some(levels[0])
}

/// From `sched_switch`, for a task switched out still runnable: the innermost throttled
/// `cfs_rq` above it, if its hierarchy is throttled; in tracepoint mode this also opens the
/// episode of each throttled level on this CPU, or counts the task into it.
#[inline(always)]
pub fn switched_out_runnable<const DIRECT: bool>(
    c: *mut Counters,
    task: *const u8,
    now: u64,
) -> Option<u64> {
    let open = THROTTLE_MODE.get(0).copied().unwrap_or(MODE_TRACEPOINT) == MODE_TRACEPOINT;
    throttled_cfs_rq_of::<DIRECT>(c, task, now, open).map(|p| p as u64)
}

/// Tracepoint mode: a task switched out into a throttled hierarchy opens the episode of `cfs_rq`
/// on this CPU, or is counted into it.
#[inline(always)]
fn task_throttled<const DIRECT: bool>(c: *mut Counters, cfs_rq: *const u8, now: u64) {
    let Some(open) = THROTTLE_OPEN.get_ptr_mut(0) else {
        return;
    };
    let key = cfs_rq as u64;
    // SAFETY: per-CPU map value, only touched from this CPU.
    unsafe {
        // The first free slot is noted in the map value, which the verifier does not track: as
        // a register it made every (slot, first free slot) pair a state of its own, twice per
        // switch-out (two levels), and the direct `sched_switch_stamps` went over the verifier's
        // 1 M instructions on 6.18 (the probe-read variant ran instead, after ~20 s of retries).
        // Volatile, or the compiler keeps it in a register all the same.
        let hint = &raw mut (*open).free_hint;
        hint.write_volatile(MAX_OPEN_PER_CPU as u32);
        for i in 0..MAX_OPEN_PER_CPU {
            let slot = &mut (*open).slots[i];
            if slot.cfs_rq == key {
                slot.tasks += 1;
                return;
            }
            if slot.cfs_rq == 0 && hint.read_volatile() == MAX_OPEN_PER_CPU as u32 {
                hint.write_volatile(i as u32);
            }
        }
        let free = hint.read_volatile() as usize;
        if free >= MAX_OPEN_PER_CPU {
            count(c, counters::THROTTLE_SLOTS_FULL);
            return;
        }
        let tg = cfs_rq_tg::<DIRECT>(cfs_rq);
        let slot = &mut (*open).slots[free];
        slot.cfs_rq = key;
        slot.start_ns = now;
        slot.cgroup_id = tg_cgroup_id::<DIRECT>(tg).unwrap_or(0);
        slot.tasks = 1;
        slot.runnable = read::<u32, DIRECT>(cfs_rq, layout!(cfs_rq_h_nr)).unwrap_or(0);
        (*open).n_open += 1;
        watch(slot.cgroup_id, now);
        seed_period_counts(tg, slot.cgroup_id);
    }
}

/// Closes this CPU's episodes whose `cfs_rq` is no longer throttled.
///
/// Not inlined (a BPF-to-BPF call): its loop over the slots is verified apart from the paths of
/// the rest of `sched_switch`, which kept it within the verifier's budget.
#[inline(never)]
pub(super) fn close_unthrottled(c: *mut Counters, closed_by: u32) {
    let Some(open) = THROTTLE_OPEN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU map value, only touched from this CPU.
    unsafe {
        if (*open).n_open == 0 {
            return;
        }
        let now = now();
        for i in 0..MAX_OPEN_PER_CPU {
            let slot = &mut (*open).slots[i];
            if slot.cfs_rq == 0 {
                continue;
            }
            // Open past any real episode: its cfs_rq went with its group (freed memory may read
            // as throttled forever). Dropped, never reported.
            if now.saturating_sub(slot.start_ns) > MAX_EPISODE_NS {
                slot.cfs_rq = 0;
                (*open).n_open = (*open).n_open.saturating_sub(1);
                count(c, counters::THROTTLE_STALE);
                continue;
            }
            // Slot pointers come from a map: untyped for the verifier, so read with the helper.
            let cfs_rq = slot.cfs_rq as *const u8;
            if cfs_rq_throttled::<false>(cfs_rq) {
                continue;
            }
            // Closing: the cfs_rq must still be the group's that opened the episode (a group
            // removed while throttled frees it, and another group may reuse the memory).
            let tg = cfs_rq_tg::<false>(cfs_rq);
            if slot.cgroup_id != 0 && tg_cgroup_id::<false>(tg).unwrap_or(0) != slot.cgroup_id {
                slot.cfs_rq = 0;
                (*open).n_open = (*open).n_open.saturating_sub(1);
                count(c, counters::THROTTLE_STALE);
                continue;
            }
            let ev = ThrottleEvent {
                // Written out, not `event_header`: through the helper LLVM ordered this loop's
                // spills differently (one instruction more in a function `sched_switch` calls).
                header: EventHeader {
                    kind: KIND_THROTTLE,
                    cpu: cpu(),
                    ts_ns: now,
                },
                cgroup_id: slot.cgroup_id,
                start_ns: slot.start_ns,
                duration_ns: now.saturating_sub(slot.start_ns),
                tasks: slot.tasks,
                runnable: slot.runnable,
                closed_by,
                _pad: 0,
                kernel_ns: 0,
            };
            let _ = THROTTLE_LAST_CLOSE.insert(&slot.cfs_rq, &now, 0);
            slot.cfs_rq = 0;
            (*open).n_open = (*open).n_open.saturating_sub(1);
            if closed_by == CLOSE_LATE {
                count(c, counters::THROTTLE_LATE_CLOSE);
            }
            emit(c, &ev);
        }
    }
}

/// From `sched_switch`: episodes whose unthrottle no hook saw (a quota write) end here.
#[inline(always)]
pub fn close_late<const DIRECT: bool>(c: *mut Counters) {
    // The common case, no episode open on this CPU, without the call.
    // SAFETY: per-CPU map value, read only.
    if THROTTLE_OPEN
        .get_ptr(0)
        .is_none_or(|open| unsafe { (*open).n_open } == 0)
    {
        return;
    }
    close_unthrottled(c, CLOSE_LATE);
}

/// Remote unthrottles (6.2+) run `__cfsb_csd_unthrottle` as a CSD on the owning CPU. A raw
/// tracepoint: tp_btf cannot read `csd_function_exit`'s function-pointer argument.
#[raw_tracepoint(tracepoint = "csd_function_exit")]
pub fn throttle_csd_exit(ctx: RawTracePointContext) -> u32 {
    let func: u64 = ctx.arg(0);
    let csd_fn = layout!(csd_unthrottle_fn);
    if csd_fn != 0 && func == csd_fn {
        close_unthrottled(counters(), CLOSE_CSD);
    }
    0
}
