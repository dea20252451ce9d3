//! rstat flush work: the rstat tracepoints (6.10+) and, in fentry mode, the flush functions charge
//! flush work to the read in progress on the same thread; a flush outside any read is accounted
//! as reads of the pseudo-file `FILE_RSTAT_FLUSH` by that thread.
use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit},
    programs::{BtfTracePointContext, FEntryContext, FExitContext},
};
use cgtrace_common::{
    counters,
    reads::{FILE_RSTAT_FLUSH, ReadInflight},
};

use super::{HOOK_FLUSH, is_self, reader_key, stats::account};
use crate::{
    helpers::{current_task, now, tid},
    maps::{READ_INFLIGHT, count, counters},
};

/// The current thread's entry, creating a flush-only one (charged to `FILE_RSTAT_FLUSH`) when it
/// is in no traced read.
#[inline(always)]
fn inflight_or_flush() -> Option<*mut ReadInflight> {
    let t = tid();
    let existing = READ_INFLIGHT.get_ptr_mut(&t);
    // SAFETY: this thread's live map value.
    if let Some(p) = existing
        && unsafe { (*p).open } != 0
    {
        return Some(p);
    }
    // Flushes by cgtrace's own reads are not charged to anyone.
    if is_self() {
        return None;
    }
    let mut r = ReadInflight::start(
        now(),
        reader_key(current_task(), FILE_RSTAT_FLUSH, 0),
        HOOK_FLUSH,
    );
    r.needs_flush = 1;
    if let Some(p) = existing {
        // SAFETY: this thread's live map value (a finished read's entry, reused).
        unsafe { *p = r };
        return Some(p);
    }
    if READ_INFLIGHT.insert(&t, &r, 0).is_err() {
        count(counters(), counters::READ_INFLIGHT_FULL);
        return None;
    }
    READ_INFLIGHT.get_ptr_mut(&t)
}

/// `memcg_flush_stats(memcg, stats_updates, force, needs_flush)` (6.11+).
#[btf_tracepoint(function = "memcg_flush_stats")]
pub fn reads_memcg_flush(ctx: BtfTracePointContext) -> u32 {
    let needs: u64 = ctx.arg(3);
    if needs & 0xff == 0 {
        return 0;
    }
    if let Some(r) = READ_INFLIGHT.get_ptr_mut(&tid()) {
        // SAFETY: live map value of this thread.
        unsafe {
            if (*r).open != 0 {
                (*r).needs_flush = 1;
            }
        }
    }
    0
}

/// `cgroup_rstat_lock_contended(cgrp, cpu, contended)`: the lock is busy; waiting begins.
#[btf_tracepoint(function = "cgroup_rstat_lock_contended")]
pub fn reads_rstat_contended(_ctx: BtfTracePointContext) -> u32 {
    if let Some(r) = inflight_or_flush() {
        // SAFETY: live map value of this thread.
        unsafe { (*r).contended_at = now() };
    }
    0
}

/// `cgroup_rstat_locked(cgrp, cpu, contended)`: the lock is held from now.
#[btf_tracepoint(function = "cgroup_rstat_locked")]
pub fn reads_rstat_locked(_ctx: BtfTracePointContext) -> u32 {
    let Some(r) = inflight_or_flush() else {
        return 0;
    };
    let t = now();
    // SAFETY: live map value of this thread.
    unsafe {
        if (*r).contended_at != 0 {
            (*r).lock_wait_ns += t.saturating_sub((*r).contended_at);
            (*r).contended += 1;
            (*r).contended_at = 0;
        }
        (*r).flush_locks += 1;
        (*r).locked_at = t;
    }
    0
}

/// `cgroup_rstat_unlock(cgrp, cpu, contended)`: one lock hold ends. A flush-only entry is
/// accounted per hold (one "read" of `FILE_RSTAT_FLUSH` per CPU walked on 6.16+).
#[btf_tracepoint(function = "cgroup_rstat_unlock")]
pub fn reads_rstat_unlock(_ctx: BtfTracePointContext) -> u32 {
    let t_id = tid();
    let Some(r) = READ_INFLIGHT.get_ptr_mut(&t_id) else {
        return 0;
    };
    let t = now();
    // SAFETY: live map value of this thread.
    unsafe {
        if (*r).open == 0 {
            return 0;
        }
        if (*r).locked_at != 0 {
            (*r).flush_ns += t.saturating_sub((*r).locked_at);
            (*r).locked_at = 0;
        }
        if (*r).hook == HOOK_FLUSH && (*r).flush_entry_at == 0 {
            end_flush_only(r, t);
        }
    }
    0
}

/// A flush-only entry (`HOOK_FLUSH`) ends at `t` and is accounted as a read of `FILE_RSTAT_FLUSH`.
///
/// # Safety
/// `r` is this thread's live `READ_INFLIGHT` value.
#[inline(always)]
unsafe fn end_flush_only(r: *mut ReadInflight, t: u64) {
    // SAFETY: guaranteed by the caller; copied before it is accounted.
    let done = unsafe {
        (*r).open = 0;
        *r
    };
    account(&done, t, 0);
}

/// fentry mode, kernels without rstat tracepoints: the flush function's span.
#[inline(always)]
fn flush_enter() {
    if let Some(r) = inflight_or_flush() {
        // SAFETY: live map value of this thread.
        unsafe {
            if (*r).flush_entry_at == 0 {
                (*r).flush_entry_at = now();
            }
        }
    }
}

#[inline(always)]
fn flush_exit() {
    let t_id = tid();
    let Some(r) = READ_INFLIGHT.get_ptr_mut(&t_id) else {
        return;
    };
    let t = now();
    // SAFETY: live map value of this thread.
    unsafe {
        if (*r).open == 0 {
            return;
        }
        if (*r).flush_entry_at != 0 {
            (*r).flush_span_ns += t.saturating_sub((*r).flush_entry_at);
            (*r).flush_entry_at = 0;
            (*r).needs_flush = 1;
        }
        if (*r).hook == HOOK_FLUSH {
            end_flush_only(r, t);
        }
    }
}

/// The fentry/fexit pair on a flush function: `flush_hooks!(function, entry program, exit program)`.
macro_rules! flush_hooks {
    ($function:literal, $enter:ident, $exit:ident) => {
        #[fentry(function = $function)]
        pub fn $enter(_ctx: FEntryContext) -> u32 {
            flush_enter();
            0
        }

        #[fexit(function = $function)]
        pub fn $exit(_ctx: FExitContext) -> u32 {
            flush_exit();
            0
        }
    };
}

flush_hooks!("css_rstat_flush", reads_flush_enter, reads_flush_exit);
// Kernels before 6.16 (`cgroup_rstat_flush`, and `cgroup_rstat_flush_irqsafe` on 6.1).
flush_hooks!(
    "cgroup_rstat_flush",
    reads_flush_old_enter,
    reads_flush_old_exit
);
flush_hooks!(
    "cgroup_rstat_flush_irqsafe",
    reads_flush_irqsafe_enter,
    reads_flush_irqsafe_exit
);
