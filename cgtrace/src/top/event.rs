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
    Player(PlayerState),
}

/// What the view asks of the player.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlayerCmd {
    TogglePause,
    /// Show the window this many windows away, and pause.
    Step(i64),
    Faster,
    Slower,
    /// The first window that ends at or after this wall-clock time (Unix ms).
    SeekTo(u64),
    /// The next window preceded by single events of these families ([`crate::record::reader::Marks`] bits).
    Next(u32),
}

/// Where the player stands, sent to the view after every change.
#[derive(Clone, Debug, PartialEq)]
pub struct PlayerState {
    /// 1-based index of the window shown (0: none yet) and how many there are.
    pub pos: usize,
    pub total: usize,
    pub paused: bool,
    pub speed: f64,
    /// At the last window.
    pub at_end: bool,
    /// Wall clock of the recording's first and last window.
    pub first_ms: u64,
    pub last_ms: u64,
    /// Said once, e.g. "no later throttle episode".
    pub note: Option<String>,
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
