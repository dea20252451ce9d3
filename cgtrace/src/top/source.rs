//! Where windows come from. The view is handed a [`Hello`](crate::model::Hello) and then
//! [`Event::Window`]s on its event channel, and never knows whether a live session
//! ([`super::live::spawn_live`]) or a recording produced them: a source is a thread steered by
//! [`Control`]s through a [`SourceHandle`]; [`spawn_recorded`] replays windows already made.

use std::{
    sync::mpsc::{self, Sender},
    thread::JoinHandle,
    time::Duration,
};

use super::event::Event;
use crate::model::Window;

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
    pub(crate) error: Option<String>,
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
