//! The blame ledger: each CPU keeps a ring of its last slices (who ran, from when to when), and
//! a wait that ends is charged to the cgroups whose slices overlapped it (`BLAME`).
use aya_ebpf::bindings::BPF_NOEXIST;
use cgtrace_common::{
    counters::{self, Counters},
    runq::{
        BlameKey, CULPRIT_HISTORY, CULPRIT_IDLE, CULPRIT_THROTTLED_ANCESTOR, CULPRIT_THROTTLED_OWN,
        NR_SLICES, Slice, SliceRing, WALK_BOUNDED,
    },
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

/// How long slice `s` overlaps the wait `[from, to]` (idle slices too).
#[inline(always)]
fn overlap(s: &Slice, from: u64, to: u64) -> u64 {
    if s.end_ns <= from || s.start_ns >= to {
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

/// A wait's walk of its CPU's ring: what every step needs (a `bpf_loop` callback gets it through
/// its context pointer).
#[repr(C)]
struct Walk {
    c: *mut Counters,
    ring: *const SliceRing,
    head: u64,
    victim: u64,
    rest_from: u64,
    to: u64,
    scale: u64,
    covered: u64,
}

/// Step `k` of the walk, newest slice first: charges the slice's overlap with the wait to its
/// cgroup (idle ones to [`CULPRIT_IDLE`]). False when there is no older slice that overlaps: the
/// ring is in time order, so the walk stops at the first slice that ended before the wait began
/// (a short wait reads a slot or two, not the whole ring).
#[inline(always)]
fn step(w: &mut Walk, k: u64) -> bool {
    if k >= w.head {
        return false;
    }
    let i = (w.head.wrapping_sub(1 + k) as usize) & (NR_SLICES - 1);
    // SAFETY: a per-CPU map value, only touched from this CPU with preemption off; copied out.
    let s = unsafe { (*w.ring).slots[i] };
    if s.end_ns <= w.rest_from {
        return false;
    }
    let o = overlap(&s, w.rest_from, w.to);
    w.covered += o;
    let culprit = if s.cgroup_id == 0 {
        CULPRIT_IDLE
    } else {
        s.cgroup_id
    };
    add_blame(w.c, w.victim, culprit, (o * w.scale) >> 10);
    true
}

/// [`step`] as a `bpf_loop` callback (5.17+): verified once, however long the walk.
extern "C" fn step_callback(k: u32, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` on the stack of `blame`, which waits for the loop.
    let w = unsafe { &mut *ctx.cast::<Walk>() };
    if step(w, u64::from(k)) { 0 } else { 1 }
}

/// Charges a wait of `victim` over `[from, to]` that ended now on this CPU: its throttled part to
/// its own quota or an ancestor's; the rest to the cgroups whose slices on this CPU overlapped
/// `[rest_from, to]` (the victim itself: its siblings), idle slices to [`CULPRIT_IDLE`], and what
/// the walk does not reach back to to [`CULPRIT_HISTORY`], so every nanosecond of the wait is
/// charged somewhere (the slices of a CPU are contiguous from its first switch on). `rest_from`
/// is where the throttled part ended when that is known (6.18+: the unthrottle); before 6.18 it
/// is `from`, and the slices, which then also cover the throttled stretch, are scaled down to the
/// rest. The part of a wait spent queued on another CPU before a migration is charged to this
/// CPU's slices of that time.
///
/// `LOOP`: the walk runs in `bpf_loop` (kernels 5.18+, the programs with `prev_state`) and
/// reaches back the whole ring ([`NR_SLICES`]); else it is a bounded loop of [`WALK_BOUNDED`]
/// steps, which the verifier walks step by step (at 512 the 6.18 verifier gave up at its 1 M
/// instructions).
#[inline(always)]
pub(super) fn blame<const LOOP: bool>(
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
    // In 1/1024ths: a product of two waits in ns would overflow. Before 6.18 the slices also
    // cover the throttled stretch (`rest_from` is `from`): every charge is scaled down to the
    // rest, so the charges add up to it whatever the ring covers.
    let span = to - rest_from;
    let scale = if span > rest {
        (rest << 10) / span
    } else {
        1 << 10
    };
    let mut w = Walk {
        c,
        ring,
        // SAFETY: per-CPU map value.
        head: unsafe { (*ring).head },
        victim,
        rest_from,
        to,
        scale,
        covered: 0,
    };
    if LOOP {
        // SAFETY: the callback only touches `w`, which outlives the call.
        unsafe {
            aya_ebpf::helpers::generated::bpf_loop(
                NR_SLICES as u32,
                step_callback as *mut core::ffi::c_void,
                (&raw mut w).cast(),
                0,
            );
        }
    } else {
        for k in 0..WALK_BOUNDED as u64 {
            if !step(&mut w, k) {
                break;
            }
        }
    }
    add_blame(
        c,
        victim,
        CULPRIT_HISTORY,
        (span.saturating_sub(w.covered) * scale) >> 10,
    );
}
