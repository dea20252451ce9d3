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
    // The least it gets before other columns go ([`NAME_MIN`]); it grows to its longest label
    // and no further, so the numbers stay next to the names on a wide terminal.
    width: NAME_MIN,
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

/// The `needs` entry of columns that show the blame ledger (`hello.blame_min_us`: on unless `--no-blame`).
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

/// The name column's minimum: room for a container and a bit of its pod (the name is cut in the
/// middle, keeping its end).
pub const NAME_MIN: u16 = 20;

/// Room the name column keeps before a column below [`CORE`] is shown (or its longest label, if
/// shorter): a pod or test cgroup name whole, rather than one more optional number.
pub const NAME_COMFORT: u16 = 32;

/// Columns of at least this priority are promised on an 80-column terminal, whatever families
/// are attached and with the blame ledger on: their widths plus [`NAME_MIN`] fit in 80 (a test
/// checks it). Lower ones are shown when there is room.
pub const CORE: u8 = 72;

/// The columns a terminal shows, how wide the name column is, and what did not fit.
#[derive(Debug)]
pub struct Fitted {
    /// In order, `NAME` first.
    pub columns: Vec<&'static Column>,
    /// Display columns of the name column.
    pub name_width: usize,
    /// Columns left out for lack of room, in column order (said in the header).
    pub hidden: Vec<&'static Column>,
}

/// Fits the columns to `width` (one space between columns). Every column but `NAME` keeps its
/// width. The lowest-priority ones go first: those below [`CORE`] until the rest leave `NAME` its
/// longest label (`natural_name` columns) or [`NAME_COMFORT`], then core ones until the rest
/// leave it [`NAME_MIN`]; the sort column `sort_id` always stays. `NAME` then takes what it needs
/// for its longest label, and no more than what is left (no gap before the numbers).
pub fn fit(
    columns: &[&'static Column],
    width: u16,
    show_flags: bool,
    sort_id: &str,
    natural_name: usize,
) -> Fitted {
    let mut keep: Vec<&'static Column> = columns
        .iter()
        .copied()
        .filter(|c| show_flags || c.id != FLAGS.id)
        .collect();
    let mut hidden: Vec<&'static Column> = Vec::new();
    let fixed = |cols: &[&Column]| -> usize {
        cols.iter()
            .filter(|c| c.id != NAME.id)
            .map(|c| usize::from(c.width) + 1)
            .sum()
    };
    let width = usize::from(width);
    let comfort = natural_name.clamp(usize::from(NAME_MIN), usize::from(NAME_COMFORT));
    loop {
        let left = width.saturating_sub(fixed(&keep));
        let lowest = |core: bool| {
            keep.iter()
                .enumerate()
                .filter(|(_, c)| c.id != NAME.id && c.id != sort_id)
                .filter(|(_, c)| core || c.priority < CORE)
                .min_by_key(|(i, c)| (c.priority, std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
        };
        let drop = if left < comfort {
            lowest(false).or_else(|| (left < usize::from(NAME_MIN)).then(|| lowest(true))?)
        } else {
            None
        };
        let Some(i) = drop else { break };
        hidden.push(keep.remove(i));
    }
    hidden.sort_by_key(|h| columns.iter().position(|c| c.id == h.id));
    let left = width.saturating_sub(fixed(&keep));
    Fitted {
        name_width: natural_name
            .max(usize::from(NAME_MIN))
            .min(left)
            .max(4.min(left)),
        columns: keep,
        hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::family::FAMILIES;

    fn every_column() -> Vec<&'static Column> {
        let mut all: Vec<&'static Column> = vec![&NAME];
        all.extend(FAMILIES.iter().flat_map(|f| f.columns().iter()));
        all.push(&FLAGS);
        all
    }

    #[test]
    fn core_columns_fit_80_with_every_family_and_the_ledger() {
        let all = every_column();
        let core: usize = all
            .iter()
            .filter(|c| c.id != NAME.id && c.priority >= CORE)
            .map(|c| usize::from(c.width) + 1)
            .sum();
        assert!(
            core + usize::from(NAME_MIN) <= 80,
            "core columns take {core} of 80"
        );
        let f = fit(&all, 80, true, "runq.wait", 200);
        for c in all.iter().filter(|c| c.priority >= CORE) {
            assert!(f.columns.iter().any(|k| k.id == c.id), "{} hidden", c.id);
        }
        let shown: usize = f
            .columns
            .iter()
            .map(|c| usize::from(c.width) + 1)
            .sum::<usize>()
            - usize::from(NAME.width)
            - 1
            + f.name_width;
        assert!(shown <= 80, "{shown}");
        assert!(f.name_width >= usize::from(NAME_MIN));
        // What went is said, and nothing is both shown and hidden.
        assert_eq!(f.columns.len() + f.hidden.len(), all.len());
        assert!(f.hidden.iter().all(|h| h.priority < CORE));
    }

    #[test]
    fn the_name_takes_what_it_needs_and_the_sort_column_stays() {
        let all = every_column();
        let f = fit(&all, 250, true, "runq.wait", 30);
        assert!(f.hidden.is_empty());
        assert_eq!(f.name_width, 30, "no gap between names and numbers");
        let f = fit(&all, 250, true, "runq.wait", 5);
        assert_eq!(f.name_width, usize::from(NAME_MIN));
        let f = fit(&all, 80, true, "reads.rate", 200);
        assert!(f.columns.iter().any(|c| c.id == "reads.rate"));
        // Optional columns give way to a readable name; core ones only to the minimum.
        let f = fit(&all, 120, true, "runq.wait", 31);
        assert_eq!(f.name_width, 31);
        assert!(f.hidden.iter().all(|c| c.priority < CORE));
        let f = fit(&all, 120, true, "runq.wait", 100);
        assert!(f.name_width >= usize::from(NAME_COMFORT), "{f:?}");
        // Too narrow for anything but the name and the sort column.
        let f = fit(&all, 12, true, "runq.p99", 200);
        let ids: Vec<&str> = f.columns.iter().map(|c| c.id).collect();
        assert_eq!(ids, ["name", "runq.p99"]);
        assert_eq!(f.name_width, 5);
    }
}
