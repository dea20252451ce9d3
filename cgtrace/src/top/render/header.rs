//! The header lines, most important first on each so that 80 columns keep what matters:
//! state, host, how each family is traced and on which cgroup layout; the window's events, drops
//! and cgtrace's own cost; the view's settings (sort, mode, the columns too many for the width,
//! filter, interval) and the window; with the blame ledger on, the node's top culprits.

use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    text::{Line, Span},
};

use crate::top::{
    app::{App, Status},
    format,
};

pub fn render(frame: &mut Frame<'_>, area: Rect, app: &App) {
    let t = &app.theme;
    let h = &app.hello;
    let sep = || Span::styled(" · ", t.dim);
    let badge = match (&app.replay, &app.status) {
        (Some(p), _) => format!(
            " REPLAY {} {}/{} ",
            if p.paused {
                "❚❚".to_string()
            } else if p.at_end {
                "end".to_string()
            } else {
                format!("▶ {}×", crate::top::player::fmt_speed(p.speed))
            },
            p.pos,
            p.total
        ),
        (None, status) => match status {
            Status::Live => " LIVE ".to_string(),
            Status::Paused(0) => " PAUSED ".to_string(),
            Status::Paused(n) => format!(" PAUSED +{n} "),
            Status::Ended(None) => " ENDED ".to_string(),
            Status::Ended(Some(_)) => " FAILED ".to_string(),
        },
    };
    let mut l1: Vec<Span<'static>> = vec![
        Span::styled(badge, t.badge),
        Span::raw(" "),
        Span::styled(
            crate::safety::escape::terminal(&h.host).into_owned(),
            t.title,
        ),
    ];
    for (name, mode) in &h.families {
        let style = if !mode.mode.is_attached() {
            t.warn
        } else {
            t.title
        };
        l1.push(sep());
        l1.push(Span::raw(format!("{name} ")));
        l1.push(Span::styled(mode.mode.as_str(), style));
    }
    l1.push(sep());
    l1.push(Span::raw(format!(
        "cgroup {} ({})",
        h.cgroup.layout, h.cgroup.runq_hierarchy
    )));
    l1.push(sep());
    l1.push(Span::raw(format!("{} CPUs", h.cpus)));
    l1.push(sep());
    l1.push(Span::raw(format!(
        "Linux {}",
        crate::safety::escape::terminal(&h.kernel)
    )));

    let mut l2: Vec<Span<'static>> = Vec::new();
    match &app.window {
        Some(w) => {
            let secs = (w.duration_ms.max(1)) as f64 / 1e3;
            l2.push(Span::raw(format!(
                "events {}/s",
                format::si(w.events.seen as f64 / secs)
            )));
            l2.push(sep());
            let dropped = if app.dropped_total > w.events.dropped {
                format!(
                    "dropped {} ({} total)",
                    format::si(w.events.dropped as f64),
                    format::si(app.dropped_total as f64)
                )
            } else {
                format!("dropped {}", format::si(w.events.dropped as f64))
            };
            let style = if app.dropped_total > 0 {
                t.bad
            } else {
                Style::new()
            };
            l2.push(Span::styled(dropped, style));
            l2.push(sep());
            l2.push(Span::raw(format!(
                "{} of {} cgroups active",
                w.cgroups, w.cgroups_tracked
            )));
            if w.cgroups_evicted > 0 {
                l2.push(Span::styled(
                    format!(" ({} evicted)", w.cgroups_evicted),
                    t.warn,
                ));
            }
        }
        None => l2.push(Span::raw("waiting for the first window")),
    }
    if let Some(u) = app.usage {
        l2.push(sep());
        l2.push(Span::raw(format!(
            "cgtrace {} CPU {}",
            format::percent(u.cpu_percent),
            format::bytes(u.rss_bytes)
        )));
    }
    // What the programs cost the traced host (the window's `self`), bpftop-style: the share of a
    // CPU spent in them and the costliest one's time per run.
    if let Some(sc) = app.window.as_ref().and_then(|w| w.self_cost.as_ref()) {
        l2.push(sep());
        if sc.bpf_stats {
            let top = sc
                .programs
                .first()
                .and_then(|p| {
                    p.ns_per_run
                        .map(|ns| format!(" ({} {ns:.0} ns/run)", p.name))
                })
                .unwrap_or_default();
            l2.push(Span::raw(format!(
                "BPF {} CPU{top}",
                format::percent(sc.bpf_cpu_pct)
            )));
        } else {
            l2.push(Span::raw("BPF cost: --bpf-stats"));
        }
    }

    let col = app.sort_column();
    let mut l3: Vec<Span<'static>> = vec![
        Span::raw("sort "),
        Span::styled(
            format!("{}{}", col.title, if app.descending() { "▼" } else { "▲" }),
            t.sorted,
        ),
        sep(),
        Span::raw(if app.tree { "tree" } else { "flat" }),
    ];
    if app.hide_idle {
        l3.push(sep());
        l3.push(Span::raw("idle hidden"));
    }
    if !app.filter.is_empty() {
        l3.push(sep());
        l3.push(Span::raw(format!(
            "{} {:?}",
            app.filter.kind.name(),
            app.filter.text
        )));
    }
    l3.push(sep());
    l3.push(Span::raw(format!(
        "interval {}",
        format::interval(app.interval.as_millis() as u64)
    )));
    if let Some(w) = &app.window {
        l3.push(sep());
        l3.push(Span::raw(format!(
            "window #{} {} ({})",
            w.seq,
            format::clock_utc(w.end_unix_ms),
            format::interval(w.duration_ms)
        )));
    }
    let hidden = app.fitted(area.width).hidden;
    if !hidden.is_empty() {
        // Said early on the line, so that 80 columns keep it.
        let titles: Vec<&str> = hidden.iter().map(|c| c.title).collect();
        l3.insert(4, sep());
        l3.insert(
            5,
            Span::styled(
                format!("{} hidden: {}", titles.len(), titles.join(" ")),
                t.dim,
            ),
        );
    }
    if let Status::Ended(Some(e)) = &app.status {
        l3.push(sep());
        l3.push(Span::styled(e.clone(), t.bad));
    }
    let lines = [
        Line::from(l1),
        Line::from(l2),
        Line::from(l3),
        culprits_line(app, usize::from(area.width)),
    ];
    for (i, line) in lines.iter().enumerate().take(usize::from(area.height)) {
        frame
            .buffer_mut()
            .set_line(area.x, area.y + i as u16, line, area.width);
    }
}

/// Narrowest a culprit's name is cut to before the line names fewer culprits.
const CULPRIT_NAME_MIN: usize = 12;

/// `culprits <name> 1.20s/s (41%) · …`: the cgroups that delayed others most in the window, with
/// the wait they caused per second and its share of all run-queue wait. As many as fit `width`
/// with a readable name (names are cut in the middle, keeping their end); empty when the ledger
/// is off (the header then has three lines).
fn culprits_line(app: &App, width: usize) -> Line<'static> {
    let t = &app.theme;
    if !app.blame_on() {
        return Line::default();
    }
    let head = Span::styled("culprits ", t.title);
    if app.window.is_none() {
        return Line::from(vec![
            head,
            Span::styled("waiting for the first window", t.dim),
        ]);
    }
    if app.culprits.is_empty() {
        return Line::from(vec![
            head,
            Span::styled("none: no cgroup delayed another in this window", t.dim),
        ]);
    }
    let numbers: Vec<String> = app
        .culprits
        .iter()
        .map(|c| {
            format!(
                " {}/s ({})",
                format::micros(c.caused_per_s_us),
                format::percent(c.share_pct)
            )
        })
        .collect();
    // The most culprits whose names each get at least CULPRIT_NAME_MIN columns (at least one).
    let mut n = app.culprits.len();
    let room = |n: usize| -> usize {
        let fixed = format::width("culprits ")
            + numbers[..n].iter().map(|s| format::width(s)).sum::<usize>()
            + 3 * (n - 1);
        width.saturating_sub(fixed) / n
    };
    while n > 1 && room(n) < CULPRIT_NAME_MIN {
        n -= 1;
    }
    let name_room = room(n);
    let mut spans = vec![head];
    for (i, (c, num)) in app.culprits.iter().zip(&numbers).take(n).enumerate() {
        if i > 0 {
            spans.push(Span::styled(" · ", t.dim));
        }
        spans.push(Span::raw(format::ellipsize_middle(&c.label, name_room)));
        spans.push(Span::styled(num.clone(), t.warn));
    }
    Line::from(spans)
}
