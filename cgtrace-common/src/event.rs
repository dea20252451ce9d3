//! The header every ring-buffer record starts with.
//!
//! Kinds are numbered in ranges per family (runq 0x100.., throttle 0x200.., reads 0x300..);
//! retired numbers are never reused.

/// First field of every record in the `EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// One of the `KIND_*` constants.
    pub kind: u32,
    /// CPU the event was recorded on.
    pub cpu: u32,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the event was recorded.
    pub ts_ns: u64,
}

/// A run-queue wait above the event threshold: [`crate::runq::RunqEvent`].
pub const KIND_RUNQ_WAIT: u32 = 0x100;
/// A closed CFS throttle episode: [`crate::throttle::ThrottleEvent`].
pub const KIND_THROTTLE: u32 = 0x200;
/// Retired: one CPU slice of a thread in a recently throttled group, sent at every switch
/// (recordings before slices were summed; the daemon still reads them).
pub const KIND_THROTTLE_SLICE_V0: u32 = 0x201;
/// A thread's CPU time in one period of a recently throttled group, summed in the kernel:
/// [`crate::throttle::SliceEvent`].
pub const KIND_THROTTLE_SLICE: u32 = 0x203;
/// A bandwidth period of a recently throttled group ended: [`crate::throttle::PeriodEvent`].
pub const KIND_THROTTLE_PERIOD: u32 = 0x202;

/// A pseudo-file read at or above the read event threshold: [`crate::reads::SlowReadEvent`].
pub const KIND_SLOW_READ: u32 = 0x300;
/// A cgroup created or removed: [`crate::reads::CgroupChurnEvent`].
pub const KIND_CGROUP_CHURN: u32 = 0x301;

// Records are decoded in one place, the daemon's `decode::Record::from_bytes`.
