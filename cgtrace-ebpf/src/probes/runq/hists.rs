//! The latency histograms a wait is added to, per (cgroup, wait kind): with task storage, slots
//! of the memory-mapped `RUNQ_SLOTS` array, cached in the task's storage; without, entries of
//! the `RUNQ_HIST` hash.
use aya_ebpf::bindings::BPF_NOEXIST;
use cgtrace_common::{
    counters::{self, Counters},
    runq::{NR_WAIT_KINDS, RqClockOffset, RunqHist, RunqKey, RunqSlot, RunqStart},
};

use crate::{
    helpers::{atomic_add, atomic_add_u32, bucket_index},
    maps::{EPOCH, RUNQ_FREE_SLOTS, RUNQ_HIST, RUNQ_SLOT_OF, RUNQ_SLOTS, ZERO_HIST, count},
};

/// How stale the run queue's clock was at this switch, for the part of a wait that ends at it:
/// read from this CPU's `RqClockOffset` when the part is added, not carried in a register from
/// the estimate at the program's start — the estimate's branches then end where it stored its
/// result, instead of each one doubling the verifier's paths through everything after.
#[derive(Clone, Copy)]
pub(super) struct Stale {
    at: *const RqClockOffset,
    /// All ones where the staleness applies (a wait timed in the run queue's clock), else 0.
    mask: u64,
}

impl Stale {
    /// Nothing added (a part that ended before this switch).
    pub const NONE: Self = Self {
        at: core::ptr::null(),
        mask: 0,
    };

    #[inline(always)]
    pub fn of(at: *const RqClockOffset, mask: u64) -> Self {
        Self { at, mask }
    }

    #[inline(always)]
    fn ns(self) -> u64 {
        if self.at.is_null() {
            return 0;
        }
        // SAFETY: this CPU's live map value; volatile so it is loaded here.
        unsafe { core::ptr::read_volatile(&raw const (*self.at).stale) & self.mask }
    }
}

/// Where a wait's histograms are.
#[derive(Clone, Copy)]
pub(super) enum Hists {
    /// Task storage: `RUNQ_SLOTS`, through the slots cached in this storage.
    Slots(*mut RunqStart, u64),
    /// No task storage: `RUNQ_HIST`, keyed by this cgroup id.
    Hash(u64),
}

/// The histograms of `cgroup_id` for a wait of the task whose storage is `storage` (null: the
/// hash is used).
#[inline(always)]
pub(super) fn hists_of(storage: *mut RunqStart, cgroup_id: u64) -> Hists {
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

/// Adds a wait of `wait_ns` in the run queue's clock to `kind`'s histogram, `stale` (the
/// clock's staleness at its end) on top: the bucket and maximum are of the whole wait, the sum
/// keeps the two apart.
///
/// Only with `LOOP` (5.18+): without it (the `noprevstate` programs of older kernels) the
/// staleness is left out, as is its atomic add — with them LLVM laid out the bucket index in a
/// shape 5.10's verifier cannot bound (a misaligned atomic add), and an atomic add of a constant 0
/// becomes an atomic `or`, which 5.10 refuses. With `LOOP` the add is unconditional: a test of
/// the value (or an `Option`) changed the layout until 6.1's verifier lost the index's bounds.
#[inline(always)]
pub(super) fn add_to_hist<const LOOP: bool>(
    c: *mut Counters,
    hists: Hists,
    kind: u32,
    wait_ns: u64,
    stale: Stale,
) {
    let Some(hist) = hist_of(c, hists, kind) else {
        return;
    };
    let stale_ns = if LOOP { stale.ns() } else { 0 };
    let sum_ns = wait_ns;
    let wait_ns = wait_ns + stale_ns;
    bucket_index!(let idx = wait_ns, else return);
    // SAFETY: `hist` points into a live map value; the adds are atomic because several CPUs may
    // charge the same cgroup at once.
    unsafe {
        atomic_add(&raw mut (*hist).sum_ns, sum_ns);
        if LOOP {
            atomic_add(&raw mut (*hist).stale_ns, stale_ns);
        }
        atomic_add_u32(&raw mut (*hist).buckets[idx], 1);
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
