//! The kernel-facing plumbing: everything that talks to BPF on behalf of the families.
//!
//! - [`loader`]: loads the eBPF object, probes what the kernel allows, attaches each family
//!   (through [`attach`], the shared load/attach calls) and owns what is attached ([`loader::Tracer`]).
//! - [`btf`]: the kernel's BTF read at start-up ([`btf::layout`]: struct field offsets for the
//!   programs, since rustc emits no CO-RE relocations; [`btf::patch`]: one map's BTF retyped
//!   before load).
//! - [`kallsyms`]: kernel symbol addresses for the kprobe/fentry throttle hooks.
//! - [`maps`]: whole-map reads in batches and memory-mapped arrays (what aya 0.16 lacks).
//! - [`ring`]: the ring buffer's reader thread and the framing of the raw records it hands on.
//! - [`counters`], [`prog_stats`]: the programs' own event/loss counters and per-program run cost.
//!
//! Only this folder, the live session and each family's `attach`/`collect` import `aya`.

pub mod attach;
pub mod btf;
pub mod counters;
pub mod kallsyms;
pub mod loader;
pub mod maps;
pub mod prog_stats;
pub mod ring;
