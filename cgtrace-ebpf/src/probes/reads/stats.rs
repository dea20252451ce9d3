//! A finished read (or flush) added to `READ_STATS`, and sent to the daemon when it was slow.
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_get_current_pid_tgid};
use cgtrace_common::{
    counters,
    event::KIND_SLOW_READ,
    reads::{ReadInflight, ReadStats, SlowReadEvent},
};

use crate::{
    helpers::{atomic_add, bucket_index, config, event_header},
    maps::{EVENTS, READ_STATS, READ_ZERO, count, counters},
};

/// Counts `ns` in the histogram of `s`.
#[inline(always)]
fn add_bucket(s: *mut ReadStats, ns: u64) {
    bucket_index!(let idx = ns, else return);
    // SAFETY: `s` points into a live map value; the index is checked.
    unsafe { atomic_add(&raw mut (*s).buckets[idx], 1) };
}

/// Adds one finished read (or flush) to `READ_STATS` and sends it as an event if slow.
#[inline(always)]
pub(super) fn account(r: &ReadInflight, end: u64, ret: i64) {
    let duration = end.saturating_sub(r.start_ns);
    // With only the flush functions hooked (fentry mode without rstat tracepoints), the span is
    // the flush, lock waits included.
    let flush_ns = if r.flush_ns == 0 && r.flush_span_ns > 0 {
        r.flush_span_ns.saturating_sub(r.lock_wait_ns)
    } else {
        r.flush_ns
    };
    let flushed = u64::from(r.needs_flush != 0 || r.flush_locks > 0 || r.flush_span_ns > 0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let c = counters();
    let mut stats = READ_STATS.get_ptr_mut(&r.key);
    if stats.is_none() {
        if let Some(zero) = READ_ZERO.get_ptr(0) {
            // SAFETY: the per-CPU zero value stays valid while the program runs.
            let _ = READ_STATS.insert(&r.key, unsafe { &*zero }, u64::from(BPF_NOEXIST));
        }
        stats = READ_STATS.get_ptr_mut(&r.key);
    }
    match stats {
        Some(s) => {
            // SAFETY: live map value; counters are added atomically, the rest are last-writer
            // values.
            unsafe {
                atomic_add(&raw mut (*s).count, 1);
                atomic_add(&raw mut (*s).total_ns, duration);
                // Most reads flush nothing: skip those atomic adds.
                if flushed != 0 {
                    atomic_add(&raw mut (*s).flush_ns, flush_ns);
                    atomic_add(&raw mut (*s).lock_wait_ns, r.lock_wait_ns);
                    atomic_add(&raw mut (*s).flush_locks, r.flush_locks);
                    atomic_add(&raw mut (*s).flushed_reads, flushed);
                    atomic_add(&raw mut (*s).contended, r.contended);
                }
                if ret > 0 {
                    atomic_add(&raw mut (*s).bytes, ret as u64);
                }
                add_bucket(s, duration);
                if duration > (*s).max_ns {
                    (*s).max_ns = duration;
                }
                (*s).target_cgroup = r.target_cgroup;
                (*s).target_dying = r.target_dying;
                (*s).last_pid = pid_tgid as u32;
                (*s).last_tgid = (pid_tgid >> 32) as u32;
            }
        }
        None => count(c, counters::READ_STATS_FULL),
    }
    if duration < config!(read_event_min_ns) {
        return;
    }
    let Some(mut slot) = EVENTS.reserve::<SlowReadEvent>(0) else {
        count(c, counters::RINGBUF_FULL);
        return;
    };
    let ev = slot.as_mut_ptr();
    // SAFETY: `ev` points to a reserved, writable record; every field is written before submit.
    unsafe {
        (*ev).header = event_header(KIND_SLOW_READ, end);
        (*ev).key = r.key;
        (*ev).magic = r.magic;
        (*ev).start_ns = r.start_ns;
        (*ev).duration_ns = duration;
        (*ev).flush_ns = flush_ns;
        (*ev).lock_wait_ns = r.lock_wait_ns;
        (*ev).flush_locks = r.flush_locks;
        (*ev).contended = r.contended;
        (*ev).target_cgroup = r.target_cgroup;
        (*ev).ret = ret;
        (*ev).pid = pid_tgid as u32;
        (*ev).tgid = (pid_tgid >> 32) as u32;
        (*ev).target_dying = r.target_dying;
        (*ev).needs_flush = flushed as u32;
    }
    slot.submit(0);
}
