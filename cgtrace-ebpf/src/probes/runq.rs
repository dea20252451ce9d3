//! `runq`: run-queue latency per cgroup and wait kind.
//!
//! A wait starts at `sched_wakeup`/`sched_wakeup_new` (kind wakeup) or when a task is switched out
//! still runnable (kind preempt: `prev_state == TASK_RUNNING`, or the `preempt` flag set — not the
//! flag alone, which is 0 for most involuntary preemptions on preempt=none kernels, while a task
//! preempted on its way to sleep on preempt=full kernels has a sleeping state but stays queued).
//! It ends when the task is switched in, and is charged to that task's cgroup — the task that
//! waited, never `current`.
//!
//! The programs are in `sched.rs` (one `sched_switch`, one `sched_wakeup` entry for every
//! family); these are the run-queue parts they call.
use aya_ebpf::bindings::BPF_NOEXIST;
use cgtrace_common::{
    counters::{self, Counters},
    event::KIND_RUNQ_WAIT,
    layout::{ABSENT, THR_CLOCK_NONE},
    runq::{
        BlameKey, CULPRIT_THROTTLED_ANCESTOR, CULPRIT_THROTTLED_OWN, NR_SLICES, NR_WAIT_KINDS,
        RunqEvent, RunqHist, RunqKey, RunqSlot, RunqStart, Slice, SwitchOut, WaitKind,
    },
};

use crate::{
    helpers::{atomic_add, bucket_index, config, event_header},
    kernel::{
        RqClock, layout, read, read_unchecked, task_cgroup_id, task_comm, task_nivcsw,
        task_rq_clock, task_tgid,
    },
    maps::{
        BLAME, CPU_SLICES, EPOCH, RUNQ_FREE_SLOTS, RUNQ_HIST, RUNQ_SLOT_OF, RUNQ_SLOTS, RUNQ_START,
        RUNQ_START_TASK, THROTTLE_LAST_CLOSE, ZERO_HIST, count, emit,
    },
};

/// A wait of `pid` (`task`) starts now, on the run queue `rq`.
#[inline(always)]
pub fn start_wait<const DIRECT: bool>(
    c: *mut Counters,
    task: *const u8,
    pid: u32,
    kind: WaitKind,
    now: u64,
    rq: RqClock,
    throttle_cfs_rq: u64,
) {
    let (leaf_cfs_rq, thr_clock) = thr_clock_of_task::<DIRECT>(task);
    if task_storage() {
        let p = RUNQ_START_TASK.get(task, true);
        if p.is_null() {
            count(c, counters::RUNQ_START_FULL);
            return;
        }
        // SAFETY: the task's own storage value, written under the rq lock that serializes this
        // task's wakeup, switch-out and switch-in. Field by field, the slot cache left as it is:
        // a whole-struct store became a byte-wise memmove call the verifier refuses (a partial
        // fill of a spilled register).
        unsafe {
            (*p).ts_ns = now;
            (*p).kind = kind as u32;
            (*p).throttle_cfs_rq = throttle_cfs_rq;
            (*p).leaf_cfs_rq = leaf_cfs_rq;
            (*p).thr_clock = thr_clock;
            (*p).rq_cpu = rq.cpu as u32;
            (*p).rq_clock_lo = rq.clock as u32;
        }
        return;
    }
    let start = RunqStart::new(now, kind as u32, throttle_cfs_rq, leaf_cfs_rq, thr_clock)
        .on_rq(rq.cpu as u32, rq.clock as u32);
    if RUNQ_START.insert(&pid, &start, 0).is_err() {
        count(c, counters::RUNQ_START_FULL);
    }
}

/// Whether wait starts are kept in task-local storage (else in the `RUNQ_START` hash).
#[inline(always)]
fn task_storage() -> bool {
    config!(runq_start_task) != 0
}

/// Takes the open wait start of `task` (`pid`), if any, with the task's storage (null: the
/// hash is used).
#[inline(always)]
fn take_start(task: *const u8, pid: u32) -> Option<(RunqStart, *mut RunqStart)> {
    if task_storage() {
        let p = RUNQ_START_TASK.get(task, false);
        if p.is_null() {
            return None;
        }
        // SAFETY: as in `start_wait`; copied out, then marked closed.
        unsafe {
            let ts_ns = (*p).ts_ns;
            if ts_ns == 0 {
                return None;
            }
            (*p).ts_ns = 0;
            let start = RunqStart::new(
                ts_ns,
                (*p).kind,
                (*p).throttle_cfs_rq,
                (*p).leaf_cfs_rq,
                (*p).thr_clock,
            )
            .on_rq((*p).rq_cpu, (*p).rq_clock_lo);
            Some((start, p))
        }
    } else {
        // SAFETY: the value is copied out before the entry is removed.
        let start = (unsafe { RUNQ_START.get(&pid) }).copied()?;
        let _ = RUNQ_START.remove(&pid);
        Some((start, core::ptr::null_mut()))
    }
}

/// Kernels before task-based throttling (6.18) dequeue a whole group at throttle: its queued
/// tasks keep waiting under their wakeup or preempt stamp. The kernel keeps, per `cfs_rq`, a
/// clock of the time it spent in a throttled hierarchy (`LAYOUT.cfs_rq_thr_clock_time`); its
/// advance over a wait is the wait's throttled part. Returns the task's own `cfs_rq` and that
/// clock now, `(0, 0)` where the split is off (6.18+: the switch-out marks throttled waits).
#[inline(always)]
fn thr_clock_of_task<const DIRECT: bool>(task: *const u8) -> (u64, u64) {
    if layout!(thr_clock_kind) == THR_CLOCK_NONE {
        return (0, 0);
    }
    match read::<*const u8, DIRECT>(task, layout!(task_se_cfs_rq)) {
        Some(cfs_rq) if !cfs_rq.is_null() => (cfs_rq as u64, thr_clock::<DIRECT>(cfs_rq)),
        _ => (0, 0),
    }
}

/// The kernel's throttled clock of `cfs_rq` now: the closed intervals' total, plus the open one
/// while its hierarchy is throttled (measured against its `rq`'s clock, which the scheduler has
/// just updated wherever this is called).
#[inline(always)]
pub fn thr_clock<const DIRECT: bool>(cfs_rq: *const u8) -> u64 {
    let total = read::<u64, DIRECT>(cfs_rq, layout!(cfs_rq_thr_clock_time)).unwrap_or(0);
    if read::<i32, DIRECT>(cfs_rq, layout!(cfs_rq_throttle_count)).unwrap_or(0) <= 0 {
        return total;
    }
    let since = read::<u64, DIRECT>(cfs_rq, layout!(cfs_rq_thr_clock)).unwrap_or(0);
    if since == 0 {
        return total;
    }
    let Some(rq) = read::<*const u8, DIRECT>(cfs_rq, layout!(cfs_rq_rq)) else {
        return total;
    };
    let mut clock = read::<u64, DIRECT>(rq, layout!(rq_thr_clock)).unwrap_or(0);
    if layout!(rq_thr_clock_sub) != ABSENT {
        clock = clock.wrapping_sub(read::<u64, DIRECT>(rq, layout!(rq_thr_clock_sub)).unwrap_or(0));
    }
    total + clock.saturating_sub(since)
}

/// How much of the wait that began at `start` was spent throttled, by the advance of the
/// throttled clock of the `cfs_rq` it began on (read through the helper when `next` has moved
/// to another CPU or group meanwhile: that pointer is no longer the typed one).
#[inline(always)]
fn throttled_part<const DIRECT: bool>(next: *const u8, start: &RunqStart) -> u64 {
    let clock = match read::<*const u8, DIRECT>(next, layout!(task_se_cfs_rq)) {
        Some(cfs_rq) if cfs_rq as u64 == start.leaf_cfs_rq => thr_clock::<DIRECT>(cfs_rq),
        _ => thr_clock::<false>(start.leaf_cfs_rq as *const u8),
    };
    clock.saturating_sub(start.thr_clock)
}

/// Whether a wait's throttled part was the task's own group's quota: 6.18+, the throttled
/// `cfs_rq` it was switched out under is its own; before, its own group has a quota (when an
/// ancestor has one too, the clock cannot tell which level ran out: charged as its own).
#[inline(always)]
fn own_quota<const DIRECT: bool>(next: *const u8, start: &RunqStart) -> bool {
    let Some(cfs_rq) = read::<*const u8, DIRECT>(next, layout!(task_se_cfs_rq)) else {
        return true;
    };
    if start.leaf_cfs_rq == 0 {
        return start.throttle_cfs_rq == cfs_rq as u64;
    }
    read::<i32, DIRECT>(cfs_rq, layout!(cfs_rq_runtime_enabled)).unwrap_or(1) != 0
}

/// A task switched out ([`SwitchOut`]): still queued, its wait starts (`throttled_cfs_rq`: the
/// throttled `cfs_rq` above it, when its hierarchy is throttled); exiting, a wait it may have left
/// open (woken while still running) goes.
#[inline(always)]
pub fn switched_out<const DIRECT: bool, const STAMPS: bool>(
    c: *mut Counters,
    task: *const u8,
    pid: u32,
    out: SwitchOut,
    now: u64,
    rq: RqClock,
    throttled_cfs_rq: Option<u64>,
) {
    if STAMPS {
        // The kernel stamps the wait itself; only a switch-out into a throttled hierarchy is
        // marked, with the switch count that identifies it at the switch-in.
        if let (SwitchOut::Queued, Some(cfs_rq)) = (out, throttled_cfs_rq) {
            let p = RUNQ_START_TASK.get(task, true);
            if p.is_null() {
                count(c, counters::RUNQ_START_FULL);
                return;
            }
            // SAFETY: the task's own storage value (see `start_wait`).
            unsafe {
                (*p).throttle_cfs_rq = cfs_rq;
                // The mark: the low half of nivcsw after this switch-out (see `RunqStart`).
                (*p).rq_clock_lo = task_nivcsw::<DIRECT>(task) as u32;
            }
        }
        return;
    }
    match out {
        // Replaces any older stamp (a wakeup that came while it still ran).
        SwitchOut::Queued => match throttled_cfs_rq {
            Some(cfs_rq) => {
                start_wait::<DIRECT>(c, task, pid, WaitKind::Throttled, now, rq, cfs_rq)
            }
            None => start_wait::<DIRECT>(c, task, pid, WaitKind::Preempt, now, rq, 0),
        },
        // A task woken while still running can exit with a wait recorded that never ends (task
        // storage goes with the task).
        SwitchOut::Exited => {
            if !task_storage() {
                let _ = RUNQ_START.remove(&pid);
            }
        }
        SwitchOut::Sleeps => {}
    }
}

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
fn blame(
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

/// `next` is switched in: its wait, if any, ends now and is charged to its cgroup
/// (`known_cgroup`: already read for the slice ring). `STAMPS`: the wait is read from the
/// kernel's own stamps (the `sched_switch_stamps` programs, 6.18+), not from a start of ours.
#[inline(always)]
pub fn end_wait<const DIRECT: bool, const STAMPS: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
    rq: RqClock,
    known_cgroup: Option<u64>,
) {
    if STAMPS {
        end_wait_sched_info::<DIRECT>(c, next, pid, now, known_cgroup);
        return;
    }
    let Some((mut start, storage)) = take_start(next, pid) else {
        return;
    };
    if now < start.ts_ns {
        return;
    }
    // In the run queue's clock when the wait began on this CPU's run queue (the kernel's own
    // clock of run-queue waits, see `RunqStart::rq_cpu`), else in ktime; from here on the start
    // is where that wait began as ktime sees it.
    start.ts_ns = now - start.wait_ns(now, rq.cpu as u32, rq.clock);
    charge::<DIRECT>(c, next, pid, now, known_cgroup, &start, storage);
}

/// `next` is switched in, waits read from the kernel's own stamps: `sched_switch` runs before
/// `sched_info_switch`, so `next`'s `sched_info.run_delay` does not have the ending wait yet and
/// `last_queued` is when its last queued stretch began (in `rq.clock`, which the scheduler
/// updated for this switch). The wait is everything `run_delay` will have gained since the
/// task's previous switch-in — the stretches it spent queued on other CPUs before a migration
/// included — so the waits add up to the kernel's `run_delay` by construction. A task seen for
/// the first time has only its last stretch, and its wait counts as a wakeup. Kind: the task
/// left the CPU still runnable (its `nivcsw` rose since its previous switch-in) — preempted, or
/// throttled when that switch-out was marked — else it slept and was woken.
#[inline(always)]
fn end_wait_sched_info<const DIRECT: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
    known_cgroup: Option<u64>,
) {
    let p = RUNQ_START_TASK.get(next, true);
    if p.is_null() {
        count(c, counters::RUNQ_START_FULL);
        return;
    }
    let last_queued = read_unchecked::<DIRECT, true>(next, layout!(task_last_queued));
    let run_delay = read_unchecked::<DIRECT, true>(next, layout!(task_run_delay));
    let nivcsw = task_nivcsw::<DIRECT>(next);
    let clock = task_rq_clock::<DIRECT>(next);
    let stretch = if last_queued != 0 {
        clock.saturating_sub(last_queued)
    } else {
        0
    };
    let total = run_delay + stretch;
    // The words this mode keeps in the storage (see `RunqStart`): `leaf_cfs_rq` is run_delay and
    // `thr_clock` nivcsw at the last switch-in, `rq_clock_lo` the throttled switch-out's mark.
    // SAFETY: the task's own storage value, written under the rq lock of its switch-in.
    let (seen, before, nivcsw_before, mark, thr_cfs_rq) = unsafe {
        let seen = (*p).ts_ns != 0;
        let v = (
            seen,
            (*p).leaf_cfs_rq,
            (*p).thr_clock,
            u64::from((*p).rq_clock_lo),
            (*p).throttle_cfs_rq,
        );
        (*p).ts_ns = now;
        (*p).leaf_cfs_rq = total;
        (*p).thr_clock = nivcsw;
        v
    };
    let wait_ns = if seen {
        total.saturating_sub(before)
    } else {
        stretch
    };
    // The kernel counts an arrival (`pcount`) wherever a stretch was open; a wait of 0 is real:
    // where the switch-in skips the clock update (a wakeup that preempts has just updated it),
    // the kernel's own wait is 0, and the histograms count it as such.
    let arrived = last_queued != 0 || (seen && total != before);
    if !arrived || wait_ns > now {
        return;
    }
    let kind = if !seen || nivcsw == nivcsw_before {
        WaitKind::Wakeup
    } else if mark == (nivcsw & 0xffff_ffff) && thr_cfs_rq != 0 {
        WaitKind::Throttled
    } else {
        WaitKind::Preempt
    };
    let throttle_cfs_rq = if kind == WaitKind::Throttled {
        thr_cfs_rq
    } else {
        0
    };
    let start = RunqStart::new(now - wait_ns, kind as u32, throttle_cfs_rq, 0, 0);
    charge::<DIRECT>(c, next, pid, now, known_cgroup, &start, p);
}

/// Charges the wait that began at `start` and ended now to `next`'s cgroup: histograms (split
/// at its throttled part), blame, and an event when it is long enough.
#[inline(always)]
fn charge<const DIRECT: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    now: u64,
    known_cgroup: Option<u64>,
    start: &RunqStart,
    storage: *mut RunqStart,
) {
    let wait_ns = now - start.ts_ns;
    let cgroup_id = match known_cgroup.or_else(|| task_cgroup_id::<DIRECT>(next)) {
        Some(id) => id,
        None => {
            count(c, counters::CGROUP_UNREADABLE);
            0
        }
    };
    let hists = hists_of(storage, cgroup_id);
    let mut kind = start.kind;
    // The wait's throttled part, and whether it was the group's own quota.
    let mut throttled_ns = 0u64;
    let mut rest_from = start.ts_ns;
    if start.leaf_cfs_rq != 0 {
        // Before 6.18: the kernel's throttled clock splits the wait into its throttled part and
        // the rest, which keeps the kind it began with (a switch-out into a throttled hierarchy
        // becomes queueing once the group runs again).
        let throttled = throttled_part::<DIRECT>(next, start).min(wait_ns);
        throttled_ns = throttled;
        let rest_kind = if start.kind == WaitKind::Throttled as u32 {
            WaitKind::Preempt as u32
        } else {
            start.kind
        };
        if throttled > 0 {
            add_to_hist(c, hists, WaitKind::Throttled as u32, throttled);
        }
        if throttled == 0 || wait_ns > throttled {
            add_to_hist(c, hists, rest_kind, wait_ns - throttled);
        }
        kind = if throttled * 2 > wait_ns {
            WaitKind::Throttled as u32
        } else {
            rest_kind
        };
    } else if start.kind == WaitKind::Throttled as u32 {
        // 6.18+: split at the unthrottle: the throttled part, then queueing behind other tasks.
        // SAFETY: the value is copied out.
        let closed = unsafe { THROTTLE_LAST_CLOSE.get(&start.throttle_cfs_rq) }.copied();
        match closed {
            Some(at) if at > start.ts_ns && at < now => {
                throttled_ns = at - start.ts_ns;
                rest_from = at;
                add_to_hist(c, hists, WaitKind::Throttled as u32, throttled_ns);
                add_to_hist(c, hists, WaitKind::Preempt as u32, now - at);
            }
            _ => {
                throttled_ns = wait_ns;
                add_to_hist(c, hists, WaitKind::Throttled as u32, wait_ns);
            }
        }
    } else {
        add_to_hist(c, hists, start.kind, wait_ns);
    }
    if wait_ns >= blame_min_ns() {
        let own = throttled_ns > 0 && own_quota::<DIRECT>(next, start);
        blame(
            c,
            cgroup_id,
            (start.ts_ns, rest_from, now),
            throttled_ns,
            own,
        );
    }
    if wait_ns >= config!(runq_event_min_ns) {
        emit_event::<DIRECT>(c, next, pid, cgroup_id, kind, wait_ns, now);
    }
}

/// Where a wait's histograms are.
#[derive(Clone, Copy)]
enum Hists {
    /// Task storage: `RUNQ_SLOTS`, through the slots cached in this storage.
    Slots(*mut RunqStart, u64),
    /// No task storage: `RUNQ_HIST`, keyed by this cgroup id.
    Hash(u64),
}

/// The histograms of `cgroup_id` for a wait of the task whose storage is `storage` (null: the
/// hash is used).
#[inline(always)]
fn hists_of(storage: *mut RunqStart, cgroup_id: u64) -> Hists {
    if storage.is_null() {
        Hists::Hash(cgroup_id)
    } else {
        Hists::Slots(storage, cgroup_id)
    }
}

/// The histogram of `kind` in `hists` (`None`: no room, counted as `runq_hist_full`).
#[inline(always)]
fn hist_of(c: *mut Counters, hists: Hists, kind: u32) -> Option<*mut RunqHist> {
    let (storage, cgroup_id) = match hists {
        Hists::Hash(cgroup_id) => return hash_hist(c, cgroup_id, kind),
        Hists::Slots(storage, cgroup_id) => (storage, cgroup_id),
    };
    if kind as usize >= NR_WAIT_KINDS {
        return None;
    }
    let key = RunqKey {
        cgroup_id,
        kind,
        _pad: 0,
    };
    // The slot cached in the task's storage: an array index, checked against the slot's owner.
    // SAFETY: the task's own storage value (see `start_wait`); the slot is a live map value.
    unsafe {
        let cached = match kind {
            0 => (*storage).slot_wakeup,
            1 => (*storage).slot_preempt,
            _ => (*storage).slot_throttled,
        };
        if (*storage).slot_cgroup == cgroup_id
            && let Some(slot) = RUNQ_SLOTS.get_ptr_mut(cached)
            && (*slot).owner.cgroup_id == cgroup_id
            && (*slot).owner.kind == kind
        {
            return Some(&raw mut (*slot).hist);
        }
    }
    // The task's first wait of this kind in this cgroup.
    let Some((index, slot)) = slot_of(&key) else {
        count(c, counters::RUNQ_HIST_FULL);
        return None;
    };
    // SAFETY: as above.
    unsafe {
        if (*storage).slot_cgroup != cgroup_id {
            (*storage).slot_cgroup = cgroup_id;
            (*storage).slot_wakeup = 0;
            (*storage).slot_preempt = 0;
            (*storage).slot_throttled = 0;
        }
        match kind {
            0 => (*storage).slot_wakeup = index,
            1 => (*storage).slot_preempt = index,
            _ => (*storage).slot_throttled = index,
        }
        Some(&raw mut (*slot).hist)
    }
}

/// The slot of `key`: the one mapped to it, or a free one taken and mapped now.
#[inline(always)]
fn slot_of(key: &RunqKey) -> Option<(u32, *mut RunqSlot)> {
    // SAFETY: the value is copied out.
    let index = match unsafe { RUNQ_SLOT_OF.get(key) }.copied() {
        Some(index) => index,
        None => {
            let Ok(Some(index)) = RUNQ_FREE_SLOTS.pop() else {
                return None;
            };
            // Always there: the loader queues the array's own indices.
            let slot = RUNQ_SLOTS.get_ptr_mut(index)?;
            // Owned before it is mapped, so a mapped slot never shows another owner.
            // SAFETY: a live map value; a free slot is written by no one else.
            unsafe {
                (*slot).owner.kind = key.kind;
                (*slot).owner.cgroup_id = key.cgroup_id;
            }
            if RUNQ_SLOT_OF
                .insert(key, &index, u64::from(BPF_NOEXIST))
                .is_ok()
            {
                return Some((index, slot));
            }
            // Another CPU mapped one for it meanwhile: this one goes back.
            // SAFETY: as above.
            unsafe { (*slot).owner.cgroup_id = 0 };
            let _ = RUNQ_FREE_SLOTS.push(&index, 0);
            // SAFETY: the value is copied out.
            unsafe { RUNQ_SLOT_OF.get(key) }.copied()?
        }
    };
    let slot = RUNQ_SLOTS.get_ptr_mut(index)?;
    // A mapping the daemon is taking back (its cgroup was removed) has lost its owner.
    // SAFETY: a live map value.
    let owned =
        unsafe { (*slot).owner.cgroup_id == key.cgroup_id && (*slot).owner.kind == key.kind };
    owned.then_some((index, slot))
}

/// The `RUNQ_HIST` entry of (`cgroup_id`, `kind`), inserted if new (`None`: the map is full,
/// counted).
#[inline(always)]
fn hash_hist(c: *mut Counters, cgroup_id: u64, kind: u32) -> Option<*mut RunqHist> {
    let key = RunqKey {
        cgroup_id,
        kind,
        _pad: 0,
    };
    if let Some(h) = RUNQ_HIST.get_ptr_mut(&key) {
        return Some(h);
    }
    let zero = ZERO_HIST.get_ptr(0)?;
    // SAFETY: `zero` points at a map value of the right type.
    let _ = RUNQ_HIST.insert(&key, unsafe { &*zero }, u64::from(BPF_NOEXIST));
    let h = RUNQ_HIST.get_ptr_mut(&key);
    if h.is_none() {
        count(c, counters::RUNQ_HIST_FULL);
    }
    h
}

#[inline(always)]
fn add_to_hist(c: *mut Counters, hists: Hists, kind: u32, wait_ns: u64) {
    let Some(hist) = hist_of(c, hists, kind) else {
        return;
    };
    bucket_index!(let idx = wait_ns, else return);
    // SAFETY: `hist` points into a live map value; the adds are atomic because several CPUs may
    // charge the same cgroup at once.
    unsafe {
        atomic_add(&raw mut (*hist).sum_ns, wait_ns);
        atomic_add(&raw mut (*hist).buckets[idx], 1);
        // Per-window max in the slot of the current epoch (see `RunqHist`). Not atomic: two CPUs
        // raising the same cgroup's max at the same instant can keep the smaller of the two.
        let epoch = EPOCH.get(0).copied().unwrap_or(0);
        let slot = (epoch & 1) as usize;
        if (*hist).max_epoch[slot] != epoch {
            (*hist).max_epoch[slot] = epoch;
            (*hist).max_ns[slot] = wait_ns;
        } else if wait_ns > (*hist).max_ns[slot] {
            (*hist).max_ns[slot] = wait_ns;
        }
    }
    count(c, counters::RUNQ_WAITS);
}

#[inline(always)]
fn emit_event<const DIRECT: bool>(
    c: *mut Counters,
    next: *const u8,
    pid: u32,
    cgroup_id: u64,
    kind: u32,
    wait_ns: u64,
    now: u64,
) {
    let ev = RunqEvent {
        header: event_header(KIND_RUNQ_WAIT, now),
        cgroup_id,
        wait_ns,
        pid,
        tgid: task_tgid::<DIRECT>(next).unwrap_or(0),
        kind,
        _pad: 0,
        comm: task_comm(next),
    };
    emit(c, &ev);
}
