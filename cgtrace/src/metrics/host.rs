//! The series without a `cgroup` label: the events the kernel programs saw and lost, their
//! counters, the run count and run time of each of cgtrace's own BPF programs, the windows
//! aggregated, how many cgroups have series of their own, and cgtrace's own CPU and memory.

use std::collections::BTreeMap;

use super::encode::{Kind, Labels, MetricFamily};
use crate::model::Window;

/// What the host-wide series hold, cumulative since cgtrace started.
#[derive(Debug, Default)]
pub(super) struct Host {
    windows: u64,
    last_seq: u64,
    last_end_ms: u64,
    seen: u64,
    dropped: u64,
    counters: BTreeMap<String, u64>,
    /// Per BPF program (from the windows' `self`): runs, run time (ns), recursion misses.
    programs: BTreeMap<String, (u64, u64, u64)>,
    /// cgtrace's own cost: CPU seconds and resident bytes, read at each window.
    own: Option<ProcessCost>,
}

/// The bookkeeping of the per-cgroup series, which the host series report.
pub(super) struct SeriesCounts {
    /// Cgroups with series of their own now.
    pub cgroups: usize,
    /// Cgroups summed into `cgroup="other"` since start.
    pub folded: u64,
    /// Series dropped after `ttl` without activity since start.
    pub expired: u64,
}

/// A per-program metric of cgtrace's own BPF programs: name, unit, help, and its value from
/// (runs, run time in ns, recursion misses).
type PerProgram = (
    &'static str,
    &'static str,
    &'static str,
    fn(&(u64, u64, u64)) -> f64,
);

/// cgtrace's own BPF programs, bpftop-style (`window.self`): what tracing costs the host.
#[rustfmt::skip]
const PER_PROGRAM: [PerProgram; 3] = [
    ("cgtrace_bpf_runs", "", "Runs of each of cgtrace's BPF programs", |v| v.0 as f64),
    (
        "cgtrace_bpf_run_seconds",
        "seconds",
        "Time the kernel spent in each of cgtrace's BPF programs (counted while BPF \
         run-time statistics are on: see window.self.bpf_stats)",
        |v| v.1 as f64 / 1e9,
    ),
    (
        "cgtrace_bpf_recursion_misses",
        "",
        "Runs of each of cgtrace's BPF programs the kernel skipped (the program was \
         already running on that CPU)",
        |v| v.2 as f64,
    ),
];

/// What `record` could not write: a window's `recorder_*` counter, its metric, its help.
const RECORDER: [(&str, &str, &str); 4] = [
    (
        "recorder_dropped_chunks",
        "cgtrace_recorder_dropped_chunks",
        "Chunks the recorder could not write (disk full, I/O error, read-only, below --min-free, queue full)",
    ),
    (
        "recorder_dropped_bytes",
        "cgtrace_recorder_dropped_bytes",
        "Bytes of the chunks the recorder could not write",
    ),
    (
        "recorder_queue_full",
        "cgtrace_recorder_queue_full",
        "Chunks dropped because the writer thread's queue was full (the disk stalled)",
    ),
    (
        "recorder_write_errors",
        "cgtrace_recorder_write_errors",
        "Writes the disk refused (each retry counts)",
    ),
];

/// cgtrace's own process: CPU used since it started and resident memory now.
#[derive(Clone, Copy, Debug)]
struct ProcessCost {
    cpu_seconds: f64,
    rss_bytes: u64,
}

impl ProcessCost {
    /// CPU time from `getrusage`, resident pages from `/proc/self/statm` (the `self` object's
    /// source too).
    fn read_self() -> Option<Self> {
        let (cpu_seconds, rss_bytes) = crate::selfstat::process_totals()?;
        Some(Self {
            cpu_seconds,
            rss_bytes,
        })
    }
}

impl Host {
    /// Adds one window, and reads cgtrace's own cost now.
    pub(super) fn add(&mut self, w: &Window) {
        self.windows += 1;
        self.last_seq = w.seq;
        self.last_end_ms = w.end_unix_ms;
        self.seen += w.events.seen;
        self.dropped += w.events.dropped;
        for (k, v) in &w.events.counters {
            *self.counters.entry(k.clone()).or_insert(0) += v;
        }
        for p in w.self_cost.iter().flat_map(|s| &s.programs) {
            let e = self.programs.entry(p.name.clone()).or_insert((0, 0, 0));
            e.0 += p.runs;
            e.1 += (p.run_us * 1e3).round() as u64;
            e.2 += p.recursion_misses;
        }
        self.own = ProcessCost::read_self();
    }

    /// The host-wide metrics, in the exposition's order.
    pub(super) fn families(&self, series: &SeriesCounts, out: &mut Vec<MetricFamily>) {
        #[rustfmt::skip]
        let events = [
            ("cgtrace_events_seen", Kind::Counter, "", "Scheduler events the kernel programs handled", self.seen as f64),
            ("cgtrace_events_dropped", Kind::Counter, "", "Events or waits lost (full maps or ring buffer, undecodable)", self.dropped as f64),
        ];
        out.extend(singles(events));
        let none = Labels::new();
        let mut f = MetricFamily::new(
            "cgtrace_kernel_program",
            Kind::Counter,
            "",
            "Each counter of the kernel programs",
        );
        for (k, v) in &self.counters {
            if !k.starts_with("recorder_") {
                f.num(&none, Some(("counter", k)), *v as f64);
            }
        }
        out.push(f);
        // The recorder's own (only `record` has them).
        for (key, name, help) in RECORDER {
            if let Some(v) = self.counters.get(key) {
                out.push(MetricFamily::single(
                    name,
                    Kind::Counter,
                    "",
                    help,
                    *v as f64,
                ));
            }
        }
        for (name, unit, help, value) in PER_PROGRAM {
            let mut f = MetricFamily::new(name, Kind::Counter, unit, help);
            for (program, v) in &self.programs {
                f.num(&none, Some(("program", program)), value(v));
            }
            out.push(f);
        }
        #[rustfmt::skip]
        let windows = [
            ("cgtrace_windows", Kind::Counter, "", "Windows aggregated", self.windows as f64),
            ("cgtrace_last_window_seq", Kind::Gauge, "", "seq of the last window in these figures", self.last_seq as f64),
            ("cgtrace_last_window_end_seconds", Kind::Gauge, "seconds", "Unix time the last window ended", self.last_end_ms as f64 / 1e3),
            ("cgtrace_series_cgroups", Kind::Gauge, "", "Cgroups with series of their own (at most --max-series)", series.cgroups as f64),
            ("cgtrace_series_folded", Kind::Counter, "", "Cgroups summed into cgroup=\"other\" past --max-series", series.folded as f64),
            ("cgtrace_series_expired", Kind::Counter, "", "Cgroups whose series were dropped after --series-ttl without activity", series.expired as f64),
        ];
        out.extend(singles(windows));
        if let Some(c) = &self.own {
            #[rustfmt::skip]
            let own = [
                ("cgtrace_process_cpu_seconds", Kind::Counter, "seconds", "CPU cgtrace's own process used (user and system)", c.cpu_seconds),
                ("cgtrace_process_resident_memory_bytes", Kind::Gauge, "bytes", "cgtrace's own resident memory", c.rss_bytes as f64),
            ];
            out.extend(singles(own));
        }
    }
}

/// A metric of one series without labels: name, type, unit, help, value.
type Single = (&'static str, Kind, &'static str, &'static str, f64);

fn singles<const N: usize>(rows: [Single; N]) -> [MetricFamily; N] {
    rows.map(|(name, kind, unit, help, v)| MetricFamily::single(name, kind, unit, help, v))
}
