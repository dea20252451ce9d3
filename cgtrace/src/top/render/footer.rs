//! The last line: the filter prompt while typing, else a message, else the main keys.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
};

use crate::top::app::{App, Mode};

const HINTS: &[(&str, &str)] = &[
    ("?", "help"),
    ("q", "quit"),
    ("Enter", "detail"),
    ("/", "filter"),
    ("<>", "sort"),
    ("r", "reverse"),
    ("t", "tree"),
    ("i", "idle"),
    ("p", "pause"),
    ("+-", "interval"),
];

const REPLAY_HINTS: &[(&str, &str)] = &[
    ("?", "help"),
    ("q", "quit"),
    ("p", "pause"),
    ("n/N", "step"),
    ("[]", "speed"),
    (":", "jump"),
    ("T", "throttle"),
    ("R", "read"),
    ("E", "event"),
    ("Enter", "detail"),
];

pub fn render(frame: &mut Frame<'_>, area: Rect, app: &App) {
    if area.height == 0 {
        return;
    }
    let t = &app.theme;
    let line = match &app.mode {
        Mode::Filter(p) => {
            let mut spans = vec![
                Span::styled(
                    format!("filter ({}, Tab switches): ", p.kind.name()),
                    t.title,
                ),
                Span::raw(p.text.clone()),
                Span::styled("▏", t.title),
            ];
            if let Some(e) = &p.error {
                spans.push(Span::raw("  "));
                spans.push(Span::styled(e.clone(), t.bad));
            }
            Line::from(spans)
        }
        Mode::Seek(text) => Line::from(vec![
            Span::styled(
                "jump to (HH:MM[:SS] UTC, +30s, -2m, 90s, start, end): ",
                t.title,
            ),
            Span::raw(text.clone()),
            Span::styled("▏", t.title),
        ]),
        _ => match &app.message {
            Some(m) => Line::raw(m.clone()),
            None => {
                let mut spans = Vec::new();
                let hints = if app.is_replay() { REPLAY_HINTS } else { HINTS };
                for (k, what) in hints {
                    spans.push(Span::styled(*k, t.title));
                    spans.push(Span::raw(format!(" {what}  ")));
                }
                Line::from(spans)
            }
        },
    };
    frame
        .buffer_mut()
        .set_line(area.x, area.y, &line, area.width);
}
