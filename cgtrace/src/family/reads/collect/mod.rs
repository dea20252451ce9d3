//! The live side of `reads`: the collector that, each window, takes the read statistics'
//! deltas ([`ReadsReader`]), the host's dying memcgs ([`DyingCounter`]) and cgroup churn, and
//! names the slow reads' files for their event lines.

use aya::maps::{HashMap, MapData};
use cgtrace_common::reads::ReadKey;

pub use super::dying::DyingCounter;
pub mod reader;

use super::{MemcgTarget, ReadFile};
use crate::{
    family::collect::{Collector, Start, WindowInput, take_map},
    family::{EventLine, Records},
    model::{CgroupWindow, Window},
};
pub use reader::{ReadsReader, ReadsWindow};

/// The reads family's collector: its map reader, where dying memcgs are counted, and how churn
/// events name their hierarchies.
pub struct Reads {
    pub reader: ReadsReader,
    /// Counts dying memcgs (`None`: no memory controller).
    pub dying: Option<DyingCounter>,
    /// Cgroup churn is traced, so the v1 directory count can follow it between walks.
    pub churn_traced: bool,
    /// v1 controllers by hierarchy id, to name churn events' hierarchies.
    pub subsystems: Vec<(String, u32)>,
    /// Memcg targets of the window being built.
    memcgs: Vec<MemcgTarget>,
}

impl Reads {
    pub fn new(
        reader: ReadsReader,
        dying: Option<DyingCounter>,
        churn_traced: bool,
        subsystems: Vec<(String, u32)>,
    ) -> Self {
        Self {
            reader,
            dying,
            churn_traced,
            subsystems,
            memcgs: Vec::new(),
        }
    }
}

/// Takes `READ_STATS` and `READ_FILES`; dying memcgs are counted in the memory hierarchy (v1)
/// or cgroup2.
pub fn start(ctx: &mut Start<'_>) -> anyhow::Result<Box<dyn Collector>> {
    let stats: HashMap<MapData, _, _> = take_map(ctx.ebpf, "READ_STATS")?.try_into()?;
    let files: HashMap<MapData, _, _> = take_map(ctx.ebpf, "READ_FILES")?.try_into()?;
    let cgroups = ctx.cgroups;
    let dying = match cgroups.for_controller("memory") {
        Some(h) => Some(DyingCounter::new(
            h.mount.clone(),
            matches!(h.version, crate::cgroup::Version::V2),
        )),
        None => cgroups
            .v2()
            .map(|h| DyingCounter::new(h.mount.clone(), true)),
    };
    Ok(Box::new(Reads::new(
        ReadsReader::new(stats, files),
        dying,
        ctx.reads.churn_traced,
        cgroups
            .subsystems
            .iter()
            .map(|s| (s.name.clone(), s.hierarchy))
            .collect(),
    )))
}

impl Collector for Reads {
    fn read_window(
        &mut self,
        records: &mut Records,
        input: &mut WindowInput,
    ) -> anyhow::Result<()> {
        let w = self.reader.read_window();
        self.reader.age(&records.reads.churn.take_removed());
        input.reads = w.by_cgroup;
        self.memcgs = w.memcgs;
        Ok(())
    }

    fn cgroup_part(&mut self, cg: &mut CgroupWindow, input: &mut WindowInput, _: u64) {
        cg.reads = input.reads.remove(&cg.id);
    }

    fn finish_window(&mut self, records: &mut Records, window: &mut Window) {
        window.memcgs = std::mem::take(&mut self.memcgs);
        let (reader, subsystems) = (&self.reader, &self.subsystems);
        window.churn = records
            .reads
            .churn
            .take(|h| reader.hierarchy_name(h, subsystems));
        // The memory hierarchy's churn keeps the v1 directory count current between walks.
        let churn = self.churn_traced.then(|| {
            window.churn.as_ref().map_or((0, 0), |c| {
                c.by_hierarchy
                    .iter()
                    .filter(|(name, _)| name.split(',').any(|n| n == "memory"))
                    .fold((0, 0), |acc, (_, v)| (acc.0 + v[0], acc.1 + v[1]))
            })
        });
        window.dying_memcgs = self
            .dying
            .as_mut()
            .and_then(|d| d.read("/proc/cgroups".as_ref(), churn));
    }

    fn lines(&mut self, records: &mut Records, out: &mut Vec<EventLine>) {
        for ev in records.reads.take_slow_reads() {
            out.push(EventLine::SlowRead(self.reader.slow_read(&ev)));
        }
    }

    fn read_file(&mut self, key: &ReadKey) -> Option<ReadFile> {
        Some(self.reader.read_file(key))
    }
}
