//! Indices into the per-CPU `COUNTERS` array: what the kernel side saw and what it lost.
//!
//! Retired indices are never reused; new counters are appended before `NR_COUNTERS`.

/// `sched_switch` events handled.
pub const SCHED_SWITCH: u32 = 0;
/// `sched_wakeup` and `sched_wakeup_new` events handled.
pub const SCHED_WAKEUP: u32 = 1;
/// Run-queue waits measured and added to a histogram.
pub const RUNQ_WAITS: u32 = 2;
/// A wait could not be started (the wait is lost): the `RUNQ_START` hash was full, or (task
/// storage, 6.1+) the kernel gave the task no storage.
pub const RUNQ_START_FULL: u32 = 3;
/// A wait could not be added because its cgroup got no histograms: `RUNQ_HIST` full, or (kernels
/// with task-local storage) no free slot in `RUNQ_SLOTS` (the wait is lost).
pub const RUNQ_HIST_FULL: u32 = 4;
/// An event could not be reserved in the ring buffer (the event is lost; histograms still count it).
pub const RINGBUF_FULL: u32 = 5;
/// The waiting task's cgroup could not be read (charged to cgroup id 0).
pub const CGROUP_UNREADABLE: u32 = 6;
/// A throttle episode could not be opened: all per-CPU slots in use (the episode is lost).
pub const THROTTLE_SLOTS_FULL: u32 = 7;
/// Throttle episodes closed late (seen unthrottled at a context switch, not at the unthrottle).
pub const THROTTLE_LATE_CLOSE: u32 = 8;
/// A flush outside any traced read could not be tracked: `READ_INFLIGHT` had no room for its
/// entry (the flush is not timed). Reads that lose their entry are `READ_INFLIGHT_LOST`.
pub const READ_INFLIGHT_FULL: u32 = 9;
/// A read could not be added: `READ_STATS` full (the read is lost from the aggregates; a slow
/// read is still sent as an event).
pub const READ_STATS_FULL: u32 = 10;
/// A file's names could not be stored: `READ_FILES` full (its path shows as unknown).
pub const READ_FILES_FULL: u32 = 11;
/// A group's period counters could not be stored: `THROTTLE_STATS` full (its periods are not
/// counted until an entry frees).
pub const THROTTLE_STATS_FULL: u32 = 12;
/// Open throttle episodes dropped as stale: their `cfs_rq` now belongs to another cgroup (freed
/// with its group and reused), or they were open longer than
/// [`MAX_EPISODE_NS`](crate::throttle::MAX_EPISODE_NS).
pub const THROTTLE_STALE: u32 = 13;
/// A traced read ended without its entry in `READ_INFLIGHT` (the read is not timed): the LRU
/// evicted it for other threads' reads while it ran (`--max-read-threads` too small for the
/// readers at once), there was no room to store it, or the read began before cgtrace attached.
pub const READ_INFLIGHT_LOST: u32 = 14;
/// Part of a wait could not be charged to whoever held the CPU: `BLAME` full (that part is
/// reported as `unattributed_us`).
pub const BLAME_FULL: u32 = 15;
/// Slices of watched groups' threads (one per switch-out), summed per thread and period in
/// `THROTTLE_SLICE_SUMS`.
pub const THROTTLE_SLICES: u32 = 16;
/// Slice records sent to the daemon (a thread's sum per period, or one slice when
/// `THROTTLE_SLICE_SUMS_FULL`).
pub const THROTTLE_SLICE_RECORDS: u32 = 17;
/// A slice could not be summed: `THROTTLE_SLICE_SUMS` full (it is sent alone, as before sums).
pub const THROTTLE_SLICE_SUMS_FULL: u32 = 18;
/// Waits with no start of cgtrace's own (own stamps: no wakeup or queued switch-out seen for the
/// task) that the kernel stamped (`sched_info.last_queued`): timed as the kernel's, what its total
/// (`run_delay` and the open stretch) gained since the task's last switch-in, as a wakeup. Their
/// number, not a loss: the kernel enqueues a task now and then without `sched_wakeup`, and a
/// wakeup can miss the program.
pub const RUNQ_KERNEL_STAMPED: u32 = 19;
/// Waits whose kernel stretch began while the task slept (6.12+: a sleeping task kept on its
/// run queue, delayed dequeue, was queued again when moved to another CPU): timed from its
/// wakeup; the sleep the kernel's `run_delay` counts is reported per cgroup as
/// `run_delay_asleep_us` (on own stamps with task storage: what the kernel's total gained from
/// the task's last switch-in to the wakeup; in the hash, the stretch still open). Their number,
/// not a loss.
pub const RUNQ_ASLEEP_STAMPED: u32 = 20;
/// Number of counters.
pub const NR_COUNTERS: u32 = 21;

/// Names, in index order, as they appear in `cgtrace doctor` and the stream.
pub const NAMES: [&str; NR_COUNTERS as usize] = [
    "sched_switch",
    "sched_wakeup",
    "runq_waits",
    "runq_start_full",
    "runq_hist_full",
    "ringbuf_full",
    "cgroup_unreadable",
    "throttle_slots_full",
    "throttle_late_close",
    "read_inflight_full",
    "read_stats_full",
    "read_files_full",
    "throttle_stats_full",
    "throttle_stale",
    "read_inflight_lost",
    "blame_full",
    "throttle_slices",
    "throttle_slice_records",
    "throttle_slice_sums_full",
    "runq_kernel_stamped",
    "runq_asleep_stamped",
];

/// The value of the single-entry per-CPU `COUNTERS` map: one lookup per program run.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub v: [u64; NR_COUNTERS as usize],
}

#[cfg(feature = "user")]
// SAFETY: #[repr(C)] array of integers.
unsafe impl aya::Pod for Counters {}
