//! `throttle`: CFS bandwidth throttling, one episode per throttled `cfs_rq` (one cgroup on one
//! CPU), plus per-cgroup period counters.
//!
//! Tracepoint-only mode (kernels without fentry/kprobes, task-based throttling 6.18+): an episode
//! opens when the first task of a throttled hierarchy switches out into the limbo list
//! (`prev_state == TASK_RUNNING`, `prev->throttled`), on that CPU; it closes on the same CPU when
//! the `cfs_rq` is seen unthrottled: at the exit of the bandwidth period/slack hrtimer (local
//! unthrottle), at the exit of the `__cfsb_csd_unthrottle` CSD (remote unthrottle, run on the owning
//! CPU), or, as a fallback for other paths (a quota write), at the next context switch there.
//! Periods are counted at the period timer's entry; a period is throttled when the kernel's
//! `throttled_cfs_rq` list is non-empty then — the kernel's own definition of `nr_throttled`.

use crate::event::EventHeader;

/// Open episodes one CPU can hold at once (nested quotas, several throttled groups per CPU).
pub const MAX_OPEN_PER_CPU: usize = 32;

/// One open episode, in the per-CPU `THROTTLE_OPEN` slots. `cfs_rq == 0` marks a free slot.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OpenEpisode {
    /// The throttled `struct cfs_rq *` (unique per cgroup and CPU).
    pub cfs_rq: u64,
    pub start_ns: u64,
    /// `kernfs_node.id` of the throttled group's cgroup (the css owner of the quota).
    pub cgroup_id: u64,
    /// Tasks that went into the limbo list during the episode.
    pub tasks: u32,
    /// `h_nr_queued`/`h_nr_running` of the `cfs_rq` when the episode opened.
    pub runnable: u32,
}

/// The per-CPU `THROTTLE_OPEN` value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OpenEpisodes {
    /// Slots in use, so the common case (none) costs one load.
    pub n_open: u32,
    /// Scratch for the search of a free slot (the first free one found): kept in the map
    /// value, not in a register, so the verifier follows one path per slot searched instead of
    /// one per (slot, free slot found so far) pair.
    pub free_hint: u32,
    pub slots: [OpenEpisode; MAX_OPEN_PER_CPU],
}

/// Per-cgroup counters in `THROTTLE_STATS`, cumulative; the daemon takes deltas.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThrottleStats {
    /// Periods the group's bandwidth timer counted while traced (the kernel's `nr_periods`).
    pub nr_periods: u64,
    /// Of those, throttled ones (the kernel's `nr_throttled`).
    pub nr_throttled: u64,
    /// The kernel's `cfs_b->nr_periods` and `nr_throttled` at the last period timer seen: each
    /// callback adds the change since then, so a callback whose exit was missed (a recursion
    /// miss, nested timers) is counted at the next one instead of lost.
    pub last_periods: u32,
    pub last_throttled: u32,
}

/// A closed episode, through the `EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ThrottleEvent {
    pub header: EventHeader,
    pub cgroup_id: u64,
    pub start_ns: u64,
    /// How long it was throttled; in the hook modes on kernels that keep
    /// `throttled_clock_self_time` (6.7–6.17), the kernel's own throttled time of the cfs_rq
    /// over the episode: the time it was throttled with tasks queued, as `cpu.stat` counts it.
    pub duration_ns: u64,
    pub tasks: u32,
    pub runnable: u32,
    /// How the end was seen: one of the `CLOSE_*` constants.
    pub closed_by: u32,
    pub _pad: u32,
    /// fentry/kprobe modes: the change of the kernel's `cfs_bandwidth.throttled_time` across
    /// `unthrottle_cfs_rq`, its own accounting of this episode (0 in tracepoint mode; a
    /// group-wide counter, so unthrottles on other CPUs at the same moment add to it).
    pub kernel_ns: u64,
}

/// An open episode in the hook modes, in `THROTTLE_EPISODES` keyed by `cfs_rq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HookEpisode {
    pub start_ns: u64,
    pub cgroup_id: u64,
    /// `cfs_bandwidth.throttled_time` at `unthrottle_cfs_rq` entry.
    pub kernel_before: u64,
    /// When `unthrottle_cfs_rq` was entered: the episode's end. The kernel accounts the episode
    /// at the start of the function; the re-enqueueing after it is not throttled time.
    pub unthrottle_ns: u64,
    pub runnable: u32,
    pub cpu: u32,
    /// Kernels that keep `throttled_clock_self_time` (6.7–6.17): the cfs_rq's throttled clock at
    /// the open. Its advance over the episode is the time the kernel counts in `cpu.stat`: only
    /// while the cfs_rq had tasks (a cfs_rq throttled as its last task blocked counts from the
    /// next enqueue).
    pub self_before: u64,
}

/// `THROTTLE_MODE` values: who opens and closes episodes.
pub const MODE_TRACEPOINT: u32 = 0;
/// fentry/fexit or kprobe/kretprobe on `throttle_cfs_rq` / `unthrottle_cfs_rq`.
pub const MODE_HOOKS: u32 = 1;

/// Closed at the exit of the period or slack timer on this CPU.
pub const CLOSE_TIMER: u32 = 0;
/// Closed at the exit of the remote-unthrottle CSD on this CPU.
pub const CLOSE_CSD: u32 = 1;
/// Seen unthrottled at a later context switch (another unthrottle path, e.g. a quota write).
pub const CLOSE_LATE: u32 = 2;
/// Closed by the `unthrottle_cfs_rq` hook (fentry/kprobe modes).
pub const CLOSE_UNTHROTTLE: u32 = 3;

/// How long after an episode opens a group's threads are followed slice by slice (ns): ten
/// 100 ms periods.
pub const WATCH_NS: u64 = 1_000_000_000;

/// An open episode older than this is stale (the longest CFS period is 1 s, and every period
/// refill unthrottles a group with runtime left): its `cfs_rq` went with its cgroup, or the
/// close was missed. It is dropped and counted (`throttle_stale`), never reported.
pub const MAX_EPISODE_NS: u64 = 60_000_000_000;

/// Key of `THROTTLE_SLICE_SUMS`: one thread of a watched group.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceKey {
    /// The group with the quota (nearest ancestor with `runtime_enabled`).
    pub cgroup_id: u64,
    pub tid: u32,
    pub _pad: u32,
}

/// CPUs a [`SliceSum`] tells apart exactly (a bit each); beyond, a change of CPU counts one more.
pub const SLICE_CPU_BITS: u32 = 256;

/// Value of `THROTTLE_SLICE_SUMS`: a thread's slices in one bandwidth period of its group, summed
/// in the kernel. When the thread comes off the CPU in a later period, the sum goes to the daemon
/// as one [`SliceEvent`] and the entry starts over; sums nobody sent that way (the thread has not
/// run since) the daemon reads from the map once their period has ended.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SliceSum {
    /// The group's period: its `cfs_bandwidth.nr_periods` plus one when the slices ran.
    pub period: u32,
    pub slices: u32,
    pub runtime_ns: u64,
    /// When the first slice of this sum ended (tells the sum from a later one of the same
    /// thread and period, after the daemon deleted the entry).
    pub first_ns: u64,
    /// When the last one ended.
    pub last_ns: u64,
    pub tgid: u32,
    pub last_cpu: u32,
    /// Distinct CPUs it ran on (see [`SLICE_CPU_BITS`]).
    pub cpus: u32,
    pub _pad: u32,
    pub cpu_mask: [u64; (SLICE_CPU_BITS / 64) as usize],
    pub comm: [u8; 16],
}

/// [`SliceEvent::flags`]: one slice, sent alone because `THROTTLE_SLICE_SUMS` had no room (the
/// daemon adds it); without it the record is a thread's sum so far in `period`.
pub const SLICE_ONE: u32 = 1;

/// A thread of a watched group ran `runtime_ns` in `period` (see [`SliceSum`]): its sum when it
/// came off the CPU in a later period, or, read by the daemon from the map, its sum at that moment.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SliceEvent {
    /// `cpu`: the last CPU it ran on; `ts_ns`: when the record was made.
    pub header: EventHeader,
    /// The group with the quota (nearest ancestor with `runtime_enabled`).
    pub cgroup_id: u64,
    pub runtime_ns: u64,
    pub pid: u32,
    pub tgid: u32,
    pub comm: [u8; 16],
    /// As in [`SliceSum`]; 0 in recordings made before slices were summed.
    pub period: u32,
    pub slices: u32,
    pub cpus: u32,
    /// [`SLICE_ONE`] or 0.
    pub flags: u32,
    pub first_ns: u64,
}

/// The period timer of a watched group fired: `period` (as in [`SliceSum`]) ended; `throttled`
/// as in `ThrottleStats`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PeriodEvent {
    pub header: EventHeader,
    pub cgroup_id: u64,
    pub throttled: u32,
    /// 0 in recordings made before slices were summed.
    pub period: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] integers.
    unsafe impl aya::Pod for super::ThrottleStats {}
    // SAFETY: #[repr(C)] integers.
    unsafe impl aya::Pod for super::HookEpisode {}
    // SAFETY: #[repr(C)] integers with explicit padding.
    unsafe impl aya::Pod for super::SliceKey {}
    // SAFETY: #[repr(C)] integers and byte arrays with explicit padding.
    unsafe impl aya::Pod for super::SliceSum {}
}
