//! The blame ledger: each CPU keeps a ring of its last slices (who ran, from when to when), and
//! a wait that ends is charged to the cgroups whose slices overlapped it (`BLAME`).
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_get_smp_processor_id};
use cgtrace_common::{
    counters::{self, Counters},
    runq::{
        BlameKey, CULPRIT_HISTORY, CULPRIT_IDLE, CULPRIT_IDLE_ELSEWHERE, CULPRIT_IRQ,
        CULPRIT_STEAL, CULPRIT_THROTTLED_ANCESTOR, CULPRIT_THROTTLED_OWN, NR_SLICES, Slice,
        SliceRing, WALK_BOUNDED, slice_frac,
    },
};

use crate::{
    helpers::{atomic_add, config},
    kernel::{rq_irq_steal, task_cpus_mask, task_nr_cpus_allowed},
    maps::{BLAME, CPU_SLICES, IDLE_SINCE, count},
};

/// The blame ledger's threshold (`u64::MAX`: off).
#[inline(always)]
pub fn blame_min_ns() -> u64 {
    config!(blame_min_ns)
}

/// At a context switch (blame ledger on): the slice the CPU ran until now goes into its ring,
/// with the share of it the run queue accounted as interrupt and steal time (read through
/// `next`, which is on this CPU's run queue), and the one of `next_cgroup` (0: idle) begins. A
/// slice of the same cgroup as the one before it (tasks of one pod handing the CPU to each other)
/// extends that one instead of taking a slot, so the ring reaches back further on a busy CPU.
/// When `idle_elsewhere` is computed, the CPU's `IDLE_SINCE` follows its idle task in and out.
///
/// `LOOP`: the programs whose walk runs in `bpf_loop` (5.18+); the others (5.10-5.17) keep no
/// interrupt or steal share and no `IDLE_SINCE` — with those reads the 5.10 verifier did not
/// finish their `sched_switch` — and the daemon reports those parts as unknown there.
#[inline(always)]
pub fn slice_switch<const DIRECT: bool, const LOOP: bool>(
    next: *const u8,
    now: u64,
    next_cgroup: u64,
) {
    let Some(ring) = CPU_SLICES.get_ptr_mut(0) else {
        return;
    };
    let (irq, steal) = if LOOP {
        rq_irq_steal::<DIRECT>(next)
    } else {
        (0, 0)
    };
    // SAFETY: per-CPU map value, only touched from this CPU with preemption off.
    unsafe {
        let start = (*ring).cur_start;
        let cgroup_id = (*ring).cur_cgroup;
        if start != 0 && now > start {
            // A slice keeps at most its last u32::MAX ns (4.3 s).
            let len = now - start;
            let (start, len) = if len > u64::from(u32::MAX) {
                (now - u64::from(u32::MAX), u64::from(u32::MAX))
            } else {
                (start, len)
            };
            let (irq_frac, steal_frac) = if LOOP {
                (
                    slice_frac(irq.wrapping_sub((*ring).cur_irq), len),
                    slice_frac(steal.wrapping_sub((*ring).cur_steal), len),
                )
            } else {
                (0, 0)
            };
            let last = ((*ring).head.wrapping_sub(1) as usize) & (NR_SLICES - 1);
            let prev = &mut (*ring).slots[last];
            let prev_len = u64::from(prev.len_ns);
            if (*ring).head != 0
                && prev.cgroup_id == cgroup_id
                && prev.start_ns + prev_len == start
                && prev_len + len <= u64::from(u32::MAX)
            {
                let total = prev_len + len;
                if LOOP && (irq_frac | prev.irq_frac | steal_frac | prev.steal_frac) != 0 {
                    prev.irq_frac = ((u64::from(prev.irq_frac) * prev_len
                        + u64::from(irq_frac) * len)
                        / total) as u16;
                    prev.steal_frac = ((u64::from(prev.steal_frac) * prev_len
                        + u64::from(steal_frac) * len)
                        / total) as u16;
                }
                prev.len_ns = total as u32;
            } else {
                let i = ((*ring).head as usize) & (NR_SLICES - 1);
                (*ring).slots[i] = Slice {
                    cgroup_id,
                    start_ns: start,
                    len_ns: len as u32,
                    irq_frac,
                    steal_frac,
                };
                (*ring).head += 1;
            }
        }
        if LOOP && config!(idle_scan_cpus) != 0 && (cgroup_id == 0) != (next_cgroup == 0) {
            let cpu = bpf_get_smp_processor_id();
            if let Some(p) = IDLE_SINCE.get_ptr_mut(cpu) {
                (*p).since_ns = if next_cgroup == 0 { now } else { 0 };
            }
        }
        (*ring).cur_cgroup = next_cgroup;
        (*ring).cur_start = now;
        if LOOP {
            (*ring).cur_irq = irq;
            (*ring).cur_steal = steal;
        }
    }
}

/// How long slice `s` overlaps the wait `[from, to]` (idle slices too).
#[inline(always)]
fn overlap(s: &Slice, from: u64, to: u64) -> u64 {
    let end = s.start_ns + u64::from(s.len_ns);
    if end <= from || s.start_ns >= to {
        return 0;
    }
    let a = if s.start_ns > from { s.start_ns } else { from };
    let b = if end < to { end } else { to };
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
    irq: u64,
    steal: u64,
}

/// Step `k` of the walk, newest slice first: charges the slice's overlap with the wait to its
/// cgroup (idle ones to [`CULPRIT_IDLE`]), less the shares the run queue accounted as interrupt
/// and steal time, which add up in the walk for [`CULPRIT_IRQ`] and [`CULPRIT_STEAL`]. False when there is no older slice that overlaps: the
/// ring is in time order, so the walk stops at the first slice that ended before the wait began
/// (a short wait reads a slot or two, not the whole ring).
/// `FRACS`: the slices carry interrupt and steal shares (the `bpf_loop` programs; the bounded
/// walk of the others stays as small as the 5.10 verifier needs).
#[inline(always)]
fn step<const FRACS: bool>(w: &mut Walk, k: u64) -> bool {
    if k >= w.head {
        return false;
    }
    let i = (w.head.wrapping_sub(1 + k) as usize) & (NR_SLICES - 1);
    // SAFETY: a per-CPU map value, only touched from this CPU with preemption off; copied out.
    let s = unsafe { (*w.ring).slots[i] };
    if s.start_ns + u64::from(s.len_ns) <= w.rest_from {
        return false;
    }
    let mut o = overlap(&s, w.rest_from, w.to);
    w.covered += o;
    if FRACS && (s.irq_frac | s.steal_frac) != 0 {
        let irq = (o * u64::from(s.irq_frac)) >> 16;
        let steal = (o * u64::from(s.steal_frac)) >> 16;
        w.irq += irq;
        w.steal += steal;
        o = o.saturating_sub(irq + steal);
    }
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
    if step::<true>(w, u64::from(k)) { 0 } else { 1 }
}

/// `idle_elsewhere`'s look at the other CPUs a waiting task may run on: what every step needs
/// (a `bpf_loop` callback gets it through its context pointer).
#[repr(C)]
struct Scan {
    mask: [u64; 8],
    cpu: u64,
    from: u64,
    to: u64,
    longest: u64,
}

/// CPU `k` of the scan: if the task may run there and it is idle, how long it has been idle
/// within the wait (the longest such stretch is kept).
extern "C" fn scan_callback(k: u32, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Scan` on the stack of `idle_elsewhere`, which waits for the loop.
    let s = unsafe { &mut *ctx.cast::<Scan>() };
    let k = u64::from(k);
    if k == s.cpu || (s.mask[((k >> 6) & 7) as usize] >> (k & 63)) & 1 == 0 {
        return 0;
    }
    let Some(v) = IDLE_SINCE.get(k as u32) else {
        return 1;
    };
    let since = v.since_ns;
    if since == 0 {
        return 0;
    }
    let from = if since > s.from { since } else { s.from };
    if s.to > from && s.to - from > s.longest {
        s.longest = s.to - from;
    }
    0
}

/// How much of the wait `[from, to]` of `task`, ending now on this CPU, another CPU it may run
/// on sat idle: of the allowed CPUs idle now, the one idle longest within the wait (a CPU that
/// went idle and woke again during the wait is not seen). 0 for a task pinned to one CPU, and
/// where the kernel cannot tell (`idle_scan_cpus` 0).
#[inline(always)]
fn idle_elsewhere<const DIRECT: bool>(task: *const u8, from: u64, to: u64) -> u64 {
    let cpus = config!(idle_scan_cpus);
    if cpus == 0 || task_nr_cpus_allowed::<DIRECT>(task) <= 1 {
        return 0;
    }
    let mut s = Scan {
        mask: [0; 8],
        // SAFETY: no preconditions.
        cpu: u64::from(unsafe { bpf_get_smp_processor_id() }),
        from,
        to,
        longest: 0,
    };
    task_cpus_mask(task, &mut s.mask);
    // SAFETY: the callback only touches `s`, which outlives the call.
    unsafe {
        aya_ebpf::helpers::generated::bpf_loop(
            cpus,
            scan_callback as *mut core::ffi::c_void,
            (&raw mut s).cast(),
            0,
        );
    }
    s.longest
}

/// Charges a wait of `victim` over `[from, to]` that ended now on this CPU: its throttled part to
/// its own quota or an ancestor's; what another allowed CPU sat idle for to
/// [`CULPRIT_IDLE_ELSEWHERE`] (with `bpf_loop` only); the rest to the cgroups whose slices on this CPU overlapped
/// `[rest_from, to]` (the victim itself: its siblings), idle slices to [`CULPRIT_IDLE`], and what
/// the walk does not reach back to to [`CULPRIT_HISTORY`], so every nanosecond of the wait is
/// charged somewhere (the slices of a CPU are contiguous from its first switch on). `rest_from`
/// is where the throttled part ended when that is known (6.18+: the unthrottle); before 6.18 it
/// is `from`, and the slices, which then also cover the throttled stretch, are scaled down to the
/// rest. The part of a wait spent queued on another CPU before a migration is charged to this
/// CPU's slices of that time. The interrupt and steal shares of those slices go to
/// [`CULPRIT_IRQ`] and [`CULPRIT_STEAL`].
///
/// `LOOP`: the walk runs in `bpf_loop` (kernels 5.18+, the programs with `prev_state`) and
/// reaches back the whole ring ([`NR_SLICES`]); else it is a bounded loop of [`WALK_BOUNDED`]
/// steps, which the verifier walks step by step (at 512 the 6.18 verifier gave up at its 1 M
/// instructions).
#[inline(always)]
pub(super) fn blame<const DIRECT: bool, const LOOP: bool>(
    c: *mut Counters,
    task: *const u8,
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
    let mut rest = (to - from).saturating_sub(throttled);
    if rest == 0 {
        return;
    }
    if LOOP {
        let idle = idle_elsewhere::<DIRECT>(task, rest_from, to).min(rest);
        add_blame(c, victim, CULPRIT_IDLE_ELSEWHERE, idle);
        rest -= idle;
        if rest == 0 {
            return;
        }
    }
    let Some(ring) = CPU_SLICES.get_ptr(0) else {
        return;
    };
    // In 1/1024ths: a product of two waits in ns would overflow. Before 6.18 the slices also
    // cover the throttled stretch (`rest_from` is `from`), and what another CPU sat idle for is
    // already charged: every charge is scaled down to the rest, so the charges add up to it
    // whatever the ring covers.
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
        irq: 0,
        steal: 0,
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
            if !step::<false>(&mut w, k) {
                break;
            }
        }
    }
    if LOOP {
        add_blame(c, victim, CULPRIT_IRQ, (w.irq * scale) >> 10);
        add_blame(c, victim, CULPRIT_STEAL, (w.steal * scale) >> 10);
    }
    add_blame(
        c,
        victim,
        CULPRIT_HISTORY,
        (span.saturating_sub(w.covered) * scale) >> 10,
    );
}
