//! Maps shared by all probes. Sizes are defaults; the loader resizes them from the command line.
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use cgtrace_common::{
    counters::NR_COUNTERS,
    runq::{RunqHist, RunqKey, RunqStart},
};

/// Per-CPU event and loss counters, indexed by `cgtrace_common::counters`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NR_COUNTERS, 0);

/// Notable events for the daemon (`cgtrace_common::event`).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// tid -> start of its current run-queue wait. LRU so that tasks that exit with a wait open
/// (woken while still running, then gone) cannot fill it.
#[map]
pub static RUNQ_START: LruHashMap<u32, RunqStart> = LruHashMap::with_max_entries(65536, 0);

/// (cgroup, wait kind) -> cumulative latency histogram.
#[map]
pub static RUNQ_HIST: HashMap<RunqKey, RunqHist> = HashMap::with_max_entries(3 * 8192, 0);

/// The daemon's window number, bumped at the end of each window (see `RunqHist`).
#[map]
pub static EPOCH: Array<u64> = Array::with_max_entries(1, 0);

/// One all-zero histogram to insert new `RUNQ_HIST` entries from (too big for the stack).
#[map]
pub static ZERO_HIST: PerCpuArray<RunqHist> = PerCpuArray::with_max_entries(1, 0);

/// Adds one to counter `idx` on this CPU.
#[inline(always)]
pub fn count(idx: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *p += 1 };
    }
}
