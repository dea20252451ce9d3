//! The table: column titles, then only the rows that fit, from `app.offset`.

use ratatui::{
    Frame,
    layout::{Alignment, Rect},
    style::Style,
    text::{Line, Span},
    widgets::Paragraph,
};

use crate::top::{
    app::App,
    columns::{self, Cell, Column, Source},
    family::Ctx,
    format,
    render::name::name_cell,
};

pub fn render(frame: &mut Frame<'_>, area: Rect, app: &App) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let t = &app.theme;
    let fitted = app.fitted(area.width);
    let (cols, name_w) = (&fitted.columns, fitted.name_width);
    let sort_id = app.sort_column().id;
    let arrow = if app.descending() { "▼" } else { "▲" };

    let mut title: Vec<Span<'static>> = Vec::new();
    for (i, c) in cols.iter().enumerate() {
        if i > 0 {
            title.push(Span::raw(" "));
        }
        let text = if c.id == sort_id {
            format!("{}{arrow}", c.title)
        } else {
            c.title.to_string()
        };
        let style = if c.id == sort_id { t.sorted } else { t.title };
        title.push(Span::styled(pad(&text, width_of(c, name_w), c), style));
    }
    let buf = frame.buffer_mut();
    buf.set_line(area.x, area.y, &Line::from(title), area.width);

    let body = Rect::new(area.x, area.y + 1, area.width, area.height - 1);
    if body.height == 0 {
        return;
    }
    if app.rows.is_empty() {
        let msg = empty_message(app);
        let y = body.y + body.height.saturating_sub(1) / 2;
        frame.render_widget(
            Paragraph::new(Line::styled(msg, t.dim)).alignment(Alignment::Center),
            Rect::new(body.x, y, body.width, 1),
        );
        return;
    }
    let ctx = app.store.ctx.unwrap_or(Ctx { duration_ms: 1000 });
    let buf = frame.buffer_mut();
    for (n, row) in app
        .rows
        .iter()
        .enumerate()
        .skip(app.offset)
        .take(usize::from(body.height))
    {
        let y = body.y + (n - app.offset) as u16;
        let tracked = row.id.and_then(|id| app.store.get(id));
        let idle = tracked.is_none_or(|tr| !app.store.is_active(tr));
        let mut spans: Vec<Span<'static>> = Vec::with_capacity(cols.len() * 2);
        for (i, c) in cols.iter().enumerate() {
            if i > 0 {
                spans.push(Span::raw(" "));
            }
            let w = width_of(c, name_w);
            let (text, style) = match c.source {
                Source::Name => (name_cell(row, &app.label(row), w), Style::new()),
                Source::Flags => {
                    let codes: Vec<&str> = tracked
                        .filter(|tr| app.store.is_active(tr))
                        .map(|tr| tr.flags.iter().map(|f| f.code.as_str()).collect())
                        .unwrap_or_default();
                    let style = if codes.is_empty() {
                        Style::new()
                    } else {
                        t.warn
                    };
                    (flags_cell(&codes, w), style)
                }
                Source::Data(f) => {
                    let cell = match tracked {
                        None => Cell::Text(String::new()),
                        Some(tr) if !app.store.is_active(tr) => Cell::Idle,
                        Some(tr) => f(&tr.cg, &ctx),
                    };
                    (cell.text(), Style::new())
                }
            };
            spans.push(Span::styled(pad(&text, w, c), style));
        }
        let mut line = Line::from(spans);
        if idle {
            line = line.patch_style(t.dim);
        }
        let selected = n == app.cursor;
        if selected {
            line = line.patch_style(t.selected);
            buf.set_style(Rect::new(body.x, y, body.width, 1), t.selected);
        }
        buf.set_line(body.x, y, &line, body.width);
    }
}

/// The flag codes, or the first and how many more when they do not fit (`RQ+2`).
fn flags_cell(codes: &[&str], w: usize) -> String {
    let all = codes.join(",");
    match codes.first() {
        Some(first) if all.chars().count() > w => format!("{first}+{}", codes.len() - 1),
        _ => all,
    }
}

fn width_of(c: &Column, name_w: usize) -> usize {
    if c.id == columns::NAME.id {
        name_w
    } else {
        usize::from(c.width)
    }
}

/// Left-aligned for text columns, right-aligned for numbers; cut to `w` display columns.
fn pad(text: &str, w: usize, c: &Column) -> String {
    format::pad(text, w, !matches!(c.source, Source::Data(_)))
}

fn empty_message(app: &App) -> String {
    if app.window.is_none() {
        return format!(
            "waiting for the first window ({} interval)…",
            format::interval(app.interval.as_millis() as u64)
        );
    }
    if !app.filter.is_empty() {
        return format!(
            "no cgroup matches the filter {:?} (/ to change it)",
            app.filter.text
        );
    }
    if app.hide_idle {
        return "no cgroup had run-queue waits in this window (i shows idle ones)".into();
    }
    "no run-queue waits in this window".into()
}
