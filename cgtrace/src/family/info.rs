//! What every family is, offline and live: its [`FamilyInfo`] (names, event kinds, diagnoses)
//! and the parts of an event line every family shares ([`LineHead`], the room lines are kept in).
//! A leaf: the families import it, it imports none of them.

use serde::{Deserialize, Serialize};

use crate::model::{CgroupWindow, Flag};

/// A family as every part of cgtrace names it.
#[derive(Clone, Copy)]
pub struct FamilyInfo {
    /// Its name in the stream, `hello.families`, `--events`, metrics and the view.
    pub name: &'static str,
    /// First event kind of its range (`cgtrace_common::event`); each range is 0x100 wide.
    pub first_kind: u32,
    /// The kind of its single event (the one `--events` prints as a line and a recording marks
    /// for seeking); the family's other kinds feed its windows only.
    pub event_kind: u32,
    /// What its single event line is called (`type` in the stream).
    pub event_line: &'static str,
    /// Its bit in a recording's window index (seek targets).
    pub mark: u32,
    /// Its event lines can be made again from a recording (`replay --stream`): false when naming
    /// them needs the live tracer's tables.
    pub lines_offline: bool,
    /// Its diagnoses of one cgroup's window (`duration_ms` long), appended to `out`: made in the
    /// daemon, so the stream, recordings, report, metrics and the view all have them.
    pub flags: fn(&CgroupWindow, u64, &mut Vec<Flag>),
}

impl std::fmt::Debug for FamilyInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for FamilyInfo {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// The fields every event line starts with: its type, when and where, and its cgroup.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LineHead {
    /// The family's `event_line`: `runq_wait`, `throttle`, `slow_read`.
    #[serde(rename = "type")]
    pub kind: String,
    /// CLOCK_MONOTONIC (ns) when the event ended.
    pub ts_ns: u64,
    pub cpu: u32,
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
}

impl LineHead {
    /// The head of a line of `family` from a record's header, its cgroup not yet named.
    pub fn new(
        family: &FamilyInfo,
        header: &cgtrace_common::event::EventHeader,
        cgroup_id: u64,
    ) -> Self {
        Self {
            kind: family.event_line.into(),
            ts_ns: header.ts_ns,
            cpu: header.cpu,
            cgroup_id,
            path: None,
            name: None,
        }
    }

    /// Names the line's cgroup.
    pub fn named(mut self, (path, name): (Option<String>, Option<String>)) -> Self {
        (self.path, self.name) = (path, name);
        self
    }
}

/// Path and name of a cgroup id, for event lines: from the live cgroup table, or from the names
/// a recording kept.
pub type Describe<'a> = dyn FnMut(u64) -> (Option<String>, Option<String>) + 'a;

/// Event lines kept between two takes at most (beyond, they are counted as dropped).
pub const MAX_PENDING_LINES: usize = 100_000;

/// The room left for event lines: a family keeps a line only if it may.
pub struct Room<'a>(&'a mut u64);

impl<'a> Room<'a> {
    /// Room counting what does not fit in `dropped`.
    pub fn new(dropped: &'a mut u64) -> Self {
        Self(dropped)
    }

    /// Whether one more line fits in `pending`; counts it as dropped when not.
    pub fn fits<T>(&mut self, pending: &[T]) -> bool {
        if pending.len() < MAX_PENDING_LINES {
            true
        } else {
            *self.0 += 1;
            false
        }
    }
}

/// Whether `release` (`/proc/sys/kernel/osrelease`) is at least `want` (major, minor): what a
/// family may use of the kernel it runs on.
pub fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((next(), next()), (Some(major), Some(minor)) if (major, minor) >= want)
}
