//! The replay source of the view: plays a [`Recording`]'s windows at their recorded pace (times
//! a speed), and obeys the view's player commands: pause, step, speed, seek to a time, to the
//! next window with a throttle episode, a slow read, or any single event. It hands the view the
//! same [`Event::Window`]s a live session does, so the view code is the same.

use std::{
    sync::{
        Arc,
        mpsc::{RecvTimeoutError, Sender},
    },
    time::{Duration, Instant},
};

use crate::record::reader::{Marks, Recording};
use crate::{
    model::Window,
    top::{
        event::{Event, PlayerCmd, PlayerState},
        source::{Control, SourceHandle},
    },
};

pub const MIN_SPEED: f64 = 0.125;
pub const MAX_SPEED: f64 = 1024.0;
/// The longest the player waits between two windows, whatever the recording says.
const MAX_GAP: Duration = Duration::from_secs(60);

struct Player {
    rec: Arc<Recording>,
    buf: Vec<u8>,
    cached: Option<u32>,
    /// Index of the window shown.
    shown: Option<usize>,
    paused: bool,
    speed: f64,
    events: Sender<Event>,
}

impl Player {
    fn state(&self, note: Option<String>) -> PlayerState {
        let n = self.rec.windows.len();
        PlayerState {
            pos: self.shown.map_or(0, |i| i + 1),
            total: n,
            paused: self.paused,
            speed: self.speed,
            at_end: self.shown.map_or(n == 0, |i| i + 1 >= n),
            first_ms: self.rec.windows.first().map_or(0, |w| w.end_unix_ms),
            last_ms: self.rec.windows.last().map_or(0, |w| w.end_unix_ms),
            note,
        }
    }

    /// Sends window `i` (and the state); `false` when the view is gone.
    fn show(&mut self, i: usize, note: Option<String>) -> bool {
        let w: Option<Window> = self
            .rec
            .window_json(i, &mut self.buf, &mut self.cached)
            .and_then(|j| serde_json::from_slice(j).ok());
        self.shown = Some(i);
        if let Some(w) = w
            && self.events.send(Event::Window(Box::new(w))).is_err()
        {
            return false;
        }
        self.events.send(Event::Player(self.state(note))).is_ok()
    }

    /// How long window `i` is shown before the next one at the current speed.
    fn gap(&self, i: usize) -> Duration {
        let w = &self.rec.windows;
        let ms = match (w.get(i), w.get(i + 1)) {
            (Some(a), Some(b)) => b.end_unix_ms.saturating_sub(a.end_unix_ms),
            _ => 0,
        };
        Duration::from_secs_f64(ms as f64 / 1e3 / self.speed).min(MAX_GAP)
    }

    /// Applies a command; returns the window to show, if it moves, and a note.
    fn command(&mut self, c: PlayerCmd) -> (Option<usize>, Option<String>) {
        let n = self.rec.windows.len();
        let cur = self.shown;
        match c {
            PlayerCmd::TogglePause => {
                self.paused = !self.paused;
                // Resuming at the end starts over.
                if !self.paused && cur.is_some_and(|i| i + 1 >= n) {
                    return (Some(0), Some("from the start".into()));
                }
                (None, None)
            }
            PlayerCmd::Step(d) => {
                self.paused = true;
                let from = cur.map_or(-1, |i| i as i64);
                let to = (from + d).clamp(0, n as i64 - 1);
                if n == 0 || Some(to as usize) == cur {
                    return (
                        None,
                        Some(
                            if d > 0 {
                                "at the last window"
                            } else {
                                "at the first window"
                            }
                            .into(),
                        ),
                    );
                }
                (Some(to as usize), None)
            }
            PlayerCmd::Faster | PlayerCmd::Slower => {
                let f = if c == PlayerCmd::Faster { 2.0 } else { 0.5 };
                self.speed = (self.speed * f).clamp(MIN_SPEED, MAX_SPEED);
                (None, Some(format!("speed {}×", fmt_speed(self.speed))))
            }
            PlayerCmd::SeekTo(ms) => {
                let i = self
                    .rec
                    .windows
                    .iter()
                    .position(|w| w.end_unix_ms >= ms)
                    .unwrap_or(n.saturating_sub(1));
                (
                    (n > 0).then_some(i),
                    Some(format!(
                        "at {}",
                        crate::top::format::clock_utc(
                            self.rec.windows.get(i).map_or(0, |w| w.end_unix_ms)
                        )
                    )),
                )
            }
            PlayerCmd::Next(mask) => {
                let from = cur.map_or(0, |i| i + 1);
                match self.rec.windows[from.min(n)..]
                    .iter()
                    .position(|w| w.marks.has(mask))
                {
                    Some(k) => (Some(from + k), None),
                    None => (
                        None,
                        Some(format!("no later window with {}", mark_name(mask))),
                    ),
                }
            }
        }
    }
}

pub fn mark_name(mask: u32) -> &'static str {
    match mask {
        Marks::THROTTLE => "a throttle episode",
        Marks::READS => "a slow read",
        _ => "single events",
    }
}

pub fn fmt_speed(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// Plays `rec` on a thread of its own, starting at `speed` (paused when `paused`).
pub fn spawn(
    rec: Arc<Recording>,
    speed: f64,
    paused: bool,
    events: Sender<Event>,
) -> std::io::Result<SourceHandle> {
    crate::top::source::spawn_offline(events, move |ctl_rx, events| {
        let mut p = Player {
            rec,
            buf: Vec::new(),
            cached: None,
            shown: None,
            paused,
            speed: speed.clamp(MIN_SPEED, MAX_SPEED),
            events,
        };
        if p.rec.windows.is_empty() {
            let _ = p.events.send(Event::Player(
                p.state(Some("the recording has no windows".into())),
            ));
        } else if !p.show(0, None) {
            return;
        }
        let mut next_at = Instant::now() + p.gap(0);
        loop {
            let n = p.rec.windows.len();
            let playing = !p.paused && p.shown.is_some_and(|i| i + 1 < n);
            let msg = if playing {
                match ctl_rx.recv_timeout(next_at.saturating_duration_since(Instant::now())) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match ctl_rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            };
            let (to, note) = match msg {
                None => (p.shown.map(|i| i + 1), None),
                Some(Control::Stop) => return,
                Some(Control::SetInterval(_)) => (None, None),
                Some(Control::Player(c)) => p.command(c),
            };
            let ok = match to {
                Some(i) => p.show(i, note),
                None => p.events.send(Event::Player(p.state(note))).is_ok(),
            };
            if !ok {
                return;
            }
            if to.is_some() || msg.is_some() {
                next_at = Instant::now() + p.shown.map_or(Duration::ZERO, |i| p.gap(i));
            }
        }
    })
}

/// Parses the seek prompt: `HH:MM[:SS]` (UTC, the clock the view shows; the first such time at
/// or after the recording's start), `+N`/`-N` from the window shown, `N` from the start, with an
/// optional unit `s`, `m` or `h`; `start` and `end`. Returns Unix ms.
pub fn parse_seek(text: &str, first_ms: u64, last_ms: u64, now_ms: u64) -> Result<u64, String> {
    let t = text.trim();
    let bad =
        || format!("{t:?}: type HH:MM[:SS] (UTC), +30s, -2m, 90s from the start, start or end");
    match t {
        "start" | "0" => return Ok(first_ms),
        "end" => return Ok(last_ms),
        _ => {}
    }
    if t.contains(':') {
        let parts: Vec<u64> = t
            .trim_end_matches(['Z', 'z'])
            .split(':')
            .map(|p| p.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let (h, m, s) = match parts.as_slice() {
            [h, m] => (*h, *m, 0),
            [h, m, s] => (*h, *m, *s),
            _ => return Err(bad()),
        };
        if h > 23 || m > 59 || s > 59 {
            return Err(bad());
        }
        let tod = (h * 3600 + m * 60 + s) * 1000;
        let day = first_ms / 86_400_000 * 86_400_000;
        let mut at = day.saturating_add(tod);
        if at.saturating_add(999) < first_ms {
            at = at.saturating_add(86_400_000);
        }
        return Ok(at);
    }
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1i64, &t[1..]),
        Some(b'-') => (-1, &t[1..]),
        _ => (0, t),
    };
    let (num, mult) = match rest.chars().last() {
        Some('s') => (&rest[..rest.len() - 1], 1000.0),
        Some('m') => (&rest[..rest.len() - 1], 60_000.0),
        Some('h') => (&rest[..rest.len() - 1], 3_600_000.0),
        _ => (rest, 1000.0),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    let d = (v * mult) as u64;
    Ok(match sign {
        0 => first_ms.saturating_add(d),
        1 => now_ms.saturating_add(d),
        _ => now_ms.saturating_sub(d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seek_text() {
        // 2026-11-22 17:30:00Z .. 17:31:00Z
        let first = 1_795_368_600_000;
        let last = first + 60_000;
        let now = first + 30_000;
        assert_eq!(parse_seek("start", first, last, now), Ok(first));
        assert_eq!(parse_seek("end", first, last, now), Ok(last));
        assert_eq!(parse_seek("+10s", first, last, now), Ok(now + 10_000));
        assert_eq!(parse_seek("-1m", first, last, now), Ok(now - 60_000));
        assert_eq!(parse_seek("45", first, last, now), Ok(first + 45_000));
        assert_eq!(parse_seek("17:30:40", first, last, now), Ok(first + 40_000));
        assert_eq!(parse_seek("17:31Z", first, last, now), Ok(first + 60_000));
        // A time of day before the start is the next day's.
        assert_eq!(
            parse_seek("17:00", first, last, now),
            Ok(first - 1_800_000 + 86_400_000)
        );
        assert!(parse_seek("25:00", first, last, now).is_err());
        assert!(
            parse_seek("soon", first, last, now)
                .unwrap_err()
                .contains("HH:MM")
        );
    }
}

#[cfg(test)]
mod view {
    use std::{
        sync::{Arc, mpsc},
        time::Duration,
    };

    use ratatui::{Terminal, backend::TestBackend};

    use crate::{
        record::{
            format,
            reader::Recording,
            tests::{HELLO, runq_record, throttle_record, window_json, writer},
        },
        top::{
            Action, App, Command, Effect, Theme,
            app::Edit,
            event::Event,
            source::{Control, SourceHandle},
        },
    };

    /// Applies what the player sends until it is quiet, as `run_loop` does.
    fn settle(app: &mut App, rx: &mpsc::Receiver<Event>) {
        while let Ok(ev) = rx.recv_timeout(Duration::from_millis(150)) {
            match ev {
                Event::Window(w) => app.apply(Action::Window(w)),
                Event::Player(p) => app.apply(Action::Player(p)),
                _ => None,
            };
        }
    }

    fn press(app: &mut App, src: &SourceHandle, rx: &mpsc::Receiver<Event>, a: Action) {
        if let Some(Effect::Player(c)) = app.apply(a) {
            src.send(Control::Player(c));
        }
        settle(app, rx);
    }

    fn seq(app: &App) -> u64 {
        app.window.as_ref().map_or(0, |w| w.seq)
    }

    #[test]
    fn the_view_pauses_steps_seeks_and_plays_a_recording() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r");
        let mut w = writer(&p);
        for s in 1..=10u64 {
            if s == 3 || s == 9 {
                w.event(&runq_record(s * 1_000_000_000 - 5, 7, 30_000_000));
            }
            if s == 7 {
                w.event(&throttle_record(s * 1_000_000_000 - 5, 7));
            }
            w.window(
                s * 1_000_000_000,
                1000 + s * 1000,
                window_json(s).as_bytes(),
            );
            w.flush(false).unwrap();
        }
        drop(w);
        let rec = Arc::new(Recording::open(&p).unwrap());
        let (tx, rx) = mpsc::channel();
        let mut app = App::new(rec.hello(), Theme::plain());
        app.start_replay();
        let src = super::spawn(rec, 1.0, true, tx).unwrap();
        settle(&mut app, &rx);
        let st = app.replay.clone().unwrap();
        assert_eq!((st.pos, st.total, st.paused, seq(&app)), (1, 10, true, 1));

        let cmd = |c| Action::Command(c);
        press(&mut app, &src, &rx, cmd(Command::StepForward));
        assert_eq!(seq(&app), 2);
        press(&mut app, &src, &rx, cmd(Command::StepBack));
        assert_eq!(seq(&app), 1);
        press(&mut app, &src, &rx, cmd(Command::StepBack));
        assert_eq!(seq(&app), 1);
        assert_eq!(app.message.as_deref(), Some("at the first window"));
        press(&mut app, &src, &rx, cmd(Command::NextThrottle));
        assert_eq!(seq(&app), 7, "the window after the throttle episode");
        press(&mut app, &src, &rx, cmd(Command::NextEvent));
        assert_eq!(seq(&app), 9, "the next window after single events");
        press(&mut app, &src, &rx, cmd(Command::NextThrottle));
        assert_eq!(seq(&app), 9);
        assert_eq!(
            app.message.as_deref(),
            Some("no later window with a throttle episode")
        );
        press(&mut app, &src, &rx, cmd(Command::NextRead));
        assert!(app.message.as_deref().unwrap().contains("slow read"));
        // Jump to a time: from the start, then relative.
        for (text, want) in [("start", 1), ("+4s", 5), ("00:00:08", 7), ("end", 10)] {
            press(&mut app, &src, &rx, cmd(Command::Seek));
            for c in text.chars() {
                app.apply(Action::Edit(Edit::Char(c)));
            }
            press(&mut app, &src, &rx, Action::Edit(Edit::Apply));
            assert_eq!(seq(&app), want, "seek {text}");
        }
        // Play from the start, as fast as it goes: every window arrives, then it stops at the end.
        press(&mut app, &src, &rx, cmd(Command::Seek));
        app.apply(Action::Edit(Edit::Char('0')));
        press(&mut app, &src, &rx, Action::Edit(Edit::Apply));
        for _ in 0..14 {
            press(&mut app, &src, &rx, cmd(Command::PlayFaster));
        }
        assert_eq!(app.replay.as_ref().unwrap().speed, super::MAX_SPEED);
        press(&mut app, &src, &rx, cmd(Command::Freeze));
        std::thread::sleep(Duration::from_millis(300));
        settle(&mut app, &rx);
        let st = app.replay.clone().unwrap();
        assert!(!st.paused && st.at_end && st.pos == 10, "{st:?}");
        assert_eq!(seq(&app), 10);
        // The header says where the replay stands, the help lists the replay keys.
        let mut term = Terminal::new(TestBackend::new(100, 30)).unwrap();
        let mut screen = |app: &App| -> String {
            term.draw(|f| crate::top::render::draw(f, app)).unwrap();
            let buf = term.backend().buffer();
            buf.content().iter().map(|c| c.symbol()).collect()
        };
        let s = screen(&app);
        assert!(s.contains("REPLAY end 10/10"), "{s}");
        press(&mut app, &src, &rx, cmd(Command::Help));
        let screen = screen(&app);
        assert!(screen.contains("next throttle episode") && screen.contains("jump to a time"));
    }

    #[test]
    fn replay_keys_say_so_in_the_live_view() {
        let rec = Recording::from_bytes(format::header(HELLO.as_bytes())).unwrap();
        let mut app = App::new(rec.hello(), Theme::plain());
        assert_eq!(app.apply(Action::Command(Command::StepForward)), None);
        assert_eq!(
            app.message.as_deref(),
            Some("replay only (cgtrace replay FILE)")
        );
    }
}
