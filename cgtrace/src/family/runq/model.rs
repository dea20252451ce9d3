//! The runq family's window types beyond the histograms: the blame ledger's `runq.blame` and
//! `caused` (filled by [`super::blame`]).

use serde::{Deserialize, Serialize};

/// Neighbours (and victims) listed by name; the rest are summed.
pub const TOP: usize = 5;

/// `runq.blame`: a cgroup's run-queue wait in the window, split by why it waited. The parts add
/// up to the wait (`sum_us` of `runq`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Blame {
    /// Its own CPU quota was exhausted (the `throttled` part of its waits).
    pub throttled_own_us: f64,
    /// An ancestor's quota was exhausted (6.18+; before 6.18 counted as its own when it has a
    /// quota of its own).
    pub throttled_ancestor_us: f64,
    /// The CPU ran other tasks of the same cgroup.
    pub siblings_us: f64,
    /// The other cgroups that held the CPU, most first (at most [`TOP`]).
    pub neighbours: Vec<Party>,
    /// The neighbours past the first [`TOP`].
    pub neighbours_other_us: f64,
    /// What the ledger cannot attribute: waits shorter than `--blame-min-us`, the part of a
    /// wait spent queued on another CPU before a migration, stretches older than the CPU's last
    /// 64 slices, idle time, and parts lost to a full table (`blame_full`).
    pub unattributed_us: f64,
}

impl Blame {
    /// All of its wait the other cgroups held the CPU for: the named neighbours and the rest.
    pub fn neighbours_us(&self) -> f64 {
        self.neighbours.iter().map(|n| n.wait_us).sum::<f64>() + self.neighbours_other_us
    }
}

/// A cgroup on the other side of a blame entry.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Party {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub wait_us: f64,
}

/// `caused`: the run-queue wait a cgroup's tasks caused other cgroups in the window by holding
/// their CPU (present even when it never waited itself).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Caused {
    pub wait_us: f64,
    /// The cgroups it delayed most (at most [`TOP`]).
    pub victims: Vec<Party>,
}

/// A cgroup that cost others run-queue wait over a recording (`report`'s noisy neighbours).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct NoisyNeighbour {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    /// Run-queue wait it caused other cgroups, summed over the windows.
    pub caused_us: f64,
    /// Windows in which it caused any.
    pub windows: u64,
    /// Its victims, most delayed first (each window's top [`TOP`], summed; at most [`TOP`]).
    pub victims: Vec<Party>,
}
