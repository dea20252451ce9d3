//! Programs on the run-queue family's hooks that measure nothing, for `cargo xtask bench runq`'s
//! floor configurations: what any BPF program on these tracepoints costs (the kernel's
//! trampoline and, with `--bpf-stats`, its run counting), so a table can show what cgtrace adds
//! above it. They never run in normal operation.
//!
//! - `floor_*` (`CGTRACE_BENCH_FLOOR=1`): empty programs.
//! - `floor_clock_*` (`CGTRACE_BENCH_FLOOR=clock`): each reads the clock every timestamp of
//!   ours is in and keeps it in a per-CPU slot — the least a tool that times a wait does at each
//!   of these hooks, so a table shows how much of cgtrace's cost that one read already is.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

use crate::{helpers::now, maps::FLOOR_CLOCK};

#[btf_tracepoint(function = "sched_switch")]
pub fn floor_sched_switch(_ctx: BtfTracePointContext) -> u32 {
    0
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn floor_sched_wakeup(_ctx: BtfTracePointContext) -> u32 {
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn floor_sched_wakeup_new(_ctx: BtfTracePointContext) -> u32 {
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn floor_clock_sched_switch(_ctx: BtfTracePointContext) -> u32 {
    keep_clock()
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn floor_clock_sched_wakeup(_ctx: BtfTracePointContext) -> u32 {
    keep_clock()
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn floor_clock_sched_wakeup_new(_ctx: BtfTracePointContext) -> u32 {
    keep_clock()
}

#[inline(always)]
fn keep_clock() -> u32 {
    if let Some(slot) = FLOOR_CLOCK.get_ptr_mut(0) {
        // SAFETY: this CPU's own slot, written only by these programs.
        unsafe { *slot = now() };
    }
    0
}
