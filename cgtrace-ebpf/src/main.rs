//! cgtrace's kernel side. Built for `bpfel-unknown-none` by `cgtrace/build.rs`.
//!
//! No kernel struct offset is compiled in: every field read goes through [`kernel`], which adds
//! the offsets the daemon resolved from the running kernel's BTF (the `LAYOUT` global).
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![expect(
    internal_features,
    reason = "atomic_xadd (helpers::atomic_add): the BPF target has no AtomicU64::fetch_add"
)]

mod helpers;
mod kernel;
mod maps;
mod probes;

use cgtrace_common::layout::{Config, Layout};

/// Field offsets of the running kernel; written by the loader before load.
#[unsafe(no_mangle)]
static LAYOUT: Layout = Layout::UNSET;

/// Run-time settings; written by the loader before load.
#[unsafe(no_mangle)]
static CONFIG: Config = Config::DEFAULT;

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
