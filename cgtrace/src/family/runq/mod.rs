//! `runq` in the daemon: reads the kernel's per-(cgroup, wait kind) histograms once per window
//! and turns cumulative values into window deltas; decodes `RunqEvent` records.

use std::collections::HashMap as StdHashMap;

use anyhow::Context as _;
use aya::maps::{Array, HashMap, MapData};
use cgtrace_common::{
    hist::NR_BUCKETS,
    runq::{RunqEvent, RunqHist, RunqKey, WaitKind},
};

use serde::{Deserialize, Serialize};

use crate::{
    decode::comm_str,
    family::{Describe, EventLine, FamilyInfo, Room},
    hist::Hist,
};

pub const INFO: FamilyInfo = FamilyInfo {
    name: "runq",
    first_kind: 0x100,
    event_kind: cgtrace_common::event::KIND_RUNQ_WAIT,
    event_line: "runq_wait",
    mark: 1,
};

/// Cumulative reading of one key, kept to compute the next delta.
struct Prev {
    count: u64,
    sum_ns: u64,
    buckets: Box<[u64; NR_BUCKETS]>,
}

/// Window deltas of one cgroup, by wait kind.
pub type KindHists = [Hist; cgtrace_common::runq::NR_WAIT_KINDS];

/// Reads `RUNQ_HIST` and drives `EPOCH`.
pub struct RunqReader {
    hist: HashMap<MapData, RunqKey, RunqHist>,
    epoch_map: Array<MapData, u64>,
    epoch: u64,
    prev: StdHashMap<RunqKey, Prev>,
}

impl RunqReader {
    pub fn new(
        hist: HashMap<MapData, RunqKey, RunqHist>,
        mut epoch_map: Array<MapData, u64>,
    ) -> anyhow::Result<Self> {
        let epoch = 1;
        epoch_map.set(0, &epoch, 0).context("setting EPOCH")?;
        Ok(Self {
            hist,
            epoch_map,
            epoch,
            prev: StdHashMap::new(),
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
        for entry in self.hist.iter() {
            // An entry deleted while iterating ends the walk early for that key only.
            let Ok((key, cur)) = entry else { continue };
            let Ok(kind) = WaitKind::try_from(key.kind) else {
                continue;
            };
            let count = cur.count();
            let prev = self
                .prev
                .get(&key)
                .map(|p| (p.count, p.sum_ns, &*p.buckets));
            if prev.is_some_and(|(c, _, _)| c == count) {
                continue;
            }
            let mut delta = Hist::delta(count, cur.sum_ns, &cur.buckets, prev);
            delta.max_ns = cur
                .window_max(ended)
                .unwrap_or_else(|| delta.top_bucket_upper_ns());
            self.prev.insert(
                key,
                Prev {
                    count,
                    sum_ns: cur.sum_ns,
                    buckets: Box::new(cur.buckets),
                },
            );
            out.entry(key.cgroup_id).or_default()[kind as usize] = delta;
        }
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
            let _ = self.hist.remove(&key);
            self.prev.remove(&key);
        }
    }
}

/// `runq` records between two windows: waits of at least `--event-min-ms`, kept for event lines.
#[derive(Debug, Default)]
pub struct Records {
    pub keep_lines: bool,
    /// Waits received (kept or not).
    pub events: u64,
    waits: Vec<RunqEvent>,
}

impl Records {
    pub fn wait(&mut self, ev: &RunqEvent, room: &mut Room<'_>) {
        self.events += 1;
        if self.keep_lines && room.fits(&self.waits) {
            self.waits.push(*ev);
        }
    }

    pub fn lines(&mut self, describe: &mut Describe<'_>, out: &mut Vec<EventLine>) {
        for ev in self.waits.drain(..) {
            let (path, name) = describe(ev.cgroup_id);
            out.push(EventLine::RunqWait(wait_line(&ev, path, name)));
        }
    }
}

/// The event line of one run-queue wait of the cgroup at `path`.
pub fn wait_line(ev: &RunqEvent, path: Option<String>, name: Option<String>) -> RunqWait {
    RunqWait {
        kind: INFO.event_line.into(),
        ts_ns: ev.header.ts_ns,
        cpu: ev.header.cpu,
        cgroup_id: ev.cgroup_id,
        path,
        name,
        pid: ev.pid,
        tgid: ev.tgid,
        comm: comm_str(&ev.comm),
        wait_kind: WaitKind::try_from(ev.kind)
            .map_or("unknown", |k| k.name())
            .to_string(),
        wait_us: ev.wait_ns as f64 / 1e3,
    }
}

/// A single run-queue wait at or above `--event-min-ms` (`--events`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunqWait {
    #[serde(rename = "type")]
    pub kind: String,
    /// CLOCK_MONOTONIC (ns) when the wait ended.
    pub ts_ns: u64,
    pub cpu: u32,
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    /// `wakeup`, `preempt` or `throttled`.
    pub wait_kind: String,
    pub wait_us: f64,
}
