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
    /// Which ancestor(s) of it were throttled in the window (the throttle family's throttled
    /// time there), `throttled_ancestor_us` split across them by their throttled time, most
    /// first (nearest first when equal); empty when none is known.
    #[serde(default)]
    pub throttled_ancestors: Vec<Party>,
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
    /// Who in the root cgroup held the CPU: kernel threads (a kernel thread's pid) and host
    /// processes (their process id), most first (at most [`TOP`]; their `wait_us` is part of
    /// `kernel_us`, which also holds the rest; empty before 5.18).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_tasks: Vec<KernelTask>,
    /// The CPU it was queued on sat idle: waking that CPU (an IPI, an idle-state exit, a vCPU the
    /// host had halted) was the wait.
    #[serde(default)]
    pub idle_us: f64,
    /// The CPU handled hard and soft interrupts during the slices that overlapped the wait;
    /// `None` (`null`): this kernel cannot tell (no `CONFIG_IRQ_TIME_ACCOUNTING`, or before 5.18).
    #[serde(default)]
    pub irq_us: Option<f64>,
    /// The hypervisor ran something else on the vCPU meanwhile (steal); `None`: this kernel
    /// cannot tell.
    #[serde(default)]
    pub steal_us: Option<f64>,
    /// Another CPU the task was allowed to run on sat idle while it waited: balancing or
    /// affinity, not capacity; `None`: this kernel cannot tell (before 5.18).
    #[serde(default)]
    pub idle_elsewhere_us: Option<f64>,
    /// Stretches older than the CPU's last 1 024 slices that its summaries of older slices hold
    /// but do not name (not among their 8 longest-held cgroups): other cgroups, or the kernel.
    #[serde(default)]
    pub older_others_us: f64,
    /// What the ledger cannot attribute: waits shorter than `--blame-min-us` before 5.18,
    /// stretches older than what the CPU keeps (`unattributed_history_us`), and parts lost to a full table
    /// (`blame_full`).
    pub unattributed_us: f64,
    /// Of `unattributed_us`: the stretches older than what the CPU keeps (its last 1 024 slices
    /// and, 5.18+, the 32 summaries of the slices before them: at least 16 384 and 32 s), and the
    /// part of a wait begun before cgtrace attached (the CPU's history starts then).
    #[serde(default)]
    pub unattributed_history_us: f64,
}

impl Blame {
    /// All of its wait the other cgroups held the CPU for: the named neighbours and the rest.
    pub fn neighbours_us(&self) -> f64 {
        self.neighbours.iter().map(|n| n.wait_us).sum::<f64>() + self.neighbours_other_us
    }

    /// The parts that add up to the wait, by the names the `part` metric label uses (the
    /// neighbours summed, after `siblings`); `None`: a part this kernel cannot tell.
    pub fn parts(&self) -> Vec<(&'static str, Option<f64>)> {
        let mut out = Vec::with_capacity(PARTS.len() + 1);
        for p in PARTS {
            out.push((p.metric, (p.of)(self)));
            if p.key == "siblings_us" {
                out.push(("neighbours", Some(self.neighbours_us())));
            }
        }
        out
    }

    /// The parts summed (the unknown ones are not there): the wait.
    pub fn total_us(&self) -> f64 {
        self.parts().iter().filter_map(|p| p.1).sum()
    }

    /// Every part times `f` (a ledger charged beyond the wait, scaled to it).
    pub fn scale(&mut self, f: f64) {
        self.throttled_own_us *= f;
        self.throttled_ancestor_us *= f;
        for a in &mut self.throttled_ancestors {
            a.wait_us *= f;
        }
        self.siblings_us *= f;
        self.neighbours_other_us *= f;
        self.kernel_us *= f;
        for t in &mut self.kernel_tasks {
            t.wait_us *= f;
        }
        self.idle_us *= f;
        self.older_others_us *= f;
        for v in [
            &mut self.irq_us,
            &mut self.steal_us,
            &mut self.idle_elsewhere_us,
        ]
        .into_iter()
        .flatten()
        {
            *v *= f;
        }
        self.unattributed_us *= f;
        self.unattributed_history_us *= f;
        for n in &mut self.neighbours {
            n.wait_us *= f;
        }
    }
}

/// A part of a cgroup's wait other than the named neighbours, as the ledger (`runq.blame`) gives
/// it: its key there (and in `report --json`), its `part` metric label, the words people read,
/// and how to read it (`None`: this kernel cannot tell). [`PARTS`] lists them once; the stream's
/// checks, the metrics, the report, the view and the diagnoses iterate it.
pub struct BlamePart {
    pub key: &'static str,
    pub metric: &'static str,
    pub label: &'static str,
    pub of: fn(&Blame) -> Option<f64>,
}

/// Every part of `runq.blame` besides `neighbours` and `neighbours_other_us`, in the order they
/// are shown: a new part of the ledger is one line here (and its field in [`Blame`]).
pub const PARTS: &[BlamePart] = &[
    BlamePart {
        key: "throttled_own_us",
        metric: "throttled_own",
        label: "own quota",
        of: |b| Some(b.throttled_own_us),
    },
    BlamePart {
        key: "throttled_ancestor_us",
        metric: "throttled_ancestor",
        label: "ancestor's quota",
        of: |b| Some(b.throttled_ancestor_us),
    },
    BlamePart {
        key: "siblings_us",
        metric: "siblings",
        label: "its own tasks",
        of: |b| Some(b.siblings_us),
    },
    BlamePart {
        key: "kernel_us",
        metric: "kernel",
        label: "kernel, host",
        of: |b| Some(b.kernel_us),
    },
    BlamePart {
        key: "idle_us",
        metric: "idle",
        label: "idle CPU waking",
        of: |b| Some(b.idle_us),
    },
    BlamePart {
        key: "idle_elsewhere_us",
        metric: "idle_elsewhere",
        label: "idle CPU elsewhere",
        of: |b| b.idle_elsewhere_us,
    },
    BlamePart {
        key: "irq_us",
        metric: "irq",
        label: "interrupts",
        of: |b| b.irq_us,
    },
    BlamePart {
        key: "steal_us",
        metric: "steal",
        label: "hypervisor steal",
        of: |b| b.steal_us,
    },
    BlamePart {
        key: "older_others_us",
        metric: "older_others",
        label: "others, older than the ring",
        of: |b| Some(b.older_others_us),
    },
    BlamePart {
        key: "unattributed_us",
        metric: "unattributed",
        label: "unattributed",
        of: |b| Some(b.unattributed_us),
    },
];

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
    /// The kernel is older than the programs that keep these parts (no `prev_state` in
    /// `sched_switch`, before 5.18): the reason for all three, whatever its build has.
    #[serde(skip)]
    pub before_5_18: bool,
    /// The traced hierarchy's root cgroup id (0: not known): the ledger charges its tasks by
    /// process, as `caused` of this cgroup.
    #[serde(skip)]
    pub root_cgroup: u64,
}

impl BlameCaps {
    /// Every part this kernel cannot tell, with why (`hello.blame.unknown`, `doctor`).
    pub fn unknown(&self) -> Vec<String> {
        let old = "the programs that keep it need sched_switch with prev_state (5.18+), and this \
                   kernel is older";
        let mut out = Vec::new();
        let mut say = |told: bool, part: &str, why: &str| {
            if !told {
                let why = if self.before_5_18 { old } else { why };
                out.push(format!("{part} unknown: {why}"));
            }
        };
        say(
            self.irq,
            "irq_us",
            "this kernel is built without CONFIG_IRQ_TIME_ACCOUNTING (its run queue keeps no \
             interrupt time: rq.prev_irq_time is not in its BTF)",
        );
        say(
            self.steal,
            "steal_us",
            "this kernel is built without CONFIG_PARAVIRT_TIME_ACCOUNTING (its run queue keeps no \
             steal time: rq.prev_steal_time_rq is not in its BTF)",
        );
        say(
            self.idle_elsewhere,
            "idle_elsewhere_us",
            "task_struct.cpus_mask or nr_cpus_allowed is not in this kernel's BTF",
        );
        out
    }
}

/// `hello.blame`: which of the ledger's kernel-dependent parts this kernel can tell, and for each
/// it cannot, why (those parts are `null` in `runq.blame`, never 0).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HelloBlame {
    /// `irq`, `steal`, `idle_elsewhere`: whether this kernel tells that part.
    #[serde(flatten)]
    pub told: BlameCaps,
    /// "irq_us unknown: …", one per part this kernel cannot tell.
    pub unknown: Vec<String>,
}

impl HelloBlame {
    pub fn new(caps: BlameCaps) -> Self {
        Self {
            told: caps,
            unknown: caps.unknown(),
        }
    }
}

/// A task of the root cgroup that held the CPU someone waited for (`kernel_tasks`): a kernel
/// thread (ksoftirqd/1, kworker/0:2) or a host process outside any container.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelTask {
    /// Its process id (a kernel thread's pid).
    pub pid: u32,
    /// Its name (`/proc/PID/comm` when the window was read; `None`: it had exited).
    pub comm: Option<String>,
    pub wait_us: f64,
}

/// A cgroup on the other side of a blame entry.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Party {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub wait_us: f64,
    /// An ancestor in `throttled_ancestors`: its quota in that window, as `cpu.max` has it
    /// ("20000 100000"); absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_max: Option<String>,
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
