//! The live side of `runq`: turns the per-(cgroup, wait kind) histograms into window deltas once
//! per window, and drives `EPOCH` (the per-window max). Where wait starts are in task storage the
//! histograms are slots of the `RUNQ_SLOTS` array, mapped: each window takes what a slot gathered
//! (swapping its words for 0), so nothing is remembered per slot. Before, they are entries of the
//! `RUNQ_HIST` hash, cumulative: each reading is kept to subtract from the next.

use std::collections::HashMap as StdHashMap;
use std::collections::HashSet as StdHashSet;

use anyhow::Context as _;
use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray, Stack};
use cgtrace_common::hist::NR_BUCKETS;
use cgtrace_common::runq::{BLAME_PARITY_SHIFT, BlameKey, CULPRIT_IRQ, CULPRIT_STEAL, ShortHalf};
use cgtrace_common::runq::{RunqHist, RunqKey, RunqSlot, WaitKind, window_max};
use std::mem::{offset_of, size_of};

use super::KindHists;
use crate::{
    bpf::attach::LoadError,
    bpf::maps::batch::WholeHashMap,
    bpf::maps::mmap_array::MappedArray,
    family::Records,
    family::collect::{Collector, Start, WindowInput, take_map},
    hist::SparseHist,
};

/// Histograms per `BPF_MAP_LOOKUP_BATCH` call.
const BATCH: usize = 512;

/// Windows a (cgroup, wait kind) slot may go without a wait before it is taken back: most of a
/// node's cgroups are preempted or throttled now and then, and each such kind kept its slot for
/// the cgroup's life (at 10 000 cgroups the slots in use, the mapped prefix and the per-window
/// walk of `RUNQ_SLOT_OF` grew for minutes toward two per cgroup). The next wait of that kind
/// takes a slot again (a hash miss, a pop and an insert in the kernel, once).
const IDLE_WINDOWS: u16 = 30;

/// Cumulative reading of one key, kept to compute the next delta (sparse: a cgroup's waits
/// fill a few of its buckets).
type Prev = SparseHist;

/// Where the kernel keeps the histograms.
enum Source {
    /// `RUNQ_HIST` (no task storage).
    Hash(WholeHashMap<RunqKey, RunqHist>),
    /// `RUNQ_SLOTS` and its tables (task storage).
    Slots(Box<Slots>),
}

impl Source {
    /// Deletes a removed cgroup's histograms (its slots go back on the free stack).
    fn forget(&mut self, cgroup_id: u64) {
        for kind in WaitKind::ALL {
            let key = RunqKey {
                cgroup_id,
                kind: kind as u32,
                _pad: 0,
            };
            match self {
                Self::Hash(h) => h.remove(&key),
                Self::Slots(s) => s.free(&key),
            }
        }
    }
}

/// The owner of slot `index`.
fn owner(slots: &MappedArray, index: u32) -> RunqKey {
    let at = offset_of!(RunqSlot, owner);
    RunqKey {
        cgroup_id: slots.load(index, at + offset_of!(RunqKey, cgroup_id)),
        // `kind` and the padding after it share a word; the padding is 0.
        kind: slots.load(index, at + offset_of!(RunqKey, kind)) as u32,
        _pad: 0,
    }
}

/// Takes what slot `index` gathered since the last take, as window `ended`'s delta: every
/// non-zero bucket swapped for 0, then (if any was) both sums, so the slot holds only what came
/// after and the daemon keeps no reading of its own to subtract. A program adds a wait's sums
/// before its bucket: a wait being added meanwhile lands in this window or the next, or splits
/// (sum here, bucket next), which the next take catches up — nothing is lost. `None`: no new
/// wait.
fn take_hist(slots: &MappedArray, index: u32, ended: u64) -> Option<SparseHist> {
    let at = offset_of!(RunqSlot, hist);
    let mut buckets = [0u32; NR_BUCKETS];
    let mut any = false;
    for (i, n) in buckets.iter_mut().enumerate() {
        *n = slots.take_u32(index, at + offset_of!(RunqHist, buckets) + 4 * i);
        any |= *n != 0;
    }
    if !any {
        return None;
    }
    let sums = (
        slots.take(index, at + offset_of!(RunqHist, sum_ns)),
        slots.take(index, at + offset_of!(RunqHist, stale_ns)),
    );
    let word = |field: usize, i: usize| slots.load(index, at + field + 8 * i);
    let max = window_max(ended, |slot| {
        (
            word(offset_of!(RunqHist, max_epoch), slot),
            word(offset_of!(RunqHist, max_ns), slot),
        )
    });
    Some(with_max(SparseHist::reading(sums, &buckets), max))
}

/// `delta` with its window's maximum: the kernel's, or else its top bucket's upper bound.
fn with_max(mut delta: SparseHist, max: Option<u64>) -> SparseHist {
    let max = max.unwrap_or_else(|| delta.top_bucket_upper_ns());
    delta.set_max(max);
    delta
}

/// Window `ended`'s delta of a `RUNQ_HIST` entry (cumulative: its last reading is kept in `prev`
/// to subtract). `None`: no new wait.
fn hash_delta(
    prev: &mut StdHashMap<RunqKey, Prev>,
    key: &RunqKey,
    cur: &RunqHist,
    ended: u64,
) -> Option<SparseHist> {
    let count = cur.count();
    let last = prev.get(key);
    if last.map_or(count == 0, |p| p.count() == count) {
        return None;
    }
    let delta = match last {
        Some(p) => p.delta((cur.sum_ns, cur.stale_ns), &cur.buckets),
        None => SparseHist::reading((cur.sum_ns, cur.stale_ns), &cur.buckets),
    };
    let delta = with_max(delta, cur.window_max(ended));
    let sums = (cur.sum_ns, cur.stale_ns);
    match prev.get_mut(key) {
        Some(p) => p.read_again(sums, &cur.buckets),
        None => {
            prev.insert(*key, Prev::reading(sums, &cur.buckets));
        }
    }
    Some(delta)
}

/// The slot tables: the histograms (mapped as far as slots are in use), (cgroup, kind) -> slot,
/// and the free slots.
struct Slots {
    slots: MappedArray,
    slot_of: WholeHashMap<RunqKey, u32>,
    free: Stack<MapData, u32>,
    /// Windows since each slot last had a wait, by slot index (grown as slots are reached).
    idle: Vec<u16>,
    /// Slots of idle kinds unmapped and ownerless since the last window, with their owner.
    retiring: Vec<(RunqKey, u32)>,
}

impl Slots {
    /// Takes a removed cgroup's slot back at once (a cgroup being replaced every 10 ms needs its
    /// slots free for the next one, not a window later): unmapped, zeroed (its owner first, so
    /// no wait is added to it meanwhile), then free again.
    fn free(&mut self, key: &RunqKey) {
        let Some(index) = self.slot_of.get(key) else {
            return;
        };
        // Not mapped (the daemon's address space is full): the slot stays with its cgroup, and
        // the next window, reaching it too, fails with the same error and says so.
        if self.slots.reach(index).is_err() {
            return;
        }
        self.slot_of.remove(key);
        if owner(&self.slots, index) == *key {
            self.zero_and_push(index);
        }
    }

    fn zero_and_push(&mut self, index: u32) {
        for offset in (0..size_of::<RunqSlot>()).step_by(8) {
            self.slots.store(index, offset, 0);
        }
        if let Some(idle) = self.idle.get_mut(index as usize) {
            *idle = 0;
        }
        // Cannot be full: it holds every slot at most once.
        let _ = self.free.push(&index, 0);
    }

    /// Takes slot `index` of `key`, a kind of a live cgroup (found mapped, reached and owned by
    /// `key` in this window's walk), back in two steps: now its mapping is deleted and then its
    /// owner cleared, so a program finds no slot for `key` (and takes a new one) and one that has
    /// its index cached fails the owner check; at the next window ([`Slots::free_retired`]) what
    /// a program that had passed the check still added is taken as `key`'s, and the slot is
    /// zeroed and free. (Zeroed and freed at once, a wait being added meanwhile would be lost, or
    /// counted for the slot's next owner.)
    fn retire(&mut self, key: &RunqKey, index: u32) {
        self.slot_of.remove(key);
        self.slots.store(
            index,
            offset_of!(RunqSlot, owner) + offset_of!(RunqKey, cgroup_id),
            0,
        );
        self.retiring.push((*key, index));
    }

    /// The second step of [`Slots::retire`] for the slots retired before the last window: what
    /// was added since is window `ended`'s (into `out`), then each slot is zeroed
    /// and pushed back on the free stack.
    fn free_retired(&mut self, ended: u64, out: &mut StdHashMap<u64, KindHists>) {
        for (key, index) in std::mem::take(&mut self.retiring) {
            if let Some(delta) = take_hist(&self.slots, index, ended)
                && let Ok(kind) = WaitKind::try_from(key.kind)
            {
                out.entry(key.cgroup_id).or_default().set(kind, delta);
            }
            self.zero_and_push(index);
        }
    }
}

/// Counts one more window without a wait for slot `index` in `idle` (`had_wait`: it had one, the
/// count starts again); whether it has now been idle for [`IDLE_WINDOWS`].
fn idle_for_long(idle: &mut Vec<u16>, index: u32, had_wait: bool) -> bool {
    let i = index as usize;
    if i >= idle.len() {
        idle.resize(i + 1, 0);
    }
    let n = &mut idle[i];
    *n = if had_wait { 0 } else { n.saturating_add(1) };
    *n >= IDLE_WINDOWS
}

const _: () =
    assert!(size_of::<RunqSlot>().is_multiple_of(8) && offset_of!(RunqKey, kind) % 8 == 0);

/// Reads the histograms and drives `EPOCH`.
pub struct RunqReader {
    source: Source,
    epoch_map: Array<MapData, u64>,
    epoch: u64,
    /// The last reading of each `RUNQ_HIST` entry (empty with `RUNQ_SLOTS`, which are taken).
    prev: StdHashMap<RunqKey, Prev>,
    /// How many cgroups the last window had: the next window's table is sized from it rather
    /// than grown by doubling (and rehashing) through 10 000 inserts.
    last_cgroups: usize,
    /// `BLAME` (absent from objects built before the ledger).
    blame: Option<BlameReader>,
    /// Which of the ledger's parts this kernel can tell.
    caps: super::model::BlameCaps,
}

/// The first window's epoch. The loader sets `EPOCH` to it before any program is attached
/// ([`first_epoch`]): what the programs charge before the reader starts belongs to that window
/// (at 0, the blame ledger's short-wait tables of window 0 were never read, and `BLAME`'s pairs
/// of window 0 were read a window late).
pub const FIRST_EPOCH: u64 = 1;

/// Sets `EPOCH` to [`FIRST_EPOCH`] in a loaded object (before attaching).
pub fn first_epoch(ebpf: &mut aya::Ebpf) -> Result<(), LoadError> {
    let err = |source| LoadError::Map {
        map: "EPOCH",
        source,
    };
    let mut epoch: Array<&mut MapData, u64> = ebpf
        .map_mut("EPOCH")
        .ok_or(LoadError::MissingMap("EPOCH"))?
        .try_into()
        .map_err(err)?;
    epoch.set(0, &FIRST_EPOCH, 0).map_err(err)
}

impl RunqReader {
    /// `EPOCH` already holds [`FIRST_EPOCH`] (set by the loader before attaching).
    fn new(source: Source, epoch_map: Array<MapData, u64>) -> anyhow::Result<Self> {
        Ok(Self {
            source,
            epoch_map,
            epoch: FIRST_EPOCH,
            prev: StdHashMap::new(),
            last_cgroups: 0,
            blame: None,
            caps: Default::default(),
        })
    }

    /// Ends the current window: bumps the epoch, then returns each cgroup's deltas since the
    /// previous call (only cgroups with new waits).
    pub fn read_window(&mut self) -> anyhow::Result<StdHashMap<u64, KindHists>> {
        let ended = self.epoch;
        self.epoch += 1;
        self.epoch_map
            .set(0, &self.epoch, 0)
            .context("bumping EPOCH")?;
        let mut out: StdHashMap<u64, KindHists> =
            StdHashMap::with_capacity(self.last_cgroups + self.last_cgroups / 8);
        match &mut self.source {
            Source::Hash(h) => {
                let prev = &mut self.prev;
                h.for_each(|key, cur| {
                    let Ok(kind) = WaitKind::try_from(key.kind) else {
                        return;
                    };
                    if let Some(delta) = hash_delta(prev, key, cur, ended) {
                        out.entry(key.cgroup_id).or_default().set(kind, delta);
                    }
                });
            }
            Source::Slots(s) => {
                // First what was added to slots retired a window ago (a kind of a cgroup
                // whose new slot is read below is merged with it).
                let mut retired = StdHashMap::new();
                s.free_retired(ended, &mut retired);
                let Slots {
                    slots,
                    slot_of,
                    idle,
                    ..
                } = &mut **s;
                let mut unmapped = None;
                let mut idle_keys = Vec::new();
                slot_of.for_each(|key, &index| {
                    let Ok(kind) = WaitKind::try_from(key.kind) else {
                        return;
                    };
                    // Its waits stay in the slot for a window that can map it.
                    if let Err(e) = slots.reach(index) {
                        unmapped.get_or_insert((index, e));
                        return;
                    }
                    // A slot being taken back or given to another owner meanwhile is skipped.
                    if owner(slots, index) != *key {
                        return;
                    }
                    let delta = take_hist(slots, index, ended);
                    if idle_for_long(idle, index, delta.is_some()) {
                        idle_keys.push((*key, index));
                    }
                    if let Some(delta) = delta {
                        out.entry(key.cgroup_id).or_default().set(kind, delta);
                    }
                });
                for (cgroup_id, h) in retired {
                    out.entry(cgroup_id).or_default().merge(&h);
                }
                for (key, index) in &idle_keys {
                    s.retire(key, *index);
                }
                if let Some((index, e)) = unmapped {
                    return Err(e)
                        .with_context(|| format!("mapping RUNQ_SLOTS up to slot {index}"));
                }
            }
        }
        self.last_cgroups = out.len();
        Ok(out)
    }

    /// Drops removed cgroups' kernel entries and remembered readings.
    pub fn forget(&mut self, gone: &StdHashSet<u64>) {
        for &cgroup_id in gone {
            self.source.forget(cgroup_id);
            for kind in WaitKind::ALL {
                self.prev.remove(&RunqKey {
                    cgroup_id,
                    kind: kind as u32,
                    _pad: 0,
                });
            }
        }
    }
}

/// Takes the histogram tables and `EPOCH`.
pub fn start(ctx: &mut Start<'_>) -> anyhow::Result<Box<dyn Collector>> {
    let source = if ctx.runq.starts.task_storage() {
        let Map::Array(slots) = take_map(ctx.ebpf, "RUNQ_SLOTS")? else {
            anyhow::bail!("RUNQ_SLOTS is not an array");
        };
        let slot_of: HashMap<MapData, RunqKey, u32> =
            take_map(ctx.ebpf, "RUNQ_SLOT_OF")?.try_into()?;
        Source::Slots(Box::new(Slots {
            slots: MappedArray::new(slots, size_of::<RunqSlot>()).context("reading RUNQ_SLOTS")?,
            slot_of: WholeHashMap::new(slot_of, BATCH),
            free: take_map(ctx.ebpf, "RUNQ_FREE_SLOTS")?.try_into()?,
            idle: Vec::new(),
            retiring: Vec::new(),
        }))
    } else {
        let hist: HashMap<MapData, _, _> = take_map(ctx.ebpf, "RUNQ_HIST")?.try_into()?;
        Source::Hash(WholeHashMap::new(hist, BATCH))
    };
    let epoch: Array<MapData, u64> = take_map(ctx.ebpf, "EPOCH")?.try_into()?;
    let mut reader = RunqReader::new(source, epoch)?;
    if ctx.runq.blame {
        let blame: HashMap<MapData, _, _> = take_map(ctx.ebpf, "BLAME")?.try_into()?;
        let short: PerCpuArray<MapData, ShortHalf> =
            take_map(ctx.ebpf, "BLAME_SHORT")?.try_into()?;
        reader.blame = Some(BlameReader::new(blame, short));
        reader.caps = ctx.runq.caps;
    }
    Ok(Box::new(reader))
}

impl Collector for RunqReader {
    fn read_window(
        &mut self,
        records: &mut Records,
        input: &mut WindowInput,
    ) -> anyhow::Result<()> {
        input.runq = RunqReader::read_window(self)?;
        input.runq_asleep = std::mem::take(&mut records.runq.asleep);
        if let Some(b) = &mut self.blame {
            input.blame = Some(b.read_window(self.epoch - 1));
            input.blame_caps = self.caps;
        }
        Ok(())
    }

    fn forget(&mut self, gone: &StdHashSet<u64>) {
        RunqReader::forget(self, gone);
    }
}

/// Pairs per batch call (16 bytes of key and 8 of value each).
const BLAME_BATCH: usize = 4096;

/// Hands `BLAME` over once per window. The programs charge the half of the current window's
/// parity (`EPOCH & 1`); once the epoch has moved on, the ended window's half is read whole, what
/// it held is this window's, and its pairs are deleted, so the map holds about one window of
/// pairs (pairs that never meet again, a removed cgroup's too, go with their window: nothing to
/// forget). A pair that meets again costs one insert a window. A program that read the old
/// epoch just before the flip would have to add after the delete to lose its ns (or, the entry
/// reused, give them to another pair); it runs for a microsecond with interrupts off, and the
/// delete follows the flip, the histograms' read and this map's whole read. No copy of the
/// kernel's values is kept; an entry a walk of the map missed keeps its ns for the next turn.
pub struct BlameReader {
    /// Keys with the window's parity in the victim's top bit ([`BLAME_PARITY_SHIFT`]).
    map: WholeHashMap<BlameKey, u64>,
    /// Each CPU's short waits by pair (`BLAME_SHORT`, a half per parity): read, not zeroed (the
    /// programs reuse an entry of an older window).
    short: PerCpuArray<MapData, ShortHalf>,
    /// Pairs charged in the last window: the next window's map is made this size, not grown to
    /// it (each growth holds the old table beside the new one).
    last_len: usize,
}

impl BlameReader {
    pub fn new(
        map: HashMap<MapData, BlameKey, u64>,
        short: PerCpuArray<MapData, ShortHalf>,
    ) -> Self {
        Self {
            map: WholeHashMap::new(map, BLAME_BATCH),
            short,
            last_len: 0,
        }
    }

    /// Each pair's ns charged in window `ended` (read after `EPOCH` moved past it).
    pub fn read_window(&mut self, ended: u64) -> StdHashMap<BlameKey, u64> {
        let parity = ended & 1;
        let mut out: StdHashMap<BlameKey, u64> =
            StdHashMap::with_capacity(self.last_len + self.last_len / 8);
        let mut read = Vec::with_capacity(self.last_len);
        self.map.for_each(|key, &ns| {
            if key.victim >> BLAME_PARITY_SHIFT != parity {
                return;
            }
            read.push(*key);
            if ns == 0 {
                return;
            }
            let pair = BlameKey {
                victim: key.victim & !(1 << BLAME_PARITY_SHIFT),
                culprit: key.culprit,
            };
            *out.entry(pair).or_default() += ns;
        });
        self.map.remove_all(&read);
        // The short waits each CPU summed in the ended window (as `BLAME`'s pairs, read the
        // same way: the window's half once the epoch has moved on).
        if let Ok(cpus) = self.short.get(&(parity as u32), 0) {
            for half in cpus.iter() {
                for e in half.entries.iter().filter(|e| e.epoch == ended) {
                    for (culprit, ns) in [
                        (e.culprit, e.ns),
                        (CULPRIT_IRQ, e.irq_ns),
                        (CULPRIT_STEAL, e.steal_ns),
                    ] {
                        if ns != 0 {
                            let pair = BlameKey {
                                victim: e.victim,
                                culprit,
                            };
                            *out.entry(pair).or_default() += ns;
                        }
                    }
                }
            }
        }
        self.last_len = out.len();
        out
    }
}
