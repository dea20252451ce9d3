//! Maps shared by all probes. Sizes are defaults; the loader resizes them from the command line.
use aya_ebpf::{
    bindings::{
        BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, BPF_RB_AVAIL_DATA,
        BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE,
        task_struct,
    },
    helpers::generated::bpf_task_storage_get,
    macros::{btf_map, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf, Stack},
};
use cgtrace_common::{
    counters::Counters,
    reads::{FileKey, FileNames, ReadInflight, ReadKey, ReadStats},
    runq::{
        BlameKey, IdleSince, RqClockOffset, RunqHist, RunqKey, RunqSlot, RunqStart, ShortHalf,
        SliceRing, WalkTop,
    },
    throttle::{HookEpisode, OpenEpisodes, SliceKey, SliceSum, ThrottleStats},
};

/// Per-CPU event and loss counters, indexed by `cgtrace_common::counters`.
#[map]
pub static COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(1, 0);

/// Notable events for the daemon (`cgtrace_common::event`).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// tid -> start of its current run-queue wait where task storage is not used (kernels before
/// 6.1): entries live from wakeup (or preemption) to the next switch-in, or to the task's exit. A
/// plain preallocated hash (an LRU one costs more per update); when full, new waits are counted
/// as lost (`runq_start_full`). One entry otherwise.
#[map]
pub static RUNQ_START: HashMap<u32, RunqStart> = HashMap::with_max_entries(65536, 0);

/// tid -> the start of its current run-queue wait, in the task's own storage (6.1+, see
/// `Config::runq_start_task`): no table to fill however many tasks a host runs, no lock or delete
/// per wait, and the entry goes with the task. `ts_ns == 0`: no wait open.
#[btf_map]
pub static RUNQ_START_TASK: TaskStorage<RunqStart> = TaskStorage::new();

/// The element type of `TaskStorage`'s map-type array, named so the loader can find that array
/// in the object's BTF and, on kernels that cannot use task storage from tracing programs, turn
/// the map into a one-entry hash that the programs never touch (`cgtrace::bpf::btf::patch`).
#[repr(C)]
pub struct CgtraceTaskStorageType(u8);

/// A `BPF_MAP_TYPE_TASK_STORAGE` map definition (aya-ebpf has none): the BTF map layout of its
/// `btf_map_def!` (the kernel reads type, key, value, max_entries and flags from the
/// pointed-to types).
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [CgtraceTaskStorageType; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: placeholder pointers the loader patches; never dereferenced from Rust.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// `task`'s value (`create`: made zeroed if it has none); null if it has none, or when the
    /// kernel could not allocate it or refused a nested call.
    #[inline(always)]
    pub fn get(&self, task: *const u8, create: bool) -> *mut T {
        let flags = if create {
            u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE)
        } else {
            0
        };
        // SAFETY: `task` is a BTF-typed task pointer from the tracepoint's arguments, which the
        // verifier checks; the map pointer is relocated to the map by the loader.
        unsafe {
            bpf_task_storage_get(
                (self as *const Self).cast_mut().cast(),
                task.cast_mut().cast::<task_struct>(),
                core::ptr::null_mut(),
                flags,
            )
        }
        .cast()
    }
}

/// (cgroup, wait kind) -> cumulative latency histogram, where task storage is not used (kernels
/// before 6.1; one entry otherwise).
#[map]
pub static RUNQ_HIST: HashMap<RunqKey, RunqHist> = HashMap::with_max_entries(3 * 8192, 0);

/// With task storage: the histograms, one slot per (cgroup, wait kind) (see `RunqSlot`), read by
/// the daemon through a memory mapping. Sized by the loader like `RUNQ_HIST` (one slot
/// otherwise).
#[map]
pub static RUNQ_SLOTS: Array<RunqSlot> = Array::with_max_entries(3 * 8192, BPF_F_MMAPABLE);

/// With task storage: (cgroup, wait kind) -> its slot in `RUNQ_SLOTS`, for a task whose cache
/// does not have it (its first wait of that kind there); deleted by the daemon when the cgroup
/// goes.
#[map]
pub static RUNQ_SLOT_OF: HashMap<RunqKey, u32> = HashMap::with_max_entries(3 * 8192, 0);

/// With task storage: the free slots of `RUNQ_SLOTS`, a stack filled by the loader with slot 0 on
/// top, refilled by the daemon as cgroups go. Last in, first out: a slot freed is the next taken,
/// so the slots in use stay below the most ever in use at once, and the daemon maps (and counts in
/// its RSS) only that much of the array.
#[map]
pub static RUNQ_FREE_SLOTS: Stack<u32> = Stack::with_max_entries(3 * 8192, 0);

/// Per CPU: its run queue's clock against ktime, for how stale the clock is at a switch (see
/// `RqClockOffset`).
#[map]
pub static RQ_CLOCK_OFFSET: PerCpuArray<RqClockOffset> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: its last slices (who ran, from when to when), for the blame ledger.
#[map]
pub static CPU_SLICES: PerCpuArray<SliceRing> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: the wait being walked, its charges summed by culprit (see `WalkTop`).
#[map]
pub static BLAME_WALK: PerCpuArray<WalkTop> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU (sized by the loader): when its idle task was switched in, 0 while it runs a task;
/// read across CPUs by the ledger's `idle_elsewhere`.
#[map]
pub static IDLE_SINCE: Array<IdleSince> = Array::with_max_entries(1, 0);

/// (waiting cgroup with its window's parity in the top bit, who held the CPU) -> ns of wait
/// charged to it, until the daemon hands the window over (reads and deletes the ended window's
/// pairs). Sized by the loader from `--max-cgroups`; when full the part is counted
/// (`blame_full`) and left unattributed.
#[map]
pub static BLAME: HashMap<BlameKey, u64> = HashMap::with_max_entries(16 * 8192, 0);

/// Per CPU, two halves (index `EPOCH & 1`): the blame ledger's waits shorter than
/// `--blame-min-us`, summed by (victim, culprit) until the daemon reads the ended window's half
/// (see `ShortCharge`).
#[map]
pub static BLAME_SHORT: PerCpuArray<ShortHalf> = PerCpuArray::with_max_entries(2, 0);

/// Open throttle episodes of this CPU (tracepoint mode, see `probes::throttle::cpu_episodes`).
#[map]
pub static THROTTLE_OPEN: PerCpuArray<OpenEpisodes> = PerCpuArray::with_max_entries(1, 0);

/// cgroup id -> period counters of its bandwidth timer.
#[map]
pub static THROTTLE_STATS: HashMap<u64, ThrottleStats> = HashMap::with_max_entries(8192, 0);

/// throttled `cfs_rq` -> when its last episode closed: splits a throttled task's wait into the
/// throttled part and the queueing after the unthrottle.
#[map]
pub static THROTTLE_LAST_CLOSE: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// cgroup id -> until when (ns) its threads are followed slice by slice: set when one of its
/// episodes opens, so "who burned the quota" costs nothing for groups that are not throttled.
#[map]
pub static THROTTLE_WATCH: LruHashMap<u64, u64> = LruHashMap::with_max_entries(8192, 0);

/// The latest `THROTTLE_WATCH` end of any group: while it is past (no group throttled within
/// `WATCH_NS`), `sched_switch` skips the walk up a switched-out task's groups that would look
/// for one.
#[map]
pub static THROTTLE_WATCH_UNTIL: Array<u64> = Array::with_max_entries(1, 0);

/// (watched group, thread) -> its slices in the group's current period, summed (see
/// `cgtrace_common::throttle::SliceSum`). Sized by the loader from `--max-cgroups` and the CPUs;
/// the daemon deletes sums whose period it has taken.
#[map]
pub static THROTTLE_SLICE_SUMS: HashMap<SliceKey, SliceSum> = HashMap::with_max_entries(16384, 0);

/// Who opens and closes episodes (`cgtrace_common::throttle::MODE_*`), set by the loader after
/// it knows which programs attached.
#[map]
pub static THROTTLE_MODE: Array<u32> = Array::with_max_entries(1, 0);

/// Hook modes: open episodes by `cfs_rq` (closed from whichever CPU runs the unthrottle, under
/// that rq's lock, so never twice).
#[map]
pub static THROTTLE_EPISODES: HashMap<u64, HookEpisode> = HashMap::with_max_entries(16384, 0);

/// kprobe mode: the `cfs_rq` argument between a kprobe and its kretprobe, per CPU (both run with
/// the rq lock held and interrupts off, so they cannot interleave on one CPU).
#[map]
pub static THROTTLE_ARG: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

/// The period timer running on this CPU and its group's `nr_periods`/`nr_throttled` at entry
/// (hrtimer callbacks do not nest on a CPU).
#[map]
pub static THROTTLE_PERIOD_AT: PerCpuArray<[u64; 3]> = PerCpuArray::with_max_entries(1, 0);

/// The daemon's window number, bumped at the end of each window (see `RunqHist`).
#[map]
pub static EPOCH: Array<u64> = Array::with_max_entries(1, 0);

/// One all-zero histogram to insert new `RUNQ_HIST` entries from (too big for the stack).
#[map]
pub static ZERO_HIST: PerCpuArray<RunqHist> = PerCpuArray::with_max_entries(1, 0);

/// tid -> the traced pseudo-file read it is in (or the rstat flush a thread outside any read is
/// doing), and after it ends the key of the last file it read (reused by its next read of the
/// same file). LRU: threads that stopped reading are evicted.
#[map]
pub static READ_INFLIGHT: LruHashMap<u32, ReadInflight> = LruHashMap::with_max_entries(16384, 0);

/// (reader cgroup, comm, file) -> cumulative read stats and latency histogram.
#[map]
pub static READ_STATS: HashMap<ReadKey, ReadStats> = HashMap::with_max_entries(4096, 0);

/// file -> its name chain, written when it is first read.
#[map]
pub static READ_FILES: HashMap<FileKey, FileNames> = HashMap::with_max_entries(8192, 0);

/// Scratch space too big for the stack: a zeroed `ReadStats` to insert from, and a name chain
/// being built.
#[map]
pub static READ_ZERO: PerCpuArray<ReadStats> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static READ_NAMES_SCRATCH: PerCpuArray<FileNames> = PerCpuArray::with_max_entries(1, 0);
/// The last read counted as lost at a `seq_read_iter` exit on this CPU, `[tid, file]`: the
/// enclosing kernfs/proc exit that follows finds it and does not count the read again.
#[map]
pub static READ_LOST_INNER: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

/// The last clock read of the `floor_clock_*` benchmark programs (see `probes::floor`), per CPU.
#[map]
pub static FLOOR_CLOCK: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Batched wakeups: the reader is woken only when enough bytes are pending (it also drains on a
/// timer), so its own wakeups cannot feed back into the events it reads.
#[inline(always)]
pub fn wakeup_flags() -> u64 {
    let threshold = crate::helpers::config!(ringbuf_wakeup_bytes);
    if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) >= threshold {
        u64::from(BPF_RB_FORCE_WAKEUP)
    } else {
        u64::from(BPF_RB_NO_WAKEUP)
    }
}

/// Sends a record to the daemon; a full ring buffer is counted (`ringbuf_full`), never silent.
#[inline(always)]
pub fn emit<T>(c: *mut Counters, ev: &T) {
    if EVENTS.output(ev, wakeup_flags()).is_err() {
        count(c, cgtrace_common::counters::RINGBUF_FULL);
    }
}

/// This CPU's counters, looked up once per program run.
#[inline(always)]
pub fn counters() -> *mut Counters {
    COUNTERS.get_ptr_mut(0).unwrap_or(core::ptr::null_mut())
}

/// Adds one to counter `idx` of `c` (from [`counters`]).
#[inline(always)]
pub fn count(c: *mut Counters, idx: u32) {
    if c.is_null() {
        return;
    }
    let idx = idx as usize;
    if idx < cgtrace_common::counters::NR_COUNTERS as usize {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { (*c).v[idx] += 1 };
    }
}
