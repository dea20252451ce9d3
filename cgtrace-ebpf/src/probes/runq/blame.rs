//! The blame ledger: each CPU keeps a ring of its last slices (who ran, from when to when), and
//! a wait that ends is charged to the cgroups whose slices overlapped it (`BLAME`).
use aya_ebpf::bindings::BPF_NOEXIST;
use cgtrace_common::{
    counters::{self, Counters},
    runq::{BlameKey, CULPRIT_THROTTLED_ANCESTOR, CULPRIT_THROTTLED_OWN, NR_SLICES, Slice},
};

use crate::{
    helpers::{atomic_add, config},
    maps::{BLAME, CPU_SLICES, count},
};

/// The blame ledger's threshold (`u64::MAX`: off).
#[inline(always)]
pub fn blame_min_ns() -> u64 {
    config!(blame_min_ns)
}

/// At a context switch (blame ledger on): the slice the CPU ran until now goes into its ring,
/// and the one of `next_cgroup` (0: idle) begins. A slice of the same cgroup as the one before it
/// (tasks of one pod handing the CPU to each other) extends that one instead of taking a slot,
/// so the ring reaches back further on a busy CPU.
#[inline(always)]
pub fn slice_switch(now: u64, next_cgroup: u64) {
    let Some(ring) = CPU_SLICES.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU map value, only touched from this CPU with preemption off.
    unsafe {
        let start = (*ring).cur_start;
        if start != 0 && now > start {
            let cgroup_id = (*ring).cur_cgroup;
            let last = ((*ring).head.wrapping_sub(1) as usize) & (NR_SLICES - 1);
            let prev = &mut (*ring).slots[last];
            if (*ring).head != 0 && prev.cgroup_id == cgroup_id && prev.end_ns == start {
                prev.end_ns = now;
            } else {
                let i = ((*ring).head as usize) & (NR_SLICES - 1);
                (*ring).slots[i] = Slice {
                    cgroup_id,
                    start_ns: start,
                    end_ns: now,
                };
                (*ring).head += 1;
            }
        }
        (*ring).cur_cgroup = next_cgroup;
        (*ring).cur_start = now;
    }
}

/// How long slice `s` overlaps the wait `[from, to]` (0 for idle slices).
#[inline(always)]
fn overlap(s: &Slice, from: u64, to: u64) -> u64 {
    if s.cgroup_id == 0 || s.end_ns <= from || s.start_ns >= to {
        return 0;
    }
    let a = if s.start_ns > from { s.start_ns } else { from };
    let b = if s.end_ns < to { s.end_ns } else { to };
    b.saturating_sub(a)
}

/// Adds `ns` of `victim`'s wait to `culprit` in `BLAME`.
#[inline(always)]
fn add_blame(c: *mut Counters, victim: u64, culprit: u64, ns: u64) {
    if ns == 0 {
        return;
    }
    let key = BlameKey { victim, culprit };
    let p = match BLAME.get_ptr_mut(&key) {
        Some(p) => p,
        None => {
            let _ = BLAME.insert(&key, &0, u64::from(BPF_NOEXIST));
            match BLAME.get_ptr_mut(&key) {
                Some(p) => p,
                None => {
                    count(c, counters::BLAME_FULL);
                    return;
                }
            }
        }
    };
    // SAFETY: a live map value; several CPUs may charge the same pair at once.
    unsafe { atomic_add(p, ns) };
}

/// Charges a wait of `victim` over `[from, to]` that ended now on this CPU: its throttled part to
/// its own quota or an ancestor's; the rest to the cgroups whose slices on this CPU overlapped
/// `[rest_from, to]` (the victim itself: its siblings). `rest_from` is where the throttled part
/// ended when that is known (6.18+: the unthrottle); before 6.18 it is `from`, and the slices,
/// which then also cover the throttled stretch, are scaled down to the rest. What no slice covers
/// (older than the ring, idle, or spent queued on another CPU before a migration) stays
/// unattributed: the daemon reports wait − charged.
#[inline(always)]
pub(super) fn blame(
    c: *mut Counters,
    victim: u64,
    (from, rest_from, to): (u64, u64, u64),
    throttled: u64,
    own: bool,
) {
    let culprit = if own {
        CULPRIT_THROTTLED_OWN
    } else {
        CULPRIT_THROTTLED_ANCESTOR
    };
    add_blame(c, victim, culprit, throttled);
    let rest = (to - from).saturating_sub(throttled);
    if rest == 0 {
        return;
    }
    let Some(ring) = CPU_SLICES.get_ptr(0) else {
        return;
    };
    // Newest first; the ring is in time order, so the walk stops at the first slice that ended
    // before the wait began (a short wait reads a slot or two, not the whole ring).
    // SAFETY: per-CPU map value.
    let head = unsafe { (*ring).head };
    let slot = |k: usize| -> Option<Slice> {
        if k as u64 >= head {
            return None;
        }
        let i = (head.wrapping_sub(1 + k as u64) as usize) & (NR_SLICES - 1);
        // SAFETY: as above; copied out.
        let s = unsafe { (*ring).slots[i] };
        (s.end_ns > rest_from).then_some(s)
    };
    let mut total = 0u64;
    for k in 0..NR_SLICES {
        let Some(s) = slot(k) else {
            break;
        };
        total += overlap(&s, rest_from, to);
    }
    if total == 0 {
        return;
    }
    // In 1/1024ths: a product of two waits in ns would overflow.
    let scale = if total > rest {
        (rest << 10) / total
    } else {
        1 << 10
    };
    for k in 0..NR_SLICES {
        let Some(s) = slot(k) else {
            break;
        };
        let o = overlap(&s, rest_from, to);
        if o > 0 {
            add_blame(c, victim, s.cgroup_id, (o * scale) >> 10);
        }
    }
}
