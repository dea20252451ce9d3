//! The detail pane of the selected cgroup: who it is, each family's section, the flags spelled
//! out with the suggested change, and the window's own counters.

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph, Wrap},
};

use crate::top::{
    app::App,
    columns,
    family::{Ctx, Detail},
    format,
    rows::RowKey,
};

pub fn render(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let t = &app.theme;
    let row = app.selected_row();
    let title = match row {
        Some(r) => format!(
            " {} ",
            format::ellipsize_middle(&app.label(r), usize::from(area.width.saturating_sub(6)))
        ),
        None => " detail ".to_string(),
    };
    let block = Block::default()
        .borders(Borders::TOP)
        .border_style(t.border)
        .title(Span::styled(title, t.title));
    let inner = block.inner(area);
    let lines = lines(app, inner.width);
    let scroll = app.detail_scroll.min(lines.len().saturating_sub(1) as u16);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0)),
        area,
    );
}

/// The pane's content for the selected row.
pub fn lines(app: &App, width: u16) -> Vec<Line<'static>> {
    let t = &app.theme;
    let mut out: Vec<Line<'static>> = Vec::new();
    let Some(row) = app.selected_row() else {
        out.push(Line::raw("no cgroup selected"));
        return out;
    };
    let tracked = match &row.key {
        RowKey::Cgroup(id) => app.store.get(*id),
        RowKey::Path(_) => None,
    };
    let Some(tr) = tracked else {
        let below = match row.tree {
            Some(crate::top::rows::TreeMark::Folded(n)) => format!("{n} cgroups below, folded"),
            _ => "the cgroups below it".to_string(),
        };
        out.push(Line::raw(format!(
            "{}: no waits of its own in the window; see {below}",
            row.path.as_deref().unwrap_or(&app.label(row))
        )));
        return out;
    };
    let cg = &tr.cg;
    // Who it is: kind, name, id, then the path (cut in the middle to one line).
    let mut who = Vec::new();
    if let (Some(name), Some(kind)) = (&cg.name, &cg.name_kind) {
        who.push(Span::styled(format!("{} ", kind.as_str()), t.dim));
        who.push(Span::raw(format!("{name} · ")));
    }
    who.push(Span::styled(format!("id {}", cg.id), t.dim));
    if cg.removed {
        who.push(Span::styled(" · removed", t.warn));
    }
    out.push(Line::from(who));
    let path = cg
        .path
        .as_deref()
        .unwrap_or("(path unknown: removed before it was resolved)");
    out.push(Line::styled(
        format::ellipsize_middle(path, usize::from(width)),
        t.dim,
    ));
    if !app.store.is_active(tr) {
        out.push(Line::raw(format!(
            "idle: no run-queue waits in this window (last in window #{})",
            tr.last_seq
        )));
        return out;
    }
    // The diagnosis first: what is wrong and what to change.
    for f in &tr.flags {
        out.push(Line::from(vec![
            Span::styled(format!("{:<4} ", f.code), t.warn),
            Span::styled(f.finding.clone(), t.warn),
        ]));
        if !f.evidence.is_empty() {
            out.push(Line::styled(format!("     {}", f.evidence), t.dim));
        }
        out.push(Line::raw(format!("     → {}", f.advice)));
        if !f.change.is_empty() {
            out.push(Line::raw(format!("     change: {}", f.change)));
        }
    }
    let ctx = app.store.ctx.unwrap_or(Ctx { duration_ms: 1000 });
    for fam in app.families {
        if !columns::family_active(&app.hello, fam.name()) {
            continue;
        }
        out.push(Line::raw(""));
        fam.detail(
            cg,
            &mut Detail {
                ctx: &ctx,
                theme: t,
                width,
                out: &mut out,
            },
        );
    }
    // Where throttled and contention are told apart only approximately (before 6.8), say so
    // under the numbers that depend on it. (From the hello line, which a recording carries:
    // escaped like any string read from a file.)
    if let Some(s) = app.hello.wait_split.as_ref().filter(|s| !s.exact) {
        out.push(Line::styled(
            format!(
                "throttled vs contention is approximate on this kernel ({}): {}",
                crate::safety::escape::terminal(&s.method),
                crate::safety::escape::terminal(&s.detail)
            ),
            t.dim,
        ));
    }
    if let Some(w) = &app.window {
        out.push(Line::raw(""));
        out.push(Line::styled(
            "This window, host-wide (cgtrace's kernel counters)",
            t.title,
        ));
        let mut text = format!("  seen {} · dropped {}", w.events.seen, w.events.dropped);
        for (name, v) in &w.events.counters {
            text.push_str(&format!(" · {name} {v}"));
        }
        out.push(Line::raw(text));
    }
    out
}
