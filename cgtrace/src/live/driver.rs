//! The one collection loop: a [`Pump`] feeds every output of a live session (the NDJSON stream,
//! the recorder, Prometheus, the view) as a [`Sink`]. `stream`, `record`, `serve` and the live
//! view differ only in the sinks they hand [`run`] and in what stops it.

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel},
    time::sleep,
};

use crate::{
    family::EventLine,
    live::session::{Pump, Pumped, Session},
    model::{CgroupWindow, Hello, Window},
};

/// Closing line: what the whole run saw per cgroup.
#[derive(Serialize)]
pub struct Summary<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub windows: u64,
    pub cgroups: &'a [CgroupWindow],
}

/// Whether the run goes on after a sink was handed something.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// This sink ends the run (stdout closed, `--max-size` reached).
    Stop,
}

/// What one turn of the pump gives every sink.
pub struct Turn<'a> {
    /// Names cgroups, and holds what the ring buffer delivered.
    pub session: &'a mut Session,
    /// The event lines drained in the turn.
    pub lines: &'a [EventLine],
    /// The window the turn ended, if any (at the end: the partial last window).
    pub window: Option<&'a Window>,
}

/// An output of a live session. Sinks are handed each turn in the order given to [`run`], so an
/// earlier sink (the recorder) has written what a later one (stdout) prints.
pub trait Sink {
    /// The session started.
    fn start(&mut self, _hello: &Hello) -> anyhow::Result<Flow> {
        Ok(Flow::Continue)
    }
    /// The sink's own counters for the window about to go out (the recorder's: what it could not
    /// write), added to its `events.counters` as deltas since the last window.
    fn counters(&mut self, _counters: &mut BTreeMap<String, u64>) {}
    /// One turn of the pump.
    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow>;
    /// The run ended: the last turn (with the partial last window) and the closing summary
    /// line (JSON). By default, one more turn.
    fn finish(&mut self, t: &mut Turn<'_>, _summary: &str) -> anyhow::Result<()> {
        self.turn(t).map(|_| ())
    }
}

/// What the caller asks of a running [`run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Windows of this length from now on.
    SetInterval(Duration),
    /// End the run (after the partial last window).
    Stop,
}

/// A control channel that says [`Control::Stop`] on SIGINT, SIGTERM or after `duration`.
pub fn stop_on_signals(
    duration: Option<Duration>,
) -> anyhow::Result<(UnboundedSender<Control>, UnboundedReceiver<Control>)> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let (tx, rx) = unbounded_channel();
    let stop = tx.clone();
    tokio::spawn(async move {
        let deadline = sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
            () = deadline => {}
        }
        let _ = stop.send(Control::Stop);
    });
    Ok((tx, rx))
}

/// Windows between two returns of the heap's free pages to the kernel.
const TRIM_EVERY: u64 = 5;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub windows: u64,
    /// A sink stopped it (rather than the control channel).
    pub by_sink: bool,
}

/// Drives `pump` until `control` says stop (or closes) or a sink stops the run; hands every turn
/// to `sinks` in order; then the partial last window and the closing summary, so nothing traced
/// goes unreported.
pub async fn run(
    mut pump: Pump,
    sinks: &mut [&mut dyn Sink],
    mut control: UnboundedReceiver<Control>,
) -> anyhow::Result<Ended> {
    let hello = pump.session.hello.clone();
    for s in sinks.iter_mut() {
        if s.start(&hello)? == Flow::Stop {
            return Ok(Ended {
                windows: 0,
                by_sink: true,
            });
        }
    }
    let mut windows = 0u64;
    let mut by_sink = false;
    'run: loop {
        let pumped = tokio::select! {
            p = pump.next() => p?,
            c = control.recv() => match c {
                Some(Control::SetInterval(d)) => {
                    pump.set_interval(d);
                    continue;
                }
                Some(Control::Stop) | None => break,
            },
        };
        let lines = pump.session.take_lines();
        let mut window = match pumped {
            Pumped::Window(w) => Some(*w),
            Pumped::Drained => None,
        };
        if let Some(w) = window.as_mut() {
            for s in sinks.iter_mut() {
                s.counters(&mut w.events.counters);
            }
        }
        windows += u64::from(window.is_some());
        let mut turn = Turn {
            session: &mut pump.session,
            lines: &lines,
            window: window.as_ref(),
        };
        for s in sinks.iter_mut() {
            if s.turn(&mut turn)? == Flow::Stop {
                by_sink = true;
                break 'run;
            }
        }
        let ended = window.is_some();
        drop((window, lines));
        // Not every window: a trim walks the whole heap (a sixth of the daemon's CPU at 10 000
        // cgroups when done every second), and a window's holes are mostly the next one's.
        if ended && windows.is_multiple_of(TRIM_EVERY) {
            crate::selfstat::release_free_heap();
        }
    }
    let mut last = pump.last_window()?;
    for s in sinks.iter_mut() {
        s.counters(&mut last.events.counters);
    }
    pump.session.finish_records();
    let lines = pump.session.take_lines();
    windows += 1;
    let totals = pump.session.totals();
    let summary = serde_json::to_string(&Summary {
        kind: "summary",
        windows,
        cgroups: &totals,
    })?;
    let mut turn = Turn {
        session: &mut pump.session,
        lines: &lines,
        window: Some(&last),
    };
    for s in sinks.iter_mut() {
        s.finish(&mut turn, &summary)?;
    }
    drop(pump); // detaches every program
    Ok(Ended { windows, by_sink })
}
