//! The table's columns: a registry of what each column shows, how it sorts, how wide it is and
//! which families it needs. `NAME` and `FLAGS` belong to the view; every other column comes from
//! a family of the view (`super::family`).

use crate::model::{CgroupWindow, Hello};

use super::format;

/// What a family needs to know besides one cgroup's data.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// Length of the window the data covers.
    pub duration_ms: u64,
}

impl Ctx {
    /// The window's length in seconds, never zero.
    pub fn seconds(&self) -> f64 {
        (self.duration_ms.max(1)) as f64 / 1e3
    }
}

/// What a cell holds. Numbers keep their value (for sorting); text is made at draw time.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// The family has no data for this cgroup (not traced here, not available): `—`.
    Absent,
    /// Traced, but nothing happened in the window: `·`.
    Idle,
    /// A duration in microseconds.
    Micros(f64),
    /// Events per second.
    PerSec(f64),
    /// A share, 0–100.
    Percent(f64),
    /// CPUs' worth of time (usage, quota).
    Cores(f64),
    Count(u64),
    Text(String),
}

impl Cell {
    /// The sort key: `None` (no data) sorts after every value in either direction.
    pub fn sort_key(&self) -> Option<f64> {
        match *self {
            Self::Absent | Self::Idle | Self::Text(_) => None,
            Self::Micros(v) | Self::PerSec(v) | Self::Percent(v) | Self::Cores(v) => Some(v),
            Self::Count(n) => Some(n as f64),
        }
    }

    pub fn text(&self) -> String {
        match self {
            Self::Absent => "—".into(),
            Self::Idle => "·".into(),
            Self::Micros(us) => format::micros(*us),
            Self::PerSec(v) => format::si(*v),
            Self::Percent(p) => format::percent(*p),
            Self::Cores(c) if *c < 9.95 => format!("{c:.2}"),
            Self::Cores(c) => format!("{c:.0}"),
            Self::Count(n) => format::si(*n as f64),
            Self::Text(s) => s.clone(),
        }
    }
}

/// How a column gets its value.
#[derive(Clone, Copy)]
pub enum Source {
    /// The cgroup's name or path, with its depth (the view's own column).
    Name,
    /// The flags raised by the families (the view's own column).
    Flags,
    /// A family's value for one cgroup in one window.
    Data(fn(&CgroupWindow, &Ctx) -> Cell),
}

/// One column of the table.
#[derive(Clone, Copy)]
pub struct Column {
    /// Stable id, `<family>.<what>` (`runq.p99`).
    pub id: &'static str,
    /// Header text, at most `width` characters.
    pub title: &'static str,
    /// One line for the help overlay.
    pub help: &'static str,
    pub width: u16,
    /// Which columns survive a narrow terminal: higher is kept longer.
    pub priority: u8,
    /// Families that must be attached (`hello.families[..].mode`, not off or unavailable) for the column
    /// to be shown at all; [`BLAME`]: the blame ledger must be on.
    pub needs: &'static [&'static str],
    pub source: Source,
    /// Sort descending by default (largest latency first).
    pub descending: bool,
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Column").field("id", &self.id).finish()
    }
}

pub const NAME: Column = Column {
    id: "name",
    title: "NAME",
    help: "pod/container, Docker or unit name, else path; dots show depth",
    // The least it gets: other columns go first (32 keeps a pod or test cgroup name whole).
    width: 32,
    priority: u8::MAX,
    needs: &[],
    source: Source::Name,
    descending: false,
};

pub const FLAGS: Column = Column {
    id: "flags",
    title: "FLAGS",
    help: "diagnoses, spelled out with advice in the detail pane",
    width: 6,
    priority: 200,
    needs: &[],
    source: Source::Flags,
    descending: true,
};

/// Whether a family is attached in this session.
pub fn family_active(hello: &Hello, family: &str) -> bool {
    hello
        .families
        .get(family)
        .is_some_and(|m| m.mode.is_attached())
}

/// The `needs` entry of columns that show the blame ledger (`--blame`, `hello.blame_min_us`).
pub const BLAME: &str = "blame";

/// Whether one of a column's `needs` is met in this session.
fn need_met(hello: &Hello, need: &str) -> bool {
    if need == BLAME {
        hello.blame_min_us.is_some()
    } else {
        family_active(hello, need)
    }
}

/// The columns this session can show, in order: `NAME`, each active family's columns (`families`:
/// its name and columns) whose `needs` are met, then `FLAGS`.
pub fn available(
    hello: &Hello,
    families: impl IntoIterator<Item = (&'static str, &'static [Column])>,
) -> Vec<&'static Column> {
    let mut out: Vec<&'static Column> = vec![&NAME];
    for (name, columns) in families {
        if !family_active(hello, name) {
            continue;
        }
        out.extend(
            columns
                .iter()
                .filter(|c| c.needs.iter().all(|n| need_met(hello, n))),
        );
    }
    out.push(&FLAGS);
    out
}

/// The columns that fit in `width` (one space between columns): the lowest-priority ones go
/// first; `NAME` always stays and takes what is left.
pub fn fit(columns: &[&'static Column], width: u16, show_flags: bool) -> Vec<&'static Column> {
    let mut keep: Vec<&'static Column> = columns
        .iter()
        .copied()
        .filter(|c| show_flags || c.id != FLAGS.id)
        .collect();
    let need = |cols: &[&Column]| -> u32 { cols.iter().map(|c| u32::from(c.width) + 1).sum() };
    while need(&keep) > u32::from(width) + 1 && keep.len() > 1 {
        let Some((i, _)) = keep
            .iter()
            .enumerate()
            .filter(|(_, c)| c.id != NAME.id)
            .min_by_key(|(i, c)| (c.priority, std::cmp::Reverse(*i)))
        else {
            break;
        };
        keep.remove(i);
    }
    keep
}
