//! The view's state, changed only through [`App::apply`]. Drawing reads it and never changes it.

use std::{collections::HashSet, time::Duration};

use crate::{
    model::{Hello, Window},
    record::reader::Marks,
    selfstat::SelfUsage,
    top::event::PlayerCmd,
};

use super::{
    columns::{self, Column},
    family::{FAMILIES, Family},
    filter::{Filter, FilterKind},
    render::{layout, theme::Theme},
    rows::{self, Row, RowKey, Store, TreeMark, ViewSpec},
};

/// The column `c` sorts by: the harm a cgroup caused others.
pub const CAUSED: &str = "runq.caused";

/// Interval steps for `+` / `-`.
pub const INTERVAL_STEPS_MS: [u64; 10] =
    [100, 200, 250, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000];

/// What a key asks for (see `keys.rs` for which key does what).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    /// Open / close the detail pane.
    Detail,
    DetailUp,
    DetailDown,
    SortPrev,
    SortNext,
    /// Sort by the harm each cgroup caused others (`CAUSE/s`, blame ledger on).
    SortCaused,
    Reverse,
    /// Open the filter prompt.
    Filter,
    /// Tree / flat.
    Tree,
    /// Fold the selected node (or go to its parent).
    Collapse,
    /// Unfold the selected node.
    Expand,
    ToggleFold,
    HideIdle,
    /// Freeze / resume the display.
    Freeze,
    /// Longer interval.
    Slower,
    /// Shorter interval.
    Faster,
    Help,
    /// Close the help, the prompt or the detail pane; quit when none is open.
    Back,
    Quit,
    /// Replay: one window forward / back (pauses).
    StepForward,
    StepBack,
    /// Replay: play faster / slower.
    PlayFaster,
    PlaySlower,
    /// Replay: the next window with a throttle episode / a slow read / any single event.
    NextThrottle,
    NextRead,
    NextEvent,
    /// Replay: open the jump-to-time prompt.
    Seek,
}

/// Editing the filter prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edit {
    Char(char),
    Backspace,
    /// Clear the text.
    Clear,
    /// Substring ↔ regex.
    ToggleKind,
    Apply,
    Cancel,
}

/// Everything that changes the view.
#[derive(Debug)]
pub enum Action {
    Window(Box<Window>),
    /// The source stopped: `Some(error)` when it failed.
    SourceEnded(Option<String>),
    Usage(SelfUsage),
    Resize(u16, u16),
    Command(Command),
    Edit(Edit),
    /// Replay: where the player stands.
    Player(crate::top::event::PlayerState),
}

/// What the caller must do after an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    Quit,
    /// Ask the source for windows of this length from now on.
    SetInterval(Duration),
    /// Replay: tell the player.
    Player(crate::top::event::PlayerCmd),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Table,
    Help,
    Filter(Prompt),
    /// Replay: the time to jump to, as typed.
    Seek(String),
}

/// The filter being typed: applied as it is typed, restored on Esc.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub text: String,
    pub kind: FilterKind,
    pub error: Option<String>,
    before: (String, FilterKind),
}

/// The window on screen, without its cgroups (they live in the store): the window's own fields
/// (through `Deref`), and how many cgroups it had.
#[derive(Clone, Debug, Default)]
pub struct WindowInfo {
    head: Window,
    /// Cgroups with data in this window.
    pub cgroups: usize,
}

impl std::ops::Deref for WindowInfo {
    type Target = Window;

    fn deref(&self) -> &Window {
        &self.head
    }
}

/// Where the data stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Live,
    /// Frozen by `p`; this many windows arrived since.
    Paused(u64),
    /// The source stopped (end of a recording, or an error).
    Ended(Option<String>),
}

pub struct App {
    pub hello: Hello,
    pub families: &'static [&'static dyn Family],
    /// Columns this session can show (family attached), `NAME` first.
    pub columns: Vec<&'static Column>,
    pub theme: Theme,
    pub interval: Duration,
    pub window: Option<WindowInfo>,
    pub dropped_total: u64,
    pub store: Store,
    pending: Option<Box<Window>>,
    pub status: Status,
    frozen: bool,
    pub rows: Vec<Row>,
    /// Display columns the longest name cell of `rows` needs (the name column grows to it).
    pub name_width: usize,
    pub any_flags: bool,
    /// The window's top culprits (blame ledger on), for the header.
    pub culprits: Vec<super::culprits::Culprit>,
    /// Index into `columns`.
    pub sort: usize,
    /// Against the column's natural direction.
    pub reversed: bool,
    pub filter: Filter,
    pub tree: bool,
    pub hide_idle: bool,
    folded: HashSet<String>,
    /// The tree view's shape, kept between snapshots.
    tree_shape: rows::TreeShape,
    pub cursor: usize,
    pub offset: usize,
    selected: Option<RowKey>,
    pub mode: Mode,
    pub detail: bool,
    pub detail_scroll: u16,
    pub size: (u16, u16),
    pub usage: Option<SelfUsage>,
    /// A one-line message for the footer (cleared by the next command).
    pub message: Option<String>,
    /// Replay: the player's state (`None` live).
    pub replay: Option<crate::top::event::PlayerState>,
    replaying: bool,
}

impl App {
    pub fn new(hello: Hello, theme: Theme) -> Self {
        Self::with_families(hello, theme, FAMILIES)
    }

    pub fn with_families(
        hello: Hello,
        theme: Theme,
        families: &'static [&'static dyn Family],
    ) -> Self {
        let columns = columns::available(&hello, families.iter().map(|f| (f.name(), f.columns())));
        let sort = families
            .iter()
            .filter(|f| columns::family_active(&hello, f.name()))
            .find_map(|f| f.default_sort())
            .and_then(|id| columns.iter().position(|c| c.id == id))
            .unwrap_or(0);
        Self {
            interval: Duration::from_millis(hello.interval_ms.max(1)),
            hello,
            families,
            columns,
            theme,
            window: None,
            dropped_total: 0,
            store: Store::default(),
            pending: None,
            status: Status::Live,
            frozen: false,
            rows: Vec::new(),
            name_width: 0,
            any_flags: false,
            culprits: Vec::new(),
            sort,
            reversed: false,
            filter: Filter::default(),
            tree: false,
            hide_idle: false,
            folded: HashSet::new(),
            tree_shape: rows::TreeShape::default(),
            cursor: 0,
            offset: 0,
            selected: None,
            mode: Mode::Table,
            detail: false,
            detail_scroll: 0,
            size: (80, 24),
            usage: None,
            message: None,
            replay: None,
            replaying: false,
        }
    }

    /// The source is a recording: `p` pauses the player and the replay keys work.
    pub fn start_replay(&mut self) {
        self.replaying = true;
    }

    pub fn is_replay(&self) -> bool {
        self.replaying
    }

    pub fn sort_column(&self) -> &'static Column {
        self.columns[self.sort.min(self.columns.len() - 1)]
    }

    pub fn descending(&self) -> bool {
        self.sort_column().descending ^ self.reversed
    }

    pub fn selected_row(&self) -> Option<&Row> {
        self.rows.get(self.cursor)
    }

    /// Whether the blame ledger is on in this session (its columns and the culprits line).
    pub fn blame_on(&self) -> bool {
        self.hello.blame_min_us.is_some()
    }

    /// The columns a table `width` wide shows, the name column's width and what is hidden.
    pub fn fitted(&self, width: u16) -> columns::Fitted {
        columns::fit(
            &self.columns,
            width,
            self.any_flags,
            self.sort_column().id,
            self.name_width,
        )
    }

    /// A row's label (name, path or tree node).
    pub fn label<'a>(&'a self, row: &'a Row) -> std::borrow::Cow<'a, str> {
        self.store.label(row)
    }

    /// Cgroup data replaced by the last snapshot: the caller frees it off the UI thread.
    pub fn take_garbage(&mut self) -> super::rows::Garbage {
        self.store.take_garbage()
    }

    /// Rows that fit in the table body.
    pub fn page(&self) -> usize {
        usize::from(layout::table_body_rows(
            self.size.0,
            self.size.1,
            self.detail,
            layout::header_rows(self.blame_on()),
        ))
        .max(1)
    }

    /// Applies one action; returns what the caller must do.
    pub fn apply(&mut self, action: Action) -> Option<Effect> {
        match action {
            Action::Window(mut w) => {
                // Windows recorded before the daemon made every family's diagnoses get them
                // here, from the same functions (a no-op on newer windows).
                crate::family::diagnose(&mut w);
                if self.frozen {
                    self.pending = Some(w);
                    if let Status::Paused(n) = &mut self.status {
                        *n += 1;
                    }
                } else {
                    self.take_window(*w);
                }
                None
            }
            Action::SourceEnded(err) => {
                self.status = Status::Ended(err);
                None
            }
            Action::Usage(u) => {
                self.usage = Some(u);
                None
            }
            Action::Resize(w, h) => {
                self.size = (w, h);
                self.scroll_to_cursor();
                None
            }
            Action::Command(c) => {
                self.message = None;
                self.command(c)
            }
            Action::Edit(e) => self.edit(e),
            Action::Player(p) => {
                if let Some(n) = &p.note {
                    self.message = Some(n.clone());
                }
                self.replay = Some(p);
                None
            }
        }
    }

    fn take_window(&mut self, mut w: Window) {
        self.dropped_total += w.events.dropped;
        // The header without the cgroups (they go to the store, uncopied).
        let cgroups = std::mem::take(&mut w.cgroups);
        self.window = Some(WindowInfo {
            head: w.clone(),
            cgroups: cgroups.len(),
        });
        w.cgroups = cgroups;
        self.store.update(w, self.families);
        self.any_flags = self.store.any_flags;
        if self.blame_on() {
            self.culprits = super::culprits::of(&self.store);
        }
        self.rebuild();
    }

    /// Recomputes the row order and keeps the selection on the same cgroup.
    fn rebuild(&mut self) {
        let spec = ViewSpec {
            sort: self.sort_column(),
            descending: self.descending(),
            filter: &self.filter,
            hide_idle: self.hide_idle,
            tree: self.tree,
            folded: &self.folded,
        };
        self.name_width = rows::build(&self.store, &spec, &mut self.tree_shape, &mut self.rows);
        if let Some(key) = &self.selected
            && let Some(i) = self.rows.iter().position(|r| &r.key == key)
        {
            self.cursor = i;
        }
        self.cursor = self.cursor.min(self.rows.len().saturating_sub(1));
        self.selected = self.rows.get(self.cursor).map(|r| r.key.clone());
        self.scroll_to_cursor();
    }

    fn select(&mut self, i: usize) {
        if self.rows.is_empty() {
            return;
        }
        let i = i.min(self.rows.len() - 1);
        if i != self.cursor {
            self.detail_scroll = 0;
        }
        self.cursor = i;
        self.selected = Some(self.rows[i].key.clone());
        self.scroll_to_cursor();
    }

    fn scroll_to_cursor(&mut self) {
        let page = self.page();
        if self.cursor < self.offset {
            self.offset = self.cursor;
        } else if self.cursor >= self.offset + page {
            self.offset = self.cursor + 1 - page;
        }
        self.offset = self.offset.min(self.rows.len().saturating_sub(page));
    }

    fn command(&mut self, c: Command) -> Option<Effect> {
        if let Mode::Help = self.mode {
            // Any key closes the help; q and Ctrl-C still quit.
            self.mode = Mode::Table;
            return (c == Command::Quit).then_some(Effect::Quit);
        }
        let page = self.page();
        match c {
            Command::Up => self.select(self.cursor.saturating_sub(1)),
            Command::Down => self.select(self.cursor + 1),
            Command::PageUp => self.select(self.cursor.saturating_sub(page)),
            Command::PageDown => self.select(self.cursor + page),
            Command::Home => self.select(0),
            Command::End => self.select(self.rows.len().saturating_sub(1)),
            Command::Detail => {
                self.detail = !self.detail;
                self.detail_scroll = 0;
                self.scroll_to_cursor();
            }
            Command::DetailUp => self.detail_scroll = self.detail_scroll.saturating_sub(1),
            Command::DetailDown => {
                if self.detail {
                    self.detail_scroll = self.detail_scroll.saturating_add(1);
                }
            }
            Command::SortPrev | Command::SortNext => {
                let n = self.columns.len();
                self.sort = if c == Command::SortNext {
                    (self.sort + 1) % n
                } else {
                    (self.sort + n - 1) % n
                };
                self.reversed = false;
                self.rebuild();
            }
            Command::SortCaused => match self.columns.iter().position(|c| c.id == CAUSED) {
                Some(i) => {
                    self.sort = i;
                    self.reversed = false;
                    self.rebuild();
                }
                None => {
                    self.message =
                        Some("CAUSE/s needs the blame ledger (started with --no-blame)".into());
                }
            },
            Command::Reverse => {
                self.reversed = !self.reversed;
                self.rebuild();
            }
            Command::Filter => {
                let before = (self.filter.text.clone(), self.filter.kind.clone());
                self.mode = Mode::Filter(Prompt {
                    text: before.0.clone(),
                    kind: before.1.clone(),
                    error: None,
                    before,
                });
            }
            Command::Tree => {
                self.tree = !self.tree;
                self.rebuild();
            }
            Command::Collapse => self.fold(Some(true)),
            Command::Expand => self.fold(Some(false)),
            Command::ToggleFold => self.fold(None),
            Command::HideIdle => {
                self.hide_idle = !self.hide_idle;
                self.rebuild();
            }
            Command::Freeze if self.replaying => {
                return Some(Effect::Player(PlayerCmd::TogglePause));
            }
            Command::Slower | Command::Faster if self.replaying => {
                self.message =
                    Some("the recording fixes the interval: [ and ] change the speed".into());
            }
            Command::StepForward
            | Command::StepBack
            | Command::PlayFaster
            | Command::PlaySlower
            | Command::NextThrottle
            | Command::NextRead
            | Command::NextEvent
            | Command::Seek
                if !self.replaying =>
            {
                self.message = Some("replay only (cgtrace replay FILE)".into());
            }
            Command::StepForward => return Some(Effect::Player(PlayerCmd::Step(1))),
            Command::StepBack => return Some(Effect::Player(PlayerCmd::Step(-1))),
            Command::PlayFaster => return Some(Effect::Player(PlayerCmd::Faster)),
            Command::PlaySlower => return Some(Effect::Player(PlayerCmd::Slower)),
            Command::NextThrottle => return Some(Effect::Player(PlayerCmd::Next(Marks::THROTTLE))),
            Command::NextRead => return Some(Effect::Player(PlayerCmd::Next(Marks::READS))),
            Command::NextEvent => {
                return Some(Effect::Player(PlayerCmd::Next(
                    Marks::RUNQ | Marks::THROTTLE | Marks::READS | Marks::OTHER,
                )));
            }
            Command::Seek => self.mode = Mode::Seek(String::new()),
            Command::Freeze => {
                self.frozen = !self.frozen;
                if self.frozen {
                    if self.status == Status::Live {
                        self.status = Status::Paused(0);
                    }
                } else {
                    if matches!(self.status, Status::Paused(_)) {
                        self.status = Status::Live;
                    }
                    if let Some(w) = self.pending.take() {
                        self.take_window(*w);
                    }
                }
            }
            Command::Slower | Command::Faster => return self.step_interval(c == Command::Slower),
            Command::Help => self.mode = Mode::Help,
            Command::Back => {
                if self.detail {
                    self.detail = false;
                    self.scroll_to_cursor();
                } else {
                    return Some(Effect::Quit);
                }
            }
            Command::Quit => return Some(Effect::Quit),
        }
        None
    }

    /// Folds (`Some(true)`), unfolds (`Some(false)`) or toggles the selected tree node. Folding a
    /// leaf or a folded node moves to its parent, as in file trees.
    fn fold(&mut self, want: Option<bool>) {
        if !self.tree {
            self.message = Some("folding works in the tree view (t)".into());
            return;
        }
        let Some(row) = self.rows.get(self.cursor) else {
            return;
        };
        let (Some(path), Some(mark)) = (row.path.clone(), row.tree) else {
            return;
        };
        let folded = matches!(mark, TreeMark::Folded(_));
        let fold = match want {
            Some(f) => f,
            None => !folded,
        };
        if fold && (folded || mark == TreeMark::Leaf) {
            if want.is_some() {
                // Go to the parent.
                let depth = row.depth;
                if let Some(p) = self.rows[..self.cursor]
                    .iter()
                    .rposition(|r| r.depth < depth)
                {
                    self.select(p);
                }
            }
            return;
        }
        if fold {
            self.folded.insert(path.to_string());
        } else if !self.folded.remove(&*path) {
            return;
        }
        self.rebuild();
    }

    fn step_interval(&mut self, slower: bool) -> Option<Effect> {
        let cur = self.interval.as_millis() as u64;
        let next = if slower {
            INTERVAL_STEPS_MS.iter().copied().find(|&s| s > cur)
        } else {
            INTERVAL_STEPS_MS.iter().rev().copied().find(|&s| s < cur)
        };
        let Some(ms) = next else {
            self.message = Some(format!(
                "interval already at its {} ({})",
                if slower { "longest" } else { "shortest" },
                super::format::interval(cur)
            ));
            return None;
        };
        self.interval = Duration::from_millis(ms);
        self.message = Some(format!(
            "interval {} (from the next window)",
            super::format::interval(ms)
        ));
        Some(Effect::SetInterval(self.interval))
    }

    fn edit(&mut self, e: Edit) -> Option<Effect> {
        if let Mode::Seek(text) = &mut self.mode {
            match e {
                Edit::Char(c) => text.push(c),
                Edit::Backspace => {
                    text.pop();
                }
                Edit::Clear => text.clear(),
                Edit::ToggleKind => {}
                Edit::Cancel => self.mode = Mode::Table,
                Edit::Apply => {
                    let text = std::mem::take(text);
                    self.mode = Mode::Table;
                    let (first, last) = self
                        .replay
                        .as_ref()
                        .map_or((0, 0), |p| (p.first_ms, p.last_ms));
                    let now = self.window.as_ref().map_or(first, |w| w.end_unix_ms);
                    match crate::top::player::parse_seek(&text, first, last, now) {
                        Ok(ms) => return Some(Effect::Player(PlayerCmd::SeekTo(ms))),
                        Err(m) => self.message = Some(m),
                    }
                }
            }
            return None;
        }
        let Mode::Filter(prompt) = &mut self.mode else {
            return None;
        };
        match e {
            Edit::Char(c) => prompt.text.push(c),
            Edit::Backspace => {
                prompt.text.pop();
            }
            Edit::Clear => prompt.text.clear(),
            Edit::ToggleKind => {
                prompt.kind = match prompt.kind {
                    FilterKind::Substring => FilterKind::Regex,
                    FilterKind::Regex => FilterKind::Substring,
                }
            }
            Edit::Apply => {
                if prompt.error.is_none() {
                    self.mode = Mode::Table;
                }
                return None;
            }
            Edit::Cancel => {
                let (text, kind) = prompt.before.clone();
                self.mode = Mode::Table;
                if let Ok(f) = Filter::new(&text, kind) {
                    self.filter = f;
                }
                self.rebuild();
                return None;
            }
        }
        // Filter as it is typed; an incomplete regex keeps the last valid filter.
        match Filter::new(&prompt.text, prompt.kind.clone()) {
            Ok(f) => {
                prompt.error = None;
                self.filter = f;
                self.rebuild();
            }
            Err(err) => prompt.error = Some(err.to_string()),
        }
        None
    }
}

#[cfg(test)]
mod tests;
