//! `cgtrace stream`: the headless NDJSON stream. One `hello` line, one `window` line per interval,
//! and a closing `summary` line with since-start histograms. Stops on `--duration`, SIGINT,
//! SIGTERM or a closed stdout, and detaches everything.

use std::{
    io::{self, Write},
    time::Duration,
};

use serde::Serialize;
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval, sleep},
};

use crate::{
    session::{Session, SessionOptions, drain_ring},
    snapshot::CgroupWindow,
};

/// Closing line: what the whole run saw per cgroup.
#[derive(Serialize)]
struct Summary<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    windows: u64,
    cgroups: &'a [CgroupWindow],
}

/// Writes one JSON line; `Ok(false)` when the reader went away (EPIPE).
fn emit<W: Write, T: Serialize>(out: &mut W, value: &T) -> anyhow::Result<bool> {
    let line = serde_json::to_string(value)?;
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

enum Wake {
    Ring,
    Window,
    Stop,
}

/// Runs the stream until `duration` (if any), a signal, or a closed stdout.
pub async fn run(
    opts: SessionOptions,
    duration: Option<Duration>,
    summary: bool,
    events: bool,
) -> anyhow::Result<()> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let (mut session, ring) = Session::start(&opts)?;
    // SAFETY: the ring buffer owns its map fd, which stays open and unchanged until `ring` drops.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if !emit(&mut out, &session.hello)? {
        return Ok(());
    }
    let mut tick = interval(opts.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate
    let mut drain_tick = interval(Duration::from_millis(200));
    let deadline = sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut windows = 0u64;
    let mut open = true;
    let mut waits = Vec::new();
    session.drain_stats().keep_throttle_lines = events;
    loop {
        let wake = tokio::select! {
            r = ring.readable_mut() => {
                if let Ok(mut guard) = r {
                    guard.clear_ready();
                }
                Wake::Ring
            }
            _ = drain_tick.tick() => Wake::Ring,
            _ = tick.tick() => Wake::Window,
            _ = sigint.recv() => Wake::Stop,
            _ = sigterm.recv() => Wake::Stop,
            () = &mut deadline => Wake::Stop,
        };
        drain_ring(
            ring.get_mut(),
            session.drain_stats(),
            events.then_some(&mut waits),
        );
        for ev in waits.drain(..) {
            let line = session.runq_wait(&ev);
            if !emit(&mut out, &line)? {
                open = false;
            }
        }
        let episodes = std::mem::take(&mut session.drain_stats().throttle_lines);
        for (ev, period) in episodes {
            let line = session.throttle_line(&ev, period);
            if !emit(&mut out, &line)? {
                open = false;
            }
        }
        if !open {
            break;
        }
        match wake {
            Wake::Ring => {}
            Wake::Window => {
                let w = session.next_window()?;
                windows += 1;
                if !emit(&mut out, &w)? {
                    open = false;
                    break;
                }
            }
            Wake::Stop => break,
        }
    }
    if open {
        // The partial last window, so nothing traced is left unreported.
        let w = session.next_window()?;
        windows += 1;
        if emit(&mut out, &w)? && summary {
            let totals = session.totals();
            emit(
                &mut out,
                &Summary {
                    kind: "summary",
                    windows,
                    cgroups: &totals,
                },
            )?;
        }
    }
    drop(session); // detaches every program
    Ok(())
}
