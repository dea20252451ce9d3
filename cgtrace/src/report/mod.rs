//! `cgtrace report FILE [--json]`: an incident summary of a recording.
//!
//! Families are found in the windows by shape, not by a list: any object inside a cgroup element
//! that carries a histogram (`count`, `sum_us`, `max_us`, `buckets`) is a family whose worst
//! cgroups are ranked by p99 and max over the whole recording (merged buckets, so the p99 is of
//! every wait, not an average of windows); the `throttle` family adds periods, throttled time,
//! the kernel's own `cpu.stat` counters next to ours, and the flags. Single events give the
//! longest throttle episodes with the threads that burned the quota, and the slowest waits; event
//! kinds this cgtrace cannot decode are counted by family.

pub mod html;

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use serde::Serialize;
use serde_json::Value;

use crate::{
    family::select::EventSelection,
    family::throttle::burners::ThrottledPeriod,
    family::{self, EventLine},
    hist::{Hist, HistSummary},
    model::{CgroupWindow, Window},
    record::reader::{Item, ReadStats, Recording},
    replay::Playback,
    units::{PeriodIn, clock_utc, period, period_thread},
};

/// How many entries each ranking keeps.
const TOP: usize = 10;

#[derive(Debug, Serialize)]
pub struct Report {
    pub host: String,
    pub kernel: String,
    pub cgtrace: String,
    pub format: String,
    pub first_unix_ms: u64,
    pub last_unix_ms: u64,
    pub windows: u64,
    pub events_recorded: u64,
    /// Kernel-side drops over the recording (`events.dropped` summed).
    pub events_dropped: u64,
    /// Records the recorder itself could not keep (its buffer was full).
    pub recorder_lost: u64,
    /// What could not be read from the file.
    pub read: ReadStats,
    /// Per family: the cgroups with the worst tail latency.
    pub families: BTreeMap<String, FamilyReport>,
    /// Diagnoses of the families other than `throttle` (whose flags are in `throttled`), by
    /// cgroup: most windows flagged first.
    pub diagnoses: Vec<Diagnosed>,
    pub throttled: Vec<ThrottledCgroup>,
    pub longest_episodes: Vec<Episode>,
    pub slowest_waits: Vec<Wait>,
    /// The blame ledger (recorded with `--blame`): the cgroups that cost others the most
    /// run-queue wait, with their victims.
    pub noisy_neighbours: Vec<family::runq::blame::NoisyNeighbour>,
    /// `reads`: the (reader cgroup, comm, file) with the slowest reads over the recording.
    pub slowest_reads: Vec<FileReadsSeen>,
    /// `reads`: memory cgroups whose stat files were read, most read time first.
    pub memcgs: Vec<MemcgSeen>,
    /// `reads`: the host's largest dying memcg count over the recording.
    pub dying_memcgs_max: Option<u64>,
    /// `reads`: cgroups created and removed over the recording.
    pub cgroups_created: u64,
    pub cgroups_removed: u64,
    /// Single events per family, and those this cgtrace cannot decode.
    pub events_by_family: BTreeMap<String, u64>,
    pub undecoded_events: u64,
    /// How the recorded kernel split waits into throttled and the rest (absent in recordings
    /// made before it was reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_split: Option<crate::model::WaitSplit>,
    /// What cgtrace itself cost the recorded host (the windows' `self`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_cost: Option<OwnCost>,
}

/// cgtrace's own cost over a recording, from its windows' `self` objects.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct OwnCost {
    /// Windows with a `self` object, and of those, windows whose programs were timed
    /// (`--bpf-stats`).
    pub windows: u64,
    pub timed_windows: u64,
    pub mean_daemon_cpu_pct: f64,
    pub max_daemon_cpu_pct: f64,
    pub max_rss_kib: u64,
    /// Time in all programs over the timed windows, in % of one CPU.
    pub mean_bpf_cpu_pct: f64,
    /// Per program over the timed windows, most time first.
    pub programs: Vec<ProgramTotal>,
}

/// One program's runs and time over a recording's timed windows.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct ProgramTotal {
    pub name: String,
    pub runs: u64,
    pub run_us: f64,
    pub ns_per_run: f64,
}

/// Sums the windows' `self` objects as they come.
#[derive(Default)]
struct OwnAcc {
    windows: u64,
    timed: u64,
    daemon_pct_sum: f64,
    daemon_pct_max: f64,
    rss_max: u64,
    timed_ms: u64,
    programs: BTreeMap<String, (u64, f64)>,
}

impl OwnAcc {
    fn add(&mut self, w: &Window) {
        let Some(s) = &w.self_cost else {
            return;
        };
        self.windows += 1;
        self.daemon_pct_sum += s.daemon_cpu_pct;
        self.daemon_pct_max = self.daemon_pct_max.max(s.daemon_cpu_pct);
        self.rss_max = self.rss_max.max(s.rss_kib);
        if s.bpf_stats {
            self.timed += 1;
            self.timed_ms += w.duration_ms;
            for p in &s.programs {
                let e = self.programs.entry(p.name.clone()).or_default();
                e.0 += p.runs;
                e.1 += p.run_us;
            }
        }
    }

    fn finish(self) -> Option<OwnCost> {
        if self.windows == 0 {
            return None;
        }
        let total_us: f64 = self.programs.values().map(|p| p.1).sum();
        let mut programs: Vec<ProgramTotal> = self
            .programs
            .into_iter()
            .filter(|(_, (runs, _))| *runs > 0)
            .map(|(name, (runs, run_us))| ProgramTotal {
                name,
                runs,
                run_us,
                ns_per_run: run_us * 1e3 / runs as f64,
            })
            .collect();
        programs.sort_by(|a, b| b.run_us.total_cmp(&a.run_us).then(a.name.cmp(&b.name)));
        Some(OwnCost {
            windows: self.windows,
            timed_windows: self.timed,
            mean_daemon_cpu_pct: self.daemon_pct_sum / self.windows as f64,
            max_daemon_cpu_pct: self.daemon_pct_max,
            max_rss_kib: self.rss_max,
            mean_bpf_cpu_pct: if self.timed_ms > 0 {
                total_us / (self.timed_ms as f64 * 1e3) * 100.0
            } else {
                0.0
            },
            programs,
        })
    }
}

/// One reader's reads of one file over the recording.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FileReadsSeen {
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub comm: String,
    pub file: String,
    pub count: u64,
    pub total_us: f64,
    pub flush_us: f64,
    pub max_us: f64,
    pub max_at_unix_ms: u64,
    pub dying_memcgs: Option<u64>,
}

/// A memory cgroup whose stat files were read, over the recording.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemcgSeen {
    pub hierarchy: String,
    pub path: String,
    pub stat_reads: u64,
    pub read_us: f64,
    pub flush_us: f64,
    pub dying_memcgs_max: u64,
    pub readers: Vec<String>,
}

/// Adds one window's `reads` family (per-cgroup `reads` lines, `memcgs`, `dying_memcgs`, `churn`).
fn window_reads(
    w: &Window,
    files: &mut HashMap<(u64, String, String), FileReadsSeen>,
    memcgs: &mut BTreeMap<(String, String), MemcgSeen>,
    dying_max: &mut Option<u64>,
    churn: &mut (u64, u64),
) {
    for c in &w.cgroups {
        for r in c.reads.iter().flatten() {
            let e = files
                .entry((c.id, r.comm.clone(), r.file.clone()))
                .or_insert_with(|| FileReadsSeen {
                    cgroup_id: c.id,
                    path: c.path.clone(),
                    name: c.name.clone(),
                    comm: r.comm.clone(),
                    file: r.file.clone(),
                    ..FileReadsSeen::default()
                });
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
        let e = memcgs.entry(key).or_insert_with(|| MemcgSeen {
            hierarchy: m.hierarchy.clone(),
            path: m.path.clone(),
            ..MemcgSeen::default()
        });
        e.stat_reads = e.stat_reads.saturating_add(m.stat_reads);
        e.read_us += m.read_us;
        e.flush_us += m.flush_us + m.lock_wait_us;
        e.dying_memcgs_max = e.dying_memcgs_max.max(u64::from(m.dying_memcgs));
        for r in &m.readers {
            if !e.readers.iter().any(|x| x == r) && e.readers.len() < 5 {
                e.readers.push(r.clone());
            }
        }
    }
    if let Some(d) = &w.dying_memcgs {
        *dying_max = Some(dying_max.unwrap_or(0).max(d.total));
    }
    if let Some(c) = &w.churn {
        churn.0 = churn.0.saturating_add(c.created);
        churn.1 = churn.1.saturating_add(c.removed);
    }
}

#[derive(Debug, Serialize)]
pub struct FamilyReport {
    pub cgroups: usize,
    pub worst_p99: Vec<CgroupLatency>,
    pub worst_max: Vec<CgroupLatency>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CgroupLatency {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub count: u64,
    pub mean_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// When the largest one happened (end of its window).
    pub max_at_unix_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ThrottledCgroup {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub quota_cores: Option<f64>,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_us: f64,
    pub episodes: u64,
    pub worst_window_share: f64,
    /// The kernel's `cpu.stat` deltas over the same windows (those with a reading).
    pub kernel_nr_throttled: u64,
    pub kernel_throttled_us: f64,
    /// Ours over the same windows the kernel figures cover.
    pub ours_nr_throttled_matched: u64,
    pub ours_throttled_us_matched: f64,
    /// Flag code → (windows flagged, the last message and suggestion).
    pub flags: BTreeMap<String, FlagSeen>,
}

/// A diagnosis of one cgroup over the recording.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosed {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub family: String,
    pub code: String,
    pub windows: u64,
    /// The last window's finding and the change it suggests.
    pub message: String,
    pub suggestion: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct FlagSeen {
    pub windows: u64,
    pub message: String,
    pub suggestion: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Episode {
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub at_unix_ms: u64,
    pub cpu: u32,
    pub duration_us: f64,
    pub runnable: u32,
    pub period: Option<ThrottledPeriod>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Wait {
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub at_unix_ms: u64,
    pub pid: u32,
    pub comm: String,
    pub wait_kind: String,
    pub wait_us: f64,
}

/// A family's histogram of one cgroup over the recording.
#[derive(Default)]
struct Acc {
    path: Option<String>,
    name: Option<String>,
    hist: Hist,
    max_at: u64,
}

fn as_hist(v: &Value) -> Option<HistSummary> {
    let o = v.as_object()?;
    if !(o.contains_key("count") && o.contains_key("buckets") && o.contains_key("max_us")) {
        return None;
    }
    serde_json::from_value(v.clone()).ok()
}

/// The report's share of event lines: the slowest waits and the longest episodes, timed by the
/// last window's clock pair (`clock`: CLOCK_MONOTONIC and wall clock ms).
fn place(
    lines: &mut Vec<EventLine>,
    clock: Option<(u64, u64)>,
    waits: &mut Vec<Wait>,
    episodes: &mut Vec<Episode>,
) {
    let wall = |ts: u64| {
        clock.map_or(0, |(mono, unix)| {
            let ms = i128::from(unix) + (i128::from(ts) - i128::from(mono)) / 1_000_000;
            ms.clamp(0, i128::from(u64::MAX)) as u64
        })
    };
    for line in lines.drain(..) {
        match line {
            EventLine::RunqWait(w) => {
                waits.push(Wait {
                    cgroup_id: w.head.cgroup_id,
                    path: w.head.path,
                    name: w.head.name,
                    at_unix_ms: wall(w.head.ts_ns),
                    pid: w.pid,
                    comm: w.comm,
                    wait_kind: w.wait_kind,
                    wait_us: w.wait_us,
                });
                keep_top(waits, |w| w.wait_us);
            }
            EventLine::Throttle(t) => {
                episodes.push(Episode {
                    cgroup_id: t.head.cgroup_id,
                    path: t.head.path,
                    name: t.head.name,
                    at_unix_ms: wall(t.head.ts_ns),
                    cpu: t.head.cpu,
                    duration_us: t.duration_us,
                    runnable: t.runnable,
                    period: t.period,
                });
                keep_top(episodes, |e| e.duration_us);
            }
            EventLine::SlowRead(_) => {}
        }
    }
}

/// Builds the report in one pass over the file.
pub fn build(rec: &Recording) -> Report {
    let hello = rec.hello();
    let mut fam: BTreeMap<String, HashMap<u64, Acc>> = BTreeMap::new();
    let mut thr: HashMap<u64, ThrottledCgroup> = HashMap::new();
    let mut diagnosed: HashMap<(u64, String), Diagnosed> = HashMap::new();
    let mut play = Playback::new(&EventSelection::all());
    let mut lines = Vec::new();
    let mut episodes: Vec<Episode> = Vec::new();
    let mut waits: Vec<Wait> = Vec::new();
    let mut by_family: BTreeMap<String, u64> = BTreeMap::new();
    let (mut undecoded, mut dropped, mut nwin, mut nev) = (0u64, 0u64, 0u64, 0u64);
    let mut recorder_lost = 0u64;
    let mut read_files: HashMap<(u64, String, String), FileReadsSeen> = HashMap::new();
    let mut memcgs: BTreeMap<(String, String), MemcgSeen> = BTreeMap::new();
    let mut dying_max: Option<u64> = None;
    let mut own = OwnAcc::default();
    let mut noisy = family::runq::blame::Noisy::default();
    let mut churn = (0u64, 0u64);
    let (mut first, mut last) = (u64::MAX, 0u64);
    // CLOCK_MONOTONIC → wall clock, from the last window's pair of both.
    let mut clock: Option<(u64, u64)> = None;
    // Events come before the window that ends after them: their times use the last window seen
    // (or, before the first window, are fixed up at it).
    let mut unplaced = (episodes.len(), waits.len());
    rec.for_each(|item| match item {
        Item::Names(j) => play.names(j),
        Item::Files(j) => play.files(j),
        Item::Event(raw) => {
            nev += 1;
            let played = play.event(raw, &mut lines);
            let Some(kind) = played.kind else {
                undecoded += 1;
                return;
            };
            let family = family::of_kind(kind).map_or("unknown", |f| f.name);
            *by_family.entry(family.to_string()).or_insert(0) += 1;
            if played.undecoded {
                undecoded += 1;
            }
            place(&mut lines, clock, &mut waits, &mut episodes);
        }
        Item::Window {
            mono_ns,
            end_unix_ms,
            json,
        } => {
            play.window(mono_ns, &mut lines);
            place(&mut lines, clock, &mut waits, &mut episodes);
            let fix = clock.is_none();
            clock = Some((mono_ns, end_unix_ms));
            if fix {
                for e in &mut episodes[unplaced.0..] {
                    e.at_unix_ms = end_unix_ms;
                }
                for w in &mut waits[unplaced.1..] {
                    w.at_unix_ms = end_unix_ms;
                }
            }
            unplaced = (episodes.len(), waits.len());
            let Ok(mut w) = serde_json::from_slice::<Window>(json) else {
                return;
            };
            // Recorded before the daemon made every family's diagnoses: the same functions.
            family::diagnose(&mut w);
            nwin += 1;
            first = first.min(end_unix_ms);
            last = last.max(end_unix_ms);
            dropped = dropped.saturating_add(w.events.dropped);
            window_reads(&w, &mut read_files, &mut memcgs, &mut dying_max, &mut churn);
            own.add(&w);
            for c in &w.cgroups {
                window_cgroup(c, end_unix_ms, &mut fam, &mut thr);
                window_flags(c, &mut diagnosed);
                noisy.add(c);
            }
        }
        Item::Loss(j) => {
            // Cumulative in the recorder: the last one counts.
            if let Ok(v) = serde_json::from_slice::<Value>(j) {
                recorder_lost = recorder_lost.max(v["events_lost"].as_u64().unwrap_or(0));
            }
        }
        Item::Summary(_) | Item::End(_) => {}
    });
    // Episode lines that waited for their period at the end of the run.
    play.finish(&mut lines);
    place(&mut lines, clock, &mut waits, &mut episodes);
    let families = fam
        .into_iter()
        .map(|(f, accs)| {
            let mut all: Vec<CgroupLatency> = accs
                .into_iter()
                .filter(|(_, a)| a.hist.count > 0)
                .map(|(id, a)| {
                    let s = a.hist.summary();
                    CgroupLatency {
                        id,
                        path: a.path,
                        name: a.name,
                        count: s.count,
                        mean_us: s.mean_us,
                        p99_us: s.p99_us,
                        max_us: s.max_us,
                        max_at_unix_ms: a.max_at,
                    }
                })
                .collect();
            let n = all.len();
            all.sort_by(|a, b| b.max_us.total_cmp(&a.max_us).then(a.id.cmp(&b.id)));
            let worst_max = all.iter().take(TOP).cloned().collect();
            // A p99 needs enough waits to mean something.
            all.retain(|c| c.count >= 100);
            all.sort_by(|a, b| b.p99_us.total_cmp(&a.p99_us).then(a.id.cmp(&b.id)));
            all.truncate(TOP);
            (
                f,
                FamilyReport {
                    cgroups: n,
                    worst_p99: all,
                    worst_max,
                },
            )
        })
        .collect();
    let mut throttled: Vec<ThrottledCgroup> = thr
        .into_values()
        .filter(|t| t.nr_throttled > 0 || t.episodes > 0)
        .collect();
    throttled.sort_by(|a, b| {
        b.throttled_us
            .total_cmp(&a.throttled_us)
            .then(a.id.cmp(&b.id))
    });
    let mut diagnoses: Vec<Diagnosed> = diagnosed.into_values().collect();
    diagnoses.sort_by(|a, b| {
        b.windows
            .cmp(&a.windows)
            .then(a.id.cmp(&b.id))
            .then(a.code.cmp(&b.code))
    });
    diagnoses.truncate(TOP * 2);
    episodes.sort_by(|a, b| b.duration_us.total_cmp(&a.duration_us));
    let mut slowest_reads: Vec<FileReadsSeen> = read_files.into_values().collect();
    slowest_reads.sort_by(|a, b| b.max_us.total_cmp(&a.max_us).then(a.file.cmp(&b.file)));
    slowest_reads.truncate(TOP);
    let mut memcgs: Vec<MemcgSeen> = memcgs.into_values().collect();
    memcgs.sort_by(|a, b| b.read_us.total_cmp(&a.read_us).then(a.path.cmp(&b.path)));
    memcgs.truncate(TOP);
    waits.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us));
    Report {
        host: hello.host,
        kernel: hello.kernel,
        cgtrace: hello.cgtrace,
        format: format!("{}.{}", rec.major, rec.minor),
        first_unix_ms: if nwin == 0 { 0 } else { first },
        last_unix_ms: last,
        windows: nwin,
        events_recorded: nev,
        events_dropped: dropped,
        recorder_lost,
        read: rec.stats.clone(),
        families,
        diagnoses,
        throttled,
        longest_episodes: episodes,
        slowest_waits: waits,
        noisy_neighbours: noisy.finish(TOP),
        slowest_reads,
        memcgs,
        dying_memcgs_max: dying_max,
        cgroups_created: churn.0,
        cgroups_removed: churn.1,
        events_by_family: by_family,
        undecoded_events: undecoded,
        wait_split: hello.wait_split,
        own_cost: own.finish(),
    }
}

/// Keeps the `TOP` largest by `key` (amortised: trims when twice as long).
fn keep_top<T>(v: &mut Vec<T>, key: impl Fn(&T) -> f64) {
    if v.len() >= 2 * TOP {
        v.sort_by(|a, b| key(b).total_cmp(&key(a)));
        v.truncate(TOP);
    }
}

fn window_cgroup(
    c: &CgroupWindow,
    end_ms: u64,
    fam: &mut BTreeMap<String, HashMap<u64, Acc>>,
    thr: &mut HashMap<u64, ThrottledCgroup>,
) {
    let (id, path, name) = (c.id, &c.path, &c.name);
    add_hist(
        fam,
        family::runq::INFO.name,
        id,
        path,
        name,
        &c.runq.all,
        end_ms,
    );
    // Families this build does not know, by shape: a histogram, or histograms one level down
    // (e.g. per operation).
    for (key, v) in &c.other {
        if let Some(h) = as_hist(v) {
            add_hist(fam, key, id, path, name, &h, end_ms);
        } else if let Some(o) = v.as_object() {
            for (sub, sv) in o {
                if let Some(h) = as_hist(sv) {
                    add_hist(fam, &format!("{key}.{sub}"), id, path, name, &h, end_ms);
                }
            }
        }
    }
    let Some(t) = &c.throttle else {
        return;
    };
    add_hist(fam, "throttle.episode", id, path, name, &t.episode, end_ms);
    let e = thr.entry(id).or_insert_with(|| ThrottledCgroup {
        id,
        ..ThrottledCgroup::default()
    });
    e.path.clone_from(path);
    e.name.clone_from(name);
    e.quota_cores = t.quota_cores.or(e.quota_cores);
    e.nr_periods = e.nr_periods.saturating_add(t.nr_periods);
    e.nr_throttled = e.nr_throttled.saturating_add(t.nr_throttled);
    e.throttled_us += t.throttled_us;
    e.episodes = e.episodes.saturating_add(t.episodes);
    e.worst_window_share = e.worst_window_share.max(t.throttled_share);
    if let Some(k) = &t.kernel {
        e.kernel_nr_throttled = e.kernel_nr_throttled.saturating_add(k.nr_throttled);
        e.kernel_throttled_us += k.throttled_us;
        e.ours_nr_throttled_matched = e.ours_nr_throttled_matched.saturating_add(t.nr_throttled);
        e.ours_throttled_us_matched += t.throttled_us;
    }
    for fl in &t.flags {
        let seen = e.flags.entry(fl.code.clone()).or_insert(FlagSeen {
            windows: 0,
            message: String::new(),
            suggestion: String::new(),
        });
        seen.windows += 1;
        seen.message.clone_from(&fl.message);
        seen.suggestion.clone_from(&fl.suggestion);
    }
}

/// Counts the window's diagnoses of the families other than `throttle`.
fn window_flags(c: &CgroupWindow, out: &mut HashMap<(u64, String), Diagnosed>) {
    for f in c
        .flags
        .iter()
        .filter(|f| f.family != family::throttle::INFO.name)
    {
        let d = out
            .entry((c.id, f.code.clone()))
            .or_insert_with(|| Diagnosed {
                id: c.id,
                path: None,
                name: None,
                family: f.family.clone(),
                code: f.code.clone(),
                windows: 0,
                message: String::new(),
                suggestion: String::new(),
            });
        d.windows += 1;
        d.path.clone_from(&c.path);
        d.name.clone_from(&c.name);
        d.message.clone_from(&f.message);
        d.suggestion.clone_from(&f.suggestion);
    }
}

fn add_hist(
    fam: &mut BTreeMap<String, HashMap<u64, Acc>>,
    family: &str,
    id: u64,
    path: &Option<String>,
    name: &Option<String>,
    h: &HistSummary,
    end_ms: u64,
) {
    if h.count == 0 {
        return;
    }
    let a = fam
        .entry(family.to_string())
        .or_default()
        .entry(id)
        .or_default();
    a.path.clone_from(path);
    a.name.clone_from(name);
    let hist = Hist::from_summary(h);
    if hist.max_ns > a.hist.max_ns {
        a.max_at = end_ms;
    }
    // Saturating at 2^56 per bucket (no real window comes near): a damaged or forged file cannot
    // overflow the sums the percentiles take over 140 buckets.
    const CAP: u64 = 1 << 56;
    a.hist.count = a.hist.count.saturating_add(hist.count).min(CAP);
    a.hist.sum_ns = a.hist.sum_ns.saturating_add(hist.sum_ns);
    a.hist.max_ns = a.hist.max_ns.max(hist.max_ns);
    for (x, y) in a.hist.buckets.iter_mut().zip(hist.buckets.iter()) {
        *x = x.saturating_add(*y).min(CAP);
    }
}

/// A cgroup as the text report names it (escaped: its name and path are the tenant's).
fn who(path: &Option<String>, name: &Option<String>, id: u64) -> String {
    match (name, path) {
        (Some(n), Some(p)) => format!("{} ({})", esc(n), esc(p)),
        (None, Some(p)) => esc(p).into_owned(),
        (Some(n), None) => esc(n).into_owned(),
        (None, None) => format!("cgroup id {id} (removed before it was named)"),
    }
}

fn esc(s: &str) -> std::borrow::Cow<'_, str> {
    crate::safety::escape::terminal(s)
}

fn us(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} ms", v / 1e3)
    } else {
        format!("{v:.0} µs")
    }
}

/// The text a human pastes into an incident.
/// The text report. Every string a tenant controls (cgroup paths and names, comms, file names,
/// the host name) goes through [`esc`].
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "cgtrace report: {} (Linux {}), {} to {}, {} windows, {} single events recorded, {} lost in the kernel",
        esc(&r.host),
        esc(&r.kernel),
        clock_utc(r.first_unix_ms),
        clock_utc(r.last_unix_ms),
        r.windows,
        r.events_recorded,
        r.events_dropped
    );
    if r.recorder_lost > 0 {
        let _ = writeln!(
            o,
            "note: the recorder could not keep {} single events (its buffer was full: the disk was too slow)",
            r.recorder_lost
        );
    }
    if let Some(w) = r.read.warning() {
        let _ = writeln!(o, "note: the file is damaged: {w}");
    }
    if let Some(s) = &r.wait_split {
        let _ = writeln!(
            o,
            "wait split: {} ({}): {}",
            esc(&s.method),
            if s.exact { "exact" } else { "approximate" },
            esc(&s.detail)
        );
    }
    for (f, fr) in &r.families {
        let _ = writeln!(o, "\n## {f}: worst of {} cgroups", fr.cgroups);
        if !fr.worst_p99.is_empty() {
            let _ = writeln!(o, "by p99 (cgroups with at least 100 waits):");
            for c in &fr.worst_p99 {
                let _ = writeln!(
                    o,
                    "  p99 {:>9}  max {:>9}  mean {:>9}  n {:>9}  {}",
                    us(c.p99_us),
                    us(c.max_us),
                    us(c.mean_us),
                    c.count,
                    who(&c.path, &c.name, c.id)
                );
            }
        }
        let _ = writeln!(o, "by max:");
        for c in &fr.worst_max {
            let _ = writeln!(
                o,
                "  max {:>9} at {}  p99 {:>9}  n {:>9}  {}",
                us(c.max_us),
                clock_utc(c.max_at_unix_ms),
                us(c.p99_us),
                c.count,
                who(&c.path, &c.name, c.id)
            );
        }
    }
    if !r.noisy_neighbours.is_empty() {
        let _ = writeln!(
            o,
            "\n## noisy neighbours: run-queue wait caused to other cgroups by holding their CPU"
        );
        for n in &r.noisy_neighbours {
            let _ = writeln!(
                o,
                "  caused {:>9} in {} windows  {}",
                us(n.caused_us),
                n.windows,
                who(&n.path, &n.name, n.id)
            );
            for v in &n.victims {
                let _ = writeln!(
                    o,
                    "      {:>9} to {}",
                    us(v.wait_us),
                    who(&v.path, &v.name, v.id)
                );
            }
        }
    }
    if !r.diagnoses.is_empty() {
        let _ = writeln!(o, "\n## diagnoses (run-queue waits, pseudo-file reads)");
        for d in &r.diagnoses {
            let _ = writeln!(
                o,
                "  {}: {} {} ({} windows): {}\n    → {}",
                who(&d.path, &d.name, d.id),
                d.family,
                d.code,
                d.windows,
                esc(&d.message),
                esc(&d.suggestion)
            );
        }
    }
    if !r.throttled.is_empty() {
        let _ = writeln!(
            o,
            "\n## throttled cgroups (ours vs the kernel's cpu.stat over the same windows)"
        );
        for t in r.throttled.iter().take(TOP) {
            let _ = writeln!(
                o,
                "  {}: quota {} CPUs, throttled {} of {} periods (worst window {:.0} %), {} throttled in {} episodes; kernel: nr_throttled {} vs ours {}, throttled time {} vs ours {}",
                who(&t.path, &t.name, t.id),
                t.quota_cores.map_or("?".into(), |q| format!("{q:.2}")),
                t.nr_throttled,
                t.nr_periods,
                t.worst_window_share * 100.0,
                us(t.throttled_us),
                t.episodes,
                t.kernel_nr_throttled,
                t.ours_nr_throttled_matched,
                us(t.kernel_throttled_us),
                us(t.ours_throttled_us_matched),
            );
            for (code, f) in &t.flags {
                let _ = writeln!(
                    o,
                    "    flag {code} ({} windows): {}\n      → {}",
                    f.windows,
                    esc(&f.message),
                    esc(&f.suggestion)
                );
            }
        }
    }
    if !r.longest_episodes.is_empty() {
        let _ = writeln!(o, "\n## longest throttle episodes");
        for e in r.longest_episodes.iter().take(TOP) {
            let _ = writeln!(
                o,
                "  {} at {} on CPU {} ({} runnable): {}",
                us(e.duration_us),
                clock_utc(e.at_unix_ms),
                e.cpu,
                e.runnable,
                who(&e.path, &e.name, e.cgroup_id)
            );
            if let Some(p) = &e.period {
                let top: Vec<String> = p
                    .top
                    .iter()
                    .map(|t| period_thread(&t.comm, t.tid, t.cpu_ms, t.cpus, PeriodIn::Text))
                    .collect();
                let _ = writeln!(
                    o,
                    "    {}: {}",
                    period(p.burned_in_ms, p.threads, p.cpu_ms, PeriodIn::Text),
                    top.join(", ")
                );
            }
        }
    }
    if !r.slowest_waits.is_empty() {
        let _ = writeln!(o, "\n## slowest single run-queue waits");
        for w in r.slowest_waits.iter().take(TOP) {
            let _ = writeln!(
                o,
                "  {} at {} {} {} [{}]: {}",
                us(w.wait_us),
                clock_utc(w.at_unix_ms),
                w.wait_kind,
                esc(&w.comm),
                w.pid,
                who(&w.path, &w.name, w.cgroup_id)
            );
        }
    }
    if !r.slowest_reads.is_empty() {
        let _ = writeln!(o, "\n## slowest pseudo-file reads (per reader and file)");
        for f in &r.slowest_reads {
            let flush = if f.total_us > 0.0 && f.flush_us > 0.0 {
                format!(", {:.0} % flushing", f.flush_us / f.total_us * 100.0)
            } else {
                String::new()
            };
            let dying = f
                .dying_memcgs
                .map_or(String::new(), |d| format!(", {d} dying memcgs below"));
            let _ = writeln!(
                o,
                "  max {} at {} {} in {}: {} ({} reads, {} in all{flush}{dying})",
                us(f.max_us),
                clock_utc(f.max_at_unix_ms),
                esc(&f.comm),
                who(&f.path, &f.name, f.cgroup_id),
                esc(&f.file),
                f.count,
                us(f.total_us)
            );
        }
    }
    if !r.memcgs.is_empty() || r.dying_memcgs_max.is_some() {
        let _ = writeln!(
            o,
            "\n## memory cgroups read (dying memcgs on the host: up to {}; cgroups created {}, removed {})",
            r.dying_memcgs_max.map_or("-".into(), |d| d.to_string()),
            r.cgroups_created,
            r.cgroups_removed
        );
        for m in &r.memcgs {
            let _ = writeln!(
                o,
                "  {} {}: {} stat reads, {} in all, {} flushing, up to {} dying below; read by {}",
                esc(&m.hierarchy),
                esc(&m.path),
                m.stat_reads,
                us(m.read_us),
                us(m.flush_us),
                m.dying_memcgs_max,
                esc(&m.readers.join(", "))
            );
        }
    }
    let _ = writeln!(o, "\n## single events recorded by family");
    if r.events_by_family.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for (f, n) in &r.events_by_family {
        let _ = writeln!(o, "  {f}: {n}");
    }
    if r.undecoded_events > 0 {
        let _ = writeln!(
            o,
            "  {} events of kinds this cgtrace cannot decode (e.g. slow reads from a newer cgtrace): use a newer cgtrace for them",
            r.undecoded_events
        );
    }
    if let Some(c) = &r.own_cost {
        let _ = writeln!(o, "\n## cgtrace's own cost on the host");
        let _ = writeln!(
            o,
            "  daemon: {:.2} % of one CPU on average ({:.2} % at most), resident memory up to {} KiB, over {} windows",
            c.mean_daemon_cpu_pct, c.max_daemon_cpu_pct, c.max_rss_kib, c.windows
        );
        if c.timed_windows == 0 {
            let _ = writeln!(
                o,
                "  BPF programs: not timed (record with --bpf-stats to see each program's cost)"
            );
        } else {
            let _ = writeln!(
                o,
                "  BPF programs: {:.2} % of one CPU over the {} timed windows",
                c.mean_bpf_cpu_pct, c.timed_windows
            );
            for p in &c.programs {
                let _ = writeln!(
                    o,
                    "    {:<28} {:>12} runs  {:>8.0} ns/run",
                    esc(&p.name),
                    p.runs,
                    p.ns_per_run
                );
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ProgramCost, SelfCost};

    fn window_with_self(seq: u64, timed: bool, daemon: f64, rss: u64) -> Window {
        let mut w: Window =
            serde_json::from_str(&crate::record::tests::window_json(seq)).expect("window");
        w.duration_ms = 1000;
        w.self_cost = Some(SelfCost {
            bpf_stats: timed,
            programs: if timed {
                vec![
                    ProgramCost {
                        name: "sched_switch".into(),
                        runs: 1000,
                        run_us: 600.0,
                        ns_per_run: Some(600.0),
                        recursion_misses: 0,
                    },
                    ProgramCost {
                        name: "sched_wakeup".into(),
                        runs: 500,
                        run_us: 200.0,
                        ns_per_run: Some(400.0),
                        recursion_misses: 0,
                    },
                ]
            } else {
                Vec::new()
            },
            bpf_cpu_pct: if timed { 0.08 } else { 0.0 },
            daemon_cpu_pct: daemon,
            rss_kib: rss,
        });
        w
    }

    #[test]
    fn own_cost_sums_the_windows_self_and_times_only_timed_windows() {
        let mut acc = OwnAcc::default();
        acc.add(&window_with_self(1, true, 1.0, 30_000));
        acc.add(&window_with_self(2, true, 3.0, 32_000));
        acc.add(&window_with_self(3, false, 2.0, 31_000));
        let c = acc.finish().expect("own cost");
        assert_eq!((c.windows, c.timed_windows, c.max_rss_kib), (3, 2, 32_000));
        assert!((c.mean_daemon_cpu_pct - 2.0).abs() < 1e-9);
        assert_eq!(c.max_daemon_cpu_pct, 3.0);
        // 1.6 ms of program time over 2 s of timed windows.
        assert!((c.mean_bpf_cpu_pct - 0.08).abs() < 1e-9);
        assert_eq!(c.programs[0].name, "sched_switch");
        assert_eq!(
            (c.programs[0].runs, c.programs[0].ns_per_run),
            (2000, 600.0)
        );
        assert!(OwnAcc::default().finish().is_none());
    }
}
