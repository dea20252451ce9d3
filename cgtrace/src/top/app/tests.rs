//! The state machine, driven only through `apply`.

use std::collections::BTreeMap;

use cgtrace_common::runq::WaitKind;

use super::*;
use crate::{
    family::runq::KindHists,
    live::aggregate::runq_window,
    model::{Capabilities, CgroupLayoutInfo, CgroupWindow, FamilyMode, HistSpec},
    top::{
        columns::{Cell, Source},
        family::{Ctx, Flag},
        format,
    },
};

fn hello(families: &[&str]) -> Hello {
    Hello {
        kind: "hello".into(),
        schema: 1,
        cgtrace: "0.1.0".into(),
        host: "node-1".into(),
        kernel: "6.18.0".into(),
        cpus: 2,
        start_unix_ms: 0,
        interval_ms: 1000,
        cgroup: CgroupLayoutInfo {
            layout: "v1".into(),
            runq_hierarchy: "cpu".into(),
            runq_mount: "/sys/fs/cgroup/cpu".into(),
        },
        families: families
            .iter()
            .map(|f| {
                (
                    f.to_string(),
                    FamilyMode {
                        mode: crate::model::AttachMode::TpBtf,
                        detail: String::new(),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>(),
        capabilities: Capabilities::default(),
        hist: HistSpec::this_build(),
        kept_capabilities: Vec::new(),
        wait_split: None,
        blame_min_us: None,
        blame: None,
        sched_ext: None,
    }
}

/// A cgroup with `n` wakeup waits of `wait_us` each.
fn cg(id: u64, path: &str, name: Option<&str>, n: u64, wait_us: u64) -> CgroupWindow {
    let mut k = KindHists::default();
    for _ in 0..n {
        k.record(WaitKind::Wakeup, wait_us * 1000);
    }
    CgroupWindow {
        id,
        hierarchy: "cpu".into(),
        path: Some(path.into()),
        name: name.map(Into::into),
        name_kind: name.map(|_| crate::cgroup::name::NameKind::Systemd),
        runq: runq_window(&k),
        ..CgroupWindow::default()
    }
}

fn window(seq: u64, cgroups: Vec<CgroupWindow>) -> Action {
    Action::Window(Box::new(Window {
        kind: "window".into(),
        seq,
        end_unix_ms: 1_000 * seq,
        duration_ms: 1000,
        cgroups_tracked: cgroups.len(),
        cgroups,
        ..Window::default()
    }))
}

/// The label of the selected row.
fn selected(app: &App) -> Option<String> {
    app.selected_row().map(|r| app.label(r).into_owned())
}

fn cmd(c: Command) -> Action {
    Action::Command(c)
}

fn labels(app: &App) -> Vec<String> {
    app.rows.iter().map(|r| app.label(r).into_owned()).collect()
}

/// web: 100 × 50 µs (5 ms/s), db: 10 × 2 ms (20 ms/s), cron: 1000 × 1 µs (1 ms/s).
fn three() -> Vec<CgroupWindow> {
    vec![
        cg(
            10,
            "/system.slice/web.service",
            Some("web.service"),
            100,
            50,
        ),
        cg(11, "/system.slice/db.service", Some("db.service"), 10, 2000),
        cg(
            12,
            "/system.slice/cron.service",
            Some("cron.service"),
            1000,
            1,
        ),
    ]
}

fn app_with(cgroups: Vec<CgroupWindow>) -> App {
    let mut app = App::new(hello(&["runq"]), Theme::plain());
    app.apply(Action::Resize(80, 24));
    app.apply(window(1, cgroups));
    app
}

#[test]
fn first_window_is_sorted_by_time_waited_busiest_first() {
    let app = app_with(three());
    assert_eq!(app.sort_column().id, "runq.wait");
    assert!(app.descending());
    assert_eq!(labels(&app), ["db.service", "web.service", "cron.service"]);
    assert_eq!(app.cursor, 0);
    assert_eq!(app.window.as_ref().map(|w| w.seq), Some(1));
}

#[test]
fn sort_moves_between_columns_and_reverses() {
    let mut app = app_with(three());
    app.apply(cmd(Command::SortNext)); // N/s
    assert_eq!(app.sort_column().id, "runq.rate");
    assert_eq!(labels(&app), ["cron.service", "web.service", "db.service"]);
    app.apply(cmd(Command::Reverse));
    assert!(!app.descending());
    assert_eq!(labels(&app), ["db.service", "web.service", "cron.service"]);
    // Changing column resets the direction to the column's own.
    app.apply(cmd(Command::SortPrev));
    app.apply(cmd(Command::SortPrev)); // NAME, ascending
    assert_eq!(app.sort_column().id, "name");
    assert!(!app.descending());
    assert_eq!(labels(&app), ["cron.service", "db.service", "web.service"]);
    // Wraps around.
    app.apply(cmd(Command::SortPrev));
    assert_eq!(app.sort_column().id, "flags");
}

#[test]
fn idle_cgroups_sort_last_in_both_directions_and_can_be_hidden() {
    let mut app = app_with(three());
    // Only web has waits in the next window: db and cron become idle.
    app.apply(window(
        2,
        vec![cg(
            10,
            "/system.slice/web.service",
            Some("web.service"),
            5,
            50,
        )],
    ));
    assert_eq!(labels(&app)[0], "web.service");
    app.apply(cmd(Command::Reverse));
    assert_eq!(
        labels(&app)[0],
        "web.service",
        "idle rows stay last when reversed"
    );
    app.apply(cmd(Command::HideIdle));
    assert_eq!(labels(&app), ["web.service"]);
    app.apply(cmd(Command::HideIdle));
    assert_eq!(app.rows.len(), 3);
}

#[test]
fn filter_is_applied_as_typed_and_esc_restores_the_previous_one() {
    let mut app = app_with(three());
    app.apply(cmd(Command::Filter));
    assert!(matches!(app.mode, Mode::Filter(_)));
    for c in "WEB".chars() {
        app.apply(Action::Edit(Edit::Char(c)));
    }
    assert_eq!(labels(&app), ["web.service"]);
    app.apply(Action::Edit(Edit::Apply));
    assert_eq!(app.mode, Mode::Table);
    assert_eq!(app.filter.text, "WEB");
    // A new edit, cancelled: back to "WEB".
    app.apply(cmd(Command::Filter));
    app.apply(Action::Edit(Edit::Clear));
    assert_eq!(app.rows.len(), 3);
    app.apply(Action::Edit(Edit::Cancel));
    assert_eq!(labels(&app), ["web.service"]);
    // Empty text clears the filter.
    app.apply(cmd(Command::Filter));
    app.apply(Action::Edit(Edit::Clear));
    app.apply(Action::Edit(Edit::Apply));
    assert!(app.filter.is_empty());
    assert_eq!(app.rows.len(), 3);
}

#[test]
fn regex_filter_keeps_the_last_valid_expression_while_typing() {
    let mut app = app_with(three());
    app.apply(cmd(Command::Filter));
    app.apply(Action::Edit(Edit::ToggleKind));
    for c in "^/system.slice/(db|cron)".chars() {
        app.apply(Action::Edit(Edit::Char(c)));
    }
    assert_eq!(labels(&app), ["db.service", "cron.service"]);
    app.apply(Action::Edit(Edit::Char('(')));
    let Mode::Filter(p) = &app.mode else {
        panic!("prompt closed")
    };
    assert!(
        p.error
            .as_deref()
            .is_some_and(|e| e.contains("invalid regex"))
    );
    assert_eq!(app.rows.len(), 2, "the last valid regex still applies");
    // Enter does not accept an invalid expression.
    app.apply(Action::Edit(Edit::Apply));
    assert!(matches!(app.mode, Mode::Filter(_)));
    app.apply(Action::Edit(Edit::Backspace));
    app.apply(Action::Edit(Edit::Apply));
    assert_eq!(app.mode, Mode::Table);
    assert_eq!(app.filter.kind, FilterKind::Regex);
}

#[test]
fn the_selection_follows_its_cgroup_when_the_order_changes() {
    let mut app = app_with(three());
    app.apply(cmd(Command::Down));
    assert_eq!(selected(&app).as_deref(), Some("web.service"));
    // web becomes the busiest: it moves to the top and the cursor goes with it.
    let mut next = three();
    next[0] = cg(
        10,
        "/system.slice/web.service",
        Some("web.service"),
        1000,
        500,
    );
    app.apply(window(2, next));
    assert_eq!(app.cursor, 0);
    assert_eq!(selected(&app).as_deref(), Some("web.service"));
}

#[test]
fn paging_keeps_the_cursor_on_screen() {
    let many: Vec<CgroupWindow> = (0..100)
        .map(|i| cg(100 + i, &format!("/c{i:03}"), None, 1 + i, 10))
        .collect();
    let mut app = app_with(many);
    let page = app.page();
    assert_eq!(page, 19);
    app.apply(cmd(Command::PageDown));
    assert_eq!(app.cursor, page);
    assert!(app.offset <= app.cursor && app.cursor < app.offset + page);
    app.apply(cmd(Command::End));
    assert_eq!(app.cursor, 99);
    assert_eq!(app.offset, 100 - page);
    app.apply(cmd(Command::Down));
    assert_eq!(app.cursor, 99, "stops at the last row");
    app.apply(cmd(Command::Home));
    assert_eq!((app.cursor, app.offset), (0, 0));
    app.apply(cmd(Command::Up));
    assert_eq!(app.cursor, 0);
    // A smaller terminal keeps the cursor visible.
    app.apply(cmd(Command::PageDown));
    app.apply(Action::Resize(80, 10));
    assert!(app.cursor < app.offset + app.page());
}

#[test]
fn tree_shows_ancestors_and_folds() {
    let mut app = app_with(vec![
        cg(1, "/", None, 5, 5),
        cg(10, "/kubepods/pod-a/c1", None, 100, 100),
        cg(11, "/kubepods/pod-a/c2", None, 10, 10),
        cg(12, "/kubepods/pod-b/c3", None, 10, 1000),
        cg(13, "/system.slice/x.service", Some("x.service"), 1, 1),
    ]);
    app.apply(cmd(Command::Tree));
    let got: Vec<(String, u16)> = app
        .rows
        .iter()
        .map(|r| (app.label(r).into_owned(), r.depth))
        .collect();
    let want = [
        ("/", 0),
        ("kubepods", 1),
        ("pod-a", 2),
        ("c1", 3), // 10 ms/s, the hottest subtree first
        ("c2", 3),
        ("pod-b", 2), // 10 ms/s too; after pod-a by label
        ("c3", 3),
        ("system.slice", 1),
        ("x.service", 2),
    ];
    let want: Vec<(String, u16)> = want.iter().map(|(l, d)| (l.to_string(), *d)).collect();
    assert_eq!(got, want);
    assert_eq!(app.rows[2].key, RowKey::Path("/kubepods/pod-a".into()));
    // The selection followed c1, the first row of the flat list.
    assert_eq!(selected(&app).as_deref(), Some("c1"));
    // Fold pod-a.
    app.apply(cmd(Command::Home));
    app.apply(cmd(Command::Down));
    app.apply(cmd(Command::Down));
    app.apply(cmd(Command::Collapse));
    assert_eq!(app.rows[2].tree, Some(TreeMark::Folded(2)));
    assert_eq!(app.label(&app.rows[3]), "pod-b");
    // Collapse on a folded node goes to its parent; Expand unfolds.
    app.apply(cmd(Command::Collapse));
    assert_eq!(selected(&app).as_deref(), Some("kubepods"));
    app.apply(cmd(Command::Down));
    app.apply(cmd(Command::Expand));
    assert_eq!(app.label(&app.rows[3]), "c1");
    app.apply(cmd(Command::ToggleFold));
    assert_eq!(app.rows[2].tree, Some(TreeMark::Folded(2)));
    // The filter keeps matching rows and their ancestors.
    app.apply(cmd(Command::ToggleFold));
    app.apply(cmd(Command::Filter));
    for c in "c3".chars() {
        app.apply(Action::Edit(Edit::Char(c)));
    }
    assert_eq!(labels(&app), ["/", "kubepods", "pod-b", "c3"]);
    // Back to flat: the selection is kept where it can be.
    app.apply(Action::Edit(Edit::Apply));
    app.apply(cmd(Command::End));
    app.apply(cmd(Command::Tree));
    assert_eq!(selected(&app).as_deref(), Some("/kubepods/pod-b/c3"));
}

#[test]
fn folding_in_the_flat_list_says_why_nothing_happens() {
    let mut app = app_with(three());
    app.apply(cmd(Command::Collapse));
    assert!(app.message.as_deref().is_some_and(|m| m.contains("tree")));
    assert_eq!(app.rows.len(), 3);
}

#[test]
fn freeze_keeps_the_display_until_resumed() {
    let mut app = app_with(three());
    app.apply(cmd(Command::Freeze));
    assert_eq!(app.status, Status::Paused(0));
    app.apply(window(2, vec![cg(99, "/new", None, 1, 1)]));
    app.apply(window(3, vec![cg(98, "/newer", None, 1, 1)]));
    assert_eq!(app.status, Status::Paused(2));
    assert_eq!(app.window.as_ref().map(|w| w.seq), Some(1));
    assert_eq!(app.rows.len(), 3);
    // Sorting still works on the frozen data.
    app.apply(cmd(Command::Reverse));
    assert_eq!(labels(&app)[0], "cron.service");
    app.apply(cmd(Command::Freeze));
    assert_eq!(app.status, Status::Live);
    assert_eq!(
        app.window.as_ref().map(|w| w.seq),
        Some(3),
        "the latest window is shown"
    );
    assert!(app.rows.iter().any(|r| app.label(r) == "/newer"));
}

#[test]
fn interval_keys_step_and_ask_the_source() {
    let mut app = app_with(three());
    assert_eq!(
        app.apply(cmd(Command::Slower)),
        Some(Effect::SetInterval(Duration::from_secs(2)))
    );
    assert_eq!(app.interval, Duration::from_secs(2));
    assert_eq!(
        app.apply(cmd(Command::Faster)),
        Some(Effect::SetInterval(Duration::from_secs(1)))
    );
    for _ in 0..10 {
        app.apply(cmd(Command::Faster));
    }
    assert_eq!(app.interval, Duration::from_millis(100));
    assert_eq!(app.apply(cmd(Command::Faster)), None);
    assert!(
        app.message
            .as_deref()
            .is_some_and(|m| m.contains("shortest"))
    );
}

#[test]
fn esc_closes_help_then_detail_then_quits() {
    let mut app = app_with(three());
    app.apply(cmd(Command::Detail));
    app.apply(cmd(Command::Help));
    assert_eq!(app.mode, Mode::Help);
    // In the help, any key only closes it…
    assert_eq!(app.apply(cmd(Command::Down)), None);
    assert_eq!(app.mode, Mode::Table);
    assert_eq!(app.cursor, 0);
    // …except quit.
    app.apply(cmd(Command::Help));
    assert_eq!(app.apply(cmd(Command::Quit)), Some(Effect::Quit));
    app.mode = Mode::Table;
    assert!(app.detail);
    assert_eq!(app.apply(cmd(Command::Back)), None);
    assert!(!app.detail);
    assert_eq!(app.apply(cmd(Command::Back)), Some(Effect::Quit));
}

#[test]
fn detail_scroll_resets_when_the_selection_moves() {
    let mut app = app_with(three());
    app.apply(cmd(Command::DetailDown));
    assert_eq!(app.detail_scroll, 0, "no pane, no scroll");
    app.apply(cmd(Command::Detail));
    app.apply(cmd(Command::DetailDown));
    app.apply(cmd(Command::DetailDown));
    app.apply(cmd(Command::DetailUp));
    assert_eq!(app.detail_scroll, 1);
    app.apply(cmd(Command::Down));
    assert_eq!(app.detail_scroll, 0);
}

#[test]
fn removed_cgroups_leave_after_their_last_window_and_idle_ones_are_forgotten() {
    let mut gone = cg(20, "/gone", None, 3, 10);
    gone.removed = true;
    let mut app = app_with(vec![gone, cg(21, "/stays", None, 3, 10)]);
    assert_eq!(app.rows.len(), 2, "shown in its last window");
    app.apply(window(2, vec![]));
    assert_eq!(labels(&app), ["/stays"]);
    // Idle ones go at the first sweep (every 32 windows) past FORGET_AFTER_WINDOWS.
    app.apply(window(crate::top::rows::FORGET_AFTER_WINDOWS + 1, vec![]));
    assert_eq!(labels(&app), ["/stays"]);
    app.apply(window(320, vec![]));
    assert!(app.rows.is_empty());
}

#[test]
fn forgetting_a_cgroup_keeps_every_other_one_findable_by_id() {
    // The store keeps cgroups in a vector: the last one moves into a forgotten one's place.
    let mut first = cg(30, "/first", None, 3, 10);
    first.removed = true;
    let mut app = app_with(vec![
        first,
        cg(31, "/second", None, 3, 20),
        cg(32, "/third", None, 3, 30),
    ]);
    app.apply(window(
        2,
        vec![
            cg(31, "/second", None, 3, 21),
            cg(32, "/third", None, 3, 31),
        ],
    ));
    assert!(app.store.get(30).is_none(), "removed, forgotten");
    for (id, path, wait_us) in [(31, "/second", 21.0), (32, "/third", 31.0)] {
        let t = app.store.get(id).expect("still known");
        assert_eq!((t.id, t.cg.path.as_deref()), (id, Some(path)));
        assert!(
            (t.cg.runq.all.max_us - wait_us).abs() < wait_us * 0.3,
            "its new data"
        );
    }
    assert_eq!(app.store.len(), 2);
    // A window listing a new id twice keeps the later entry, once.
    app.apply(window(
        3,
        vec![
            cg(33, "/twice", None, 1, 5),
            cg(33, "/twice-later", None, 1, 5),
        ],
    ));
    assert_eq!(app.store.len(), 3);
    assert_eq!(
        app.store.get(33).and_then(|t| t.cg.path.as_deref()),
        Some("/twice-later")
    );
}

#[test]
fn long_waits_raise_a_flag_with_advice() {
    let slow = cg(30, "/slow", None, 50, 20_000);
    let few = cg(31, "/few", None, 5, 50_000);
    let app = app_with(vec![slow, few]);
    assert!(app.any_flags);
    let flags = &app.store.get(30).expect("tracked").flags;
    assert_eq!(flags.len(), 1);
    assert_eq!(flags[0].code, "RQ");
    assert!(
        flags[0].advice.contains("cpu.shares"),
        "{}",
        flags[0].advice
    );
    assert!(
        app.store.get(31).expect("tracked").flags.is_empty(),
        "5 waits are not a diagnosis"
    );
}

#[test]
fn source_end_and_usage_are_shown_state() {
    let mut app = app_with(three());
    app.apply(Action::SourceEnded(None));
    assert_eq!(app.status, Status::Ended(None));
    let u = crate::selfstat::SelfUsage {
        cpu_percent: 1.5,
        rss_bytes: 1 << 20,
    };
    app.apply(Action::Usage(u));
    assert_eq!(app.usage, Some(u));
}

/// A family that is not in the stream yet: its columns appear only when `hello` lists it, and a
/// column needing another family only when that one is attached too.
struct Fake;

fn fake_value(_: &CgroupWindow, _: &Ctx) -> Cell {
    Cell::Absent
}

static FAKE_COLUMNS: [Column; 2] = [
    Column {
        id: "fake.a",
        title: "A",
        help: "",
        width: 4,
        priority: 10,
        needs: &[],
        source: Source::Data(fake_value),
        descending: true,
    },
    Column {
        id: "fake.b",
        title: "B",
        help: "",
        width: 4,
        priority: 10,
        needs: &["other"],
        source: Source::Data(fake_value),
        descending: true,
    },
];

static FAKE_VIEW: crate::top::family::View = crate::top::family::View {
    name: "fake",
    title: "Fake",
    columns: &FAKE_COLUMNS,
    default_sort: None,
};

impl Family for Fake {
    fn view(&self) -> &'static crate::top::family::View {
        &FAKE_VIEW
    }
    fn detail(&self, _: &CgroupWindow, d: &mut crate::top::family::Detail<'_>) {
        d.out.push("fake section".into());
    }
    fn flags(&self, _: &CgroupWindow, _: &Ctx, out: &mut Vec<Flag>) {
        out.push(Flag {
            code: "FK".into(),
            family: "fake",
            finding: "always".into(),
            evidence: String::new(),
            advice: "none".into(),
            change: String::new(),
        });
    }
}

static WITH_FAKE: &[&dyn Family] = &[&crate::top::family::runq::Runq, &Fake];

fn ids(app: &App) -> Vec<&'static str> {
    app.columns.iter().map(|c| c.id).collect()
}

#[test]
fn a_family_plugs_in_with_its_columns_only_when_attached() {
    let app = App::with_families(hello(&["runq"]), Theme::plain(), WITH_FAKE);
    assert!(!ids(&app).iter().any(|id| id.starts_with("fake.")));
    assert!(
        !ids(&app).contains(&"runq.throttled"),
        "THR% needs throttle"
    );
    let app = App::with_families(hello(&["runq", "fake"]), Theme::plain(), WITH_FAKE);
    assert!(ids(&app).contains(&"fake.a"));
    assert!(!ids(&app).contains(&"fake.b"));
    let mut app = App::with_families(
        hello(&["runq", "fake", "other", "throttle"]),
        Theme::plain(),
        WITH_FAKE,
    );
    assert_eq!(
        ids(&app),
        [
            "name",
            "runq.wait",
            "runq.rate",
            "runq.p50",
            "runq.p99",
            "runq.max",
            "runq.throttled",
            "fake.a",
            "fake.b",
            "flags"
        ]
    );
    app.apply(window(1, three()));
    assert!(app.any_flags);
    assert_eq!(app.store.get(10).map(|t| t.flags.len()), Some(1));
}

#[test]
fn an_unavailable_family_shows_no_columns() {
    let mut h = hello(&["runq", "fake"]);
    if let Some(m) = h.families.get_mut("fake") {
        m.mode = crate::model::AttachMode::Unavailable;
    }
    let app = App::with_families(h, Theme::plain(), WITH_FAKE);
    assert!(!ids(&app).contains(&"fake.a"));
}

#[test]
fn a_family_turned_off_shows_no_columns() {
    // `--reads-mode off`: the family is named in hello, with mode `off`.
    let mut h = hello(&["runq", "fake"]);
    if let Some(m) = h.families.get_mut("fake") {
        m.mode = crate::model::AttachMode::Off;
    }
    let app = App::with_families(h.clone(), Theme::plain(), WITH_FAKE);
    assert!(!ids(&app).contains(&"fake.a"));
    h.families.get_mut("fake").expect("fake").mode = crate::model::AttachMode::Fentry;
    let app = App::with_families(h, Theme::plain(), WITH_FAKE);
    assert!(ids(&app).contains(&"fake.a"));
}

/// On a kernel where the wait split is approximate the detail pane says so, escaped (the hello
/// line can come from a recording someone else made).
#[test]
fn detail_says_where_the_wait_split_is_approximate() {
    let text = |app: &App| -> String {
        crate::top::render::detail::lines(app, 200)
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut app = App::new(
        Hello {
            wait_split: Some(crate::model::WaitSplit {
                method: "throttled_clock_pelt".into(),
                exact: false,
                detail: "PELT clock\u{1b}[2J".into(),
            }),
            ..hello(&["runq"])
        },
        Theme::plain(),
    );
    app.apply(Action::Resize(80, 24));
    app.apply(window(1, three()));
    let shown = text(&app);
    assert!(
        shown.contains("approximate on this kernel (throttled_clock_pelt)"),
        "{shown}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown}");
    let exact = app_with(three());
    assert!(!text(&exact).contains("approximate"));
}

/// The detail pane says who delayed the selected cgroup (escaped names) and whom it delayed.
#[test]
fn detail_shows_who_delayed_it_and_whom_it_delayed() {
    use crate::family::runq::blame::{Blame, Caused, Party};
    let mut cgs = three();
    // db (selected first: busiest) waited 20 ms: 15 ms behind a neighbour with a hostile name,
    // 1 ms under its parent's quota; this kernel tells steal (none) but not interrupts or idle
    // CPUs elsewhere.
    cgs[1].runq.blame = Some(Blame {
        siblings_us: 1000.0,
        throttled_ancestor_us: 1000.0,
        throttled_ancestors: vec![Party {
            id: 7,
            path: Some("/kubepods/burstable/pod-q".into()),
            name: None,
            wait_us: 1000.0,
            cpu_max: Some("50000 100000".into()),
        }],
        neighbours: vec![Party {
            id: 99,
            path: Some("/evil\u{1b}[2J".into()),
            name: None,
            wait_us: 15_000.0,
            cpu_max: None,
        }],
        steal_us: Some(0.0),
        unattributed_us: 3000.0,
        ..Blame::default()
    });
    cgs[1].caused = Some(Caused {
        wait_us: 700.0,
        victims: vec![Party {
            id: 10,
            path: Some("/system.slice/web.service".into()),
            name: Some("web.service".into()),
            wait_us: 700.0,
            cpu_max: None,
        }],
    });
    let app = app_with(cgs);
    assert_eq!(selected(&app).as_deref(), Some("db.service"));
    let text: String = crate::top::render::detail::lines(&app, 100)
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("who delayed it"), "{text}");
    assert!(text.contains("75%"), "{text}");
    assert!(text.contains("its own tasks"), "{text}");
    assert!(
        text.contains("ancestor quota: /kubepods/burstable/pod-q (cpu.max 50000 100000)"),
        "{text}"
    );
    // Unknown parts are said to be unknown, never shown as 0; a told 0 is not shown.
    assert!(
        text.contains("n/a (kernel cannot tell): idle CPU elsewhere, interrupts"),
        "{text}"
    );
    assert!(!text.contains("hypervisor steal"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(text.contains("it delayed others"), "{text}");
    assert!(text.contains("web.service"), "{text}");
}

/// With the blame ledger on, the table has NBR% (share of its wait behind other cgroups) and
/// CAUSE/s (wait it caused others), and sorting by CAUSE/s puts the noisy neighbour first even
/// when it never waited itself.
#[test]
fn blame_columns_show_the_neighbours_share_and_sort_by_delay_caused() {
    use crate::family::runq::blame::{Blame, Caused, Party};
    let app = app_with(three());
    assert!(!ids(&app).contains(&"runq.neighbours") && !ids(&app).contains(&"runq.caused"));
    let mut cgs = three();
    cgs[1].runq.blame = Some(Blame {
        neighbours: vec![Party {
            id: 42,
            path: Some("/batch".into()),
            name: None,
            wait_us: cgs[1].runq.all.sum_us * 0.8,
            cpu_max: None,
        }],
        unattributed_us: cgs[1].runq.all.sum_us * 0.2,
        ..Blame::default()
    });
    let mut batch = cg(42, "/batch", None, 0, 0);
    batch.caused = Some(Caused {
        wait_us: cgs[1].runq.all.sum_us * 0.8,
        victims: Vec::new(),
    });
    cgs.push(batch);
    let mut app = App::new(
        Hello {
            blame_min_us: Some(100),
            blame: None,
            ..hello(&["runq"])
        },
        Theme::plain(),
    );
    app.apply(Action::Resize(160, 24));
    app.apply(window(1, cgs));
    assert!(ids(&app).contains(&"runq.neighbours") && ids(&app).contains(&"runq.caused"));
    let col = |id: &str| {
        app.columns
            .iter()
            .find(|c| c.id == id)
            .copied()
            .expect("column")
    };
    let value = |id: &str, cgroup: u64| match col(id).source {
        Source::Data(f) => f(
            &app.store.get(cgroup).expect("cgroup").cg,
            &Ctx { duration_ms: 1000 },
        ),
        _ => unreachable!(),
    };
    assert_eq!(value("runq.neighbours", 11), Cell::Percent(80.0));
    assert_eq!(value("runq.neighbours", 10), Cell::Absent);
    while app.sort_column().id != "runq.caused" {
        app.apply(cmd(Command::SortNext));
    }
    assert_eq!(labels(&app)[0], "/batch");
}

/// The screen drawn into a test terminal, one string a row.
fn screen_lines(app: &App) -> Vec<String> {
    let backend = ratatui::backend::TestBackend::new(app.size.0, app.size.1);
    let mut t = ratatui::Terminal::new(backend).expect("terminal");
    t.draw(|f| crate::top::render::draw(f, app)).expect("draw");
    let buf = t.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            // The cell after a double-width character is its second half: skipped.
            let mut skip = 0;
            let mut line = String::new();
            for x in 0..buf.area.width {
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                let sym = buf[(x, y)].symbol();
                skip = format::width(sym).saturating_sub(1);
                line.push_str(sym);
            }
            line
        })
        .collect()
}

/// Every backslash on screen starts a whole escape (`\x1b`, `\u{202e}`): a cut never leaves a
/// piece of one that reads as another.
fn assert_escapes_whole(line: &str) {
    assert!(
        !line.chars().any(crate::safety::escape::is_unsafe),
        "{line:?}"
    );
    for (i, _) in line.match_indices('\\') {
        let rest = &line[i + 1..];
        let whole = rest.len() >= 3
            && rest.starts_with('x')
            && rest[1..3].chars().all(|c| c.is_ascii_hexdigit())
            || rest.starts_with("u{")
                && rest[2..].find('}').is_some_and(|e| {
                    e > 0 && rest[2..2 + e].chars().all(|c| c.is_ascii_hexdigit())
                });
        assert!(whole, "a cut escape in {line:?}");
    }
}

/// Cgroups named by a hostile tenant: escape sequences, bidi overrides, double-width characters,
/// a 300-character path; each ends in a container name worth keeping.
fn hostile() -> Vec<CgroupWindow> {
    let long = format!(
        "/kubepods/burstable/pod{}/\u{1b}]0;owned\u{7}{}-leaf-container",
        "0a1b2c3d".repeat(20),
        "x".repeat(60)
    );
    let mut cgs = three();
    cgs.push(cg(20, &long, None, 50, 300));
    cgs.push(cg(
        21,
        "/kubepods/pod-evil/c1",
        Some("shop/\u{1b}[2J\u{1b}[31mcheckout-6c9f7d8b5-xk2p9/\u{202e}php-fpm"),
        40,
        500,
    ));
    cgs.push(cg(
        22,
        "/kubepods/pod-cjk/c2",
        Some("服务-命名空间/数据库-主节点-非常长的名字/容器-主进程"),
        30,
        700,
    ));
    cgs
}

fn app_sized(hello: Hello, cgroups: Vec<CgroupWindow>, w: u16, h: u16) -> App {
    let mut app = App::new(hello, Theme::plain());
    app.apply(Action::Resize(w, h));
    app.apply(window(1, cgroups));
    app
}

/// Every family attached and the blame ledger on: the most columns the view can have.
fn hello_all() -> Hello {
    Hello {
        blame_min_us: Some(100),
        blame: None,
        ..hello(&["runq", "throttle", "reads"])
    }
}

/// At 80 columns every core numeric column is on screen however long the names are, the names
/// are cut keeping their end and every escape whole, and the columns that did not fit are named
/// in the header; at 200 every column is shown and the numbers sit next to the names.
#[test]
fn the_table_fits_80_and_200_columns_with_hostile_names() {
    let app = app_sized(hello_all(), hostile(), 80, 24);
    let lines = screen_lines(&app);
    let title = lines
        .iter()
        .find(|l| l.starts_with("NAME"))
        .expect("title row");
    let core: Vec<&Column> = app
        .columns
        .iter()
        .copied()
        .filter(|c| matches!(c.source, Source::Data(_)) && c.priority >= columns::CORE)
        .collect();
    assert!(core.len() >= 7, "{core:?}");
    for c in &core {
        assert!(
            title
                .split_whitespace()
                .any(|t| t.trim_end_matches(['▼', '▲']) == c.title),
            "{} missing at 80 columns: {title:?}",
            c.title
        );
    }
    assert!(format::width(title) <= 80);
    // What did not fit is said, by name.
    let fitted = app.fitted(80);
    assert!(!fitted.hidden.is_empty());
    let settings = &lines[2];
    assert!(
        settings.contains(&format!("{} hidden:", fitted.hidden.len())),
        "{settings:?}"
    );
    assert!(settings.contains(fitted.hidden[0].title), "{settings:?}");
    for l in &lines {
        assert_escapes_whole(l);
    }
    let body = lines.join("\n");
    // The informative end survives the cut: the leaf container, the container name.
    assert!(body.contains("-leaf-container"), "{body}");
    assert!(body.contains("php-fpm"), "{body}");
    assert!(body.contains("容器-主进程"), "{body}");
    // Rows line up: the WAIT/s values end where the title does, on every row.
    // The sort column's title carries the arrow: the column is 7 wide.
    let wait_end = title.find("WAIT/s▼").expect("WAIT/s") + 7;
    for name in ["db.service", "-leaf-container", "容器-主进程"] {
        let row = lines.iter().find(|l| l.contains(name)).expect(name);
        let mut cols = 0;
        let before: String = row
            .chars()
            .take_while(|c| {
                cols += format::width(c.encode_utf8(&mut [0; 4]));
                cols <= wait_end
            })
            .collect();
        assert!(
            before.ends_with(|c: char| c.is_ascii_digit() || c == 's'),
            "{name}: {row:?} / {title:?}"
        );
    }

    let wide = app_sized(hello_all(), hostile(), 200, 30);
    assert!(wide.fitted(200).hidden.is_empty());
    let lines = screen_lines(&wide);
    let title = lines.iter().find(|l| l.starts_with("NAME")).expect("title");
    for c in wide
        .columns
        .iter()
        .filter(|c| matches!(c.source, Source::Data(_)))
    {
        assert!(
            title.contains(c.title),
            "{} missing at 200: {title:?}",
            c.title
        );
    }
    lines.iter().for_each(|l| assert_escapes_whole(l));

    // Short names on a wide screen: the numbers follow the longest name, no wide gap.
    let short = app_sized(hello_all(), three(), 200, 30);
    let lines = screen_lines(&short);
    let title = lines.iter().find(|l| l.starts_with("NAME")).expect("title");
    let longest = "··web.service"
        .chars()
        .count()
        .max(columns::NAME_MIN.into());
    let first_number = title[4..].find(|c: char| c != ' ').expect("a column") + 4;
    assert!(
        first_number <= longest + 1 + 7,
        "numbers start at {first_number}: {title:?}"
    );
}

/// Three culprits by caused wait, fed through the window: the header's culprits line names the
/// worst first with its caused wait per second and its share of all run-queue wait, computed
/// here from the same data.
#[test]
fn the_culprits_line_names_the_worst_cgroup_and_its_share() {
    use crate::family::runq::blame::Caused;
    let mut cgs = hostile();
    // By id: the hostile long path most, then web, the CJK name, db (not in the top three).
    let caused = [(20, 0.5), (10, 0.2), (22, 0.1), (11, 0.05)];
    let total: f64 = cgs.iter().map(|c| c.runq.all.sum_us).sum();
    for (id, frac) in caused {
        let idx = cgs.iter().position(|c| c.id == id).expect("id");
        cgs[idx].caused = Some(Caused {
            wait_us: total * frac,
            victims: Vec::new(),
        });
    }
    let worst = cgs
        .iter()
        .max_by(|a, b| {
            let w = |c: &CgroupWindow| c.caused.as_ref().map_or(0.0, |c| c.wait_us);
            w(a).total_cmp(&w(b))
        })
        .expect("cgroups");
    let share = worst.caused.as_ref().expect("caused").wait_us / total * 100.0;
    let per_s = worst.caused.as_ref().expect("caused").wait_us; // 1 s window
    for width in [80u16, 200] {
        let app = app_sized(hello_all(), cgs.clone(), width, 24);
        assert_eq!(app.culprits.len(), 3);
        assert_eq!(app.culprits[0].share_pct, share);
        let line = screen_lines(&app)[3].trim_end().to_string();
        assert!(line.starts_with("culprits "), "{line:?}");
        assert_escapes_whole(&line);
        let first = line.split(" · ").next().expect("a culprit");
        assert!(
            first.ends_with(&format!(
                " {}/s ({})",
                format::micros(per_s),
                format::percent(share)
            )),
            "{first:?}"
        );
        // Named by the end of its label, cut in the middle to fit.
        assert!(
            first.contains("…") && first.contains("container "),
            "{first:?}"
        );
        assert!(first.starts_with("culprits /kubep"), "{first:?}");
        assert!(format::width(line.trim_end()) <= usize::from(width));
        // Two fit 80 with readable names, three fit 200.
        let shown = if width == 200 { 3 } else { 2 };
        assert_eq!(line.matches(" · ").count(), shown - 1, "{line:?}");
        assert!(line.contains("web.service"), "{line:?}");
    }
    // Nobody caused anything: said, not blank.
    let app = app_sized(hello_all(), hostile(), 80, 24);
    assert!(screen_lines(&app)[3].starts_with("culprits none"));
    // The ledger off: no culprits line, three header rows.
    let off = app_sized(hello(&["runq"]), cgs, 80, 24);
    let lines = screen_lines(&off);
    assert!(!lines.iter().any(|l| l.contains("culprits")));
    assert!(lines[3].starts_with("NAME"));
}

/// `c` sorts by CAUSE/s when the ledger is on, and says why not when it is off.
#[test]
fn c_sorts_by_harm_caused() {
    let mut app = app_sized(hello_all(), three(), 80, 24);
    app.apply(cmd(Command::SortCaused));
    assert_eq!(app.sort_column().id, CAUSED);
    assert!(app.descending());
    let mut off = app_with(three());
    let before = off.sort_column().id;
    off.apply(cmd(Command::SortCaused));
    assert_eq!(off.sort_column().id, before);
    assert!(
        off.message
            .as_deref()
            .is_some_and(|m| m.contains("--no-blame"))
    );
}

/// The name column's width, kept from each cgroup's cached label width while the order is built,
/// is the widest name cell the table draws: flat and tree, folded, escaped and wide names, a
/// cgroup with neither name nor path, and after a cgroup's name changes.
#[test]
fn the_name_width_is_the_widest_name_cell() {
    fn widest(app: &App) -> usize {
        app.rows
            .iter()
            .map(|r| crate::top::render::name::name_cell_width(r, &app.label(r)))
            .max()
            .unwrap_or(0)
    }
    let mut cgs = hostile();
    cgs.push(cg(30, "/a/b/c/d/e/f/g/deep", Some("deep-name"), 3, 3));
    let mut gone = cg(31, "/", None, 2, 2);
    gone.path = None;
    cgs.push(gone);
    let mut app = app_sized(hello(&["runq"]), cgs.clone(), 200, 40);
    assert_eq!(app.name_width, widest(&app));
    app.apply(cmd(Command::Tree));
    assert_eq!(app.name_width, widest(&app));
    // Fold a node with descendants: its count goes after its label.
    app.apply(cmd(Command::Home));
    app.apply(cmd(Command::Down));
    app.apply(cmd(Command::Collapse));
    assert!(
        app.rows
            .iter()
            .any(|r| matches!(r.tree, Some(TreeMark::Folded(_))))
    );
    assert_eq!(app.name_width, widest(&app));
    // A renamed cgroup's width follows its new name, in both views.
    cgs[3].name = Some("a-much-longer-name-than-any-other-cgroup-on-this-host-has".repeat(2));
    app.apply(window(2, cgs));
    assert_eq!(app.name_width, widest(&app));
    app.apply(cmd(Command::Tree));
    assert_eq!(app.name_width, widest(&app));
    assert!(app.name_width > 100);
}
