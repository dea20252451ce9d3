//! A diagnosis, as every family makes them: what was found, the numbers it rests on, the exact
//! change it asks for and what that change should do.

use serde::{Deserialize, Serialize};

/// A diagnosis with the change it suggests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Flag {
    /// The family that made it.
    #[serde(default)]
    pub family: String,
    /// What was found, as a stable name: `runq_long_waits`; `throttled_below_quota`,
    /// `many_threads_burn`, `long_throttle_waits`; `reads_rstat_flush`, `reads_fuse`,
    /// `reads_slow`.
    pub code: String,
    pub message: String,
    /// The numbers the diagnosis rests on ("41 of 50 periods throttled, held off 6.2 ms of CPU
    /// per throttled period"); empty in recordings made before it.
    #[serde(default)]
    pub evidence: String,
    /// The change in words (what `change` spells out).
    pub suggestion: String,
    /// The exact changes, each a way to make the same one (the cgroup file, the Kubernetes
    /// field, the runtime flag), or where none of the cgroup's knobs fixes it, what to move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub change: Vec<Change>,
    /// What the change should improve, and by how much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
}

/// One way to make a suggested change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Where it is made.
    pub kind: ChangeKind,
    /// The file (relative to the cgroup's directory: `cpu.max.burst`), the field
    /// (`resources.limits.cpu`), the runtime flag (`-XX:ActiveProcessorCount`), or what to move.
    pub knob: String,
    /// The value to set (for `move`: where to, or empty).
    pub value: String,
}

/// Where a change is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A file of the cgroup (or, named in `knob`, of an ancestor).
    CgroupFile,
    /// A Kubernetes field or kubelet flag.
    Kubernetes,
    /// A flag or setting of the program in the cgroup (JVM, Go runtime, thread pools).
    Runtime,
    /// No knob of this cgroup fixes it: something else moves (a neighbour, a cpuset, interrupts).
    Move,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CgroupFile => "cgroup_file",
            Self::Kubernetes => "kubernetes",
            Self::Runtime => "runtime",
            Self::Move => "move",
        }
    }
}

impl Change {
    pub fn new(kind: ChangeKind, knob: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            kind,
            knob: knob.into(),
            value: value.into(),
        }
    }

    /// `cpu.max.burst = 8000`, `move: /kubepods/…/batch`.
    pub fn words(&self) -> String {
        match (self.kind, self.value.is_empty()) {
            (ChangeKind::Move, true) => format!("move: {}", self.knob),
            (ChangeKind::Move, false) => format!("move {} → {}", self.knob, self.value),
            _ => format!("{} = {}", self.knob, self.value),
        }
    }
}

/// What a change should do, as a number the kernel's own counters can check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    /// What it changes: `throttled_periods` (per second, `cpu.stat nr_throttled`),
    /// `throttle_stall_p99_us`, `quota_burned_in_ms` (how long into the period the quota
    /// lasts), `runq_wait_us` (run-queue wait, `run_delay`), `reads_us`.
    pub metric: String,
    /// By how much, in percent of its value now (negative: fewer or shorter).
    pub change_percent: f64,
    /// The same in words, with what the number rests on.
    pub words: String,
}

impl Flag {
    /// The change and its expected effect on one line: `cpu.max.burst = 8000 (expected:
    /// throttled periods −85 %)`; empty without a change (recordings from before them).
    pub fn change_line(&self) -> String {
        change_line(&self.change, self.expected.as_ref())
    }
}

/// `change` and `expected` on one line (see [`Flag::change_line`]).
pub fn change_line(change: &[Change], expected: Option<&Expected>) -> String {
    if change.is_empty() {
        return String::new();
    }
    let changes: Vec<String> = change.iter().map(Change::words).collect();
    match expected {
        Some(e) => format!("{} (expected: {})", changes.join("; "), e.words),
        None => changes.join("; "),
    }
}
