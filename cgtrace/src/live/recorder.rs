//! `cgtrace record`: what the aggregator consumed, to a file (see [`crate::record::format`] for
//! the layout).
//!
//! The recorder is a [`Sink`] of the same driver as the stream and the view. After every turn it
//! takes the ring-buffer records exactly as they came out ([`RawRecords`]) and writes them as they
//! are; after every window it writes the window's JSON (the stream's `window` line), the names of
//! cgroups not seen before, and writes the chunk out. A chunk is also written whenever one second
//! has passed since its first record, so a killed recorder loses at most the last second (see
//! [`FLUSH_EVERY`]).
//!
//! The chunks are written by a thread of their own ([`crate::record::disk`]); a disk that is full,
//! failing, read-only, below `--min-free` or stalled costs chunks, never the run: what could not
//! be written is counted in every window's `events.counters` (`recorder_dropped_chunks`,
//! `recorder_dropped_bytes`, `recorder_queue_full`, `recorder_write_errors`), in a loss record of
//! the file and in the hello of the next part.

use std::{
    collections::BTreeMap, io, path::PathBuf, sync::atomic::Ordering::Relaxed, time::Duration,
};

use cgtrace_common::reads::ReadKey;

use crate::{
    decode::RawRecords,
    decode::Record,
    family::select::EventSelection,
    live::driver::{self, Flow, Sink, Turn},
    live::session::{Pump, Session, SessionOptions},
    live::stream::Ndjson,
    model::Window,
    record::{
        NameEntry,
        format::Tag,
        human_bytes,
        part::DISK_COUNTERS,
        writer::{self, Flushed, OnFull, Writer},
    },
    units::monotonic_ns,
};

/// A chunk is written once its first record is this old. Records reach the recorder within 200 ms
/// of the kernel writing them (the drain tick) and the age is checked at every drain, so a record
/// is on disk at most 600 + 200 + 200 ms after it happened: `kill -9` loses at most a second.
pub const FLUSH_EVERY: Duration = Duration::from_millis(600);
/// How long the end of a run waits for a stalled disk to take the last chunks.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// Raw records kept between two turns of the pump at most (beyond it they are counted as lost).
const RAW_CAP: usize = 64 << 20;

pub struct RecordOptions {
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub max_size: Option<u64>,
    pub on_full: OnFull,
    pub force: bool,
    /// Stop writing while the filesystem has fewer bytes free (`--min-free`).
    pub min_free: Option<u64>,
    /// Also print the NDJSON stream to stdout (with these event lines).
    pub stream: Option<EventSelection>,
    /// `--prometheus` and `--otlp`.
    pub metrics: crate::metrics::outputs::Outputs,
}

/// The recorder sink: after every turn the ring-buffer records exactly as they came out, the names
/// of their cgroups, and at a window its JSON; chunks written as [`FLUSH_EVERY`] says.
struct Recorder {
    writer: Writer,
    lost_reported: u64,
    /// `--max-size` reached with `--stop-at-max`.
    full: bool,
    /// The session's hello, for the next parts' (with what could not be written).
    hello: serde_json::Value,
    /// The disk counters as last put in a window.
    in_windows: [u64; 4],
    /// Chunks dropped as last noted in the hello.
    drops_noted: u64,
}

impl Recorder {
    /// Takes the raw records drained so far and notes the names of their cgroups.
    fn events(&mut self, session: &mut Session) {
        let Some(mut raw) = session.raw.take() else {
            return;
        };
        let (mut ids, mut files) = (Vec::new(), Vec::new());
        raw.drain(|rec| {
            self.writer.event(rec);
            let Ok(r) = Record::from_bytes(rec) else {
                return;
            };
            let id = r.cgroup_id();
            if id != 0 && !self.writer.knows(id) && !ids.contains(&id) {
                ids.push(id);
            }
            // A slow read's file, named as the stream names it, so a replay prints its line.
            if let Record::SlowRead(ev) = r
                && !self.writer.knows_file(ev.key.file, ev.key.dev)
                && !files
                    .iter()
                    .any(|k: &ReadKey| (k.file, k.dev) == (ev.key.file, ev.key.dev))
            {
                files.push(ev.key);
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
        session.raw = Some(raw);
        for key in files {
            if let Some(f) = session.read_file(&key) {
                self.writer.file(&f);
            }
        }
        for id in ids {
            let (path, name) = session.describe(id);
            self.writer.name(NameEntry {
                id,
                path,
                name: name.as_ref().map(|n| n.display.clone()),
                name_kind: name.map(|n| n.kind),
            });
        }
    }

    /// New drops go in the hello of the next part (the file's own loss record is written by the
    /// writer thread, after the first chunk it could write: `record::part`).
    fn note_drops(&mut self) {
        let dropped = self.writer.disk().dropped_chunks.load(Relaxed);
        if dropped == self.drops_noted {
            return;
        }
        self.drops_noted = dropped;
        let mut hello = self.hello.clone();
        hello["recorder"] = serde_json::Value::Object(self.writer.disk().totals());
        self.writer.set_hello(hello.to_string().as_bytes());
    }

    fn window(&mut self, w: &Window) -> anyhow::Result<()> {
        for c in &w.cgroups {
            self.writer.name(NameEntry {
                id: c.id,
                path: c.path.clone(),
                name: c.name.clone(),
                name_kind: c.name_kind,
            });
        }
        self.writer
            .window_value(monotonic_ns(), w.end_unix_ms, w)
            .map_err(|e| anyhow::anyhow!("a window could not be serialised: {e}"))?;
        Ok(())
    }
}

impl Sink for Recorder {
    fn counters(&mut self, counters: &mut BTreeMap<String, u64>) {
        let d = self.writer.disk();
        for ((name, get), last) in DISK_COUNTERS.iter().zip(&mut self.in_windows) {
            let now = get(d).load(Relaxed);
            counters.insert((*name).into(), now - *last);
            *last = now;
        }
    }

    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow> {
        self.events(t.session);
        self.note_drops();
        if let Some(w) = t.window {
            self.window(w)?;
        }
        // Every window ends a chunk; so does FLUSH_EVERY's worth of events, or a full buffer.
        let (pending, since) = self.writer.pending();
        let due = t.window.is_some()
            || since.is_some_and(|t| t.elapsed() >= FLUSH_EVERY)
            || pending >= writer::CHUNK_BYTES;
        if due && flush(&mut self.writer, false)? == Flushed::Full {
            self.full = true;
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, t: &mut Turn<'_>, summary: &str) -> anyhow::Result<()> {
        self.events(t.session);
        self.note_drops();
        if let Some(w) = t.window.filter(|_| !self.full) {
            self.window(w)?;
        }
        // After --max-size the summary still goes in, in the room kept for it.
        self.writer.record(Tag::Summary, summary.as_bytes());
        let reason = if self.full { "max-size" } else { "stopped" };
        self.writer
            .record(Tag::End, format!("{{\"reason\":\"{reason}\"}}").as_bytes());
        flush(&mut self.writer, true)?;
        Ok(())
    }
}

/// Runs the recorder until `--duration`, SIGINT/SIGTERM, or `--max-size` with `--stop-at-max`.
pub async fn run(trace: SessionOptions, opts: RecordOptions) -> anyhow::Result<()> {
    let (_stop, control) = driver::stop_on_signals(opts.duration)?;
    // The file first: a bad path is one line before anything is traced.
    if let OnFull::Rotate { keep } = opts.on_full {
        // A flight recorder restarted (a node agent, a service): the last run's parts are kept,
        // shifted like a rotation, as long as they hold a window; what a run killed on a full
        // disk or while rotating left is reused, recovered or set aside, never refused.
        if opts.force {
            let _ = std::fs::remove_file(Writer::next_path(&opts.output));
        } else {
            let notes = crate::record::restart::make_way(&opts.output, keep).map_err(|e| {
                anyhow::anyhow!(
                    "{} exists and could not be rotated away: {e}; fix the directory's permissions or pass --force",
                    opts.output.display()
                )
            })?;
            for n in notes {
                eprintln!("cgtrace: {n}");
            }
        }
    }
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
    let writer = Writer::threaded(
        file,
        &opts.output,
        hello_json.as_bytes(),
        opts.max_size,
        opts.on_full,
        opts.min_free,
    )?;
    let mut metrics = opts.metrics.start(&pump.session.hello.host)?;
    crate::safety::privilege::drop_after_attach("record");
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
    pump.session.raw = Some(RawRecords::new(RAW_CAP));
    if let Some(events) = &opts.stream {
        pump.session.set_lines(events);
    }
    let mut rec = Recorder {
        writer,
        lost_reported: 0,
        full: false,
        hello: serde_json::to_value(&pump.session.hello)?,
        in_windows: [0; 4],
        drops_noted: 0,
    };
    // The file first, then stdout: whatever the stream printed is on disk. A closed stdout ends
    // only the stream, not the recording.
    let mut out = Ndjson::new(
        io::BufWriter::with_capacity(1 << 16, io::stdout().lock()),
        true,
        false,
    );
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut rec];
    if opts.stream.is_some() {
        sinks.push(&mut out);
    }
    crate::live::outputs::run(pump, sinks, &mut metrics, control).await?;
    // The disk may be stalled: what it has not taken in CLOSE_WAIT is left (and said so).
    let closed = rec.writer.close(CLOSE_WAIT);
    let s = rec.writer.stats;
    let d = rec.writer.disk();
    let (written, rotations) = (d.written_bytes.load(Relaxed), d.rotations.load(Relaxed));
    let (dropped, dropped_bytes) = (
        d.dropped_chunks.load(Relaxed),
        d.dropped_bytes.load(Relaxed),
    );
    eprintln!(
        "cgtrace: recorded {} windows and {} events to {} ({} written{}){}{}{}",
        s.windows,
        s.events,
        opts.output.display(),
        human_bytes(written),
        if rotations > 0 {
            format!(", {rotations} rotations")
        } else {
            String::new()
        },
        if dropped > 0 {
            format!(
                "; {dropped} chunks ({}) could not be written",
                human_bytes(dropped_bytes)
            )
        } else {
            String::new()
        },
        if closed {
            String::new()
        } else {
            format!(
                "; the disk did not take the last chunks within {} s",
                CLOSE_WAIT.as_secs()
            )
        },
        if rec.full {
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

/// A chunk out; a rotation says so itself where it is done (`record::part`), once it has worked.
fn flush(w: &mut Writer, closing: bool) -> anyhow::Result<Flushed> {
    Ok(w.flush(closing)?)
}
