//! The report's types: what `report --json` prints, what the text and the page are written from.
//! A leaf: `build/` fills them, `text.rs` and `html/` read them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{family, family::throttle::burners::ThrottledPeriod, record::reader::ReadStats};

/// How many entries each ranking keeps.
pub(super) const TOP: usize = 10;

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub host: String,
    pub kernel: String,
    pub cgtrace: String,
    pub format: String,
    pub first_unix_ms: u64,
    pub last_unix_ms: u64,
    /// The recorder's window length (its hello; 0 when unknown): the first window's start is
    /// its end less this.
    #[serde(skip)]
    pub interval_ms: u64,
    pub windows: u64,
    pub events_recorded: u64,
    /// Kernel-side drops over the recording (`events.dropped` summed).
    pub events_dropped: u64,
    /// Records the recorder itself could not keep (its buffer was full).
    pub recorder_lost: u64,
    /// Chunks (windows and events) the recorder could not write: a full or failing disk, or
    /// below `--min-free`.
    pub recorder_dropped_chunks: u64,
    pub recorder_dropped_bytes: u64,
    /// Per-cgroup entries (and name updates) left out once the report's tallies reached their
    /// bound (96 MiB: a recording naming more cgroups than that holds).
    pub untallied: u64,
    /// What could not be read from the file.
    pub read: ReadStats,
    /// Per family: the cgroups with the worst tail latency.
    pub families: BTreeMap<String, FamilyReport>,
    /// Diagnoses of the families other than `throttle` (whose flags are in `throttled`), by
    /// cgroup: most windows flagged first.
    pub diagnoses: Vec<Diagnosed>,
    pub throttled: Vec<ThrottledCgroup>,
    pub longest_episodes: Vec<Episode>,
    pub slowest_waits: Vec<Wait>,
    /// The blame ledger (recorded with `--blame`): the cgroups that cost others the most
    /// run-queue wait, with their victims.
    pub noisy_neighbours: Vec<family::runq::blame::NoisyNeighbour>,
    /// The blame ledger as a victim × culprit matrix: who delayed whom (the report opens with it).
    pub who_delayed_whom: WhoDelayedWhom,
    /// `reads`: the (reader cgroup, comm, file) with the slowest reads over the recording.
    pub slowest_reads: Vec<FileReadsSeen>,
    /// `reads`: memory cgroups whose stat files were read, most read time first.
    pub memcgs: Vec<MemcgSeen>,
    /// `reads`: the host's largest dying memcg count over the recording.
    pub dying_memcgs_max: Option<u64>,
    /// `reads`: cgroups created and removed over the recording.
    pub cgroups_created: u64,
    pub cgroups_removed: u64,
    /// Single events per family, and those this cgtrace cannot decode.
    pub events_by_family: BTreeMap<String, u64>,
    pub undecoded_events: u64,
    /// How the recorded kernel split waits into throttled and the rest (absent in recordings
    /// made before it was reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_split: Option<crate::model::WaitSplit>,
    /// What cgtrace itself cost the recorded host (the windows' `self`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_cost: Option<OwnCost>,
    /// Every tallied cgroup's totals over the recording, for `report --compare` (not part of
    /// `report --json`: the rankings above say the same for the worst).
    #[serde(skip)]
    pub cgroups: Vec<CgroupTotals>,
}

/// One cgroup's totals over a recording: what `report --compare` sets side by side. Made from
/// the tallies the report keeps anyway (bounded by its budget), nothing summed twice.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CgroupTotals {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    /// Run-queue waits over the recording (merged histogram). `wait_us` is the kernel's
    /// `run_delay` part; `wait_stale_us` what the waits lasted beyond it (the run queue's clock
    /// not updated at the switch), `run_delay_asleep_us` what `run_delay` counted while the task
    /// slept (not in `wait_us`); both absent when 0.
    pub waits: u64,
    pub wait_us: f64,
    #[serde(skip_serializing_if = "crate::units::is_zero")]
    pub wait_stale_us: f64,
    #[serde(skip_serializing_if = "crate::units::is_zero")]
    pub run_delay_asleep_us: f64,
    pub wait_p50_us: f64,
    pub wait_p99_us: f64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_us: f64,
    /// The kernel's `cpu.stat` deltas, where windows carried them.
    pub kernel_nr_throttled: Option<u64>,
    pub kernel_throttled_us: Option<f64>,
    /// Blame ledger (`--blame`): run-queue wait it caused others, and that others caused it
    /// (among the ledger's top culprits).
    pub caused_us: Option<f64>,
    pub suffered_us: Option<f64>,
    /// Flag codes raised in any window (throttle flags and other families' diagnoses).
    pub flags: Vec<String>,
}

/// cgtrace's own cost over a recording, from its windows' `self` objects.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct OwnCost {
    /// Windows with a `self` object, and of those, windows whose programs were timed
    /// (`--bpf-stats`).
    pub windows: u64,
    pub timed_windows: u64,
    pub mean_daemon_cpu_pct: f64,
    pub max_daemon_cpu_pct: f64,
    pub max_rss_kib: u64,
    /// Time in all programs over the timed windows, in % of one CPU.
    pub mean_bpf_cpu_pct: f64,
    /// Per program over the timed windows, most time first.
    pub programs: Vec<ProgramTotal>,
}

/// One program's runs and time over a recording's timed windows.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct ProgramTotal {
    pub name: String,
    pub runs: u64,
    pub run_us: f64,
    pub ns_per_run: f64,
}

/// One reader's reads of one file over the recording.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FileReadsSeen {
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub comm: String,
    pub file: String,
    pub count: u64,
    pub total_us: f64,
    pub flush_us: f64,
    pub max_us: f64,
    pub max_at_unix_ms: u64,
    pub dying_memcgs: Option<u64>,
}

/// A memory cgroup whose stat files were read, over the recording.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemcgSeen {
    pub hierarchy: String,
    pub path: String,
    pub stat_reads: u64,
    pub read_us: f64,
    pub flush_us: f64,
    pub dying_memcgs_max: u64,
    pub readers: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct FamilyReport {
    pub cgroups: usize,
    pub worst_p99: Vec<CgroupLatency>,
    pub worst_max: Vec<CgroupLatency>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CgroupLatency {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub count: u64,
    pub mean_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// When the largest one happened (end of its window).
    pub max_at_unix_ms: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ThrottledCgroup {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub quota_cores: Option<f64>,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_us: f64,
    pub episodes: u64,
    pub worst_window_share: f64,
    /// The kernel's `cpu.stat` deltas over the same windows (those with a reading).
    pub kernel_nr_throttled: u64,
    pub kernel_throttled_us: f64,
    /// Windows that carried the kernel's figures (0: none recorded).
    #[serde(skip)]
    pub kernel_windows: u64,
    /// Ours over the same windows the kernel figures cover.
    pub ours_nr_throttled_matched: u64,
    pub ours_throttled_us_matched: f64,
    /// Flag code → (windows flagged, the last message and suggestion).
    pub flags: BTreeMap<String, FlagSeen>,
}

/// A diagnosis of one cgroup over the recording.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosed {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub family: String,
    pub code: String,
    /// Its windows, finding and suggestion (flat in the JSON, after `code`).
    #[serde(flatten)]
    pub seen: FlagSeen,
}

/// A flag over the recording: the windows it was raised in, and the last window's finding and
/// the change it suggests.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlagSeen {
    pub windows: u64,
    pub message: String,
    pub evidence: String,
    pub suggestion: String,
    /// The exact change and what it should do (as the last window's flag had them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub change: Vec<crate::model::flag::Change>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<crate::model::flag::Expected>,
}

impl FlagSeen {
    /// The change and its expected effect on one line (empty without a change).
    pub fn change_line(&self) -> String {
        crate::model::flag::change_line(&self.change, self.expected.as_ref())
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Episode {
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub at_unix_ms: u64,
    pub cpu: u32,
    pub duration_us: f64,
    pub runnable: u32,
    pub period: Option<ThrottledPeriod>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Wait {
    pub cgroup_id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub at_unix_ms: u64,
    pub pid: u32,
    pub comm: String,
    pub wait_kind: String,
    pub wait_us: f64,
}

/// A part of a victim's wait other than the named neighbours, and every such part: the ledger's
/// one table ([`crate::family::runq::model::PARTS`]); the matrix's rows, the text, the JSON and
/// the page iterate it.
pub use crate::family::runq::model::{BlamePart as Part, PARTS};

/// Who delayed whom over a recording, from the blame ledger: the [`TOP`] victims (most
/// run-queue wait charged to other cgroups first) against the [`TOP`] culprits (most wait
/// caused first). Times in µs, as the ledger's; `_per_s` is per second of the recording.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct WhoDelayedWhom {
    /// Whether the recording carries the ledger (recorded with `--blame`); without it the rest
    /// is empty.
    pub ledger: bool,
    /// The windows' length summed: what `_per_s` divides by.
    pub seconds: f64,
    /// Run-queue wait of every cgroup on the node over the recording.
    pub node_wait_us: f64,
    /// The cells summed, and their share of `node_wait_us` (0 to 1).
    pub explained_us: f64,
    pub explained_share: f64,
    pub victims: Vec<Victim>,
    pub culprits: Vec<Culprit>,
    /// The non-zero cells, by victim then culprit (indices into `victims` and `culprits`).
    pub cells: Vec<Cell>,
    /// The root cgroup's tasks (kernel threads, host processes outside any container) that
    /// held CPUs others waited for, summed over every victim and window, most first (at most
    /// [`TOP`]): who the victims' `kernel_us` was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernel_tasks: Vec<KernelTaskTotal>,
    pub left_out: LeftOut,
}

/// A root-cgroup task over the recording (`kernel_tasks`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct KernelTaskTotal {
    pub pid: u32,
    /// Its name as last recorded (`None`: it had exited when every window was read).
    pub comm: Option<String>,
    /// The wait it cost other cgroups.
    pub wait_us: f64,
}

/// A row of the matrix: a cgroup that waited for CPUs other cgroups held.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Victim {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    /// Its whole run-queue wait (the row's total: its cells, `other_neighbours_us` and `parts`).
    pub wait_us: f64,
    pub wait_us_per_s: f64,
    /// What other cgroups held its CPU for (the ranking): its cells and `other_neighbours_us`.
    pub charged_to_others_us: f64,
    /// Neighbours outside the culprit columns (and those the ledger did not name).
    pub other_neighbours_us: f64,
    /// The rest of its wait, by [`PARTS`] key (`null`: the kernel could not tell that part).
    pub parts: BTreeMap<&'static str, Option<f64>>,
    /// The ancestors whose quota ran out (`throttled_ancestor_us` by ancestor), most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub throttled_ancestors: Vec<AncestorQuota>,
}

/// An ancestor whose CPU quota throttled a victim, and the wait it cost it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct AncestorQuota {
    pub path: String,
    pub wait_us: f64,
}

/// A column of the matrix: a cgroup whose tasks held CPUs others waited for.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Culprit {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    /// Run-queue wait it caused every other cgroup (its `caused`), not only the victims shown.
    pub caused_us: f64,
    pub caused_us_per_s: f64,
}

/// The wait a culprit cost a victim.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Cell {
    pub victim: usize,
    pub culprit: usize,
    pub wait_us: f64,
    pub wait_us_per_s: f64,
}

/// What the matrix does not show.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LeftOut {
    /// Victims past the first [`TOP`], and the wait other cgroups cost them.
    pub victims: u64,
    pub victims_charged_to_others_us: f64,
    /// Culprits past the first [`TOP`], and the wait they caused.
    pub culprits: u64,
    pub culprits_caused_us: f64,
    /// Cgroups and (victim, culprit) pairs not tallied once the report's memory bound was
    /// reached (their wait is in `node_wait_us`, not in the matrix).
    pub untallied: u64,
}
