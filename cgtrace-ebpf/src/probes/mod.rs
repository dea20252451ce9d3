//! One module per event family; the same names as `cgtrace-common` and the daemon.
pub mod capability;
pub mod reads;
pub mod runq;
pub mod sched;
pub mod throttle;
pub mod throttle_hooks;
