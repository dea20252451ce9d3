//! `cgtrace top` rendered without a terminal or root: fixture snapshots (a recorded stream) fed
//! to the view, drawn into ratatui's `TestBackend`, compared with the committed screens in
//! `tests/snapshots/`. Review changes with `cargo insta review` or by diffing the `.snap.new`
//! files (`INSTA_UPDATE=always cargo test --test top_render` rewrites them).

use std::{ffi::OsStr, sync::mpsc, time::Duration};

use cgtrace::{
    model::{Hello, Window},
    selfstat::SelfUsage,
    top::{
        self, Action, App, Command, Event, Theme,
        app::{Edit, Status},
        keys,
        source::spawn_recorded,
    },
};
use ratatui::{
    Terminal,
    backend::TestBackend,
    crossterm::event::{KeyCode, KeyEvent, KeyModifiers},
    style::Color,
};

const FIXTURE: &str = include_str!("fixtures/container-host.jsonl");

fn fixture() -> (Hello, Vec<Window>) {
    let mut lines = FIXTURE.lines();
    let hello: Hello = serde_json::from_str(lines.next().expect("hello line")).expect("hello");
    let windows = lines
        .map(|l| serde_json::from_str(l).expect("window"))
        .collect();
    (hello, windows)
}

/// The fixture's two windows applied, a fixed own-usage figure, plain theme.
fn app(width: u16, height: u16) -> App {
    let (hello, windows) = fixture();
    let mut app = App::new(hello, Theme::plain());
    app.apply(Action::Resize(width, height));
    for w in windows {
        app.apply(Action::Window(Box::new(w)));
    }
    app.apply(Action::Usage(SelfUsage {
        cpu_percent: 0.4,
        rss_bytes: 14_942_208,
    }));
    app
}

fn draw(app: &App) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(app.size.0, app.size.1)).expect("terminal");
    t.draw(|f| top::render::draw(f, app)).expect("draw");
    t
}

fn screen(app: &App) -> String {
    draw(app).backend().to_string()
}

fn cmd(app: &mut App, c: Command) {
    app.apply(Action::Command(c));
}

fn filter(app: &mut App, text: &str) {
    cmd(app, Command::Filter);
    for c in text.chars() {
        app.apply(Action::Edit(Edit::Char(c)));
    }
    app.apply(Action::Edit(Edit::Apply));
}

#[test]
fn main_screen_80x24() {
    insta::assert_snapshot!(screen(&app(80, 24)));
}

#[test]
fn main_screen_140x30() {
    insta::assert_snapshot!(screen(&app(140, 30)));
}

/// The fixture with the blame ledger on: the batch job and php-fpm delayed the others (a share
/// of the next cgroup's wait each), so the header's culprits line and the NBR% and CAUSE/s
/// columns show, sorted by harm caused (`c`).
fn blamed(width: u16, height: u16) -> App {
    use cgtrace::family::runq::model::Caused;
    let (mut hello, windows) = fixture();
    hello.blame_min_us = Some(100);
    let mut a = App::new(hello, Theme::plain());
    a.apply(Action::Resize(width, height));
    for mut w in windows {
        let total: f64 = w.cgroups.iter().map(|c| c.runq.all.sum_us).sum();
        for c in &mut w.cgroups {
            let share = match c.path.as_deref() {
                Some("/batch/nightly-rollup") => 0.41,
                Some(p)
                    if p.contains("kubepods")
                        && c.name.as_deref().is_some_and(|n| n.ends_with("php-fpm")) =>
                {
                    0.12
                }
                _ => continue,
            };
            c.caused = Some(Caused {
                wait_us: total * share,
                victims: Vec::new(),
            });
        }
        a.apply(Action::Window(Box::new(w)));
    }
    cmd(&mut a, Command::SortCaused);
    a
}

#[test]
fn blame_on_80x24_names_the_culprits_and_keeps_cause_visible() {
    let a = blamed(80, 24);
    let s = screen(&a);
    // Two culprits fit 80 columns, the batch job first, its name cut keeping its end.
    assert!(s.contains("culprits /bat…/nightly-rollup"), "{s}");
    assert!(s.contains("php-fpm"), "{s}");
    assert!(
        s.contains("(41%)") && s.contains("CAUSE/s▼") && s.contains("NBR%"),
        "{s}"
    );
    insta::assert_snapshot!(s);
}

#[test]
fn blame_on_200x30() {
    insta::assert_snapshot!(screen(&blamed(200, 30)));
}

#[test]
fn detail_pane_of_a_flagged_container_80x24() {
    let mut a = app(80, 24);
    filter(&mut a, "php");
    cmd(&mut a, Command::Detail);
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn detail_pane_of_a_flagged_container_120x40() {
    let mut a = app(120, 40);
    filter(&mut a, "php-fpm");
    cmd(&mut a, Command::Detail);
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn detail_pane_scrolls() {
    let mut a = app(80, 24);
    filter(&mut a, "php");
    cmd(&mut a, Command::Detail);
    for _ in 0..12 {
        cmd(&mut a, Command::DetailDown);
    }
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn help_overlay_80x24_lists_every_key() {
    let mut a = app(80, 24);
    cmd(&mut a, Command::Help);
    let s = screen(&a);
    for b in keys::BINDINGS {
        assert!(s.contains(b.label), "help misses {:?}", b.label);
    }
    insta::assert_snapshot!(s);
}

#[test]
fn help_overlay_120x40_lists_the_columns_too() {
    let mut a = app(120, 40);
    cmd(&mut a, Command::Help);
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn empty_state_before_the_first_window() {
    let (hello, _) = fixture();
    let mut a = App::new(hello, Theme::plain());
    a.apply(Action::Resize(80, 24));
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn empty_state_when_the_filter_matches_nothing() {
    let mut a = app(80, 24);
    filter(&mut a, "no-such-cgroup");
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn narrow_terminal_50x16_keeps_name_and_p99() {
    let a = app(50, 16);
    let s = screen(&a);
    assert!(s.contains("NAME") && s.contains("P99"), "{s}");
    insta::assert_snapshot!(s);
}

#[test]
fn tiny_terminal_does_not_panic() {
    for (w, h) in [(1, 1), (10, 3), (20, 5), (30, 8)] {
        let mut a = app(w, h);
        draw(&a);
        cmd(&mut a, Command::Detail);
        draw(&a);
        cmd(&mut a, Command::Help);
        draw(&a);
    }
}

#[test]
fn tree_view_100x30() {
    let mut a = app(100, 30);
    cmd(&mut a, Command::Tree);
    cmd(&mut a, Command::Home);
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn tree_view_folded_and_paused() {
    let mut a = app(100, 30);
    cmd(&mut a, Command::Tree);
    filter(&mut a, "kubepods");
    cmd(&mut a, Command::Home);
    cmd(&mut a, Command::Down); // kubepods
    cmd(&mut a, Command::Down); // burstable
    cmd(&mut a, Command::Collapse);
    cmd(&mut a, Command::Freeze);
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn sorted_by_p99_ascending_with_idle_hidden() {
    let mut a = app(100, 24);
    cmd(&mut a, Command::SortNext);
    cmd(&mut a, Command::SortNext);
    cmd(&mut a, Command::SortNext); // P99
    cmd(&mut a, Command::Reverse);
    cmd(&mut a, Command::HideIdle);
    insta::assert_snapshot!(screen(&a));
}

#[test]
fn filter_prompt_shows_regex_errors() {
    let mut a = app(80, 24);
    cmd(&mut a, Command::Filter);
    a.apply(Action::Edit(Edit::ToggleKind));
    for c in "shop/(web".chars() {
        a.apply(Action::Edit(Edit::Char(c)));
    }
    insta::assert_snapshot!(screen(&a));
}

/// Without colour (NO_COLOR) nothing is coloured, and the selection and the sort column are still
/// marked (reverse video, ▼).
#[test]
fn no_color_draws_no_colour_and_stays_readable() {
    assert_eq!(Theme::for_no_color(Some(OsStr::new("1"))), Theme::plain());
    assert_eq!(Theme::for_no_color(Some(OsStr::new(""))), Theme::colour());
    assert_eq!(Theme::for_no_color(None), Theme::colour());
    let mut a = app(80, 24);
    cmd(&mut a, Command::Detail);
    let t = draw(&a);
    let buf = t.backend().buffer();
    for cell in buf.content() {
        assert_eq!(cell.fg, Color::Reset, "{cell:?}");
        assert_eq!(cell.bg, Color::Reset, "{cell:?}");
    }
    let selected_row = 4; // header 3 lines, column titles, first row
    assert!(
        buf.cell((0, selected_row))
            .is_some_and(|c| c.modifier.contains(ratatui::style::Modifier::REVERSED))
    );
    // With colour, something is coloured.
    let mut coloured = app(80, 24);
    coloured.theme = Theme::colour();
    let t = draw(&coloured);
    assert!(
        t.backend()
            .buffer()
            .content()
            .iter()
            .any(|c| c.fg != Color::Reset)
    );
}

/// The whole loop without a terminal: a recorded source feeds the windows, keys arrive on the same
/// channel, `+` reaches the source, `q` ends the loop.
#[test]
fn run_loop_replays_a_recording_and_quits_on_q() {
    let (hello, windows) = fixture();
    let (tx, rx) = mpsc::channel();
    let source = spawn_recorded(windows, None, tx.clone()).expect("source");
    let key = |c| Event::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    let mut app = App::new(hello, Theme::plain());
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).expect("terminal");
    // Wait until the recording is fully delivered, then queue the keys behind it.
    let mut queued = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(10)).expect("recording") {
            Event::SourceEnded(e) => {
                queued.push(Event::SourceEnded(e));
                break;
            }
            ev => queued.push(ev),
        }
    }
    for ev in queued {
        tx.send(ev).expect("send");
    }
    for ev in [key('+'), key('t'), key('q')] {
        tx.send(ev).expect("send");
    }
    top::run_loop(&mut terminal, &mut app, &rx, &source, None).expect("loop");
    assert_eq!(app.window.as_ref().map(|w| w.seq), Some(42));
    assert_eq!(app.status, Status::Ended(None));
    assert_eq!(app.interval, Duration::from_secs(2));
    assert!(app.tree);
    // `q` ended the loop before another frame; draw the final state to check it.
    terminal.draw(|f| top::render::draw(f, &app)).expect("draw");
    let s = terminal.backend().to_string();
    assert!(s.contains("ENDED") && s.contains("php-fpm"), "{s}");
}

#[test]
fn run_loop_stops_with_the_sources_error() {
    let (hello, _) = fixture();
    let (tx, rx) = mpsc::channel();
    let source = spawn_recorded(Vec::new(), None, mpsc::channel().0).expect("source");
    tx.send(Event::SourceEnded(Some("map read failed".into())))
        .expect("send");
    let mut app = App::new(hello, Theme::plain());
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
    let err = top::run_loop(&mut terminal, &mut app, &rx, &source, None).expect_err("error");
    assert!(err.to_string().contains("map read failed"), "{err}");
}
