//! `cgtrace replay FILE`: the `top` view over a recording (see [`crate::record::player`]), or with
//! `--stream` the NDJSON the live stream printed: the recorded `hello`, `window` and `summary`
//! lines as they were, and the event lines made again from the recorded ring-buffer records by
//! the same decoding as live ([`consume_record`]), named from the recorded cgroup names.

use std::{
    collections::HashMap,
    io::{self, Write},
};

use cgtrace_common::event::EventHeader;

use crate::{
    events::EventSelection,
    record::{
        NameEntry,
        reader::{Item, Recording},
    },
    session::{self, DrainStats, consume_record},
    stream::{emit, emit_line},
};

/// What `replay --stream` printed and could not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub windows: u64,
    pub events: u64,
    pub event_lines: u64,
    /// Selected events of a kind this cgtrace cannot turn into a line.
    pub unrendered: u64,
}

/// Prints the recording as the live stream did; stops quietly when stdout closes.
pub fn stream<W: Write>(
    rec: &Recording,
    out: &mut W,
    events: &EventSelection,
    summary: bool,
) -> anyhow::Result<Replayed> {
    let mut r = Replayed::default();
    let hello = match &rec.hello_json {
        Some(j) => String::from_utf8_lossy(j).into_owned(),
        None => serde_json::to_string(&rec.hello())?,
    };
    if !emit_line(out, &hello)? {
        return Ok(r);
    }
    let mut names: HashMap<u64, NameEntry> = HashMap::new();
    let mut stats = DrainStats {
        keep_throttle_lines: events.has("throttle"),
        ..DrainStats::default()
    };
    let want_runq = events.has("runq");
    let mut waits = Vec::new();
    let mut open = true;
    let describe = |names: &HashMap<u64, NameEntry>, id: u64| {
        names
            .get(&id)
            .map_or((None, None), |e| (e.path.clone(), e.name.clone()))
    };
    rec.for_each(|item| {
        if !open {
            return;
        }
        let res: anyhow::Result<bool> = (|| {
            match item {
                Item::Names(j) => {
                    if let Ok(v) = serde_json::from_slice::<Vec<NameEntry>>(j) {
                        names.extend(v.into_iter().map(|e| (e.id, e)));
                    }
                }
                Item::Event(raw) => {
                    r.events += 1;
                    consume_record(raw, &mut stats, want_runq.then_some(&mut waits));
                    for ev in waits.drain(..) {
                        let (path, name) = describe(&names, ev.cgroup_id);
                        r.event_lines += 1;
                        if !emit(out, &session::runq_wait(&ev, path, name))? {
                            return Ok(false);
                        }
                    }
                    for (ev, period) in std::mem::take(&mut stats.throttle_lines) {
                        let (path, name) = describe(&names, ev.cgroup_id);
                        r.event_lines += 1;
                        if !emit(out, &session::throttle_line(&ev, period, path, name))? {
                            return Ok(false);
                        }
                    }
                    // SAFETY: EventHeader is #[repr(C)] integers.
                    if let Some(h) = unsafe { cgtrace_common::event::read_pod::<EventHeader>(raw) }
                        && events.has_kind(h.kind)
                        && crate::events::family_of(h.kind)
                            .is_some_and(|f| f != "runq" && f != "throttle")
                    {
                        r.unrendered += 1;
                    }
                }
                Item::Window { mono_ns, json, .. } => {
                    r.windows += 1;
                    // As live: the window takes the throttled periods completed so far.
                    let _ = stats.burners.take(mono_ns);
                    stats.episodes.clear();
                    if !emit_line(out, &String::from_utf8_lossy(json))? {
                        return Ok(false);
                    }
                }
                Item::Summary(j) => {
                    if summary && !emit_line(out, &String::from_utf8_lossy(j))? {
                        return Ok(false);
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
    let _ = out.flush();
    Ok(r)
}

/// `cgtrace replay FILE --stream`: to stdout, with the read warning and what could not be shown
/// on stderr.
pub fn run_stream(rec: &Recording, events: &EventSelection, summary: bool) -> anyhow::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let r = stream(rec, &mut out, events, summary)?;
    if r.unrendered > 0 {
        eprintln!(
            "cgtrace: {} recorded events are of a family this cgtrace cannot print yet (replay with a newer cgtrace)",
            r.unrendered
        );
    }
    Ok(())
}
