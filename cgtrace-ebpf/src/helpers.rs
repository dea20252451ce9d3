//! The small pieces every probe family uses, once: the clock, the current thread and CPU, the
//! header of a record for the daemon, `CONFIG` reads, the atomic add on a map value, and the
//! checked index of a histogram bucket.
//!
//! All `#[inline(always)]` (or macros): each compiles to the helper call or instruction it
//! wraps. That is not always enough for the same program as with the call written out (see
//! `bucket_index!`, and "Moving code" in `probes/mod.rs`): compare the object after using one in
//! a new place.
use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_smp_processor_id, bpf_ktime_get_ns,
};
use cgtrace_common::event::EventHeader;
use core::intrinsics::{AtomicOrdering, atomic_xadd};

/// One `CONFIG` field (or element), read through a volatile load so the compiler cannot fold
/// the placeholder the loader overwrites: `config!(blame_min_ns)`, `config!(read_syscalls[i])`.
macro_rules! config {
    ($($field:tt)+) => {{
        #[allow(unused_unsafe)]
        // SAFETY: CONFIG is a plain static in .rodata.
        let v = unsafe { core::ptr::read_volatile(&raw const crate::CONFIG.$($field)+) };
        v
    }};
}
pub(crate) use config;

/// `bpf_ktime_get_ns`: the monotonic clock every timestamp of ours is in.
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// The CPU this program runs on.
#[inline(always)]
pub fn cpu() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

/// The current thread's id (the kernel's pid).
#[inline(always)]
pub fn tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// The current task (`struct task_struct *`), untyped: read it with `bpf_probe_read_kernel`.
#[inline(always)]
pub fn current_task() -> *const u8 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_current_task() as *const u8 }
}

/// The header of a record of `kind` sent from this CPU at `ts_ns`.
#[inline(always)]
pub fn event_header(kind: u32, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind,
        cpu: cpu(),
        ts_ns,
    }
}

/// Adds `v` to the `u64` at `p` atomically (several CPUs may update the same map value). The
/// result is unused, so this is the plain BPF atomic add every kernel supports (no `BPF_FETCH`,
/// which needs 5.12+): the BPF target has no `AtomicU64::fetch_add` to write it with.
///
/// # Safety
/// `p` points at an aligned `u64` inside a live map value.
#[inline(always)]
pub unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: guaranteed by the caller.
    let _ = unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// [`atomic_add`] for a `u32` (the same plain 32-bit atomic add, on every kernel).
///
/// # Safety
/// `p` points at an aligned `u32` inside a live map value.
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) {
    // SAFETY: guaranteed by the caller.
    let _ = unsafe { atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(p, v) };
}

/// `bucket_index!(let idx = ns, else return);` binds `idx` to the histogram bucket of `ns`
/// (`cgtrace_common::hist::bucket_of`) as a `usize`, bounds-checked in a shape the verifiers can
/// follow. The `else` arm runs when the index is out of range and must leave the caller: it never
/// does run (`bucket_of` clamps), but the check is what lets the verifier accept the index.
///
/// Through `black_box` (a stack spill and fill), so the check is `reg >= imm` on the loaded
/// value. Without it LLVM fused `bucket_of`'s clamp into a `const > reg` compare that the 5.10
/// and 6.1 verifiers cannot decide, and they then lost the offset's alignment.
///
/// A macro that expands to `let` statements in the caller, not a function or a block: the
/// spilled value must live to the end of the caller's scope. With a function returning `Option`,
/// or the same lines in a `{ }` block, the spill slot's lifetime ended early, LLVM laid out
/// `sched_switch` differently, and `sched_switch_probe` grew by 29 instructions.
macro_rules! bucket_index {
    (let $idx:ident = $ns:expr, else $out:expr) => {
        let $idx = core::hint::black_box(u64::from(cgtrace_common::hist::bucket_of($ns)));
        if $idx >= cgtrace_common::hist::NR_BUCKETS as u64 {
            $out;
        }
        let $idx = $idx as usize;
    };
}
pub(crate) use bucket_index;
