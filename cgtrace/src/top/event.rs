//! The one event type the UI loop waits on, and the input thread that turns terminal input into
//! it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::Sender,
    },
    thread::JoinHandle,
    time::Duration,
};

use ratatui::crossterm::event::{self, Event as TermEvent, KeyEvent, KeyEventKind};

use crate::model::Window;

/// Everything the UI loop reacts to, from any thread.
#[derive(Debug)]
pub enum Event {
    Key(KeyEvent),
    Resize(u16, u16),
    Window(Box<Window>),
    /// The source stopped; `Some(error)` if it failed.
    SourceEnded(Option<String>),
    /// SIGTERM, SIGHUP or SIGINT: quit cleanly.
    Signal(&'static str),
    /// Replay: where the player stands.
    Player(crate::top::player::PlayerState),
}

/// Reads the terminal on its own thread until stopped.
pub struct Input {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long the input thread blocks before checking whether it should stop.
const POLL: Duration = Duration::from_millis(100);

impl Input {
    pub fn spawn(events: Sender<Event>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("cgtrace-input".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match event::poll(POLL) {
                        Ok(false) => continue,
                        Ok(true) => {}
                        Err(e) => {
                            log::error!("reading the terminal: {e}");
                            break;
                        }
                    }
                    let ev = match event::read() {
                        Ok(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => Event::Key(k),
                        Ok(TermEvent::Resize(w, h)) => Event::Resize(w, h),
                        Ok(_) => continue,
                        Err(e) => {
                            log::error!("reading the terminal: {e}");
                            break;
                        }
                    };
                    if events.send(ev).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Input {
    /// Stops the input thread. After a hangup (the terminal is gone) crossterm's `poll`/`read`
    /// can spin on the dead tty and never return: the thread is then left behind (detached) and
    /// ends with the process, instead of this join hanging the exit at full CPU.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let Some(t) = self.thread.take() else {
            return;
        };
        let deadline = std::time::Instant::now() + 2 * POLL + Duration::from_millis(100);
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            log::warn!("the terminal input thread did not stop (terminal gone?); leaving it");
        }
    }
}
