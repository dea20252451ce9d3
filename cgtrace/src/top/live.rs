//! The live source of the view: a session on a thread of its own, driven exactly as
//! `cgtrace stream` drives it (ring-buffer drain and window tick), its windows sent to the view.
//! The only part of the view that imports the live run.

use std::sync::mpsc::{self, Sender};

use anyhow::{Context as _, anyhow};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{UnboundedReceiver, unbounded_channel},
};

use super::{
    event::Event,
    source::{Control, EndNotice, SourceHandle},
};
use crate::{
    live::driver::{self, Flow, Sink, Turn},
    live::session::{Pump, SessionOptions},
    model::Hello,
};

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
            let mut notice = EndNotice::new(events.clone());
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
    let handle = SourceHandle::new(
        Box::new(move |c| {
            let _ = ctl_tx.send(c);
        }),
        thread,
    );
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
        Ok(match self.events.send(Event::Window(Box::new(w.clone()))) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop, // the view is gone
        })
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
