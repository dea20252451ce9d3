//! Event families in the daemon: one folder each, with the same name as
//! `cgtrace-common/src/<family>.rs` (the ABI) and `cgtrace-ebpf/src/probes/<family>.rs` (the
//! kernel side). Each folder holds what its records become between two windows ([`Records`]),
//! its part of a window, its event lines and its diagnoses; [`FAMILIES`] is the one list every
//! place that needs the families reads.

pub mod collect;
pub mod info;
pub mod live;
pub mod reads;
pub mod runq;
pub mod select;
pub mod throttle;

pub use info::{Describe, FamilyInfo, LineHead, MAX_PENDING_LINES, Room};

use serde::Serialize;

use crate::{
    decode::Record,
    model::{CgroupWindow, Flag, Window},
};

/// Every family's diagnoses of one cgroup's window.
pub fn flags(cg: &CgroupWindow, duration_ms: u64) -> Vec<Flag> {
    let mut out = Vec::new();
    for f in FAMILIES {
        (f.flags)(cg, duration_ms, &mut out);
    }
    out
}

/// Fills in the diagnoses of every cgroup of a window that has none: a window recorded before
/// the daemon made them all. The same as the daemon's, as each family's diagnosis is a function
/// of the window alone (throttle's are copied from `throttle.flags`).
pub fn diagnose(w: &mut Window) {
    for cg in w.cgroups.iter_mut().filter(|c| c.flags.is_empty()) {
        cg.flags = flags(cg, w.duration_ms);
    }
}

/// Every family this build knows, in display order: the one list.
pub const FAMILIES: &[FamilyInfo] = &[runq::INFO, throttle::INFO, reads::INFO];

/// Mark of event kinds of no family this build knows.
pub const MARK_OTHER: u32 = 1 << 31;

/// The family an event kind belongs to, by its range.
pub fn of_kind(kind: u32) -> Option<&'static FamilyInfo> {
    FAMILIES
        .iter()
        .find(|f| (f.first_kind..f.first_kind + 0x100).contains(&kind))
}

/// The family called `name`.
pub fn by_name(name: &str) -> Option<&'static FamilyInfo> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The seek mark of an event kind: its family's mark for the family's single event, nothing for
/// its other kinds, [`MARK_OTHER`] for kinds of no known family.
pub fn mark_of_kind(kind: u32) -> u32 {
    match of_kind(kind) {
        Some(f) if f.event_kind == kind => f.mark,
        Some(_) => 0,
        None => MARK_OTHER,
    }
}

/// A single-event line of any family, as the stream prints it.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum EventLine {
    RunqWait(runq::RunqWait),
    Throttle(throttle::ThrottleLine),
    SlowRead(reads::SlowRead),
}

impl EventLine {
    /// What every line starts with.
    pub fn head(&mut self) -> &mut LineHead {
        match self {
            Self::RunqWait(l) => &mut l.head,
            Self::Throttle(l) => &mut l.head,
            Self::SlowRead(l) => &mut l.head,
        }
    }
}

/// What the records drained between two windows became, per family: the same live (from the
/// ring buffer) and offline (from a recording).
#[derive(Debug, Default)]
pub struct Records {
    pub runq: runq::Records,
    pub throttle: throttle::Records,
    pub reads: reads::Records,
    /// Records that did not decode.
    pub undecodable: u64,
    /// Event lines not kept because nobody took them in time.
    pub lines_dropped: u64,
    /// Records a collector made at a window's end (kernel sums read from a map), in the drain
    /// queue's format: the recorder keeps them with the ring buffer's, so a replay reads what
    /// the live run read.
    pub made: Vec<u8>,
}

impl Records {
    /// Keeps the event lines of the families `keep` names (`--events`).
    pub fn with_lines(keep: impl Fn(&str) -> bool) -> Self {
        let mut r = Self::default();
        r.set_lines(keep);
        r
    }

    /// Keeps the event lines of the families `keep` names from now on.
    pub fn set_lines(&mut self, keep: impl Fn(&str) -> bool) {
        self.runq.keep_lines = keep(runq::INFO.name);
        self.throttle.keep_lines = keep(throttle::INFO.name);
        self.reads.keep_lines = keep(reads::INFO.name);
    }

    /// Decodes one ring-buffer record and hands it to its family.
    pub fn consume(&mut self, bytes: &[u8]) {
        match Record::from_bytes(bytes) {
            Ok(rec) => self.record(&rec),
            Err(_) => self.undecodable += 1,
        }
    }

    /// A record a collector made (see `made`): consumed like a ring-buffer one, and kept.
    pub fn make(&mut self, bytes: &[u8]) {
        crate::decode::append(&mut self.made, bytes);
        self.consume(bytes);
    }

    /// The end of a run (live or replayed): what waited for a later window goes out.
    pub fn finish(&mut self) {
        self.throttle.finish();
    }

    pub fn record(&mut self, rec: &Record) {
        let mut room = Room::new(&mut self.lines_dropped);
        match rec {
            Record::RunqWait(ev) => self.runq.wait(ev, &mut room),
            Record::Throttle(ev) => self.throttle.episode(ev, &mut room),
            Record::ThrottleSlice(ev) => self.throttle.burners.slice(ev),
            Record::ThrottlePeriod(ev) => self.throttle.burners.period(ev),
            Record::SlowRead(ev) => self.reads.slow_read(ev, &mut room),
            Record::CgroupChurn(ev) => self.reads.churn.add(ev),
        }
    }

    /// The event lines kept so far, runq then throttle, named by `describe`. Slow reads need the
    /// live reads reader to name their files: they stay in `reads` (see
    /// [`reads::Records::take_slow_reads`]).
    pub fn take_lines(&mut self, describe: &mut Describe<'_>, out: &mut Vec<EventLine>) {
        let mut runq = Vec::new();
        self.runq.lines(describe, &mut runq);
        out.extend(runq.into_iter().map(EventLine::RunqWait));
        let mut throttle = Vec::new();
        self.throttle.lines(describe, &mut throttle);
        out.extend(throttle.into_iter().map(EventLine::Throttle));
    }

    /// A window ended at `mono_ns`: what it took from the records is gone (live, the session's
    /// window took it; offline, the recorded window already holds it).
    pub fn window_ended(&mut self, mono_ns: u64) {
        let _ = self.throttle.take_window(mono_ns);
        self.runq.asleep.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_families_and_marks() {
        assert_eq!(of_kind(0x305).map(|f| f.name), Some("reads"));
        assert_eq!(of_kind(0x900), None);
        assert_eq!(mark_of_kind(0x100), runq::INFO.mark);
        assert_eq!(mark_of_kind(0x200), throttle::INFO.mark);
        assert_eq!(mark_of_kind(0x201), 0, "a slice is no throttle episode");
        assert_eq!(mark_of_kind(0x300), reads::INFO.mark);
        assert_eq!(mark_of_kind(0x900), MARK_OTHER);
        let marks: Vec<u32> = FAMILIES.iter().map(|f| f.mark).collect();
        assert!(
            marks
                .iter()
                .all(|m| m.count_ones() == 1 && m & MARK_OTHER == 0)
        );
        assert_eq!(
            marks.iter().fold(0, |a, m| a | m).count_ones() as usize,
            FAMILIES.len(),
            "one bit each"
        );
        assert_eq!(by_name("throttle"), Some(&throttle::INFO));
    }
}
