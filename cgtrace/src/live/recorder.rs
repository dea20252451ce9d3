//! `cgtrace record`: what the aggregator consumed, to a file (see [`crate::record::format`] for
//! the layout).
//!
//! The recorder is a [`Sink`] of the same driver as the stream and the view. After every turn it
//! takes the ring-buffer records exactly as they came out ([`RawRecords`]) and writes them as they
//! are; after every window it writes the window's JSON (the stream's `window` line), the names of
//! cgroups not seen before, and writes the chunk out. A chunk is also written whenever one second
//! has passed since its first record, so a killed recorder loses at most the last second (see
//! [`FLUSH_EVERY`]).

use std::{io, path::PathBuf, time::Duration};

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
        writer::{self, Flushed, OnFull, Writer},
    },
    units::monotonic_ns,
};

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

    fn window(&mut self, w: &Window, json: &str) {
        for c in &w.cgroups {
            self.writer.name(NameEntry {
                id: c.id,
                path: c.path.clone(),
                name: c.name.clone(),
                name_kind: c.name_kind,
            });
        }
        self.writer
            .window(monotonic_ns(), w.end_unix_ms, json.as_bytes());
    }
}

impl Sink for Recorder {
    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow> {
        self.events(t.session);
        if let Some(w) = t.window {
            self.window(w.window, w.json);
        }
        // Every window ends a chunk; so does FLUSH_EVERY's worth of events, or a full buffer.
        let (pending, since) = self.writer.pending();
        let due = t.window.is_some()
            || since.is_some_and(|t| t.elapsed() >= FLUSH_EVERY)
            || pending >= writer::CHUNK_BYTES;
        if due && flush(&mut self.writer, false)? == Flushed::Full {
            self.full = true;
            if let Some(why) = &self.writer.stopped {
                eprintln!("cgtrace: {why}");
            }
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, t: &mut Turn<'_>, summary: &str) -> anyhow::Result<()> {
        self.events(t.session);
        if let Some(w) = t.window.filter(|_| !self.full) {
            self.window(w.window, w.json);
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
        // shifted like a rotation, instead of being refused or overwritten.
        let last = std::fs::symlink_metadata(&opts.output);
        if !opts.force && last.as_ref().is_ok_and(|m| m.file_type().is_file()) {
            writer::shift_parts(&opts.output, keep).map_err(|e| {
                anyhow::anyhow!(
                    "{} exists and could not be rotated away: {e}",
                    opts.output.display()
                )
            })?;
            eprintln!(
                "cgtrace: {} existed: rotated to {}.1 (--rotate keeps the last run)",
                opts.output.display(),
                opts.output.display()
            );
        }
        let next = Writer::next_path(&opts.output);
        if std::fs::symlink_metadata(&next).is_ok() {
            if opts.force {
                std::fs::remove_file(&next)?;
            } else {
                anyhow::bail!(
                    "{} exists (left by a recorder killed while rotating?): remove it, or pass --force",
                    next.display()
                );
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
    let writer = Writer::with_file(
        file,
        &opts.output,
        hello_json.as_bytes(),
        opts.max_size,
        opts.on_full,
    )?;
    let mut metrics = opts.metrics.start(&pump.session.hello.host).await?;
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
    };
    // The file first, then stdout: whatever the stream printed is on disk. A closed stdout ends
    // only the stream, not the recording.
    let mut out = Ndjson::new(io::BufWriter::new(io::stdout().lock()), true, false);
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut rec];
    if opts.stream.is_some() {
        sinks.push(&mut out);
    }
    crate::live::outputs::run(pump, sinks, &mut metrics, control).await?;
    let s = rec.writer.stats;
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
        if let Some(why) = &rec.writer.stopped {
            format!("; stopped early: {why}")
        } else if rec.full {
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
