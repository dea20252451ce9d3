//! `runq`: run-queue latency — how long a runnable task waited for a CPU, charged to the task
//! that waited (the wakee at `sched_wakeup`, `next` at `sched_switch`), keyed by its cgroup.
//!
//! Two outputs: per-(cgroup, kind) histograms aggregated in the kernel (`RUNQ_SLOTS` slots the
//! daemon takes once per interval, or before task storage `RUNQ_HIST` entries it reads as
//! cumulative values), and one [`RunqEvent`] per wait at or above the
//! event threshold in the `EVENTS` ring buffer (for `record` and event lines).

use crate::{event::EventHeader, hist::NR_BUCKETS};

/// Why a task was runnable and waiting. Retired values are never reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WaitKind {
    /// Woken (`sched_wakeup`/`sched_wakeup_new`) and waiting to run.
    Wakeup = 0,
    /// Switched out while still runnable (preempted or yielded) and waiting to run again.
    Preempt = 1,
    /// Off the CPU because its group or an ancestor was throttled (CFS bandwidth).
    Throttled = 2,
}

/// Number of wait kinds.
pub const NR_WAIT_KINDS: usize = 3;

/// `RunqEvent::kind` of a record that is not a wait: the part of a wait's kernel stretch the
/// task spent asleep (`wait_ns`; kernel stamps only, see `counters::RUNQ_ASLEEP_STAMPED`),
/// which the kernel's `run_delay` counts and the wait leaves out. Sent for every such wait.
pub const EVENT_KIND_ASLEEP: u32 = 3;

impl WaitKind {
    /// All kinds, in value order.
    pub const ALL: [Self; NR_WAIT_KINDS] = [Self::Wakeup, Self::Preempt, Self::Throttled];

    /// The name used in the stream, the view and recordings.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Wakeup => "wakeup",
            Self::Preempt => "preempt",
            Self::Throttled => "throttled",
        }
    }
}

impl TryFrom<u32> for WaitKind {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            0 => Ok(Self::Wakeup),
            1 => Ok(Self::Preempt),
            2 => Ok(Self::Throttled),
            other => Err(other),
        }
    }
}

/// `sched_switch`'s `prev_state` of a task switched out still runnable.
pub const TASK_RUNNING: u64 = 0;
/// `TASK_DEAD`: the task's last switch-out (0x80 since at least 4.14).
pub const TASK_DEAD: u64 = 0x80;
/// `TASK_INTERRUPTIBLE`: going to sleep (or preempted on its way there).
pub const TASK_INTERRUPTIBLE: u64 = 0x1;
/// A state that could not be read: neither running nor dead. A plain value, not an `Option`:
/// LLVM compares a `None`'s undefined payload, which the 5.10 verifier refuses (`!read_ok`).
pub const STATE_UNKNOWN: u64 = 1 << 62;

/// What a switch-out (`sched_switch`'s `prev`) means for the task's run-queue wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchOut {
    /// Still queued: switched out running (preempted, or yielded), or preempted whatever its
    /// state — preempted on its way to sleep (preempt=full kernels) it stays queued and runs
    /// again without a wakeup. A wait starts now, replacing any stamp a wakeup left while it
    /// still ran.
    Queued,
    /// Its last switch-out: a stamp it may have left (woken while still running) goes.
    Exited,
    /// Going to sleep: its next wait starts at its wakeup.
    Sleeps,
}

impl SwitchOut {
    /// From the tracepoint's `preempt` flag and the task's state (`STATE_UNKNOWN` if unread).
    /// Not the flag alone: it is 0 for most involuntary preemptions on preempt=none kernels.
    #[inline(always)]
    pub fn of(preempt: bool, state: u64) -> Self {
        if preempt || state == TASK_RUNNING {
            Self::Queued
        } else if state != STATE_UNKNOWN && state & TASK_DEAD != 0 {
            Self::Exited
        } else {
            Self::Sleeps
        }
    }
}

/// Value of `RUNQ_START` (keyed by tid) and of the task-local `RUNQ_START_TASK`: when the wait
/// began and why.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunqStart {
    /// When the wait began, in `bpf_ktime_get_ns`.
    pub ts_ns: u64,
    pub kind: u32,
    /// 1 + the CPU whose run queue the wait began on, with `rq_clock_lo` the low 32 bits of that
    /// run queue's clock (`rq.clock`) then; 0: not read. A wait that ends on the same CPU within
    /// 2^31 ns is timed in that clock — the clock of the kernel's own `run_delay`, stamped before
    /// the scheduler's work that precedes the tracepoint (a throttle, a contended lock), which
    /// `bpf_ktime_get_ns` at the tracepoint includes and a preempted vCPU stretches.
    pub rq_cpu: u32,
    /// For kind throttled: the throttled `cfs_rq` whose unthrottle splits the wait into its
    /// throttled part and the queueing after it.
    pub throttle_cfs_rq: u64,
    /// Kernels before task-based throttling (`LAYOUT.thr_clock_kind` set): the task's own
    /// `cfs_rq` when the wait began and the kernel's throttled clock of that `cfs_rq` then; at
    /// the end, the clock's advance is the part of the wait spent throttled (0: not kept).
    ///
    /// Waits from the kernel's own stamps (the `sched_switch_stamps` programs, 6.18+, where that
    /// split is never used) keep other things in the same words, so the struct stays 64 bytes
    /// (at 88 the 5.10 verifier never finished the `sched_switch` program of the hash path):
    /// `leaf_cfs_rq` is the task's `run_delay` (the kernel's total run-queue wait) as of its last
    /// switch-in, `thr_clock` its `nivcsw` (involuntary switches) then, `rq_clock_lo` the low 32
    /// bits of its `nivcsw` after a switch-out into a throttled hierarchy (with that `cfs_rq` in
    /// `throttle_cfs_rq`), and `ts_ns` the time of its last switch-in (0: not seen yet).
    ///
    /// Own stamps in task storage, from a switch-in to the next start (`ts_ns` 0): `thr_clock`
    /// is the task's `run_delay` plus its open stretch at that switch-in, what the kernel's
    /// total is after it (for a wait with no start of ours, see `take_start`); where no
    /// throttled clock is kept (6.18+), the same total at the start while one is open (for a
    /// switch-in that ran no `sched_switch`, see `start_wait`).
    pub leaf_cfs_rq: u64,
    pub thr_clock: u64,
    /// Task-local storage only: the task's cgroup at its last wait (0: none) and, per wait kind,
    /// the `RUNQ_SLOTS` slot of that cgroup's histogram — a cache, checked against the slot's
    /// owner before use.
    pub slot_cgroup: u64,
    /// Scalars, not an array: an array field made LLVM zero it with a memset call per wait.
    pub slot_wakeup: u32,
    pub slot_preempt: u32,
    pub slot_throttled: u32,
    /// See `rq_cpu`.
    pub rq_clock_lo: u32,
}

impl RunqStart {
    /// A wait begun at `ts_ns`, of `kind` (a [`WaitKind`] value), with its throttled-split
    /// words; no run-queue clock, no slot cached.
    #[inline(always)]
    pub const fn new(
        ts_ns: u64,
        kind: u32,
        throttle_cfs_rq: u64,
        leaf_cfs_rq: u64,
        thr_clock: u64,
    ) -> Self {
        Self {
            ts_ns,
            kind,
            rq_cpu: 0,
            throttle_cfs_rq,
            leaf_cfs_rq,
            thr_clock,
            slot_cgroup: 0,
            slot_wakeup: 0,
            slot_preempt: 0,
            slot_throttled: 0,
            rq_clock_lo: 0,
        }
    }

    /// The same, begun on run queue `rq_cpu` (1 + its CPU; 0: not read) at the low 32 bits of
    /// its clock `rq_clock_lo`.
    #[inline(always)]
    pub const fn on_rq(self, rq_cpu: u32, rq_clock_lo: u32) -> Self {
        Self {
            rq_cpu,
            rq_clock_lo,
            ..self
        }
    }

    /// The wait from this start to `now` (ktime, not before the start) on the run queue `rq_cpu`
    /// (1 + its CPU; 0: not read) with clock `rq_clock`: in that clock when the wait began on the
    /// same run queue less than 2^31 ns ago by both clocks, else in ktime. Without a branch (the
    /// BPF verifier walks the rest of `sched_switch` once per path through here).
    #[inline(always)]
    pub const fn wait_ns(&self, now: u64, rq_cpu: u32, rq_clock: u64) -> u64 {
        self.wait_ns_in(now, rq_cpu, rq_clock).0
    }

    /// [`RunqStart::wait_ns`], and all ones when it was timed in the run queue's clock (so a
    /// [`RqClockOffset`] staleness applies to it), else 0.
    #[inline(always)]
    pub const fn wait_ns_in(&self, now: u64, rq_cpu: u32, rq_clock: u64) -> (u64, u64) {
        let ktime = now - self.ts_ns;
        let rq = (rq_clock as u32).wrapping_sub(self.rq_clock_lo) as u64;
        // 0 exactly when the run queues match, neither is "not read" (0 - 1 wraps past 32 bits)
        // and both waits are below 2^31.
        let off = (self.rq_cpu ^ rq_cpu) as u64
            | ((rq_cpu as u64).wrapping_sub(1) >> 32)
            | ((ktime | rq) >> 31);
        // All ones when `off` is 0, else 0.
        let take_rq = ((off | off.wrapping_neg()) >> 63).wrapping_sub(1);
        (ktime ^ ((ktime ^ rq) & take_rq), take_rq)
    }
}

/// A wait that starts at ktime `now`, with its run queue's clock at `clock`, dated back by
/// `back` ns (what the kernel counted of it already): `(ts_ns, rq_clock)`, both `back` earlier,
/// or `now` and `clock` when `back` is 2^31 ns or more, or more than `now` (not believed).
/// Without a branch.
#[inline(always)]
pub const fn dated_back(now: u64, clock: u64, back: u64) -> (u64, u64) {
    let keep = !nonzero_mask(back >> 31) & !((now.wrapping_sub(back) as i64 >> 63) as u64);
    let back = back & keep;
    (now - back, clock.wrapping_sub(back))
}

/// All ones when `v` is not 0, else 0. Branch-free, like every helper below: each branch on
/// the `sched_switch` path is one more path through the rest of it for the verifier.
#[inline(always)]
const fn nonzero_mask(v: u64) -> u64 {
    0u64.wrapping_sub((v | v.wrapping_neg()) >> 63)
}

/// `a` where `mask` is all ones, `b` where it is 0.
#[inline(always)]
const fn select(mask: u64, a: u64, b: u64) -> u64 {
    b ^ ((a ^ b) & mask)
}

/// The lesser of two values that differ by less than 2^63, compared in wrapping arithmetic
/// (ktime minus a run queue's clock can be either sign).
#[inline(always)]
const fn wrapping_min(a: u64, b: u64) -> u64 {
    let a_less = ((a.wrapping_sub(b) as i64) >> 63) as u64;
    select(a_less, a, b)
}

/// A CPU's run-queue clock against ktime, for how stale the clock is at a switch (value of
/// `RQ_CLOCK_OFFSET`, per CPU).
///
/// The kernel times a run-queue wait in its run queue's clock (`rq.clock`), which it updates at
/// every enqueue and switch — except the switch right after a wakeup that preempts (or wakes an
/// idle CPU): that one keeps the clock of the wakeup (`rq_clock_skip_update`), so the microseconds
/// between the wakeup and the switch are in no one's `run_delay`, and such a wait reads 0. The
/// task waited them all the same (runqlat, timing both ends in ktime, sees them).
///
/// At each switch, `ktime − rq.clock` is the clocks' offset plus how long ago the clock was last
/// updated. Most switches update it first (a task that sleeps, yields or is preempted by the
/// tick), so the least such value over recent switches is the offset itself, plus the
/// tracepoint's few hundred nanoseconds; the staleness of this switch's clock is its value above
/// that least one. The least is kept over windows of [`RqClockOffset::WINDOW_NS`] (this one and
/// the last), so it follows a drift between the two clocks (NTP slewing ktime, ppm) within two
/// windows; after a CPU slept longer than that, the last least value is kept up to
/// [`RqClockOffset::KEEP_NS`], then none (staleness 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RqClockOffset {
    /// Least `ktime − rq.clock` (wrapping) in the current window.
    pub cur: u64,
    /// Least in the window before (or the last one known, see the type).
    pub last: u64,
    /// When the current window began (ktime; 0: never).
    pub since: u64,
    /// The staleness at this CPU's last switch (what [`RqClockOffset::switch`] returned).
    pub stale: u64,
}

impl RqClockOffset {
    /// 2^26 ns (67 ms).
    pub const WINDOW_SHIFT: u32 = 26;
    pub const WINDOW_NS: u64 = 1 << Self::WINDOW_SHIFT;
    /// 2^30 ns (1.07 s): past this the last least value is too old to use.
    pub const KEEP_SHIFT: u32 = 30;
    pub const KEEP_NS: u64 = 1 << Self::KEEP_SHIFT;
    /// Staleness of 2^31 ns or more is not believed (a clock not read, a wrap): 0.
    pub const MAX_SHIFT: u32 = 31;

    /// Takes the switch at ktime `now` with run-queue clock `clock`; returns how stale `clock`
    /// is (ns, by the estimate above).
    #[inline(always)]
    pub fn switch(&mut self, now: u64, clock: u64) -> u64 {
        let d = now.wrapping_sub(clock);
        let elapsed = now.wrapping_sub(self.since);
        // All ones when the current window is over (or there was none).
        let rotate = nonzero_mask(elapsed >> Self::WINDOW_SHIFT) | !nonzero_mask(self.since);
        // All ones when nothing recent enough is known.
        let forget = nonzero_mask(elapsed >> Self::KEEP_SHIFT) | !nonzero_mask(self.since);
        // The window that ended is the last one known, however long ago it ended (up to
        // `KEEP_NS`: a CPU that slept has no newer one).
        let last = select(rotate, select(forget, d, self.cur), self.last);
        let cur = select(rotate, d, wrapping_min(self.cur, d));
        self.since = select(rotate, now, self.since);
        self.cur = cur;
        self.last = last;
        // Never negative: the least value is at most `d` (`cur` is).
        let stale = d.wrapping_sub(wrapping_min(cur, last));
        let stale = stale & !nonzero_mask(stale >> Self::MAX_SHIFT);
        self.stale = stale;
        stale
    }
}

/// Key of `RUNQ_HIST`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunqKey {
    /// `kernfs_node.id` of the waiting task's cgroup in the traced hierarchy (0: unreadable).
    pub cgroup_id: u64,
    /// A [`WaitKind`] value.
    pub kind: u32,
    pub _pad: u32,
}

/// Value of `RUNQ_HIST`: sum and buckets are cumulative since the entry was created (the
/// daemon takes deltas); the maximum is per window.
///
/// Window maxima use two slots: while the `EPOCH` map holds `e`, writers keep the max of epoch `e`
/// in slot `e & 1` (resetting it when the slot still carries an older epoch). The daemon bumps
/// `EPOCH` to `e + 1` at the end of a window and then reads slot `e & 1`, which no writer of the
/// new epoch touches.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunqHist {
    /// Sum of all waits (ns), in the run queue's clock: the kernel's `run_delay`. The count is
    /// the sum of `buckets`: one atomic add fewer per wait.
    pub sum_ns: u64,
    /// Sum of the clock's staleness at the switches that ended them (ns, see [`RqClockOffset`]):
    /// what the tasks waited beyond `sum_ns`. Buckets and maxima are of the whole wait.
    pub stale_ns: u64,
    pub max_ns: [u64; 2],
    pub max_epoch: [u64; 2],
    /// Waits per bucket, `u32` to halve the kernel memory of a node's histograms (one per
    /// cgroup and wait kind, `--max-cgroups` × 3 of them). A `RUNQ_SLOTS` slot is taken by the
    /// daemon every window (each non-zero bucket, then the sums, swapped for 0); a `RUNQ_HIST`
    /// entry is cumulative, a bucket wraps after 2^32 waits (hours at the busiest rates) and the
    /// daemon takes each bucket's gain modulo 2^32. Either is exact as long as no bucket gains
    /// 2^32 waits within one window.
    pub buckets: [u32; NR_BUCKETS],
}

impl RunqHist {
    pub const ZERO: Self = Self {
        sum_ns: 0,
        stale_ns: 0,
        max_ns: [0; 2],
        max_epoch: [0; 2],
        buckets: [0; NR_BUCKETS],
    };

    /// The sum of the buckets as read (they wrap: equal sums mean no new wait, not a count).
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|&n| u64::from(n)).sum()
    }

    /// The maximum of window `epoch`, if that slot was written in it.
    pub fn window_max(&self, epoch: u64) -> Option<u64> {
        window_max(epoch, |slot| (self.max_epoch[slot], self.max_ns[slot]))
    }
}

/// [`RunqHist::window_max`] where the fields are read one by one (a mapped slot): `max(slot)`
/// gives (`max_epoch[slot]`, `max_ns[slot]`) for the slot of `epoch`'s parity.
pub fn window_max(epoch: u64, max: impl FnOnce(usize) -> (u64, u64)) -> Option<u64> {
    let (at, ns) = max((epoch & 1) as usize);
    (at == epoch).then_some(ns)
}

/// Value of `RUNQ_SLOTS`, the histograms of kernels with task-local storage: one slot per
/// (cgroup, wait kind), as many as `RUNQ_HIST` would hold. A wait finds its slot through the cache
/// in its task's storage (an array index, no hash lookup); the first wait of a (cgroup, kind)
/// takes a slot from the `RUNQ_FREE_SLOTS` stack (lowest first, a freed one before any never used)
/// and maps it in `RUNQ_SLOT_OF`. The daemon takes each slot's new waits every window through a
/// memory mapping of the array's slots in use (the slot then holds only what came after) and,
/// when the cgroup is removed, unmaps its slots, zeroes them and pushes them back on the stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunqSlot {
    /// Whose histogram it is (cgroup id 0: free). Set before the slot is mapped.
    pub owner: RunqKey,
    pub hist: RunqHist,
}

/// A wait at or above `CONFIG.runq_event_min_ns`, sent through the `EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunqEvent {
    pub header: EventHeader,
    pub cgroup_id: u64,
    pub wait_ns: u64,
    pub pid: u32,
    pub tgid: u32,
    /// A [`WaitKind`] value.
    pub kind: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// Slices each CPU keeps for the blame ledger (a power of two; 24 KiB a CPU). On the node
/// simulator (200 pods on 2 CPUs, about 22 tasks waiting at any time) 64 left 32 % of the wait
/// older than the ring; a wait's charge walks only the slices since it began, in `bpf_loop` on
/// kernels 5.18+.
pub const NR_SLICES: usize = 1024;

/// How far back a wait's walk reaches on kernels before 5.18 (no `bpf_loop` in the programs
/// they load): a bounded loop the verifier walks step by step.
pub const WALK_BOUNDED: usize = 128;

/// One stretch during which a CPU ran a task of one cgroup (`cgroup_id` 0: the idle task, or a
/// cgroup that could not be read). 24 bytes: the ring of [`NR_SLICES`] stays under the 32 KiB a
/// per-CPU map value may have.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Slice {
    pub cgroup_id: u64,
    pub start_ns: u64,
    /// How long it lasted (a slice longer than `u32::MAX` ns, 4.3 s, keeps its last 4.3 s).
    pub len_ns: u32,
    /// The share of the slice the run queue accounted as interrupt time (`rq.prev_irq_time`) and
    /// as steal time (`rq.prev_steal_time_rq`), in 1/65 536ths (0 where the kernel cannot tell).
    pub irq_frac: u16,
    pub steal_frac: u16,
}

/// A share of `len` as [`Slice::irq_frac`] keeps it: `part / len` in 1/65 536ths, at most 65 535.
#[inline(always)]
pub const fn slice_frac(part: u64, len: u64) -> u16 {
    if part == 0 || len == 0 {
        0
    } else if part >= len {
        u16::MAX
    } else {
        ((part << 16) / len) as u16
    }
}

/// Summaries each CPU keeps of the slices its ring has dropped (the `bpf_loop` programs, 5.18+).
pub const NR_EPOCHS: usize = 32;
/// Dropped slices one summary covers: with [`NR_EPOCHS`], the ledger reaches back 16 times as
/// many slices as the ring holds.
pub const EPOCH_SLICES: u64 = 512;
/// A summary also covers at least this long (1 s) before the next begins: where slices are
/// short (a crowded CPU switching tens of thousands of times a second), [`EPOCH_SLICES`] of them
/// span a few milliseconds, and the waits there last seconds (a best-effort pod at the lowest
/// weight starves behind the others: on the node simulator 8.1 % of all wait was older than 32
/// summaries of 100 ms, 3.2 % older than 32 of 1 s); this way they reach back at least 32 s
/// whatever the switch rate.
pub const EPOCH_MIN_NS: u64 = 1_000_000_000;
/// A dropped slice at least this long (20 ms: an idle stretch, a task alone on its CPU) is a
/// summary of its own: summed with short ones, a wait reaching into those would be charged its
/// share.
pub const EPOCH_LONG_SLICE_NS: u64 = 20_000_000;
/// Cgroups a summary names: those that held the CPU longest in its slices, as far as this many
/// entries keep them (a slice of a cgroup not there replaces the entry with the least time if it
/// is longer); the time of the others is charged to [`CULPRIT_OLDER_OTHERS`].
pub const EPOCH_TOP: usize = 8;

/// A summary of [`EPOCH_SLICES`] consecutive slices a CPU's ring dropped: from when to when, and
/// how long each of its first [`EPOCH_TOP`] cgroups held the CPU (`ns` 0: a free entry; cgroup
/// 0: idle). A wait that reaches back into it is charged in proportion: its overlap with the
/// summary times each cgroup's share of the summary — an estimate, where the ring is exact.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Epoch {
    pub start_ns: u64,
    pub end_ns: u64,
    pub cgroup: [u64; EPOCH_TOP],
    pub ns: [u64; EPOCH_TOP],
}

/// Value of the per-CPU `CPU_SLICES`: the CPU's last [`NR_SLICES`] slices (a ring, `head` counts
/// pushes) and the one running now, and summaries of older ones (`epochs`, a ring too:
/// `epoch_head` counts summaries begun, `epoch_fill` the slices in the newest). Written at every
/// `sched_switch`; read when a wait ends on that CPU, to charge the wait to whoever held the CPU
/// meanwhile. 29.2 KiB: under the 32 KiB a per-CPU map value may have.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SliceRing {
    pub head: u64,
    pub cur_cgroup: u64,
    pub cur_start: u64,
    /// The run queue's accounted interrupt and steal time (cumulative ns) at `cur_start`.
    pub cur_irq: u64,
    pub cur_steal: u64,
    pub slots: [Slice; NR_SLICES],
    pub epoch_head: u64,
    pub epoch_fill: u64,
    pub epochs: [Epoch; NR_EPOCHS],
}

/// Value of `IDLE_SINCE` (one per CPU, a cache line each so CPUs going idle do not share one):
/// when the CPU's idle task was switched in, 0 while it runs a task.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IdleSince {
    pub since_ns: u64,
    pub _pad: [u64; 7],
}

/// The most CPUs `idle_elsewhere` looks at (the allowed-CPU mask is read as 8 words).
pub const IDLE_SCAN_MAX_CPUS: u32 = 512;

/// Key of `BLAME`: a cgroup that waited (`victim`) and who held its CPU meanwhile (`culprit`: a
/// cgroup id, the victim itself for its own siblings, or a `CULPRIT_*` marker).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlameKey {
    pub victim: u64,
    pub culprit: u64,
}

/// Entries in each half of a CPU's table of short waits (`BLAME_SHORT`, a power of two).
pub const SHORT_ENTRIES: usize = 8;

/// Slack (ns) of the test that a short wait lies within the slice that just ended: on the
/// kernel-stamps path (6.18+) a wait's start is in the run queue's clock, which runs a few ns
/// ahead of the slices' ktime between two switches.
pub const SHORT_SLACK_NS: u64 = 2_000;

/// One (victim, culprit) pair's short waits charged on a CPU in a window (`BLAME_SHORT`): a wait
/// shorter than `--blame-min-us` that lies within the slice that just ended is charged to that
/// slice's owner without a walk, and adds up here instead of in `BLAME`, with the slices'
/// interrupt and steal shares of it beside. A pair that finds its entry taken by another pair of
/// the same window moves that one into `BLAME` first; an entry of an older window (`epoch`) has
/// been read by the daemon and is reused.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShortCharge {
    /// The cgroup that waited (no parity bit: the half of the table is the window's parity).
    pub victim: u64,
    pub culprit: u64,
    /// The window (`EPOCH`) the ns were charged in.
    pub epoch: u64,
    /// The waits less their interrupt and steal shares, charged to `culprit`.
    pub ns: u64,
    /// Their shares the run queue accounted as interrupt time ([`CULPRIT_IRQ`]).
    pub irq_ns: u64,
    /// And as steal time ([`CULPRIT_STEAL`]).
    pub steal_ns: u64,
}

/// A CPU's short-wait table for the windows of one parity (`BLAME_SHORT` holds two: index
/// `EPOCH & 1`). 384 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ShortHalf {
    pub entries: [ShortCharge; SHORT_ENTRIES],
}

/// The entry of `(victim, culprit)` in a [`ShortHalf`]: a multiplicative hash of both, so that
/// pairs that take turns on a CPU — two tasks of the root cgroup (one victim, two culprits), two
/// pods waiting behind each other ((a, b) and (b, a)) — have entries of their own rather than
/// displacing each other at every switch.
#[inline(always)]
pub fn short_index(victim: u64, culprit: u64) -> usize {
    let h = (victim ^ culprit.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 61) as usize & (SHORT_ENTRIES - 1)
}

/// Bit of `BlameKey::victim` that holds, in the kernel's `BLAME` map, the parity of the window
/// (`EPOCH & 1`) the pair was charged in. Cgroup ids never reach it (a kernfs node id is its
/// inode number, with a generation above bit 32 that grows only when 2^32 inode numbers have
/// wrapped). The daemon hands over the ended window's half once the epoch has moved on (no
/// program charges it then), zeroing what it read, so it keeps no copy of cumulative values.
pub const BLAME_PARITY_SHIFT: u32 = 63;

/// Culprit marker: the victim's own quota was exhausted (its wait's throttled part).
pub const CULPRIT_THROTTLED_OWN: u64 = u64::MAX;
/// Culprit marker: an ancestor's quota was exhausted.
pub const CULPRIT_THROTTLED_ANCESTOR: u64 = u64::MAX - 1;
/// Culprit marker: the CPU it was queued on ran its idle task meanwhile (the CPU was being woken:
/// an IPI, an idle-state exit, a vCPU the host had halted), or a task whose cgroup could not be
/// read.
pub const CULPRIT_IDLE: u64 = u64::MAX - 2;
/// Culprit marker: the part of a wait older than the CPU's last [`NR_SLICES`] slices (the ring
/// no longer says who held the CPU then).
pub const CULPRIT_HISTORY: u64 = u64::MAX - 3;
/// Culprit marker: the CPU handled hard and soft interrupts during the slices that overlapped
/// the wait (the kernel's `rq.prev_irq_time`, `CONFIG_IRQ_TIME_ACCOUNTING`).
pub const CULPRIT_IRQ: u64 = u64::MAX - 4;
/// Culprit marker: the hypervisor ran something else on the vCPU during those slices (the
/// kernel's `rq.prev_steal_time_rq`, `CONFIG_PARAVIRT_TIME_ACCOUNTING`).
pub const CULPRIT_STEAL: u64 = u64::MAX - 5;
/// Culprit marker: another CPU the task was allowed to run on sat idle while it waited (idle
/// when the wait ended, for as long as that overlapped the wait): balancing or affinity, not
/// capacity.
pub const CULPRIT_IDLE_ELSEWHERE: u64 = u64::MAX - 6;
/// Culprit marker: the part of a wait older than the CPU's ring that its summaries of dropped
/// slices hold but do not name (not among their [`EPOCH_TOP`] longest-held cgroups): other
/// cgroups, or the kernel.
pub const CULPRIT_OLDER_OTHERS: u64 = u64::MAX - 7;
/// Culprit marker: neighbour cgroups a walked wait overlapped beyond the [`WALK_TOP`] it names
/// (a crowded CPU: thousands of cgroups' slices within one wait).
pub const CULPRIT_OTHER_NEIGHBOURS: u64 = u64::MAX - 8;
/// Culprit marker: root-cgroup tasks ([`culprit_task`]) a walked wait overlapped beyond the
/// [`WALK_TOP`] it names: kernel threads and host processes, unnamed.
pub const CULPRIT_OTHER_TASKS: u64 = u64::MAX - 9;
/// Culprit markers, lowest first: every culprit at or above this is a marker, not a cgroup.
pub const CULPRIT_MARKERS: u64 = CULPRIT_OTHER_TASKS;

/// The most culprits a walked wait (`bpf_loop` programs) names in `BLAME` (a power of two): its
/// slices are summed by culprit in [`WalkTop`] first, each culprit in the entry a hash of it
/// picks, the one holding more kept when two meet there, and what the others held goes to
/// [`CULPRIT_OTHER_NEIGHBOURS`] / [`CULPRIT_OTHER_TASKS`]. Without the bound a wait on a crowded
/// CPU charged every cgroup of its 1 024 slices: 10 000 cgroups waking on 2 CPUs made hundreds of
/// thousands of pairs in a window and filled `BLAME` (`blame_full`).
pub const WALK_TOP: usize = 16;

/// Value of the per-CPU `BLAME_WALK`: one wait's charges summed by culprit during its walk of
/// the ring (its summaries of dropped slices charge `BLAME` directly), before they go to `BLAME` (a map value, not the program's stack:
/// 6.1 refuses `sched_switch` with a combined stack over 512 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WalkTop {
    /// Entries in use, listed in `used` (a walk flushes only those, and frees them as it goes:
    /// between walks every entry is free).
    pub n: u64,
    pub used: [u8; WALK_TOP],
    /// The victim's own cgroup (its siblings) and the idle CPU: parts of their own, never
    /// displaced.
    pub siblings: u64,
    pub idle: u64,
    /// What culprits displaced from (or never let into) the table held.
    pub other_cgroups: u64,
    pub other_tasks: u64,
    /// Entry `i`: a culprit and the ns it held (0: free).
    pub culprit: [u64; WALK_TOP],
    pub ns: [u64; WALK_TOP],
}

/// A slice of a task in the root cgroup (kernel threads, host processes outside any container)
/// is kept as this tag with the task's process id (its tgid: a kernel thread's own pid), so the
/// ledger names which threads and processes make up `kernel_us`. Below the markers, above any
/// cgroup id (kernfs node ids count up from 1).
pub const CULPRIT_TASK_TAG: u64 = 1 << 62;

/// The culprit a slice of root-cgroup task `tgid` is kept as.
#[inline(always)]
pub const fn culprit_task(tgid: u32) -> u64 {
    CULPRIT_TASK_TAG | tgid as u64
}

/// The process id of a [`culprit_task`] culprit, `None` for a cgroup or a marker.
#[inline(always)]
pub const fn culprit_task_tgid(culprit: u64) -> Option<u32> {
    if culprit >> 62 == 1 {
        Some(culprit as u32)
    } else {
        None
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] integers.
    unsafe impl aya::Pod for super::BlameKey {}
    // SAFETY: #[repr(C)] integers with explicit padding.
    unsafe impl aya::Pod for super::RunqKey {}
    // SAFETY: #[repr(C)] integers.
    unsafe impl aya::Pod for super::RunqHist {}
    // SAFETY: #[repr(C)] integers with explicit padding.
    unsafe impl aya::Pod for super::RunqStart {}
    // SAFETY: #[repr(C)] integers.
    unsafe impl aya::Pod for super::RunqSlot {}
    // SAFETY: #[repr(C)] integers.
    unsafe impl aya::Pod for super::ShortHalf {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wait_is_dated_back_by_what_the_kernel_counted_of_it() {
        let (now, clock) = (10_000_000_000, 5_000_000_000);
        assert_eq!(super::dated_back(now, clock, 0), (now, clock));
        assert_eq!(
            super::dated_back(now, clock, 72_000_000),
            (now - 72_000_000, clock - 72_000_000)
        );
        // The clock wraps in the low 32 bits the start keeps: fine.
        assert_eq!(
            super::dated_back(now, 5, 7),
            (now - 7, 5u64.wrapping_sub(7))
        );
        // 2^31 ns or more, or more than ktime: not believed.
        assert_eq!(super::dated_back(now, clock, 1 << 31), (now, clock));
        assert_eq!(super::dated_back(1_000, clock, 72_000_000), (1_000, clock));
        assert_eq!(super::dated_back(now, clock, u64::MAX), (now, clock));
    }

    /// Pairs that take turns on a CPU get entries of their own: one entry per victim made the two
    /// processes of `perf bench sched pipe` in the root cgroup (one victim, two culprits) displace
    /// each other at every switch, +25 % of `sched_switch`.
    #[test]
    fn pairs_that_take_turns_have_short_entries_of_their_own() {
        let root = 1;
        for tgid in [1_000u32, 4_321, 65_535, 4_000_000] {
            let (a, b) = (culprit_task(tgid), culprit_task(tgid + 1));
            assert_ne!(short_index(root, a), short_index(root, b), "tgid {tgid}");
        }
        for a in [4_000u64, 12_345, 1 << 20, (1 << 32) + 77] {
            for b in [a + 1, a + 2, a + 40] {
                assert_ne!(short_index(a, b), short_index(b, a), "({a}, {b})");
            }
        }
        assert!((0..10_000).all(|v| short_index(v, v * 3) < SHORT_ENTRIES));
    }

    #[test]
    fn clock_staleness_is_the_offset_above_the_least_recent_one() {
        let mut o = RqClockOffset::default();
        // ktime runs 5 000 ns ahead of the run queue's clock; the first switch knows nothing.
        assert_eq!(o.switch(1_000_000, 995_000), 0);
        // A fresh clock (updated 300 ns before the tracepoint), then one 7 µs stale.
        assert_eq!(o.switch(2_000_000, 1_995_000 - 300), 300);
        assert_eq!(o.switch(2_100_000, 2_095_000 - 7_000), 7_000);
        // A fresh one again: the least so far.
        assert_eq!(o.switch(2_200_000, 2_195_000), 0);
        // Next window: the last window's least is still known.
        let w = RqClockOffset::WINDOW_NS;
        assert_eq!(
            o.switch(1_000_000 + w + 10, 995_000 + w + 10 - 4_000),
            4_000
        );
        assert_eq!(o.switch(1_000_000 + w + 20, 995_000 + w + 20), 0);
        // A CPU that slept 0.5 s keeps its last least value.
        let t = 1_000_000 + w + 500_000_000;
        assert_eq!(o.switch(t, t - 5_000 - 20_000), 20_000);
        // After more than `KEEP_NS` asleep nothing is known: 0, and the switch starts anew.
        let t = t + RqClockOffset::KEEP_NS + 1;
        assert_eq!(o.switch(t, t - 5_000 - 20_000), 0);
        assert_eq!(o.switch(t + 1_000, t + 1_000 - 5_000 - 1_000), 0);
        // The offset drifts down (ktime slowed): the least follows at once.
        assert_eq!(o.switch(t + 2_000, t + 2_000 - 4_000), 0);
        assert_eq!(o.switch(t + 3_000, t + 3_000 - 4_000 - 2_500), 2_500);
        // Either sign of offset, and a clock not read (0) never gives a huge staleness.
        let mut o = RqClockOffset::default();
        assert_eq!(o.switch(1_000, 3_000), 0);
        assert_eq!(o.switch(2_000, 3_900), 100);
        let mut o = RqClockOffset::default();
        assert_eq!(o.switch(5_000_000_000, 4_000_000_000), 0);
        assert_eq!(o.switch(5_000_001_000, 0), 0);
    }

    extern crate std;
    use super::*;

    /// The wait-start stamp of one task, driven as the programs drive `RUNQ_START`.
    #[derive(Default)]
    struct Task {
        stamp: Option<(u64, WaitKind)>,
    }

    impl Task {
        fn wakeup(&mut self, now: u64) {
            self.stamp = Some((now, WaitKind::Wakeup));
        }
        fn switch_out(&mut self, preempt: bool, state: u64, now: u64) {
            match SwitchOut::of(preempt, state) {
                SwitchOut::Queued => self.stamp = Some((now, WaitKind::Preempt)),
                SwitchOut::Exited => self.stamp = None,
                SwitchOut::Sleeps => {}
            }
        }
        /// Switched in: the wait that ends, as (length, kind).
        fn switch_in(&mut self, now: u64) -> Option<(u64, WaitKind)> {
            self.stamp.take().map(|(t, k)| (now - t, k))
        }
    }

    #[test]
    fn waits_are_timed_in_the_run_queue_clock_on_the_same_cpu_only() {
        let start = RunqStart::new(1_000, 0, 0, 0, 0).on_rq(3, (5u64 << 32 | 100) as u32);
        // Same run queue (CPU 2): its clock's advance, across the low half's wrap too.
        assert_eq!(start.wait_ns(1_700, 3, 5u64 << 32 | 650), 550);
        let wraps = RunqStart::new(1_000, 0, 0, 0, 0).on_rq(3, u32::MAX - 9);
        assert_eq!(wraps.wait_ns(1_700, 3, 6u64 << 32 | 40), 50);
        // Another CPU, no clock read, a wait of 2^31 ns or more, a clock behind: ktime.
        assert_eq!(start.wait_ns(1_700, 4, 5u64 << 32 | 650), 700);
        assert_eq!(
            RunqStart::new(1_000, 0, 0, 0, 0).wait_ns(1_700, 3, 650),
            700
        );
        assert_eq!(
            start.wait_ns(1_000 + (1 << 31), 3, 5u64 << 32 | 650),
            1 << 31
        );
        assert_eq!(start.wait_ns(1_700, 3, 5u64 << 32 | 50), 700);
        assert_eq!(
            RunqStart::new(1_000, 0, 0, 0, 0).wait_ns(1_700, 0, 650),
            700
        );
    }

    /// The stale stamp of the scale issue: a wakeup arrives while the task still runs (it had
    /// set its state to sleep and not yet called `schedule`), then the task is preempted with
    /// that sleeping state (preempt=full) and runs again 2 µs later, without another wakeup. Its
    /// wait is those 2 µs, not the 10 µs since the old wakeup.
    #[test]
    fn preempted_on_its_way_to_sleep_waits_from_the_preemption() {
        let mut t = Task::default();
        t.wakeup(1_000);
        t.switch_out(true, TASK_INTERRUPTIBLE, 9_000);
        assert_eq!(t.switch_in(11_000), Some((2_000, WaitKind::Preempt)));
    }

    #[test]
    fn switch_outs() {
        // preempt=none kernels: involuntary preemption without the flag, state running.
        assert_eq!(SwitchOut::of(false, TASK_RUNNING), SwitchOut::Queued);
        assert_eq!(SwitchOut::of(true, TASK_RUNNING), SwitchOut::Queued);
        assert_eq!(SwitchOut::of(true, TASK_INTERRUPTIBLE), SwitchOut::Queued);
        assert_eq!(SwitchOut::of(false, TASK_INTERRUPTIBLE), SwitchOut::Sleeps);
        assert_eq!(SwitchOut::of(false, TASK_DEAD), SwitchOut::Exited);
        // An unreadable state is never taken for an exit (its bits include none of TASK_DEAD's).
        assert_eq!(SwitchOut::of(false, STATE_UNKNOWN), SwitchOut::Sleeps);
        let mut t = Task::default();
        // Woken while still running, then exits: the stamp goes with it.
        t.wakeup(1_000);
        t.switch_out(false, TASK_DEAD, 2_000);
        assert_eq!(t.switch_in(3_000), None);
        // An ordinary sleep: the wait is from the wakeup.
        t.switch_out(false, TASK_INTERRUPTIBLE, 4_000);
        t.wakeup(5_000);
        assert_eq!(t.switch_in(5_500), Some((500, WaitKind::Wakeup)));
    }
}
