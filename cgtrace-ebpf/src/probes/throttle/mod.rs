//! `throttle`: CFS bandwidth throttle episodes, periods, and who burned the quota (see
//! `cgtrace_common::throttle` for the design).
//!
//! Episodes are opened and closed in one of two ways, chosen by the loader (`THROTTLE_MODE`):
//! - tracepoint mode (`cpu_episodes.rs`): from `sched_switch`, when a task is switched out into a
//!   throttled hierarchy; closed by the bandwidth timer, the unthrottle CSD, or late at a switch;
//! - hook modes (`hooks.rs`): fentry/fexit or kprobes on `throttle_cfs_rq`/`unthrottle_cfs_rq`
//!   (or on the `tg_throttle_down`/`tg_unthrottle_up` walks).
//!
//! In every mode `periods.rs` counts the group's periods from its period timer, and `slices.rs`
//! sums the slices of a throttled group's threads. This file: what those share.
mod cpu_episodes;
mod hooks;
mod periods;
mod slices;

use cgtrace_common::throttle::WATCH_NS;

use crate::{
    kernel::{layout, read},
    maps::{THROTTLE_WATCH, THROTTLE_WATCH_UNTIL},
};

pub use cpu_episodes::{close_late, switched_out_runnable};
pub use slices::slice_out;

/// Whether `cfs_rq->throttled` is set (a bitfield on 6.18, an `int` before).
#[inline(always)]
fn cfs_rq_throttled<const DIRECT: bool>(cfs_rq: *const u8) -> bool {
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

/// The task group of `cfs_rq` (`cfs_rq->tg`; null where it cannot be read).
#[inline(always)]
fn cfs_rq_tg<const DIRECT: bool>(cfs_rq: *const u8) -> *const u8 {
    read::<_, DIRECT>(cfs_rq, layout!(cfs_rq_tg)).unwrap_or(core::ptr::null())
}

/// `kernfs_node.id` of a task group's cgroup (`tg->css.cgroup->kn->id`).
#[inline(always)]
fn tg_cgroup_id<const DIRECT: bool>(tg: *const u8) -> Option<u64> {
    let off = layout!(tg_css).wrapping_add(layout!(css_cgroup));
    let cgrp: *const u8 = read::<_, DIRECT>(tg, off)?;
    let kn: *const u8 = read::<_, DIRECT>(cgrp, layout!(cgroup_kn))?;
    read::<u64, DIRECT>(kn, layout!(kn_id))
}

/// A group's episode opened at `now`: its threads' slices are summed for `WATCH_NS` from now.
/// The end is also raised in `THROTTLE_WATCH_UNTIL` (a plain store: two CPUs opening episodes at
/// the same instant can leave the earlier end, nanoseconds before the other).
#[inline(always)]
fn watch(cgroup_id: u64, now: u64) {
    let until = now + WATCH_NS;
    let _ = THROTTLE_WATCH.insert(&cgroup_id, &until, 0);
    if let Some(p) = THROTTLE_WATCH_UNTIL.get_ptr_mut(0) {
        // SAFETY: a live map value.
        unsafe {
            if *p < until {
                *p = until;
            }
        }
    }
}

/// Whether any group is watched at `now` (see [`watch`]): else a switched-out task's slice
/// belongs to no watched group, and [`slice_out`] is not called.
#[inline(always)]
pub fn watching(now: u64) -> bool {
    THROTTLE_WATCH_UNTIL
        .get(0)
        .is_some_and(|&until| now <= until)
}
