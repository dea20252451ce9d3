//! One module per event family; the same names as `cgtrace-common` and the daemon.
//!
//! - `sched.rs`: the scheduler tracepoints (`sched_switch`, `sched_wakeup`): one entry that
//!   calls the run-queue and throttle parts;
//! - `runq/`: run-queue latency per cgroup and wait kind, and the blame ledger;
//! - `throttle/`: CFS bandwidth throttle episodes, periods, and who burned the quota;
//! - `reads/`: pseudo-file reads, the rstat flush work inside them, and cgroup churn;
//! - `capability.rs`: empty programs the loader tries, to learn what the kernel allows;
//! - `floor.rs`: programs on the run-queue hooks that measure nothing (empty, or one clock
//!   read), for the benchmark's floors.
//!
//! Each family's `mod.rs` says which of its files does what. Program names (the functions under
//! `#[btf_tracepoint]`, `#[fentry]`, ...) are what the daemon attaches by: never rename them.
//!
//! # Moving code
//!
//! Where a function lives is not free. The order in which rustc hands functions to LLVM follows
//! their symbol names, which contain the module path, and LLVM inlines the `#[inline(always)]`
//! functions in that order, which decides the `sched_switch` programs' stack layout and
//! registers. Moving `runq::throttled_part` alone into a `runq` submodule, with no other
//! change, left `sched_switch_noprevstate_probe` a call into a 4 000-instruction function that
//! LLVM no longer inlined; reordering functions within a file changed nothing. After moving or
//! renaming a function, compare every program section of the built object with the one before
//! (bytes and relocations); the verifiers (5.10, 6.1) are sensitive to the programs' shape.
pub mod capability;
pub mod floor;
pub mod reads;
pub mod runq;
pub mod sched;
pub mod throttle;

/// A BTF tracepoint program in its two variants, direct field access (`function::<true>`, the
/// loader tries it first) and probe reads (`function::<false>`, the `_probe` fallback):
/// `twice!(tracepoint, name, name_probe, function[::<more const arguments>], ctx => arguments)`.
macro_rules! twice {
    ($tp:literal, $direct:ident, $probe:ident, $f:ident $(:: <$($g:tt),*>)?, $ctx:ident => $($arg:expr),*) => {
        #[aya_ebpf::macros::btf_tracepoint(function = $tp)]
        pub fn $direct($ctx: aya_ebpf::programs::BtfTracePointContext) -> u32 {
            $f::<true $($(, $g)*)?>($($arg),*);
            0
        }

        #[aya_ebpf::macros::btf_tracepoint(function = $tp)]
        pub fn $probe($ctx: aya_ebpf::programs::BtfTracePointContext) -> u32 {
            $f::<false $($(, $g)*)?>($($arg),*);
            0
        }
    };
}
pub(crate) use twice;
