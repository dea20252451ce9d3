//! Empty programs the loader tries to load (and, for kprobes, attach) once at start-up to learn
//! whether this kernel allows fentry/fexit and kprobes. They never run in normal operation.
use aya_ebpf::{
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};

#[fentry(function = "do_nanosleep")]
pub fn capability_fentry(_ctx: FEntryContext) -> u32 {
    0
}

#[kprobe]
pub fn capability_kprobe(_ctx: ProbeContext) -> u32 {
    0
}
