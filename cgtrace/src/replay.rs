//! `cgtrace replay FILE`: the `top` view over a recording (see [`crate::top::player`]), or with
//! `--stream` the NDJSON the live stream printed: the recorded `hello`, `window` and `summary`
//! lines as they were, and the event lines made again from the recorded ring-buffer records by
//! the same decoding and family records as live ([`Playback`]), named from the recorded cgroup
//! names and, for slow reads, the recorded file names.

use std::{
    collections::HashMap,
    io::{self, Write},
};

use crate::{
    decode,
    family::select::EventSelection,
    family::{
        self, EventLine, Records,
        reads::{ReadFile, SlowRead},
    },
    model::ndjson::{emit, emit_line, reencode},
    record::{
        NameEntry,
        reader::{Item, Recording},
    },
};

/// The offline side of the driver: a recording's ring-buffer records go through the same
/// decoding and family [`Records`] as live, and its event lines are named from the recorded
/// cgroup names. Used by `replay --stream` and `report`.
#[derive(Default)]
pub struct Playback {
    names: HashMap<u64, NameEntry>,
    files: HashMap<(u64, u32), ReadFile>,
    records: Records,
}

/// What one recorded event was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Played {
    /// Its kind, if it had a header.
    pub kind: Option<u32>,
    /// It did not decode (too short, or a kind this build does not know).
    pub undecoded: bool,
}

impl Playback {
    /// Keeps the event lines of the families in `lines`.
    pub fn new(lines: &EventSelection) -> Self {
        Self {
            names: HashMap::new(),
            files: HashMap::new(),
            records: Records::with_lines(|f| lines.has(f)),
        }
    }

    /// A files record (JSON list of [`ReadFile`]).
    pub fn files(&mut self, json: &[u8]) {
        if let Ok(v) = serde_json::from_slice::<Vec<ReadFile>>(json) {
            self.files
                .extend(v.into_iter().map(|f| ((f.file, f.dev), f)));
        }
    }

    /// A names record (JSON list of [`NameEntry`]).
    pub fn names(&mut self, json: &[u8]) {
        if let Ok(v) = serde_json::from_slice::<Vec<NameEntry>>(json) {
            self.names.extend(v.into_iter().map(|e| (e.id, e)));
        }
    }

    /// Path and name of a cgroup, as recorded.
    pub fn describe(&self, id: u64) -> (Option<String>, Option<String>) {
        self.names
            .get(&id)
            .map_or((None, None), |e| (e.path.clone(), e.name.clone()))
    }

    /// One recorded ring-buffer record; its event lines go to `lines`.
    pub fn event(&mut self, raw: &[u8], lines: &mut Vec<EventLine>) -> Played {
        let before = self.records.undecodable;
        self.records.consume(raw);
        self.take_lines(lines);
        Played {
            kind: decode::header(raw).ok().map(|h| h.kind),
            undecoded: self.records.undecodable > before,
        }
    }

    /// The end of the recording: event lines that waited for a later window go to `lines`, as
    /// they went out at the end of the live run.
    pub fn finish(&mut self, lines: &mut Vec<EventLine>) {
        self.records.finish();
        self.take_lines(lines);
    }

    /// The event lines made so far, named.
    fn take_lines(&mut self, lines: &mut Vec<EventLine>) {
        let names = &self.names;
        self.records.take_lines(
            &mut |id| {
                names
                    .get(&id)
                    .map_or((None, None), |e| (e.path.clone(), e.name.clone()))
            },
            lines,
        );
        // Slow reads: their files as the tracer named them (recorded since format 1.1).
        for ev in self.records.reads.take_slow_reads() {
            let file = self
                .files
                .get(&(ev.key.file, ev.key.dev))
                .cloned()
                .unwrap_or_else(|| ReadFile::unknown(ev.key.file, ev.key.dev));
            let mut line = SlowRead::from_event(&ev, &file);
            (line.head.path, line.head.name) = names
                .get(&ev.key.cgroup_id)
                .map_or((None, None), |e| (e.path.clone(), e.name.clone()));
            lines.push(EventLine::SlowRead(line));
        }
    }

    /// A recorded window ended at `mono_ns`: as live, it took what the records had gathered.
    /// Event lines that waited for it go to `lines` (live printed them before the window).
    pub fn window(&mut self, mono_ns: u64, lines: &mut Vec<EventLine>) {
        self.records.window_ended(mono_ns);
        self.take_lines(lines);
    }
}

/// What `replay --stream` printed and could not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub windows: u64,
    pub events: u64,
    pub event_lines: u64,
    /// Selected events of a kind this cgtrace cannot turn into a line.
    pub unrendered: u64,
    /// Recorded windows and summaries that are not one JSON value: not printed.
    pub not_json: u64,
}

/// Prints the recording as the live stream did; stops quietly when stdout closes.
pub fn stream<W: Write>(
    rec: &Recording,
    out: &mut W,
    events: &EventSelection,
    summary: bool,
) -> anyhow::Result<Replayed> {
    let mut r = Replayed::default();
    // Every recorded line is encoded again, never passed through: a recorded string cannot
    // add a line of its own.
    let hello = match rec.hello_json.as_deref().and_then(reencode) {
        Some(j) => j,
        None => serde_json::to_string(&rec.hello())?,
    };
    if !emit_line(out, &hello)? {
        return Ok(r);
    }
    let mut play = Playback::new(events);
    let mut lines = Vec::new();
    let mut open = true;
    let mut finished = false;
    rec.for_each(|item| {
        if !open {
            return;
        }
        let res: anyhow::Result<bool> = (|| {
            match item {
                Item::Names(j) => play.names(j),
                Item::Files(j) => play.files(j),
                Item::Event(raw) => {
                    r.events += 1;
                    let played = play.event(raw, &mut lines);
                    for line in lines.drain(..) {
                        r.event_lines += 1;
                        if !emit(out, &line)? {
                            return Ok(false);
                        }
                    }
                    // Lines named from the live tracer's tables (slow reads' files) cannot be
                    // made again from a recording yet.
                    if let Some(kind) = played.kind
                        && events.has_kind(kind)
                        && family::of_kind(kind).is_some_and(|f| !f.lines_offline)
                    {
                        r.unrendered += 1;
                    }
                }
                Item::Window { mono_ns, json, .. } => {
                    r.windows += 1;
                    play.window(mono_ns, &mut lines);
                    for line in lines.drain(..) {
                        r.event_lines += 1;
                        if !emit(out, &line)? {
                            return Ok(false);
                        }
                    }
                    match reencode(json) {
                        Some(line) if !emit_line(out, &line)? => return Ok(false),
                        Some(_) => {}
                        None => r.not_json += 1,
                    }
                }
                Item::Summary(j) => {
                    // The end of the run: lines that waited went out before the summary.
                    finished = true;
                    play.finish(&mut lines);
                    for line in lines.drain(..) {
                        r.event_lines += 1;
                        if !emit(out, &line)? {
                            return Ok(false);
                        }
                    }
                    if summary {
                        match reencode(j) {
                            Some(line) if !emit_line(out, &line)? => return Ok(false),
                            Some(_) => {}
                            None => r.not_json += 1,
                        }
                    }
                }
                Item::Loss(_) | Item::End(_) => {}
            }
            Ok(true)
        })();
        match res {
            Ok(true) => {}
            Ok(false) => open = false,
            Err(e) => {
                log::error!("replay: {e:#}");
                open = false;
            }
        }
    });
    // A recording cut short (no summary): what waited goes out at its end.
    if open && !finished {
        play.finish(&mut lines);
        for line in lines.drain(..) {
            r.event_lines += 1;
            if !emit(out, &line)? {
                break;
            }
        }
    }
    let _ = out.flush();
    Ok(r)
}

/// `cgtrace replay FILE --stream`: to stdout, with the read warning and what could not be shown
/// on stderr.
pub fn run_stream(rec: &Recording, events: &EventSelection, summary: bool) -> anyhow::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let r = stream(rec, &mut out, events, summary)?;
    if r.not_json > 0 {
        eprintln!(
            "cgtrace: {} recorded windows or summaries are not JSON and were left out (the file is damaged or was not written by cgtrace)",
            r.not_json
        );
    }
    if r.unrendered > 0 {
        eprintln!(
            "cgtrace: {} recorded events are of a family this cgtrace cannot print yet (replay with a newer cgtrace)",
            r.unrendered
        );
    }
    Ok(())
}
