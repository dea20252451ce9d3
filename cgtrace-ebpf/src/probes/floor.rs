//! Empty programs on the run-queue family's hooks, for `cargo xtask bench runq`'s `floor`
//! configurations (`CGTRACE_BENCH_FLOOR=1`): what any BPF program on these tracepoints costs (the
//! kernel's trampoline and, with `--bpf-stats`, its run counting), so a table can show what
//! cgtrace adds above it. They never run in normal operation.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

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
