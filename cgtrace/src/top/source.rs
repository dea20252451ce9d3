//! Where windows come from. The view is handed a [`Hello`] and then [`Event::Window`]s on its
//! event channel, and never knows whether a live [`Session`] or a recording produced them:
//! [`spawn_live`] drives a session exactly as `cgtrace stream` does (ring-buffer drain and window
//! tick), [`spawn_recorded`] replays windows already made.

use std::{
    sync::mpsc::{self, Sender},
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, anyhow};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{UnboundedReceiver, unbounded_channel},
};

use super::event::Event;
use crate::{
    live::driver::{self, Flow, Sink, Turn},
    live::session::{Pump, SessionOptions},
    model::{Hello, Window},
};

/// What the view asks of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Windows of this length from now on (the current window ends at the next tick).
    SetInterval(Duration),
    /// Replay only: pause, step, seek, speed.
    Player(crate::top::event::PlayerCmd),
    Stop,
}

/// A running source: send it [`Control`]s; dropping it stops it and waits for its thread (for a
/// live source, that detaches every program).
pub struct SourceHandle {
    send: Box<dyn Fn(Control) + Send>,
    thread: Option<JoinHandle<()>>,
}

impl SourceHandle {
    /// A source on `thread` that is sent controls through `send`.
    pub fn new(send: Box<dyn Fn(Control) + Send>, thread: JoinHandle<()>) -> Self {
        Self {
            send,
            thread: Some(thread),
        }
    }

    pub fn send(&self, c: Control) {
        (self.send)(c);
    }
}

impl Drop for SourceHandle {
    fn drop(&mut self) {
        (self.send)(Control::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Tells the view the source stopped, even if its thread panicked.
pub(crate) struct EndNotice {
    events: Sender<Event>,
    error: Option<String>,
}

impl EndNotice {
    pub(crate) fn new(events: Sender<Event>) -> Self {
        Self {
            events,
            error: None,
        }
    }
}

impl Drop for EndNotice {
    fn drop(&mut self) {
        let error = if std::thread::panicking() {
            Some("the collector thread panicked (see the log)".into())
        } else {
            self.error.take()
        };
        let _ = self.events.send(Event::SourceEnded(error));
    }
}

/// Starts tracing on a thread of its own and returns once the programs are attached (or with the
/// reason they could not be).
pub fn spawn_live(
    opts: SessionOptions,
    events: Sender<Event>,
) -> anyhow::Result<(Hello, SourceHandle)> {
    let (ready_tx, ready_rx) = mpsc::sync_channel::<anyhow::Result<Hello>>(1);
    let (ctl_tx, ctl_rx) = unbounded_channel();
    let thread = std::thread::Builder::new()
        .name("cgtrace-collect".into())
        .spawn(move || {
            let mut notice = EndNotice {
                events: events.clone(),
                error: None,
            };
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            if let Err(e) = rt.block_on(live(opts, ready_tx, events, ctl_rx)) {
                log::error!("collector: {e:#}");
                notice.error = Some(format!("{e:#}"));
            }
        })
        .context("starting the collector thread")?;
    let handle = SourceHandle {
        send: Box::new(move |c| {
            let _ = ctl_tx.send(c);
        }),
        thread: Some(thread),
    };
    match ready_rx.recv() {
        Ok(Ok(hello)) => Ok((hello, handle)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(anyhow!("the collector stopped before tracing started")),
    }
}

/// The view as a sink of the driver: every window goes to its event channel.
struct View {
    events: Sender<Event>,
}

impl Sink for View {
    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow> {
        let Some(w) = t.window else {
            return Ok(Flow::Continue);
        };
        Ok(
            match self.events.send(Event::Window(Box::new(w.window.clone()))) {
                Ok(()) => Flow::Continue,
                Err(_) => Flow::Stop, // the view is gone
            },
        )
    }
}

async fn live(
    opts: SessionOptions,
    ready: mpsc::SyncSender<anyhow::Result<Hello>>,
    events: Sender<Event>,
    mut control: UnboundedReceiver<Control>,
) -> anyhow::Result<()> {
    let started = (|| {
        let sigs = (
            signal(SignalKind::terminate())?,
            signal(SignalKind::hangup())?,
            signal(SignalKind::interrupt())?,
        );
        anyhow::Ok((sigs, Pump::start(&opts)?))
    })();
    let ((mut sigterm, mut sighup, mut sigint), pump) = match started {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e));
            return Ok(());
        }
    };
    crate::safety::privilege::drop_after_attach("top (tracing thread)");
    let _ = ready.send(Ok(pump.session.hello.clone()));
    log::info!(
        "tracing started: interval {:?}, families {:?}",
        opts.interval,
        pump.session.hello.families
    );
    // The view decides what a signal means (it quits cleanly); its controls steer the driver.
    let (to_driver, driver_control) = unbounded_channel();
    let signals = events.clone();
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                _ = sigterm.recv() => "SIGTERM",
                _ = sighup.recv() => "SIGHUP",
                _ = sigint.recv() => "SIGINT",
            };
            log::info!("{name}: stopping");
            let _ = signals.send(Event::Signal(name));
        }
    });
    tokio::spawn(async move {
        while let Some(c) = control.recv().await {
            let c = match c {
                Control::SetInterval(d) => {
                    log::info!("interval set to {d:?}");
                    driver::Control::SetInterval(d)
                }
                Control::Player(_) => continue,
                Control::Stop => break,
            };
            if to_driver.send(c).is_err() {
                return;
            }
        }
        let _ = to_driver.send(driver::Control::Stop);
    });
    let mut view = View { events };
    driver::run(pump, &mut [&mut view], driver_control).await?;
    log::info!("tracing stopped");
    Ok(())
}

/// A source on a thread of its own that reads its controls from a channel (the replay sources):
/// `body` gets the controls and the view's event channel, and the view learns when it ends.
pub(crate) fn spawn_offline(
    events: Sender<Event>,
    body: impl FnOnce(mpsc::Receiver<Control>, Sender<Event>) + Send + 'static,
) -> std::io::Result<SourceHandle> {
    let (ctl_tx, ctl_rx) = mpsc::channel::<Control>();
    let thread = std::thread::Builder::new()
        .name("cgtrace-replay".into())
        .spawn(move || {
            let _notice = EndNotice::new(events.clone());
            body(ctl_rx, events);
        })?;
    Ok(SourceHandle::new(
        Box::new(move |c| {
            let _ = ctl_tx.send(c);
        }),
        thread,
    ))
}

/// Replays windows already made (a recording, a test), `pace` apart (all at once when `None`),
/// then reports the end.
pub fn spawn_recorded(
    windows: Vec<Window>,
    pace: Option<Duration>,
    events: Sender<Event>,
) -> std::io::Result<SourceHandle> {
    spawn_offline(events, move |ctl_rx, events| {
        let mut pace = pace;
        for w in windows {
            if events.send(Event::Window(Box::new(w))).is_err() {
                return;
            }
            let Some(p) = pace else { continue };
            match ctl_rx.recv_timeout(p) {
                Ok(Control::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Ok(Control::SetInterval(d)) => pace = Some(d),
                Ok(Control::Player(_)) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    })
}
