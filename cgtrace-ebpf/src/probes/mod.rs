//! One module per event family; the same names as `cgtrace-common` and the daemon.
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
pub mod reads;
pub mod runq;
pub mod sched;
pub mod throttle;
