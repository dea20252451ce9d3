//! `reads`' metric series: pseudo-file reads by the reading cgroup and filesystem (time, count,
//! the share spent flushing memcg statistics), and the host's dying memcgs and cgroup churn.
//!
//! Per-file and per-comm series are left to the stream and the report: file names and comms are
//! unbounded, a filesystem (`cgroup`, `cgroup2`, `sysfs`, `proc`, `fuse`, `rstat`) is not.

use std::collections::BTreeMap;

use crate::{
    metrics::encode::{Kind, Labels, MetricFamily},
    model::{CgroupWindow, Window},
};

/// One reading cgroup's reads since cgtrace started, by filesystem.
#[derive(Clone, Debug, Default)]
pub struct Series {
    by_fs: BTreeMap<String, Reads>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Reads {
    count: u64,
    total_us: f64,
    flush_us: f64,
}

impl Series {
    pub fn add(&mut self, c: &CgroupWindow) {
        for f in c.reads.iter().flatten() {
            let r = self.by_fs.entry(f.fs.clone()).or_default();
            r.count += f.count;
            r.total_us += f.total_us;
            r.flush_us += f.flush_us + f.lock_wait_us;
        }
    }
}

/// The host's side of the family, since cgtrace started.
#[derive(Clone, Debug, Default)]
pub struct Host {
    dying: Option<u64>,
    created: u64,
    removed: u64,
}

impl Host {
    pub fn add(&mut self, w: &Window) {
        if let Some(d) = &w.dying_memcgs {
            self.dying = Some(d.total);
        }
        if let Some(c) = &w.churn {
            self.created += c.created;
            self.removed += c.removed;
        }
    }
}

#[rustfmt::skip]
const COUNTERS: [(&str, &str, &str); 3] = [
    ("cgtrace_reads", "", "Pseudo-file reads by the cgroup's tasks, by filesystem"),
    ("cgtrace_read_seconds", "seconds", "Time in pseudo-file reads by the cgroup's tasks, by filesystem"),
    ("cgtrace_read_flush_seconds", "seconds", "Of that, time flushing memcg statistics (rstat) or waiting for its lock"),
];

/// The reads series of every cgroup that read pseudo-files, and the host's.
pub fn families(series: &[(&Labels, &Series)], host: &Host, out: &mut Vec<MetricFamily>) {
    for (i, (name, unit, help)) in COUNTERS.into_iter().enumerate() {
        let mut f = MetricFamily::new(name, Kind::Counter, unit, help);
        for (l, s) in series {
            for (fs, r) in &s.by_fs {
                let v = match i {
                    0 => r.count as f64,
                    1 => r.total_us / 1e6,
                    _ => r.flush_us / 1e6,
                };
                f.num(l, Some(("fs", fs)), v);
            }
        }
        out.push(f);
    }
    let mut f = MetricFamily::new(
        "cgtrace_dying_memcgs",
        Kind::Gauge,
        "",
        "Removed memory cgroups the kernel still holds (each slows memory.stat reads)",
    );
    if let Some(d) = host.dying {
        f.num(&Labels::new(), None, d as f64);
    }
    out.push(f);
    #[rustfmt::skip]
    let churn = [
        ("cgtrace_cgroups_created", "Cgroups created (mkdir)", host.created),
        ("cgtrace_cgroups_removed", "Cgroups removed (rmdir)", host.removed),
    ];
    for (name, help, v) in churn {
        let f = MetricFamily::single(name, Kind::Counter, "", help, v as f64);
        out.push(f);
    }
}
