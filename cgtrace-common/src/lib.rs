//! The ABI between cgtrace's eBPF programs and its daemon.
//!
//! Everything here is `#[repr(C)]` with explicit padding and no `bool`s, so the byte layout is
//! the same on both sides. Each event family has one name from kernel to screen: `runq` here is
//! `cgtrace-ebpf/src/probes/runq/` in the kernel and `cgtrace/src/family/runq/` in the daemon.
#![no_std]

// clap's derive (the `clap` feature, userspace only) names `std`.
#[cfg(feature = "clap")]
extern crate std;

#[cfg(feature = "clock")]
pub mod clock;
pub mod counters;
pub mod event;
pub mod hist;
pub mod layout;
pub mod modes;
pub mod reads;
pub mod runq;
pub mod throttle;
