//! `throttle`: CFS bandwidth throttle episodes and periods, tracepoint-only mode (see
//! `cgtrace_common::throttle` for the design). Open episodes live in per-CPU slots: an episode
//! belongs to one `cfs_rq`, hence one CPU, and is only ever opened and closed on that CPU, so no
//! two CPUs race on it.
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use cgtrace_common::{
    counters::{self, Counters},
    event::{EventHeader, KIND_THROTTLE, KIND_THROTTLE_PERIOD, KIND_THROTTLE_SLICE},
    layout::ABSENT,
    throttle::{
        CLOSE_CSD, CLOSE_LATE, CLOSE_TIMER, MAX_EPISODE_NS, MAX_OPEN_PER_CPU, MODE_TRACEPOINT,
        PeriodEvent, SLICE_CPU_BITS, SLICE_ONE, SliceEvent, SliceKey, SliceSum, ThrottleEvent,
        ThrottleStats, WATCH_NS,
    },
};

use crate::{
    helpers::{atomic_add, cpu, event_header, now},
    kernel::{layout, read, task_comm, task_tgid},
    maps::{
        EVENTS, THROTTLE_LAST_CLOSE, THROTTLE_MODE, THROTTLE_OPEN, THROTTLE_PERIOD_AT,
        THROTTLE_SLICE_SUMS, THROTTLE_STATS, THROTTLE_WATCH, count, counters, emit,
    },
};

/// Hierarchy levels walked from a task up to its throttled `cfs_rq`.
const MAX_DEPTH: usize = 8;

/// Whether `cfs_rq->throttled` is set (a bitfield on 6.18, an `int` before).
#[inline(always)]
pub fn cfs_rq_throttled<const DIRECT: bool>(cfs_rq: *const u8) -> bool {
    let off = layout!(cfs_rq_throttled);
    let bits = layout!(cfs_rq_throttled_bits);
    if bits == 0 {
        read::<u32, DIRECT>(cfs_rq, off).unwrap_or(0) != 0
    } else {
        let byte = read::<u8, DIRECT>(cfs_rq, off).unwrap_or(0);
        let shift = layout!(cfs_rq_throttled_shift) & 7;
        let mask: u8 = if bits >= 8 { 0xff } else { (1u8 << bits) - 1 };
        (byte >> shift) & mask != 0
    }
}

/// `kernfs_node.id` of a task group's cgroup (`tg->css.cgroup->kn->id`).
#[inline(always)]
pub fn tg_cgroup_id<const DIRECT: bool>(tg: *const u8) -> Option<u64> {
    let off = layout!(tg_css).wrapping_add(layout!(css_cgroup));
    let cgrp: *const u8 = read::<_, DIRECT>(tg, off)?;
    let kn: *const u8 = read::<_, DIRECT>(cgrp, layout!(cgroup_kn))?;
    read::<u64, DIRECT>(kn, layout!(kn_id))
}

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
    let mut free = MAX_OPEN_PER_CPU;
    // SAFETY: per-CPU map value, only touched from this CPU.
    unsafe {
        for i in 0..MAX_OPEN_PER_CPU {
            let slot = &mut (*open).slots[i];
            if slot.cfs_rq == key {
                slot.tasks += 1;
                return;
            }
            if slot.cfs_rq == 0 && free == MAX_OPEN_PER_CPU {
                free = i;
            }
        }
        if free >= MAX_OPEN_PER_CPU {
            count(c, counters::THROTTLE_SLOTS_FULL);
            return;
        }
        let tg: *const u8 =
            read::<_, DIRECT>(cfs_rq, layout!(cfs_rq_tg)).unwrap_or(core::ptr::null());
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

/// At a group's throttle: if its period counters are not kept yet, start them from the kernel's
/// `nr_periods`/`nr_throttled` now, so the period-timer callback that counts this throttle is
/// counted even when it is the first one seen and its entry was missed.
#[inline(always)]
pub fn seed_period_counts(tg: *const u8, cgroup_id: u64) {
    if cgroup_id == 0 || tg.is_null() {
        return;
    }
    // SAFETY: lookup only.
    if unsafe { THROTTLE_STATS.get(&cgroup_id) }.is_some() {
        return;
    }
    let cfs_b = tg.wrapping_add(layout!(tg_cfs_bandwidth) as usize);
    let seed = ThrottleStats {
        nr_periods: 0,
        nr_throttled: 0,
        last_periods: read::<i32, false>(cfs_b, layout!(cfs_b_nr_periods)).unwrap_or(0) as u32,
        last_throttled: read::<i32, false>(cfs_b, layout!(cfs_b_nr_throttled)).unwrap_or(0) as u32,
    };
    // An entry made meanwhile by the period timer wins (NOEXIST).
    let _ = THROTTLE_STATS.insert(&cgroup_id, &seed, u64::from(BPF_NOEXIST));
}

/// A group's episode opened at `now`: its threads' slices are summed for `WATCH_NS` from now.
#[inline(always)]
pub fn watch(cgroup_id: u64, now: u64) {
    let _ = THROTTLE_WATCH.insert(&cgroup_id, &(now + WATCH_NS), 0);
}

/// The period of the group whose bandwidth is `cfs_b` (see `SliceSum::period`).
#[inline(always)]
fn period_of(cfs_b: *const u8) -> u32 {
    (read::<i32, false>(cfs_b, layout!(cfs_b_nr_periods)).unwrap_or(0) as u32).wrapping_add(1)
}

/// From `sched_switch`, for every task switched out: if it belongs to a group with a quota that
/// was throttled within `WATCH_NS`, add the slice it just ran to its sum for the group's current
/// period (who burned the quota). The sum goes to the daemon once, when the thread comes off the
/// CPU in a later period: one record per thread and period, not one per switch.
///
/// Not inlined: a BPF-to-BPF call, so the verifier walks its branches once per call instead of
/// once per path through the rest of `sched_switch` (inlined, the program passed the
/// verifier's million-instruction budget).
#[inline(never)]
pub fn slice_out<const DIRECT: bool>(c: *mut Counters, task: *const u8, pid: u32) {
    let enabled_off = layout!(cfs_rq_runtime_enabled);
    if enabled_off == ABSENT {
        return;
    }
    let Some(mut cfs_rq) = read::<*const u8, DIRECT>(task, layout!(task_se_cfs_rq)) else {
        return;
    };
    let mut se: *const u8 = task.wrapping_add(layout!(task_se) as usize);
    let mut found = false;
    for _ in 0..4 {
        if cfs_rq.is_null() {
            return;
        }
        if read::<i32, DIRECT>(cfs_rq, enabled_off).unwrap_or(0) != 0 {
            found = true;
            break;
        }
        let Some(parent) = read::<*const u8, DIRECT>(se, layout!(se_parent)) else {
            return;
        };
        se = parent;
        let Some(next) = read::<*const u8, DIRECT>(se, layout!(se_cfs_rq)) else {
            return;
        };
        cfs_rq = next;
    }
    if !found {
        return;
    }
    let tg: *const u8 = read::<_, DIRECT>(cfs_rq, layout!(cfs_rq_tg)).unwrap_or(core::ptr::null());
    let Some(cgroup_id) = tg_cgroup_id::<DIRECT>(tg) else {
        return;
    };
    // SAFETY: the value is copied out.
    let Some(until) = (unsafe { THROTTLE_WATCH.get(&cgroup_id) }).copied() else {
        return;
    };
    let now = now();
    if now > until {
        return;
    }
    count(c, counters::THROTTLE_SLICES);
    let sum = read::<u64, DIRECT>(task, layout!(task_sum_exec)).unwrap_or(0);
    let prev = read::<u64, DIRECT>(task, layout!(task_prev_sum_exec)).unwrap_or(0);
    let runtime = sum.saturating_sub(prev);
    let period = period_of(tg.wrapping_add(layout!(tg_cfs_bandwidth) as usize));
    let cpu = cpu();
    let key = SliceKey {
        cgroup_id,
        tid: pid,
        _pad: 0,
    };
    if let Some(s) = THROTTLE_SLICE_SUMS.get_ptr_mut(&key) {
        // SAFETY: live map value. Only this thread's switch-outs write it (a thread is off the
        // CPU once at a time); the daemon reads it concurrently and deletes it only after its
        // period was taken.
        unsafe {
            if (*s).period != period {
                // A later period: the finished sum goes to the daemon, this slice starts the next.
                send_sum(c, &key, &*s, now, 0);
                (*s).period = period;
                (*s).slices = 0;
                (*s).runtime_ns = 0;
                (*s).first_ns = now;
                (*s).cpus = 0;
                (*s).cpu_mask = [0; (SLICE_CPU_BITS / 64) as usize];
                (*s).tgid = task_tgid::<DIRECT>(task).unwrap_or(0);
                (*s).comm = task_comm(task);
            }
            (*s).slices += 1;
            (*s).runtime_ns += runtime;
            (*s).last_ns = now;
            add_cpu(&mut *s, cpu);
        }
        return;
    }
    let mut fresh = SliceSum {
        period,
        slices: 1,
        runtime_ns: runtime,
        first_ns: now,
        last_ns: now,
        tgid: task_tgid::<DIRECT>(task).unwrap_or(0),
        last_cpu: cpu,
        cpus: 0,
        _pad: 0,
        cpu_mask: [0; (SLICE_CPU_BITS / 64) as usize],
        comm: task_comm(task),
    };
    add_cpu(&mut fresh, cpu);
    if THROTTLE_SLICE_SUMS
        .insert(&key, &fresh, u64::from(BPF_NOEXIST))
        .is_err()
    {
        // No room: this slice goes alone, as every slice did before sums.
        count(c, counters::THROTTLE_SLICE_SUMS_FULL);
        send_sum(c, &key, &fresh, now, SLICE_ONE);
    }
}

/// Counts `cpu` into the sum's distinct CPUs.
#[inline(always)]
fn add_cpu(s: &mut SliceSum, cpu: u32) {
    if cpu < SLICE_CPU_BITS {
        // A match, not an index: older verifiers (5.10) lose the index's bound through LLVM's
        // folding of the shift and mask.
        let [w0, w1, w2, w3] = &mut s.cpu_mask;
        let word = match cpu >> 6 {
            0 => w0,
            1 => w1,
            2 => w2,
            _ => w3,
        };
        let bit = 1u64 << (cpu & 63);
        if *word & bit == 0 {
            *word |= bit;
            s.cpus += 1;
        }
    } else if cpu != s.last_cpu || s.cpus == 0 {
        s.cpus += 1;
    }
    s.last_cpu = cpu;
}

/// Sends a thread's sum (or, with `SLICE_ONE`, a lone slice) to the daemon.
#[inline(always)]
fn send_sum(c: *mut Counters, key: &SliceKey, s: &SliceSum, now: u64, flags: u32) {
    let Some(mut slot) = EVENTS.reserve::<SliceEvent>(0) else {
        count(c, counters::RINGBUF_FULL);
        return;
    };
    // SAFETY: a reserved, writable record; every field is written before submit.
    unsafe {
        let ev = slot.as_mut_ptr();
        (*ev).header = EventHeader {
            kind: KIND_THROTTLE_SLICE,
            cpu: s.last_cpu,
            ts_ns: now,
        };
        (*ev).cgroup_id = key.cgroup_id;
        (*ev).runtime_ns = s.runtime_ns;
        (*ev).pid = key.tid;
        (*ev).tgid = s.tgid;
        (*ev).comm = s.comm;
        (*ev).period = s.period;
        (*ev).slices = s.slices;
        (*ev).cpus = s.cpus;
        (*ev).flags = flags;
        (*ev).first_ns = s.first_ns;
    }
    slot.submit(crate::maps::wakeup_flags());
    count(c, counters::THROTTLE_SLICE_RECORDS);
}

/// Closes this CPU's episodes whose `cfs_rq` is no longer throttled.
///
/// Not inlined (a BPF-to-BPF call): its loop over the slots is verified apart from the paths of
/// the rest of `sched_switch`, which kept it within the verifier's budget.
#[inline(never)]
fn close_unthrottled(c: *mut Counters, closed_by: u32) {
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
            let tg: *const u8 =
                read::<_, false>(cfs_rq, layout!(cfs_rq_tg)).unwrap_or(core::ptr::null());
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

#[inline(always)]
fn timer_function<const DIRECT: bool>(timer: *const u8) -> u64 {
    read::<u64, DIRECT>(timer, layout!(hrtimer_function)).unwrap_or(0)
}

/// Period timer entry: count the period, and whether the group is throttled right now.
#[inline(always)]
fn period_entry<const DIRECT: bool>(timer: *const u8) {
    let period_fn = layout!(period_timer_fn);
    if period_fn == 0 || timer_function::<DIRECT>(timer) != period_fn {
        return;
    }
    // container_of(timer, struct cfs_bandwidth, period_timer), then of the task_group: these
    // pointers are not BTF-typed, so everything from here is read with the helper.
    let cfs_b = timer.wrapping_sub(layout!(cfs_b_period_timer) as usize);
    let tg = cfs_b.wrapping_sub(layout!(tg_cfs_bandwidth) as usize);
    let Some(cgroup_id) = tg_cgroup_id::<false>(tg) else {
        return;
    };
    let list = cfs_b.wrapping_add(layout!(cfs_b_throttled_list) as usize);
    let next: u64 = read::<u64, false>(list, 0).unwrap_or(list as u64);
    let throttled = next != list as u64;
    // Counted at the exit, from the kernel's own counters: remember them now.
    if let Some(at) = THROTTLE_PERIOD_AT.get_ptr_mut(0) {
        let periods = read::<i32, false>(cfs_b, layout!(cfs_b_nr_periods)).unwrap_or(0);
        let throttled_n = read::<i32, false>(cfs_b, layout!(cfs_b_nr_throttled)).unwrap_or(0);
        // SAFETY: per-CPU slot; hrtimer callbacks do not nest on a CPU.
        unsafe {
            *at = [
                timer as u64,
                periods as u32 as u64,
                throttled_n as u32 as u64,
            ]
        };
    }
    // Period boundaries of watched groups delimit the slices of each period.
    // SAFETY: the value is copied out.
    let watched = unsafe { THROTTLE_WATCH.get(&cgroup_id) }.copied();
    let now = now();
    if watched.is_some_and(|until| now <= until) {
        let ev = PeriodEvent {
            header: event_header(KIND_THROTTLE_PERIOD, now),
            cgroup_id,
            throttled: u32::from(throttled),
            period: period_of(cfs_b),
        };
        emit(counters(), &ev);
    }
}

#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn throttle_period(ctx: BtfTracePointContext) -> u32 {
    period_entry::<true>(ctx.arg(0));
    0
}

#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn throttle_period_probe(ctx: BtfTracePointContext) -> u32 {
    period_entry::<false>(ctx.arg(0));
    0
}

/// Period timer exit: count the periods and throttled periods the kernel added to its
/// `nr_periods`/`nr_throttled` (its own decision, taken under `cfs_b->lock`, overrun included)
/// since the last callback seen for this group; the first one counts the change since its entry.
#[inline(always)]
fn period_exit(timer: *const u8) {
    let Some(at) = THROTTLE_PERIOD_AT.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU slot written by this CPU's entry program.
    let [stashed, periods0, throttled0] = unsafe { *at };
    let entry_seen = stashed == timer as u64;
    if entry_seen {
        // SAFETY: as above.
        unsafe { (*at)[0] = 0 };
    }
    let cfs_b = timer.wrapping_sub(layout!(cfs_b_period_timer) as usize);
    let tg = cfs_b.wrapping_sub(layout!(tg_cfs_bandwidth) as usize);
    let Some(cgroup_id) = tg_cgroup_id::<false>(tg) else {
        return;
    };
    let periods = read::<i32, false>(cfs_b, layout!(cfs_b_nr_periods)).unwrap_or(0) as u32;
    let throttled = read::<i32, false>(cfs_b, layout!(cfs_b_nr_throttled)).unwrap_or(0) as u32;
    let Some(stats) = THROTTLE_STATS.get_ptr_mut(&cgroup_id) else {
        // First sight of this group: the change across this callback, if its entry was seen.
        if !entry_seen {
            return;
        }
        let first = ThrottleStats {
            nr_periods: u64::from(periods.wrapping_sub(periods0 as u32)),
            nr_throttled: u64::from(throttled.wrapping_sub(throttled0 as u32)),
            last_periods: periods,
            last_throttled: throttled,
        };
        if THROTTLE_STATS
            .insert(&cgroup_id, &first, u64::from(BPF_NOEXIST))
            .is_err()
        {
            count(counters(), counters::THROTTLE_STATS_FULL);
        }
        return;
    };
    // SAFETY: live map value. Only this group's period timer writes it (a timer's callbacks never
    // run at once); the daemon reads it concurrently, and the counters are added atomically.
    unsafe {
        // The change since the last callback seen: more than this callback's own when an earlier
        // one was missed. With this callback's entry seen, never less than its own change: a
        // seed taken at a throttle on another CPU while this callback ran is already past it.
        let mut d_periods = periods.wrapping_sub((*stats).last_periods);
        let mut d_throttled = throttled.wrapping_sub((*stats).last_throttled);
        if entry_seen {
            d_periods = d_periods.max(periods.wrapping_sub(periods0 as u32));
            d_throttled = d_throttled.max(throttled.wrapping_sub(throttled0 as u32));
        }
        let (d_periods, d_throttled) = (u64::from(d_periods), u64::from(d_throttled));
        (*stats).last_periods = periods;
        (*stats).last_throttled = throttled;
        atomic_add(&raw mut (*stats).nr_periods, d_periods);
        atomic_add(&raw mut (*stats).nr_throttled, d_throttled);
    }
}

#[inline(always)]
fn timer_exit<const DIRECT: bool>(timer: *const u8) {
    let f = timer_function::<DIRECT>(timer);
    if f == 0 {
        return;
    }
    if f == layout!(period_timer_fn) {
        period_exit(timer);
    } else if f != layout!(slack_timer_fn) {
        return;
    }
    // Tracepoint mode: episodes unthrottled by this timer on this CPU end here (a no-op when
    // none is open, as in the hook modes).
    close_unthrottled(counters(), CLOSE_TIMER);
}

#[btf_tracepoint(function = "hrtimer_expire_exit")]
pub fn throttle_timer_exit(ctx: BtfTracePointContext) -> u32 {
    timer_exit::<true>(ctx.arg(0));
    0
}

#[btf_tracepoint(function = "hrtimer_expire_exit")]
pub fn throttle_timer_exit_probe(ctx: BtfTracePointContext) -> u32 {
    timer_exit::<false>(ctx.arg(0));
    0
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
