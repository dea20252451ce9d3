//! The `?` overlay: every key, from the one table that defines them (in two columns when the
//! screen is wide enough, so all of them fit 80×24), the filter prompt's keys, and the columns
//! when there is room.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
};

use crate::top::{
    app::App,
    format,
    keys::{BINDINGS, Binding, LABEL_WIDTH, PROMPT_KEYS, REPLAY_BINDINGS, SEEK_KEYS, WHAT_WIDTH},
};

/// One key's cell: ` label  what`, padded.
const CELL: usize = 1 + LABEL_WIDTH + 1 + WHAT_WIDTH;

pub fn render(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let t = &app.theme;
    let two = usize::from(area.width) >= 2 * CELL + 2;
    let bindings: Vec<&Binding> = if app.is_replay() {
        BINDINGS.iter().chain(REPLAY_BINDINGS).collect()
    } else {
        BINDINGS.iter().collect()
    };
    let cell = |i: usize| -> Vec<Span<'static>> {
        let b = bindings[i];
        vec![
            Span::styled(format!(" {:<LABEL_WIDTH$} ", b.label), t.title),
            Span::raw(format!("{:<WHAT_WIDTH$}", b.what)),
        ]
    };
    let mut lines: Vec<Line<'static>> = Vec::new();
    if two {
        let half = bindings.len().div_ceil(2);
        for i in 0..half {
            let mut spans = cell(i);
            if i + half < bindings.len() {
                spans.extend(cell(i + half));
            }
            lines.push(Line::from(spans));
        }
    } else {
        lines.extend((0..bindings.len()).map(|i| Line::from(cell(i))));
    }
    let width = usize::from(area.width.saturating_sub(2));
    let prompt: Vec<String> = PROMPT_KEYS
        .iter()
        .map(|(k, w)| format!("{k} {w}"))
        .collect();
    lines.push(Line::from(vec![
        Span::styled(" filter prompt: ", t.title),
        Span::raw(prompt.join(" · ")),
    ]));
    if app.is_replay() {
        let seek: Vec<String> = SEEK_KEYS
            .iter()
            .map(|(k, w)| format!("{k} {w}").trim_end().to_string())
            .collect();
        lines.push(Line::from(vec![
            Span::styled(" jump (:): ", t.title),
            Span::raw(seek.join(" · ")),
        ]));
    }
    let room = usize::from(area.height.saturating_sub(2));
    if lines.len() + 2 + app.columns.len() <= room {
        lines.push(Line::raw(""));
        for c in &app.columns {
            lines.push(Line::from(vec![
                Span::styled(format!(" {:<LABEL_WIDTH$} ", c.title), t.title),
                Span::raw(format::ellipsize_end(
                    c.help,
                    width.saturating_sub(LABEL_WIDTH + 2),
                )),
            ]));
        }
    }
    let widest = lines.iter().map(Line::width).max().unwrap_or(0) as u16 + 2;
    let w = widest.min(area.width);
    let h = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .border_style(t.border)
                .title(Span::styled(" keys — any key closes ", t.title)),
        ),
        popup,
    );
}
