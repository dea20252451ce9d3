//! The `reads` family over the recording: the slowest pseudo-file reads by reader and file, the
//! memory cgroups whose stat files were read, dying memcgs and cgroup churn.

use std::collections::{BTreeMap, HashMap, btree_map, hash_map};

use super::budget::{self, Budget};

use crate::{
    model::Window,
    report::{model::FileReadsSeen, model::MemcgSeen, model::TOP},
};

/// Sums the windows' `reads` family as they come.
#[derive(Default)]
pub(super) struct Reads {
    files: HashMap<(u64, String, String), FileReadsSeen>,
    memcgs: BTreeMap<(String, String), MemcgSeen>,
    dying_max: Option<u64>,
    churn: (u64, u64),
}

/// What the report shows of the `reads` family.
pub(super) struct ReadsSeen {
    pub slowest: Vec<FileReadsSeen>,
    pub memcgs: Vec<MemcgSeen>,
    pub dying_max: Option<u64>,
    pub created: u64,
    pub removed: u64,
}

impl Reads {
    /// Adds one window's `reads` family (per-cgroup `reads` lines, `memcgs`, `dying_memcgs`,
    /// `churn`).
    pub(super) fn add(&mut self, w: &Window, budget: &mut Budget) {
        for c in &w.cgroups {
            for r in c.reads.iter().flatten() {
                let e = match self.files.entry((c.id, r.comm.clone(), r.file.clone())) {
                    hash_map::Entry::Occupied(e) => e.into_mut(),
                    hash_map::Entry::Vacant(e) => {
                        let size = size_of::<((u64, String, String), FileReadsSeen)>()
                            + 2 * (r.comm.len() + r.file.len())
                            + budget::len(&c.path)
                            + budget::len(&c.name);
                        if !budget.take(size) {
                            continue;
                        }
                        e.insert(FileReadsSeen {
                            cgroup_id: c.id,
                            path: c.path.clone(),
                            name: c.name.clone(),
                            comm: r.comm.clone(),
                            file: r.file.clone(),
                            ..FileReadsSeen::default()
                        })
                    }
                };
                e.count = e.count.saturating_add(r.count);
                e.total_us += r.total_us;
                e.flush_us += r.flush_us + r.lock_wait_us;
                if r.latency.max_us > e.max_us {
                    e.max_us = r.latency.max_us;
                    e.max_at_unix_ms = w.end_unix_ms;
                }
                if let Some(d) = r.dying_memcgs {
                    e.dying_memcgs = Some(e.dying_memcgs.unwrap_or(0).max(u64::from(d)));
                }
            }
        }
        for m in &w.memcgs {
            let key = (m.hierarchy.clone(), m.path.clone());
            let e = match self.memcgs.entry(key) {
                btree_map::Entry::Occupied(e) => e.into_mut(),
                btree_map::Entry::Vacant(e) => {
                    let size = size_of::<((String, String), MemcgSeen)>()
                        + 2 * (m.hierarchy.len() + m.path.len());
                    if !budget.take(size) {
                        continue;
                    }
                    e.insert(MemcgSeen {
                        hierarchy: m.hierarchy.clone(),
                        path: m.path.clone(),
                        ..MemcgSeen::default()
                    })
                }
            };
            e.stat_reads = e.stat_reads.saturating_add(m.stat_reads);
            e.read_us += m.read_us;
            e.flush_us += m.flush_us + m.lock_wait_us;
            e.dying_memcgs_max = e.dying_memcgs_max.max(u64::from(m.dying_memcgs));
            for r in &m.readers {
                if !e.readers.iter().any(|x| x == r) && e.readers.len() < 5 && budget.take(r.len())
                {
                    e.readers.push(r.clone());
                }
            }
        }
        if let Some(d) = &w.dying_memcgs {
            self.dying_max = Some(self.dying_max.unwrap_or(0).max(d.total));
        }
        if let Some(c) = &w.churn {
            self.churn.0 = self.churn.0.saturating_add(c.created);
            self.churn.1 = self.churn.1.saturating_add(c.removed);
        }
    }

    /// The `TOP` slowest (reader, file) pairs and the `TOP` most read memcgs.
    pub(super) fn finish(self) -> ReadsSeen {
        let mut slowest: Vec<FileReadsSeen> = self.files.into_values().collect();
        slowest.sort_by(|a, b| b.max_us.total_cmp(&a.max_us).then(a.file.cmp(&b.file)));
        slowest.truncate(TOP);
        let mut memcgs: Vec<MemcgSeen> = self.memcgs.into_values().collect();
        memcgs.sort_by(|a, b| b.read_us.total_cmp(&a.read_us).then(a.path.cmp(&b.path)));
        memcgs.truncate(TOP);
        ReadsSeen {
            slowest,
            memcgs,
            dying_max: self.dying_max,
            created: self.churn.0,
            removed: self.churn.1,
        }
    }
}
