//! The blame ledger: each CPU keeps a ring of its last slices (who ran, from when to when), and
//! a wait that ends is charged to the cgroups whose slices overlapped it (`BLAME`).
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_get_smp_processor_id};
use cgtrace_common::{
    counters::{self, Counters},
    runq::{
        BLAME_PARITY_SHIFT, BlameKey, CULPRIT_HISTORY, CULPRIT_IDLE, CULPRIT_IDLE_ELSEWHERE,
        CULPRIT_IRQ, CULPRIT_OLDER_OTHERS, CULPRIT_OTHER_NEIGHBOURS, CULPRIT_OTHER_TASKS,
        CULPRIT_STEAL, CULPRIT_THROTTLED_ANCESTOR, CULPRIT_THROTTLED_OWN, EPOCH_LONG_SLICE_NS,
        EPOCH_MIN_NS, EPOCH_SLICES, EPOCH_TOP, Epoch, NR_EPOCHS, NR_SLICES, SHORT_SLACK_NS,
        ShortCharge, Slice, SliceRing, WALK_BOUNDED, WALK_TOP, WalkTop, culprit_task,
        culprit_task_tgid, short_index, slice_frac,
    },
};

use crate::{
    helpers::{atomic_add, config},
    kernel::{rq_irq_steal, task_cpus_mask, task_cpus_mask_word, task_nr_cpus_allowed, task_tgid},
    maps::{BLAME, BLAME_SHORT, BLAME_WALK, CPU_SLICES, EPOCH, IDLE_SINCE, count},
};

/// The blame ledger's threshold (`u64::MAX`: off).
#[inline(always)]
pub fn blame_min_ns() -> u64 {
    config!(blame_min_ns)
}

/// The traced hierarchy's root cgroup id (0: not known): its tasks' slices are kept by process.
#[inline(always)]
fn root_cgroup_id() -> u64 {
    config!(root_cgroup_id)
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
    if LOOP {
        slice_switch_looped::<DIRECT>(next, now, next_cgroup);
    } else {
        slice_update::<DIRECT, false>(next, now, next_cgroup);
    }
}

/// [`slice_update`] of the `bpf_loop` programs as a function of its own, so what it keeps does
/// not take `sched_switch`'s stack (see [`blame_looped`]).
/// There a task of the root cgroup (a kernel thread, a host process outside any container) is
/// kept by its process, so that `kernel_us` names who it was.
#[inline(never)]
fn slice_switch_looped<const DIRECT: bool>(next: *const u8, now: u64, next_cgroup: u64) {
    let root = root_cgroup_id();
    let owner = if next_cgroup == root && root != 0 {
        task_tgid::<DIRECT>(next).map_or(next_cgroup, culprit_task)
    } else {
        next_cgroup
    };
    slice_update::<DIRECT, true>(next, now, owner);
}

/// See [`slice_switch`].
#[inline(always)]
fn slice_update<const DIRECT: bool, const LOOP: bool>(next: *const u8, now: u64, next_cgroup: u64) {
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
                if LOOP && (*ring).head >= NR_SLICES as u64 {
                    fold(ring, (*ring).slots[i]);
                }
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

/// The ring drops `old`: it goes into the newest summary of dropped slices (a new one every
/// [`EPOCH_SLICES`]).
///
/// # Safety
/// `ring` is this CPU's `CPU_SLICES` value.
#[inline(always)]
unsafe fn fold(ring: *mut SliceRing, old: Slice) {
    // SAFETY: per-CPU map value, only touched from this CPU with preemption off.
    unsafe {
        let len = u64::from(old.len_ns);
        // A long slice (an idle stretch, a task alone on the CPU) is a summary of its own, so
        // that a wait reaching into the short slices beside it is not charged its share.
        let long = len >= EPOCH_LONG_SLICE_NS;
        let mut fill = (*ring).epoch_fill;
        if long && fill != 0 {
            (*ring).epoch_head += 1;
            fill = 0;
        }
        let e = &mut (*ring).epochs[((*ring).epoch_head as usize) & (NR_EPOCHS - 1)];
        if fill == 0 {
            // Field by field: a whole `Epoch` built first takes 144 bytes of the program's stack.
            e.start_ns = old.start_ns;
            e.ns.fill(0);
        }
        e.end_ns = old.start_ns + len;
        let mut least = 0;
        let mut done = false;
        for j in 0..EPOCH_TOP {
            if e.ns[j] == 0 || e.cgroup[j] == old.cgroup_id {
                e.cgroup[j] = old.cgroup_id;
                e.ns[j] += len;
                done = true;
                break;
            }
            if e.ns[j] < e.ns[least] {
                least = j;
            }
        }
        if !done && e.ns[least] < len {
            e.cgroup[least] = old.cgroup_id;
            e.ns[least] = len;
        }
        if long || (fill + 1 >= EPOCH_SLICES && e.end_ns.saturating_sub(e.start_ns) >= EPOCH_MIN_NS)
        {
            (*ring).epoch_head += 1;
            (*ring).epoch_fill = 0;
        } else {
            (*ring).epoch_fill = fill + 1;
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

/// Adds `ns` of `victim`'s wait (with its window's parity: [`BLAME_PARITY_SHIFT`]) to `culprit`
/// in `BLAME`.
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

/// The current window's parity (`EPOCH & 1`): which half of `BLAME` a wait's charges go to.
#[inline(always)]
fn window_parity() -> u64 {
    EPOCH.get(0).copied().unwrap_or(0) & 1
}

/// A wait of `victim` over `[from, to]` shorter than `--blame-min-us`, ended now on this CPU
/// with nothing of it throttled (`bpf_loop` programs): when it lies within the slice the CPU ran
/// last (the one that ended at this switch: a task woken while another ran, switched in when
/// that one stopped; [`SHORT_SLACK_NS`] of slack), it is charged to that slice's owner — its
/// interrupt and steal shares beside — in the pair's entry of `BLAME_SHORT`, with no walk, no
/// look at other CPUs and no hash update while the entry holds the same pair. False when it does
/// not lie within that slice: the caller walks the ring as for a long wait.
///
/// Inlined: it runs at most switches, and as a BPF function of its own its call and return
/// cost ~6 ns of `sched_switch`'s ~300 on 6.18 here (`sched_switch_probe`'s body is then one
/// function LLVM keeps apart, as it already did `sched_switch_noprevstate_probe`'s).
/// [`slice_switch_looped`] stays apart: inlined, its 176 bytes of stack took `sched_switch` to
/// 384, over 512 with `slice_out`'s 192.
#[inline(always)]
pub(super) fn blame_short(c: *mut Counters, victim: u64, from: u64, to: u64) -> bool {
    let Some(ring) = CPU_SLICES.get_ptr(0) else {
        return true;
    };
    // SAFETY: per-CPU map value, only touched from this CPU with preemption off; copied out.
    let s = unsafe {
        let head = (*ring).head;
        if head == 0 {
            return false;
        }
        (*ring).slots[(head.wrapping_sub(1) as usize) & (NR_SLICES - 1)]
    };
    if from + SHORT_SLACK_NS < s.start_ns || s.start_ns + u64::from(s.len_ns) < to {
        return false;
    }
    let epoch = EPOCH.get(0).copied().unwrap_or(0);
    let Some(half) = BLAME_SHORT.get_ptr_mut((epoch & 1) as u32) else {
        return true;
    };
    let culprit = if s.cgroup_id == 0 {
        CULPRIT_IDLE
    } else {
        s.cgroup_id
    };
    let mut o = to - from;
    let (mut irq, mut steal) = (0, 0);
    if (s.irq_frac | s.steal_frac) != 0 {
        irq = (o * u64::from(s.irq_frac)) >> 16;
        steal = (o * u64::from(s.steal_frac)) >> 16;
        o = o.saturating_sub(irq + steal);
    }
    // SAFETY: per-CPU map value, only touched from this CPU with preemption off.
    let e: &mut ShortCharge = unsafe { &mut (*half).entries[short_index(victim, culprit)] };
    if e.epoch == epoch {
        if e.victim == victim && e.culprit == culprit {
            e.ns += o;
            e.irq_ns += irq;
            e.steal_ns += steal;
            return true;
        }
        // Another pair of this window: its sums go to `BLAME`.
        let v = e.victim | (epoch & 1) << BLAME_PARITY_SHIFT;
        add_blame(c, v, e.culprit, e.ns);
        add_blame(c, v, CULPRIT_IRQ, e.irq_ns);
        add_blame(c, v, CULPRIT_STEAL, e.steal_ns);
    }
    *e = ShortCharge {
        victim,
        culprit,
        epoch,
        ns: o,
        irq_ns: irq,
        steal_ns: steal,
    };
    true
}

/// A wait's walk of its CPU's ring: what every step needs (a `bpf_loop` callback gets it through
/// its context pointer).
#[repr(C)]
struct Walk {
    c: *mut Counters,
    ring: *const SliceRing,
    /// This CPU's `BLAME_WALK` (the `bpf_loop` walk; null in the bounded one, which charges
    /// `BLAME` slice by slice).
    top: *mut WalkTop,
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
    if FRACS {
        note(w, culprit, (o * w.scale) >> 10);
    } else {
        add_blame(w.c, w.victim, culprit, (o * w.scale) >> 10);
    }
    true
}

/// Adds `ns` held by `culprit` to the walked wait's [`WalkTop`]: the victim's own cgroup and the
/// idle CPU in parts of their own; another culprit in its entry (by a hash of it: no search, so
/// no loop for the verifier to walk at each slice), which it takes when free or held by less
/// than `ns`. What does not stay named — the entry's old holder, or `ns` — goes to the other
/// cgroups or the other root-cgroup tasks.
#[inline(always)]
fn note(w: &mut Walk, culprit: u64, ns: u64) {
    if ns == 0 {
        return;
    }
    let t = w.top;
    // SAFETY: this CPU's `BLAME_WALK` value, only touched from this CPU with preemption off.
    unsafe {
        if culprit == w.victim & !(1 << BLAME_PARITY_SHIFT) {
            (*t).siblings += ns;
            return;
        }
        if culprit == CULPRIT_IDLE {
            (*t).idle += ns;
            return;
        }
        let j = walk_index(culprit);
        let (held_by, held) = ((*t).culprit[j], (*t).ns[j]);
        if held == 0 {
            (*t).culprit[j] = culprit;
            (*t).ns[j] = ns;
            (*t).used[((*t).n as usize) & (WALK_TOP - 1)] = j as u8;
            (*t).n += 1;
            return;
        }
        if held_by == culprit {
            (*t).ns[j] = held + ns;
            return;
        }
        let (out, out_ns) = if held < ns {
            (*t).culprit[j] = culprit;
            (*t).ns[j] = ns;
            (held_by, held)
        } else {
            (culprit, ns)
        };
        if culprit_task_tgid(out).is_some() {
            (*t).other_tasks += out_ns;
        } else {
            (*t).other_cgroups += out_ns;
        }
    }
}

/// The entry of `culprit` in a [`WalkTop`].
#[inline(always)]
fn walk_index(culprit: u64) -> usize {
    (culprit.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize & (WALK_TOP - 1)
}

/// The `k`th entry the walked wait used into `BLAME`, and freed (a `bpf_loop` callback:
/// verified once).
extern "C" fn flush_callback(k: u32, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` on the stack of `charge_wait`, which waits for the loop.
    let w = unsafe { &*ctx.cast::<Walk>() };
    let t = w.top;
    // SAFETY: as in `note`.
    unsafe {
        let j = (*t).used[k as usize & (WALK_TOP - 1)] as usize & (WALK_TOP - 1);
        add_blame(w.c, w.victim, (*t).culprit[j], (*t).ns[j]);
        (*t).ns[j] = 0;
    }
    0
}

/// The walked wait's [`WalkTop`] into `BLAME`: at most [`WALK_TOP`] culprits and four parts.
#[inline(always)]
fn flush(w: &mut Walk) {
    let t = w.top;
    let victim_id = w.victim & !(1 << BLAME_PARITY_SHIFT);
    // SAFETY: as in `note`.
    let n = unsafe { (*t).n };
    // SAFETY: the callback only reads `w`, which outlives the call.
    unsafe {
        aya_ebpf::helpers::generated::bpf_loop(
            n.min(WALK_TOP as u64) as u32,
            flush_callback as *mut core::ffi::c_void,
            (&raw mut *w).cast(),
            0,
        );
    }
    // SAFETY: as in `note`.
    let (siblings, idle, other_cgroups, other_tasks) = unsafe {
        (
            (*t).siblings,
            (*t).idle,
            (*t).other_cgroups,
            (*t).other_tasks,
        )
    };
    add_blame(w.c, w.victim, victim_id, siblings);
    add_blame(w.c, w.victim, CULPRIT_IDLE, idle);
    add_blame(w.c, w.victim, CULPRIT_OTHER_NEIGHBOURS, other_cgroups);
    add_blame(w.c, w.victim, CULPRIT_OTHER_TASKS, other_tasks);
}

/// [`step`] as a `bpf_loop` callback (5.17+): verified once, however long the walk.
extern "C" fn step_callback(k: u32, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` on the stack of `blame`, which waits for the loop.
    let w = unsafe { &mut *ctx.cast::<Walk>() };
    if step::<true>(w, u64::from(k)) { 0 } else { 1 }
}

/// Step `k` of the walk through the summaries of dropped slices, newest first (after the ring,
/// all of which the wait outlasted): each summary's overlap with the wait is charged to its
/// cgroups in proportion to their time in it. False when there is no older summary that
/// overlaps.
extern "C" fn epoch_callback(k: u32, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` on the stack of `blame`, which waits for the loop.
    let w = unsafe { &mut *ctx.cast::<Walk>() };
    let k = u64::from(k);
    // SAFETY: a per-CPU map value, only touched from this CPU with preemption off.
    let (epoch_head, fill) = unsafe { ((*w.ring).epoch_head, (*w.ring).epoch_fill) };
    // The newest summary while it fills, then the full ones before it.
    let back = if fill == 0 { k + 1 } else { k };
    if back > epoch_head || back >= NR_EPOCHS as u64 {
        return 1;
    }
    let i = (epoch_head.wrapping_sub(back) as usize) & (NR_EPOCHS - 1);
    // Read in place (a copy would take 144 bytes of the callback's stack, which 6.1 counts with
    // the program's own).
    // SAFETY: as above.
    let e: *const Epoch = unsafe { &raw const (*w.ring).epochs[i] };
    let (start, end) = unsafe { ((*e).start_ns, (*e).end_ns) };
    if end <= w.rest_from || end <= start {
        return 1;
    }
    let a = if start > w.rest_from {
        start
    } else {
        w.rest_from
    };
    let b = if end < w.to { end } else { w.to };
    if b <= a {
        return 0;
    }
    let o = b - a;
    let len = ((end - start) >> 10).max(1);
    let mut named = 0;
    for j in 0..EPOCH_TOP {
        // SAFETY: as above.
        let (ns, cgroup) = unsafe { ((*e).ns[j], (*e).cgroup[j]) };
        if ns != 0 {
            let part = o * (ns >> 10) / len;
            let part = if part > o - named { o - named } else { part };
            named += part;
            let culprit = if cgroup == 0 { CULPRIT_IDLE } else { cgroup };
            add_blame(w.c, w.victim, culprit, (part * w.scale) >> 10);
        }
    }
    // The summary's time it does not name: other cgroups, or the kernel.
    add_blame(
        w.c,
        w.victim,
        CULPRIT_OLDER_OTHERS,
        ((o - named) * w.scale) >> 10,
    );
    w.covered += o;
    0
}

/// `idle_elsewhere`'s look at the other CPUs a waiting task may run on: what every step needs
/// (a `bpf_loop` callback gets it through its context pointer).
#[repr(C)]
struct Scan {
    /// The task's `cpus_mask`, and the word of it read last (`word_at`: its index + 1, 0: none).
    mask: *const u8,
    word: u64,
    word_at: u64,
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
    if (k >> 6) + 1 != s.word_at {
        s.word = task_cpus_mask_word(s.mask, k >> 6);
        s.word_at = (k >> 6) + 1;
    }
    if k == s.cpu || (s.word >> (k & 63)) & 1 == 0 {
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
        mask: task_cpus_mask(task),
        word: 0,
        word_at: 0,
        // SAFETY: no preconditions.
        cpu: u64::from(unsafe { bpf_get_smp_processor_id() }),
        from,
        to,
        longest: 0,
    };
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
    let charge = Charge {
        victim,
        from,
        rest_from,
        to,
        throttled,
        own: u64::from(own),
    };
    if LOOP {
        blame_looped::<DIRECT>(c, task, &charge);
    } else {
        charge_wait::<DIRECT, false>(c, task, &charge);
    }
}

/// A wait to charge, as [`blame`] was given it (one pointer for a BPF call's five arguments).
#[repr(C)]
struct Charge {
    victim: u64,
    from: u64,
    rest_from: u64,
    to: u64,
    throttled: u64,
    own: u64,
}

/// [`charge_wait`] of the `bpf_loop` programs as a function of its own: its walk state then
/// takes the stack of this call, not of `sched_switch`, which already calls the throttle
/// family's `slice_out` (6.1 refuses a combined stack over 512 bytes).
#[inline(never)]
fn blame_looped<const DIRECT: bool>(c: *mut Counters, task: *const u8, charge: &Charge) {
    charge_wait::<DIRECT, true>(c, task, charge);
}

/// See [`blame`].
#[inline(always)]
fn charge_wait<const DIRECT: bool, const LOOP: bool>(
    c: *mut Counters,
    task: *const u8,
    charge: &Charge,
) {
    let (from, rest_from, to) = (charge.from, charge.rest_from, charge.to);
    // The window's half of `BLAME` in the victim's top bit (a cgroup id never has it).
    let victim = charge.victim | window_parity() << BLAME_PARITY_SHIFT;
    let (throttled, own) = (charge.throttled, charge.own != 0);
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
    let top = if LOOP {
        let Some(top) = BLAME_WALK.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's value, only touched from this CPU with preemption off. An entry
        // is free while its `ns` is 0 (its `culprit` is then never read); the last walk's flush
        // freed every entry it used.
        unsafe {
            (*top).n = 0;
            (*top).siblings = 0;
            (*top).idle = 0;
            (*top).other_cgroups = 0;
            (*top).other_tasks = 0;
        }
        top
    } else {
        core::ptr::null_mut()
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
        top,
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
        // The wait outlasted the ring (which has dropped slices): the summaries of those.
        let oldest = w.head.saturating_sub(NR_SLICES as u64);
        if w.head > NR_SLICES as u64 && w.covered < span {
            // SAFETY: per-CPU map value; the slot of the oldest slice the ring holds.
            let s = unsafe { (*ring).slots[(oldest as usize) & (NR_SLICES - 1)] };
            if s.start_ns > rest_from {
                // SAFETY: as above.
                unsafe {
                    aya_ebpf::helpers::generated::bpf_loop(
                        NR_EPOCHS as u32,
                        epoch_callback as *mut core::ffi::c_void,
                        (&raw mut w).cast(),
                        0,
                    );
                }
            }
        }
    } else {
        for k in 0..WALK_BOUNDED as u64 {
            if !step::<false>(&mut w, k) {
                break;
            }
        }
    }
    if LOOP {
        flush(&mut w);
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
