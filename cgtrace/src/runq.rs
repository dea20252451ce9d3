//! `runq` in the daemon: reads the kernel's per-(cgroup, wait kind) histograms once per window
//! and turns cumulative values into window deltas; decodes `RunqEvent` records.

use std::collections::HashMap as StdHashMap;

use anyhow::Context as _;
use aya::maps::{Array, HashMap, MapData};
use cgtrace_common::{
    event::{DecodeError, KIND_RUNQ_WAIT, read_pod},
    hist::NR_BUCKETS,
    runq::{RunqEvent, RunqHist, RunqKey, WaitKind},
};

use crate::hist::Hist;

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

/// Decodes a `KIND_RUNQ_WAIT` record.
pub fn decode_event(bytes: &[u8]) -> Result<RunqEvent, DecodeError> {
    // SAFETY: RunqEvent is #[repr(C)] integers and byte arrays, valid for any bytes.
    let ev: RunqEvent = unsafe { read_pod(bytes) }.ok_or(DecodeError::Short {
        kind: KIND_RUNQ_WAIT,
        len: bytes.len(),
        need: size_of::<RunqEvent>(),
    })?;
    Ok(ev)
}

/// A task name from a kernel `comm` buffer.
pub fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use cgtrace_common::event::EventHeader;

    use super::*;

    #[test]
    fn decodes_an_event_and_rejects_short_records() {
        let ev = RunqEvent {
            header: EventHeader {
                kind: KIND_RUNQ_WAIT,
                cpu: 1,
                ts_ns: 42,
            },
            cgroup_id: 77,
            wait_ns: 12_345_678,
            pid: 10,
            tgid: 9,
            kind: WaitKind::Preempt as u32,
            _pad: 0,
            comm: *b"stress-ng\0\0\0\0\0\0\0",
        };
        // SAFETY: plain #[repr(C)] value viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const ev).cast::<u8>(), size_of::<RunqEvent>())
        };
        let back = decode_event(bytes).expect("decode");
        assert_eq!(back.cgroup_id, 77);
        assert_eq!(back.wait_ns, 12_345_678);
        assert_eq!(WaitKind::try_from(back.kind), Ok(WaitKind::Preempt));
        assert_eq!(comm_str(&back.comm), "stress-ng");
        assert!(matches!(
            decode_event(&bytes[..20]),
            Err(DecodeError::Short { need, .. }) if need == size_of::<RunqEvent>()
        ));
    }

    #[test]
    fn abi_sizes_are_stable() {
        assert_eq!(size_of::<RunqKey>(), 16);
        assert_eq!(size_of::<RunqHist>(), 8 * (5 + NR_BUCKETS));
        assert_eq!(size_of::<RunqEvent>(), 16 + 8 + 8 + 16 + 16);
    }
}
