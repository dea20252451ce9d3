//! [`build`]: the report from a recording, in one pass over the file.
//!
//! Windows feed the per-section sums ([`latency`], [`throttle`], [`diagnoses`], [`reads`],
//! [`own_cost`], the blame ledger and [`who_delayed`]); single events are played back into event lines, of which the
//! report keeps the slowest waits and the longest throttle episodes ([`place`]).

mod budget;
mod diagnoses;
mod latency;
mod own_cost;
mod reads;
mod throttle;
mod totals;
mod who_delayed;

use std::collections::BTreeMap;

pub(super) use budget::MAX_TALLY_BYTES;
#[cfg(test)]
pub(super) use who_delayed::tests as who_tests;

use serde_json::Value;

use super::{model::Episode, model::Report, model::TOP, model::Wait};
use crate::{
    family::select::EventSelection,
    family::{self, EventLine},
    model::Window,
    record::reader::{Item, Recording},
    replay::Playback,
};

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
    let mut latency = latency::Latency::default();
    let mut throttled = throttle::Throttled::default();
    let mut diagnoses = diagnoses::Diagnoses::default();
    let mut play = Playback::new(&EventSelection::all());
    let mut lines = Vec::new();
    let mut episodes: Vec<Episode> = Vec::new();
    let mut waits: Vec<Wait> = Vec::new();
    let mut by_family: BTreeMap<String, u64> = BTreeMap::new();
    let (mut undecoded, mut dropped, mut nwin, mut nev) = (0u64, 0u64, 0u64, 0u64);
    let mut recorder_lost = 0u64;
    // Chunks the recorder could not write (a full or failing disk), as of this part's start (its
    // hello) and as its loss records went on to say (cumulative: the largest counts).
    let mut unwritten = rec
        .hello_json
        .as_deref()
        .and_then(|j| serde_json::from_slice::<Value>(j).ok())
        .map_or((0, 0), |h| unwritten_of(&h["recorder"]));
    let mut reads = reads::Reads::default();
    let mut own = own_cost::OwnAcc::default();
    let mut noisy = family::runq::blame::Noisy::default();
    let mut who = who_delayed::WhoDelayed::new(hello.blame_min_us.is_some());
    let mut budget = budget::Budget::default();
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
            reads.add(&w, &mut budget);
            own.add(&w);
            who.window(w.duration_ms);
            for c in &w.cgroups {
                latency.add_cgroup(c, end_unix_ms, &mut budget);
                throttled.add(c, &mut budget);
                diagnoses.add(c, &mut budget);
                noisy.add(c, &mut |bytes| budget.take(bytes));
                who.add(c, &mut budget);
            }
        }
        Item::Loss(j) => {
            // Cumulative in the recorder: the last one counts.
            if let Ok(v) = serde_json::from_slice::<Value>(j) {
                recorder_lost = recorder_lost.max(v["events_lost"].as_u64().unwrap_or(0));
                let (chunks, bytes) = unwritten_of(&v);
                unwritten = (unwritten.0.max(chunks), unwritten.1.max(bytes));
            }
        }
        Item::Summary(_) | Item::End(_) => {}
    });
    // Episode lines that waited for their period at the end of the run.
    play.finish(&mut lines);
    place(&mut lines, clock, &mut waits, &mut episodes);
    episodes.sort_by(|a, b| b.duration_us.total_cmp(&a.duration_us));
    waits.sort_by(|a, b| b.wait_us.total_cmp(&a.wait_us));
    let reads = reads.finish();
    let runq = latency.runq_totals();
    let diagnosed = diagnoses.finish();
    let noisy = noisy.finish(TOP);
    let cgroups = totals::collect(runq, throttled.all(), &diagnosed, &noisy);
    Report {
        host: hello.host,
        kernel: hello.kernel,
        cgtrace: hello.cgtrace,
        format: format!("{}.{}", rec.major, rec.minor),
        first_unix_ms: if nwin == 0 { 0 } else { first },
        last_unix_ms: last,
        interval_ms: hello.interval_ms,
        windows: nwin,
        events_recorded: nev,
        events_dropped: dropped,
        recorder_lost,
        recorder_dropped_chunks: unwritten.0,
        recorder_dropped_bytes: unwritten.1,
        untallied: budget.refused,
        read: rec.stats.clone(),
        families: latency.finish(),
        diagnoses: diagnosed,
        throttled: throttled.finish(),
        longest_episodes: episodes,
        slowest_waits: waits,
        noisy_neighbours: noisy,
        who_delayed_whom: who.finish(),
        slowest_reads: reads.slowest,
        memcgs: reads.memcgs,
        dying_memcgs_max: reads.dying_max,
        cgroups_created: reads.created,
        cgroups_removed: reads.removed,
        events_by_family: by_family,
        undecoded_events: undecoded,
        wait_split: hello.wait_split,
        own_cost: own.finish(),
        cgroups,
    }
}

/// `recorder_dropped_chunks` and `_bytes` of a loss record or a hello's `recorder`.
fn unwritten_of(v: &Value) -> (u64, u64) {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    (n("recorder_dropped_chunks"), n("recorder_dropped_bytes"))
}

/// Keeps the `TOP` largest by `key` (amortised: trims when twice as long).
fn keep_top<T>(v: &mut Vec<T>, key: impl Fn(&T) -> f64) {
    if v.len() >= 2 * TOP {
        v.sort_by(|a, b| key(b).total_cmp(&key(a)));
        v.truncate(TOP);
    }
}
