//! `cgtrace record`: what the aggregator consumed, to a file (see [`format`] for the layout).
//!
//! The recorder drives the same [`Pump`] as the stream and the view. After every turn it takes
//! the ring-buffer records exactly as they came out (the [`RawRecords`] sink of
//! [`crate::session::drain_ring`]) and writes them as they are; after every window it writes the
//! window's JSON (the stream's `window` line), the names of cgroups not seen before, and writes
//! the chunk out. A chunk is also written whenever one second has passed since its first record,
//! so a killed recorder loses at most the last second (see [`FLUSH_EVERY`]).

pub mod format;
pub mod player;
pub mod reader;
pub mod writer;

use std::{
    io::{self, Write as _},
    net::SocketAddr,
    path::PathBuf,
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{
    signal::unix::{SignalKind, signal},
    time::sleep,
};

use crate::{
    events::EventSelection,
    metrics::{Exporter, MetricsOptions},
    session::{Pump, Pumped, RawRecords, SessionOptions, monotonic_ns},
    snapshot::Window,
    stream::{self, Summary},
};
use format::Tag;
use writer::{Flushed, OnFull, Writer};

/// A cgroup's path and name, as the windows show them (for event lines on replay).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameEntry {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub name_kind: Option<String>,
}

/// A chunk is written once its first record is this old. Records reach the recorder within 200 ms
/// of the kernel writing them (the drain tick) and the age is checked at every drain, so a record
/// is on disk at most 600 + 200 + 200 ms after it happened: `kill -9` loses at most a second.
pub const FLUSH_EVERY: Duration = Duration::from_millis(600);
/// Raw records kept between two turns of the pump at most (beyond it they are counted as lost).
const RAW_CAP: usize = 64 << 20;

pub struct RecordOptions {
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub max_size: Option<u64>,
    pub on_full: OnFull,
    pub force: bool,
    /// Also print the NDJSON stream to stdout (with these event lines).
    pub stream: Option<EventSelection>,
    pub prometheus: Option<(SocketAddr, MetricsOptions)>,
}

/// Parses `--max-size`: bytes with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let m: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(format!("{s:?}: use a number of bytes with K, M, G or T")),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: use a number of bytes with K, M, G or T"))?;
    let v = (n * mult as f64) as u64;
    if v < 64 << 10 {
        return Err(format!("{s:?}: at least 64K"));
    }
    Ok(v)
}

/// Writes what a turn of the pump produced.
struct Recorder {
    writer: Writer,
    lost_reported: u64,
}

impl Recorder {
    /// Takes the raw records drained so far and notes the names of their cgroups.
    fn events(&mut self, pump: &mut Pump) {
        let session = &mut pump.session;
        let Some(mut raw) = session.drain_stats().raw.take() else {
            return;
        };
        let mut ids = Vec::new();
        raw.drain(|rec| {
            self.writer.event(rec);
            // Every record kind carries its cgroup id right after the 16-byte header.
            if rec.len() >= 24 {
                let id = u64::from_ne_bytes(rec[16..24].try_into().unwrap_or_default());
                if id != 0 && !self.writer.knows(id) && !ids.contains(&id) {
                    ids.push(id);
                }
            }
        });
        if raw.lost > self.lost_reported {
            let body = format!(
                "{{\"events_lost\":{},\"reason\":\"recorder buffer full\"}}",
                raw.lost
            );
            self.writer.record(Tag::Loss, body.as_bytes());
            self.lost_reported = raw.lost;
        }
        session.drain_stats().raw = Some(raw);
        for id in ids {
            let (path, name) = session.describe(id);
            self.writer.name(NameEntry {
                id,
                path,
                name: name.as_ref().map(|n| n.display.clone()),
                name_kind: name.map(|n| n.kind.as_str().to_string()),
            });
        }
    }

    fn window(&mut self, w: &Window, json: &str) {
        for c in &w.cgroups {
            self.writer.name(NameEntry {
                id: c.id,
                path: c.path.clone(),
                name: c.name.clone(),
                name_kind: c.name_kind.clone(),
            });
        }
        self.writer
            .window(monotonic_ns(), w.end_unix_ms, json.as_bytes());
    }
}

/// Runs the recorder until `--duration`, SIGINT/SIGTERM, or `--max-size` with `--stop-at-max`.
pub async fn run(trace: SessionOptions, opts: RecordOptions) -> anyhow::Result<()> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    // The file first: a bad path is one line before anything is traced.
    let file = writer::open_new(&opts.output, opts.force)?;
    let mut pump = match Pump::start(&trace) {
        Ok(p) => p,
        Err(e) => {
            // Nothing recorded: leave no empty file behind.
            drop(file);
            let _ = std::fs::remove_file(&opts.output);
            return Err(e);
        }
    };
    let hello_json = serde_json::to_string(&pump.session.hello)?;
    let writer = Writer::with_file(
        file,
        &opts.output,
        hello_json.as_bytes(),
        opts.max_size,
        opts.on_full,
    )?;
    let mut exporter = match opts.prometheus {
        Some((addr, mopts)) => Some(Exporter::start(addr, mopts).await?),
        None => None,
    };
    eprintln!(
        "cgtrace: recording to {}{}",
        opts.output.display(),
        match (opts.max_size, opts.on_full) {
            (None, _) => String::new(),
            (Some(m), OnFull::Stop) => format!(" (stops at --max-size {})", human_bytes(m)),
            (Some(m), OnFull::Rotate { keep }) => format!(
                " (at --max-size {} rotates to {}.1 … .{keep})",
                human_bytes(m),
                opts.output.display()
            ),
        }
    );
    let session = &mut pump.session;
    session.drain_stats().raw = Some(RawRecords::new(RAW_CAP));
    // Throttle episodes are kept for event lines (the recording has their raw records anyway).
    let events = opts.stream.clone().unwrap_or_default();
    session.drain_stats().keep_throttle_lines = events.has("throttle");
    let mut out = io::BufWriter::new(io::stdout().lock());
    let mut stdout_open = opts.stream.is_some();
    if stdout_open && !stream::emit(&mut out, &pump.session.hello)? {
        stdout_open = false;
    }
    let mut rec = Recorder {
        writer,
        lost_reported: 0,
    };
    let deadline = sleep(opts.duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut windows = 0u64;
    let mut waits = Vec::new();
    let want_waits = events.has("runq");
    let mut stop_reason = "stopped";
    loop {
        let pumped = tokio::select! {
            p = pump.next(want_waits.then_some(&mut waits)) => Some(p?),
            _ = sigint.recv() => None,
            _ = sigterm.recv() => None,
            () = &mut deadline => None,
        };
        // The file first, then stdout: whatever the stream printed is on disk.
        rec.events(&mut pump);
        let json = match &pumped {
            Some(Pumped::Window(w)) => {
                windows += 1;
                let json = serde_json::to_string(&**w)?;
                rec.window(w, &json);
                Some(json)
            }
            _ => None,
        };
        // Every window ends a chunk; so does FLUSH_EVERY's worth of events, or a full buffer.
        let (pending, since) = rec.writer.pending();
        let due = json.is_some()
            || since.is_some_and(|t| t.elapsed() >= FLUSH_EVERY)
            || pending >= writer::CHUNK_BYTES;
        if due && flush(&mut rec.writer, false)? == Flushed::Full {
            stop_reason = "max-size";
            break;
        }
        if stdout_open && !stream::emit_events(&mut out, &mut pump.session, &mut waits)? {
            stdout_open = false;
        }
        waits.clear();
        pump.session.drain_stats().throttle_lines.clear();
        if let (Some(json), Some(Pumped::Window(w))) = (&json, &pumped) {
            if stdout_open && !stream::emit_line(&mut out, json)? {
                stdout_open = false;
            }
            if let Some(e) = exporter.as_mut() {
                e.update(w);
            }
        }
        if pumped.is_none() {
            break;
        }
    }
    // The partial last window and the summary, so nothing traced is left out.
    let w = pump.last_window(want_waits.then_some(&mut waits))?;
    rec.events(&mut pump);
    if stdout_open {
        stdout_open = stream::emit_events(&mut out, &mut pump.session, &mut waits)?;
    }
    windows += 1;
    let json = serde_json::to_string(&w)?;
    if stop_reason != "max-size" {
        rec.window(&w, &json);
    }
    if let Some(e) = exporter.as_mut() {
        e.update(&w);
    }
    let totals = pump.session.totals();
    let summary = serde_json::to_string(&Summary {
        kind: "summary",
        windows,
        cgroups: &totals,
    })?;
    drop(pump); // detach before the last write
    // After --max-size the summary still goes in, in the room kept for it.
    rec.writer.record(Tag::Summary, summary.as_bytes());
    rec.writer.record(
        Tag::End,
        format!("{{\"reason\":\"{stop_reason}\"}}").as_bytes(),
    );
    flush(&mut rec.writer, true)?;
    if stdout_open && stream::emit_line(&mut out, &json)? {
        stream::emit_line(&mut out, &summary)?;
    }
    let s = rec.writer.stats;
    let _ = out.flush();
    eprintln!(
        "cgtrace: recorded {} windows and {} events to {} ({}{}){}",
        s.windows,
        s.events,
        opts.output.display(),
        human_bytes(s.bytes),
        if s.rotations > 0 {
            format!(", {} rotations", s.rotations)
        } else {
            String::new()
        },
        if stop_reason == "max-size" {
            format!(
                "; stopped at --max-size {} (use --rotate to keep recording)",
                human_bytes(opts.max_size.unwrap_or(0))
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

fn flush(w: &mut Writer, closing: bool) -> anyhow::Result<Flushed> {
    let r = w.flush(closing)?;
    if r == Flushed::Rotated {
        eprintln!(
            "cgtrace: {} reached --max-size: rotated (the older part is {}.1)",
            w.path().display(),
            w.path().display()
        );
    }
    Ok(r)
}

pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests;
