//! `cgtrace stream`: the headless NDJSON stream. One `hello` line, one `window` line per interval,
//! and a closing `summary` line with since-start histograms. Stops on `--duration`, SIGINT,
//! SIGTERM or a closed stdout, and detaches everything.

use std::{
    io::{self, Write},
    net::SocketAddr,
    time::Duration,
};

use cgtrace_common::runq::RunqEvent;
use serde::Serialize;
use tokio::{
    signal::unix::{SignalKind, signal},
    time::sleep,
};

use crate::{
    events::EventSelection,
    metrics::{Exporter, MetricsOptions},
    session::{Pump, Pumped, Session, SessionOptions},
    snapshot::CgroupWindow,
};

/// Closing line: what the whole run saw per cgroup.
#[derive(Serialize)]
pub struct Summary<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub windows: u64,
    pub cgroups: &'a [CgroupWindow],
}

/// Writes one JSON line; `Ok(false)` when the reader went away (EPIPE).
pub fn emit<W: Write, T: Serialize>(out: &mut W, value: &T) -> anyhow::Result<bool> {
    emit_line(out, &serde_json::to_string(value)?)
}

/// Writes one line already serialised; `Ok(false)` when the reader went away (EPIPE).
pub fn emit_line<W: Write>(out: &mut W, line: &str) -> anyhow::Result<bool> {
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Prints the event lines drained since the last call; `Ok(false)` when the reader went away.
pub fn emit_events<W: Write>(
    out: &mut W,
    session: &mut Session,
    waits: &mut Vec<RunqEvent>,
) -> anyhow::Result<bool> {
    for ev in std::mem::take(waits) {
        let line = session.runq_wait(&ev);
        if !emit(out, &line)? {
            return Ok(false);
        }
    }
    for (ev, period) in std::mem::take(&mut session.drain_stats().throttle_lines) {
        let line = session.throttle_line(&ev, period);
        if !emit(out, &line)? {
            return Ok(false);
        }
    }
    for ev in std::mem::take(&mut session.drain_stats().slow_reads) {
        if let Some(line) = session.slow_read(&ev)
            && !emit(out, &line)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Runs the stream until `duration` (if any), a signal, or a closed stdout. `events` chooses the
/// families whose single events are printed; `prometheus` also serves the windows as metrics.
pub async fn run(
    opts: SessionOptions,
    duration: Option<Duration>,
    summary: bool,
    events: EventSelection,
    prometheus: Option<(SocketAddr, MetricsOptions)>,
) -> anyhow::Result<()> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut pump = Pump::start(&opts)?;
    let mut exporter = match prometheus {
        Some((addr, mopts)) => Some(Exporter::start(addr, mopts).await?),
        None => None,
    };
    let throttle_lines = events.has("throttle");
    let slow_reads = events.has("reads");
    let events = events.has("runq");
    let mut out = io::BufWriter::new(io::stdout().lock());
    if !emit(&mut out, &pump.session.hello)? {
        return Ok(());
    }
    pump.session.drain_stats().keep_throttle_lines = throttle_lines;
    pump.session.drain_stats().keep_slow_reads = slow_reads;
    let deadline = sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut windows = 0u64;
    let mut waits = Vec::new();
    loop {
        let pumped = tokio::select! {
            p = pump.next(events.then_some(&mut waits)) => Some(p?),
            _ = sigint.recv() => None,
            _ = sigterm.recv() => None,
            () = &mut deadline => None,
        };
        // A reader that went away ends the stream (the programs detach when `pump` drops).
        if !emit_events(&mut out, &mut pump.session, &mut waits)? {
            return Ok(());
        }
        match pumped {
            None => break,
            Some(Pumped::Drained) => {}
            Some(Pumped::Window(w)) => {
                windows += 1;
                if let Some(e) = exporter.as_mut() {
                    e.update(&w);
                }
                if !emit(&mut out, &w)? {
                    return Ok(());
                }
            }
        }
    }
    // The partial last window, so nothing traced is left unreported.
    let w = pump.last_window(events.then_some(&mut waits))?;
    if !emit_events(&mut out, &mut pump.session, &mut waits)? {
        return Ok(());
    }
    windows += 1;
    if let Some(e) = exporter.as_mut() {
        e.update(&w);
    }
    if emit(&mut out, &w)? && summary {
        let totals = pump.session.totals();
        emit(
            &mut out,
            &Summary {
                kind: "summary",
                windows,
                cgroups: &totals,
            },
        )?;
    }
    Ok(())
}
