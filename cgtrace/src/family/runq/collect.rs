//! The live side of `runq`: reads `RUNQ_HIST` (cumulative per-(cgroup, wait kind) histograms)
//! once per window, turns them into window deltas, and drives `EPOCH` (the per-window max).

use std::collections::HashMap as StdHashMap;

use anyhow::Context as _;
use aya::maps::{Array, HashMap, MapData};
use cgtrace_common::{
    hist::NR_BUCKETS,
    runq::{RunqHist, RunqKey, WaitKind},
};

use super::{INFO, KindHists, blame::BlameReader};
use crate::{
    family::WindowInput,
    family::{Collector, FamilyInfo, Records, Start, take_map},
    hist::Hist,
    mapbatch::WholeHashMap,
};

/// Histograms per `BPF_MAP_LOOKUP_BATCH` call.
const BATCH: usize = 512;

/// Cumulative reading of one key, kept to compute the next delta.
struct Prev {
    count: u64,
    sum_ns: u64,
    buckets: Box<[u64; NR_BUCKETS]>,
}

/// Reads `RUNQ_HIST` and drives `EPOCH`.
pub struct RunqReader {
    hist: WholeHashMap<RunqKey, RunqHist>,
    epoch_map: Array<MapData, u64>,
    epoch: u64,
    prev: StdHashMap<RunqKey, Prev>,
    /// `BLAME` (absent from objects built before the ledger).
    blame: Option<BlameReader>,
}

impl RunqReader {
    pub fn new(
        hist: HashMap<MapData, RunqKey, RunqHist>,
        mut epoch_map: Array<MapData, u64>,
    ) -> anyhow::Result<Self> {
        let epoch = 1;
        epoch_map.set(0, &epoch, 0).context("setting EPOCH")?;
        Ok(Self {
            hist: WholeHashMap::new(hist, BATCH),
            epoch_map,
            epoch,
            prev: StdHashMap::new(),
            blame: None,
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
        let mut out: StdHashMap<u64, KindHists> = StdHashMap::new();
        let prev = &mut self.prev;
        self.hist.for_each(|key, cur| {
            let Ok(kind) = WaitKind::try_from(key.kind) else {
                return;
            };
            let count = cur.count();
            let last = prev.get(key).map(|p| (p.count, p.sum_ns, &*p.buckets));
            if last.is_some_and(|(c, _, _)| c == count) {
                return;
            }
            let mut delta = Hist::delta(count, cur.sum_ns, &cur.buckets, last);
            delta.max_ns = cur
                .window_max(ended)
                .unwrap_or_else(|| delta.top_bucket_upper_ns());
            prev.insert(
                *key,
                Prev {
                    count,
                    sum_ns: cur.sum_ns,
                    buckets: Box::new(cur.buckets),
                },
            );
            out.entry(key.cgroup_id).or_default()[kind as usize] = delta;
        });
        Ok(out)
    }

    /// Drops a removed cgroup's kernel entries and remembered readings.
    pub fn forget(&mut self, cgroup_id: u64) {
        for kind in WaitKind::ALL {
            let key = RunqKey {
                cgroup_id,
                kind: kind as u32,
                _pad: 0,
            };
            self.hist.remove(&key);
            self.prev.remove(&key);
        }
        if let Some(b) = &mut self.blame {
            b.forget(cgroup_id);
        }
    }
}

/// Takes `RUNQ_HIST` and `EPOCH`.
pub fn start(ctx: &mut Start<'_>) -> anyhow::Result<Box<dyn Collector>> {
    let hist: HashMap<MapData, _, _> = take_map(ctx.ebpf, "RUNQ_HIST")?.try_into()?;
    let epoch: Array<MapData, u64> = take_map(ctx.ebpf, "EPOCH")?.try_into()?;
    let mut reader = RunqReader::new(hist, epoch)?;
    if ctx.blame {
        let blame: HashMap<MapData, _, _> = take_map(ctx.ebpf, "BLAME")?.try_into()?;
        reader.blame = Some(BlameReader::new(blame));
    }
    Ok(Box::new(reader))
}

impl Collector for RunqReader {
    fn info(&self) -> &'static FamilyInfo {
        &INFO
    }

    fn read_window(&mut self, _: &mut Records, input: &mut WindowInput) -> anyhow::Result<()> {
        input.runq = RunqReader::read_window(self)?;
        if let Some(b) = &mut self.blame {
            input.blame = Some(b.read_window());
        }
        Ok(())
    }

    fn forget(&mut self, cgroup_id: u64) {
        RunqReader::forget(self, cgroup_id);
    }
}
