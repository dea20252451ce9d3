//! The bandwidth timers: a group's periods and throttled periods, counted from its period
//! timer's callbacks (`hrtimer_expire_entry`/`hrtimer_expire_exit`) in every mode; and, in
//! tracepoint mode, the episodes a timer unthrottled closed at its exit.
use aya_ebpf::bindings::BPF_NOEXIST;
use cgtrace_common::{
    counters,
    event::KIND_THROTTLE_PERIOD,
    throttle::{CLOSE_TIMER, PeriodEvent, ThrottleStats},
};

use super::{cpu_episodes::close_unthrottled, tg_cgroup_id};
use crate::{
    helpers::{atomic_add, event_header, now},
    kernel::{layout, read},
    maps::{THROTTLE_PERIOD_AT, THROTTLE_STATS, THROTTLE_WATCH, count, counters, emit},
    probes::twice,
};

/// The kernel's count of the group's periods (`cfs_b->nr_periods`; 0 where unreadable).
/// `cfs_b` comes from a timer or a map, not a BTF-typed argument: always read with the helper.
#[inline(always)]
fn nr_periods(cfs_b: *const u8) -> u32 {
    read::<i32, false>(cfs_b, layout!(cfs_b_nr_periods)).unwrap_or(0) as u32
}

/// The kernel's count of the group's throttled periods (`cfs_b->nr_throttled`), as above.
#[inline(always)]
fn nr_throttled(cfs_b: *const u8) -> u32 {
    read::<i32, false>(cfs_b, layout!(cfs_b_nr_throttled)).unwrap_or(0) as u32
}

/// The bandwidth (`struct cfs_bandwidth`) and task group a period timer belongs to:
/// `container_of(timer, struct cfs_bandwidth, period_timer)`, then of the `task_group`.
#[inline(always)]
fn period_timer_owner(timer: *const u8) -> (*const u8, *const u8) {
    let cfs_b = timer.wrapping_sub(layout!(cfs_b_period_timer) as usize);
    (
        cfs_b,
        cfs_b.wrapping_sub(layout!(tg_cfs_bandwidth) as usize),
    )
}

/// At a group's throttle: if its period counters are not kept yet, start them from the kernel's
/// `nr_periods`/`nr_throttled` now, so the period-timer callback that counts this throttle is
/// counted even when it is the first one seen and its entry was missed.
#[inline(always)]
pub(super) fn seed_period_counts(tg: *const u8, cgroup_id: u64) {
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
        last_periods: nr_periods(cfs_b),
        last_throttled: nr_throttled(cfs_b),
    };
    // An entry made meanwhile by the period timer wins (NOEXIST).
    let _ = THROTTLE_STATS.insert(&cgroup_id, &seed, u64::from(BPF_NOEXIST));
}

/// The period of the group whose bandwidth is `cfs_b` (see `SliceSum::period`).
#[inline(always)]
pub(super) fn period_of(cfs_b: *const u8) -> u32 {
    nr_periods(cfs_b).wrapping_add(1)
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
    // These pointers are not BTF-typed: everything from here is read with the helper.
    let (cfs_b, tg) = period_timer_owner(timer);
    let Some(cgroup_id) = tg_cgroup_id::<false>(tg) else {
        return;
    };
    let list = cfs_b.wrapping_add(layout!(cfs_b_throttled_list) as usize);
    let next: u64 = read::<u64, false>(list, 0).unwrap_or(list as u64);
    let throttled = next != list as u64;
    // Counted at the exit, from the kernel's own counters: remember them now.
    if let Some(at) = THROTTLE_PERIOD_AT.get_ptr_mut(0) {
        let (periods, throttled_n) = (nr_periods(cfs_b), nr_throttled(cfs_b));
        // SAFETY: per-CPU slot; hrtimer callbacks do not nest on a CPU.
        unsafe { *at = [timer as u64, u64::from(periods), u64::from(throttled_n)] };
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

twice!("hrtimer_expire_entry", throttle_period, throttle_period_probe, period_entry, ctx => ctx.arg(0));

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
    let (cfs_b, tg) = period_timer_owner(timer);
    let Some(cgroup_id) = tg_cgroup_id::<false>(tg) else {
        return;
    };
    let periods = nr_periods(cfs_b);
    let throttled = nr_throttled(cfs_b);
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

twice!("hrtimer_expire_exit", throttle_timer_exit, throttle_timer_exit_probe, timer_exit, ctx => ctx.arg(0));
