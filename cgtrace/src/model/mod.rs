//! The model: what the daemon produces, as typed values with no BPF in them: the `hello` header
//! and one `window` per interval, whose per-family parts are the families' own types
//! (`family::<name>`). The stream writes them as NDJSON; the view, `record`, `replay`, `report`
//! and the metrics consume the same types.
//!
//! Schema version [`SCHEMA`]: fields are only ever added within a version.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hist::HistSummary;

pub mod flag;
pub mod kind_map;
pub mod ndjson;

pub use flag::Flag;

/// Version of the stream/recording schema.
pub const SCHEMA: u32 = 1;

/// First line of the stream: what is traced, how, and on what.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hello {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema: u32,
    pub cgtrace: String,
    pub host: String,
    pub kernel: String,
    pub cpus: u32,
    /// Wall clock (Unix ms) when tracing started.
    pub start_unix_ms: u64,
    pub interval_ms: u64,
    pub cgroup: CgroupLayoutInfo,
    /// Attach mode per event family (`runq`, later `throttle`, `reads`).
    pub families: BTreeMap<String, FamilyMode>,
    /// What the kernel allows, probed once at start.
    pub capabilities: Capabilities,
    /// How histogram buckets are laid out.
    pub hist: HistSpec,
    /// Capabilities the daemon keeps once attached (every other one is dropped; see
    /// `safety/privilege.rs`). Absent in recordings made before cgtrace dropped them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_capabilities: Vec<String>,
    /// How run-queue waits are split into their throttled part and the rest on this kernel.
    /// Absent in recordings made before the split was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_split: Option<WaitSplit>,
    /// The blame ledger (`--blame`): waits at least this long (µs) are charged to whoever held
    /// the CPU. Absent when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame_min_us: Option<u64>,
    /// With the blame ledger: which of its kernel-dependent parts this kernel can tell and why
    /// not. Absent when it is off (and in recordings made before it was reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame: Option<crate::family::runq::model::HelloBlame>,
    /// A sched_ext (BPF) scheduler on the host, and what it means for `throttle`. Absent on
    /// kernels without sched_ext (and in recordings made before it was reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_ext: Option<crate::family::throttle::sched_ext::SchedExt>,
}

/// `hello.wait_split`: how the `throttled` wait kind is told apart from `wakeup`/`preempt`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WaitSplit {
    /// `task_throttle` (6.18+), `throttled_clock_self` (6.8+), `throttled_clock_pelt` (6.0+),
    /// `throttled_clock_task` (older), `switch_out` (no throttled clock) or `none`.
    pub method: String,
    /// Whether the throttled part is measured in the clock of `cpu.stat`'s throttled time.
    pub exact: bool,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CgroupLayoutInfo {
    /// `v1`, `v2` or `hybrid`.
    pub layout: String,
    /// Hierarchy that run-queue waits are keyed by: `cpu` (v1) or `cgroup2`.
    pub runq_hierarchy: String,
    /// Mount point of that hierarchy.
    pub runq_mount: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FamilyMode {
    pub mode: AttachMode,
    pub detail: String,
}

/// How a family's programs are attached (`hello.families.<name>.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachMode {
    /// BTF tracepoints (`runq`).
    TpBtf,
    Fentry,
    Kprobe,
    /// `throttle`: fentry on `tg_throttle_down`/`tg_unthrottle_up` (the hierarchy walk).
    Tgwalk,
    Tracepoint,
    /// `reads`: raw syscall tracepoints.
    Syscall,
    /// Turned off on the command line.
    Off,
    /// The kernel lacks what it needs; `detail` says what.
    Unavailable,
    /// A mode named by a newer cgtrace (a recording read by an older one).
    #[serde(other)]
    Unknown,
}

impl AttachMode {
    /// Its programs are attached and its data flow.
    pub fn is_attached(self) -> bool {
        !matches!(self, Self::Off | Self::Unavailable)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TpBtf => "tp_btf",
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Tgwalk => "tgwalk",
            Self::Tracepoint => "tracepoint",
            Self::Syscall => "syscall",
            Self::Off => "off",
            Self::Unavailable => "unavailable",
            Self::Unknown => "unknown",
        }
    }

    /// The mode a forced `--throttle-mode`/`--reads-mode` value names.
    pub fn from_name(name: &str) -> Self {
        match name {
            "tp_btf" => Self::TpBtf,
            "fentry" => Self::Fentry,
            "kprobe" => Self::Kprobe,
            "tgwalk" => Self::Tgwalk,
            "tracepoint" => Self::Tracepoint,
            "syscall" => Self::Syscall,
            "off" => Self::Off,
            "unavailable" => Self::Unavailable,
            _ => Self::Unknown,
        }
    }
}

impl std::fmt::Display for AttachMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Capabilities {
    pub btf: bool,
    pub tp_btf: bool,
    pub fentry: bool,
    pub kprobe: bool,
    /// Why a capability is missing, by name.
    pub notes: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistSpec {
    pub unit: String,
    /// Sub-buckets per power of two = 2^sub_bits.
    pub sub_bits: u32,
    pub buckets: usize,
}

impl HistSpec {
    /// The histograms this build makes (`cgtrace_common::hist`): ns, 4 buckets per power of two.
    pub fn this_build() -> Self {
        Self {
            unit: "ns".into(),
            sub_bits: cgtrace_common::hist::SUB_BITS,
            buckets: cgtrace_common::hist::NR_BUCKETS,
        }
    }
}

/// One interval of data.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Window {
    #[serde(rename = "type")]
    pub kind: String,
    pub seq: u64,
    /// Wall clock (Unix ms) at the end of the window.
    pub end_unix_ms: u64,
    /// Actual length of the window (the last one may be short).
    pub duration_ms: u64,
    pub events: EventCounts,
    /// Cgroups in the table / evicted from it so far (bounded by `--max-cgroups`).
    pub cgroups_tracked: usize,
    pub cgroups_evicted: u64,
    /// Cgroups with activity in this window.
    pub cgroups: Vec<CgroupWindow>,
    /// `reads`: memory cgroups whose stat files were read in the window, with the flush cost and
    /// their dying descendants, most read time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memcgs: Vec<crate::family::reads::model::MemcgTarget>,
    /// `reads`: dying memory cgroups on the host at the end of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dying_memcgs: Option<crate::family::reads::model::DyingMemcgs>,
    /// `reads`: cgroups created and removed in the window, and by whom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn: Option<crate::family::reads::model::Churn>,
    /// What cgtrace itself cost the host in the window. Absent in recordings made before it was
    /// reported.
    #[serde(rename = "self", default, skip_serializing_if = "Option::is_none")]
    pub self_cost: Option<SelfCost>,
}

/// `window.self`: cgtrace's own cost in the window, as bpftop shows it for every program.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SelfCost {
    /// Whether the kernel timed the programs (`BPF_ENABLE_STATS` held by cgtrace, or
    /// `kernel.bpf_stats_enabled` set): without it `run_us`, `ns_per_run` and `bpf_cpu_pct` are 0.
    pub bpf_stats: bool,
    /// Every program that ran in the window, most time first.
    pub programs: Vec<ProgramCost>,
    /// Time in all programs, in % of one CPU over the window.
    pub bpf_cpu_pct: f64,
    /// The daemon's own CPU time (user + system), in % of one CPU over the window.
    pub daemon_cpu_pct: f64,
    /// The daemon's resident memory at the end of the window.
    pub rss_kib: u64,
}

/// One BPF program's runs in a window (the kernel's `run_cnt`, `run_time_ns`,
/// `recursion_misses` of the program).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProgramCost {
    pub name: String,
    pub runs: u64,
    pub run_us: f64,
    /// Mean time per run (`null` without runs or without `bpf_stats`).
    pub ns_per_run: Option<f64>,
    /// Runs the kernel skipped because the program was already running on that CPU.
    pub recursion_misses: u64,
}

/// Kernel events handled and lost in the window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EventCounts {
    /// Scheduler events the programs handled (`sched_switch` + `sched_wakeup*`).
    pub seen: u64,
    /// Events or waits lost (full maps or ring buffer, undecodable records).
    pub dropped: u64,
    /// Every kernel counter's delta, by name.
    pub counters: BTreeMap<String, u64>,
}

/// One cgroup's data in a window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CgroupWindow {
    /// `kernfs_node.id` (the directory's inode number) in `hierarchy`.
    pub id: u64,
    pub hierarchy: std::sync::Arc<str>,
    /// Path relative to the hierarchy's mount (`/` for the root); `null` if it could not be
    /// resolved (the cgroup was removed before it was seen).
    pub path: Option<String>,
    /// A human name derived from the path (pod, container, unit), if the layout made one obvious.
    pub name: Option<String>,
    /// What kind of thing `name` is: `pod`, `container`, `docker`, `systemd`, `session`.
    pub name_kind: Option<crate::cgroup::name::NameKind>,
    /// Kubernetes namespace and pod, and the container's name, where metadata gave them (for a
    /// container or pod without metadata, its short name); `null` fields are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// A Kubernetes pod's or container's QoS class (`guaranteed`, `burstable`, `besteffort`),
    /// from where kubelet put its cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// The cgroup was removed during this window; this is its last appearance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    pub runq: RunqWindow,
    /// Run-queue wait this cgroup's tasks caused others by holding their CPU (the blame ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caused: Option<crate::family::runq::model::Caused>,
    /// CFS bandwidth throttling, for cgroups with a quota whose period timer ran in the window
    /// (boxed: 360 bytes most cgroups do not have; every window entry is moved into the view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Box<crate::family::throttle::model::ThrottleWindow>>,
    /// Pseudo-file reads by this cgroup's tasks, per (comm, file), most time first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<Vec<crate::family::reads::model::FileReads>>,
    /// Every family's diagnoses of this cgroup in this window (`throttle`'s are also in
    /// `throttle.flags`, where schema 1 first had them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
    /// Parts of families this build does not know (a recording made by a newer cgtrace), as they
    /// were: `report` ranks their histograms by shape.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl CgroupWindow {
    /// A cgroup's window with its naming and run-queue part; the other families add theirs.
    pub fn new(
        id: u64,
        hierarchy: impl Into<std::sync::Arc<str>>,
        path: Option<String>,
        name: Option<&crate::cgroup::name::Name>,
        runq: RunqWindow,
    ) -> Self {
        let parts = name
            .map(crate::cgroup::name::Name::labels)
            .unwrap_or_default();
        Self {
            id,
            hierarchy: hierarchy.into(),
            path,
            name: name.map(|n| n.display.clone()),
            name_kind: name.map(|n| n.kind),
            namespace: parts.namespace,
            pod: parts.pod,
            container: parts.container,
            qos: name.and_then(|n| n.qos.clone()),
            removed: false,
            runq,
            caused: None,
            throttle: None,
            reads: None,
            flags: Vec::new(),
            other: BTreeMap::new(),
        }
    }
}

/// Run-queue latency of one cgroup in one window: all waits, and split by wait kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunqWindow {
    #[serde(flatten)]
    pub all: HistSummary,
    /// `wakeup`, `preempt`, `throttled` (present only when non-empty).
    pub kinds: kind_map::KindMap,
    /// Sleep the kernel's `run_delay` counted as waiting (6.12+: a sleeping task still on its
    /// run queue, moved to another CPU, is stamped queued through its sleep), left out of the
    /// waits: `sum_us + run_delay_asleep_us` is the kernel's `run_delay` (absent when 0).
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub run_delay_asleep_us: f64,
    /// Who the wait is charged to (the blame ledger; absent when it is off or nothing was
    /// charged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame: Option<crate::family::runq::model::Blame>,
}
