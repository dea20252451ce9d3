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
    /// The root cgroup held the CPU: kernel threads (ksoftirqd, kworkers) and host processes
    /// outside any cgroup.
    #[serde(default)]
    pub kernel_us: f64,
    /// The CPU it was queued on sat idle: waking that CPU (an IPI, an idle-state exit, a vCPU the
    /// host had halted) was the wait.
    #[serde(default)]
    pub idle_us: f64,
    /// What the ledger cannot attribute: waits shorter than `--blame-min-us`, stretches older
    /// than the CPU's last 64 slices (`unattributed_history_us`), and parts lost to a full table
    /// (`blame_full`).
    pub unattributed_us: f64,
    /// Of `unattributed_us`: the stretches older than the CPU's last 64 slices.
    #[serde(default)]
    pub unattributed_history_us: f64,
}

impl Blame {
    /// All of its wait the other cgroups held the CPU for: the named neighbours and the rest.
    pub fn neighbours_us(&self) -> f64 {
        self.neighbours.iter().map(|n| n.wait_us).sum::<f64>() + self.neighbours_other_us
    }

    /// The parts that add up to the wait, by the names the `part` metric label and the docs use
    /// (the neighbours summed).
    pub fn parts(&self) -> [(&'static str, f64); BLAME_PARTS] {
        [
            ("throttled_own", self.throttled_own_us),
            ("throttled_ancestor", self.throttled_ancestor_us),
            ("siblings", self.siblings_us),
            ("neighbours", self.neighbours_us()),
            ("kernel", self.kernel_us),
            ("idle", self.idle_us),
            ("unattributed", self.unattributed_us),
        ]
    }

    /// Every part times `f` (a ledger charged beyond the wait, scaled to it).
    pub fn scale(&mut self, f: f64) {
        self.throttled_own_us *= f;
        self.throttled_ancestor_us *= f;
        self.siblings_us *= f;
        self.neighbours_other_us *= f;
        self.kernel_us *= f;
        self.idle_us *= f;
        self.unattributed_us *= f;
        self.unattributed_history_us *= f;
        for n in &mut self.neighbours {
            n.wait_us *= f;
        }
    }
}

/// How many parts [`Blame::parts`] has.
pub const BLAME_PARTS: usize = 7;

/// Which of the ledger's kernel-dependent parts this kernel can tell ([`super::attach::blame_caps`]).
/// A part it cannot tell is reported as unknown (`null`), never as 0.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BlameCaps {
    /// `irq_us`: the run queue accounts interrupt time (`CONFIG_IRQ_TIME_ACCOUNTING`).
    pub irq: bool,
    /// `steal_us`: the run queue accounts steal time (`CONFIG_PARAVIRT_TIME_ACCOUNTING`; on bare
    /// metal it reads 0, truly).
    pub steal: bool,
    /// `idle_elsewhere_us`: the task's allowed CPUs are readable and the ledger's walk runs in
    /// `bpf_loop` (the programs with `prev_state`, 5.18+).
    pub idle_elsewhere: bool,
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
