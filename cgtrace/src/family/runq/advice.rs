//! `runq`'s diagnosis: long run-queue waits, who caused them (the blame ledger) and the change
//! the largest part asks for, with the share of the wait it should take away.

use crate::{
    family::{
        runq::blame,
        throttle::{
            advice::{ceil_ms_us, quota_changes},
            model::ThrottleWindow,
        },
    },
    model::{
        CgroupWindow,
        flag::{Change, ChangeKind, Expected, Flag},
    },
};

/// A cgroup is flagged `runq_long_waits` when its window p99 is at least this long…
pub const FLAG_P99_US: f64 = 10_000.0;
/// …over at least this many waits (a handful of long waits is noise, not a diagnosis).
pub const FLAG_MIN_WAITS: u64 = 20;

/// The cgroup files a hierarchy's advice names.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    pub weight: &'static str,
    pub quota: &'static str,
    pub v1: bool,
}

impl Knobs {
    pub const V1: Self = Self {
        weight: "cpu.shares",
        quota: "cpu.cfs_quota_us",
        v1: true,
    };
    pub const V2: Self = Self {
        weight: "cpu.weight",
        quota: "cpu.max",
        v1: false,
    };
}

/// A diagnosis before it is a [`Flag`].
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub message: String,
    pub evidence: String,
    pub suggestion: String,
    pub change: Vec<Change>,
    pub expected: Option<Expected>,
}

/// The family's diagnosis: long run-queue waits, and what they were mostly (throttling,
/// preemption, wakeups onto busy CPUs), or with the ledger who held the CPU. Its `family` is
/// left for the family to fill in.
pub fn long_waits(cg: &CgroupWindow, duration_ms: u64) -> Option<Flag> {
    let all = &cg.runq.all;
    if all.count < FLAG_MIN_WAITS || all.p99_us < FLAG_P99_US {
        return None;
    }
    let knobs = if &*cg.hierarchy == "cpu" {
        Knobs::V1
    } else {
        Knobs::V2
    };
    let stats = format!(
        "p99 {} over {} waits",
        crate::hist::micros(all.p99_us),
        all.count
    );
    let own = cg
        .throttle
        .as_deref()
        .and_then(|t| demanded_quota(t, duration_ms, cg.runq.blame.as_ref()));
    if let Some(a) = cg
        .runq
        .blame
        .as_ref()
        .and_then(|b| blame_diagnosis(b, all.sum_us, &knobs, own))
    {
        return Some(Flag {
            code: "runq_long_waits".into(),
            message: format!("{} ({stats})", a.message),
            evidence: format!("{stats}; {}", a.evidence),
            suggestion: a.suggestion,
            change: a.change,
            expected: a.expected,
            ..Flag::default()
        });
    }
    let share = |k: &str| cg.runq.kinds.get(k).map_or(0.0, |h| h.sum_us) / all.sum_us.max(1e-9);
    let (cause, advice, change) = if share("throttled") >= 0.5 {
        (
            "mostly CFS throttling",
            format!("raise or remove its CPU quota ({})", knobs.quota),
            quota_change(&knobs, own),
        )
    } else if share("preempt") >= 0.5 {
        (
            "mostly after preemption: its tasks are CPU-bound and time-sliced",
            format!(
                "give it more CPU ({}, or a cpuset away from busy neighbours) or run fewer runnable threads",
                knobs.weight
            ),
            vec![Change::new(ChangeKind::CgroupFile, knobs.weight, "higher")],
        )
    } else {
        (
            "mostly after wakeups: its tasks woke to find the CPUs busy",
            format!(
                "raise its {} relative to its neighbours, or move the busiest neighbours (sort by WAIT/s) to other CPUs",
                knobs.weight
            ),
            vec![Change::new(ChangeKind::CgroupFile, knobs.weight, "higher")],
        )
    };
    let kinds: Vec<String> = cg
        .runq
        .kinds
        .iter()
        .filter(|(_, h)| h.sum_us > 0.0)
        .map(|(k, h)| format!("{k} {:.0} %", h.sum_us / all.sum_us.max(1e-9) * 100.0))
        .collect();
    Some(Flag {
        family: String::new(),
        code: "runq_long_waits".into(),
        message: format!("waits for a CPU: {stats}, {cause}"),
        evidence: format!(
            "{stats}, {} in all; by kind: {}",
            crate::hist::micros(all.sum_us),
            kinds.join(", ")
        ),
        suggestion: advice,
        change,
        // Without the ledger nothing says what share a change would take away.
        expected: None,
    })
}

/// The quota the cgroup asked for in the window: the CPU it used plus the runnable time it
/// spent throttled (its own quota's part of the wait), in the cgroup's period (whole ms), and
/// that period. `None` without a quota, a usage reading or throttled wait.
fn demanded_quota(
    t: &ThrottleWindow,
    duration_ms: u64,
    b: Option<&blame::Blame>,
) -> Option<(u64, u64)> {
    let quota = t.quota_us?;
    let used = t.usage_us?;
    let throttled = b.map_or(0.0, |b| b.throttled_own_us);
    if throttled <= 0.0 || duration_ms == 0 || t.period_us == 0 {
        return None;
    }
    let cores = (used + throttled) / (duration_ms as f64 * 1e3);
    let q = ceil_ms_us(cores * t.period_us as f64);
    Some((q.max(quota + 1000), t.period_us))
}

/// The quota raised to `own` (from [`demanded_quota`]), as the cgroup file and the Kubernetes
/// limit; without a number, the file to raise.
fn quota_change(knobs: &Knobs, own: Option<(u64, u64)>) -> Vec<Change> {
    match own {
        Some((q, period)) => quota_changes(knobs.v1, q, period),
        None => vec![Change::new(ChangeKind::CgroupFile, knobs.quota, "higher")],
    }
}

/// The blame ledger's account of a long wait: "waited 1.2 s: 80 % behind /kubepods/…/batch-job,
/// 15 % its own quota" (the parts of at least 10 %, largest first), the change the largest part
/// asks for, and that part's share of the wait as what it should take away. `own`: the quota
/// its own throttling asked for (see [`demanded_quota`]). `None` when the ledger attributed
/// less than half of the wait.
pub fn blame_diagnosis(
    b: &blame::Blame,
    wait_us: f64,
    knobs: &Knobs,
    own: Option<(u64, u64)>,
) -> Option<Advice> {
    if wait_us <= 0.0 || b.unattributed_us * 2.0 > wait_us {
        return None;
    }
    let (weight, quota) = (knobs.weight, knobs.quota);
    let label = |p: &blame::Party| {
        p.path
            .clone()
            .or_else(|| p.name.clone())
            .unwrap_or_else(|| format!("cgroup {}", p.id))
    };
    let moving = |what: &str, to: &str| vec![Change::new(ChangeKind::Move, what, to)];
    // (µs, what it is, the change it asks for in words, and as knobs)
    let mut parts: Vec<(f64, String, String, Vec<Change>)> =
        vec![
        (
            b.throttled_own_us,
            "its own quota".into(),
            format!(
                "raise or remove its CPU quota ({quota}){}",
                own.map(|(q, _)| format!(": it asked for {q} µs per period"))
                    .unwrap_or_default()
            ),
            quota_change(knobs, own),
        ),
        match b.throttled_ancestors.first() {
            Some(a) => {
                let who = label(a);
                (
                    b.throttled_ancestor_us,
                    format!("the quota of its ancestor {who}"),
                    format!(
                        "its ancestor {who} ran out of CPU quota: raise that cgroup's {quota}{} \
                         (or move this one out from under it)",
                        a.cpu_max
                            .as_ref()
                            .map(|m| format!(" (now {m})"))
                            .unwrap_or_default()
                    ),
                    vec![Change::new(
                        ChangeKind::CgroupFile,
                        format!("{}/{quota}", who.trim_end_matches('/')),
                        a.cpu_max
                            .as_ref()
                            .map_or("higher".into(), |m| format!("higher than {m}")),
                    )],
                )
            }
            None => (
                b.throttled_ancestor_us,
                "an ancestor's quota".into(),
                format!("raise the CPU quota ({quota}) of the parent whose quota ran out"),
                vec![Change::new(
                    ChangeKind::CgroupFile,
                    format!("<parent>/{quota}"),
                    "higher",
                )],
            ),
        },
        (
            b.siblings_us,
            "its own other threads".into(),
            format!("it has more runnable threads than CPU: run fewer, or give it more ({weight})"),
            vec![
                Change::new(ChangeKind::Runtime, "runnable threads", "fewer"),
                Change::new(ChangeKind::CgroupFile, weight, "higher"),
            ],
        ),
        (
            b.neighbours_other_us,
            "other cgroups".into(),
            format!("its CPUs are oversubscribed: raise its {weight} or move it to less busy CPUs"),
            vec![Change::new(ChangeKind::CgroupFile, weight, "higher")],
        ),
        (
            b.kernel_us,
            "kernel threads and host processes".into(),
            "the root cgroup held its CPUs (kernel threads such as ksoftirqd or kworkers, or \
             host processes outside any cgroup): find them with `top`/`perf top` on its CPUs, \
             move interrupt load (irqbalance, RPS) or give it CPUs the host does not use (cpuset)"
                .into(),
            match b.kernel_tasks.first() {
                Some(t) => moving(
                    &format!(
                        "host process {} [{}]",
                        t.comm.as_deref().unwrap_or("?"),
                        t.pid
                    ),
                    "CPUs this cgroup does not use",
                ),
                None => moving("host work in the root cgroup", "CPUs this cgroup does not use"),
            },
        ),
        (
            b.idle_us,
            "its CPU waking from idle".into(),
            "its CPU was idle and slow to wake (idle states, a halted vCPU): limit deep idle \
             states (cpuidle, `idle=poll` for latency-critical hosts) or keep it on busy CPUs"
                .into(),
            moving("deep idle states (cpuidle state disable)", ""),
        ),
        (
            b.idle_elsewhere_us.unwrap_or(0.0),
            "an idle CPU elsewhere".into(),
            "its allowed CPUs include idle ones: a balancing or affinity problem, not capacity: \
             check its cpuset, CPU affinity (taskset) and isolcpus/nohz_full, not its CPU share"
                .into(),
            moving("cpuset.cpus / CPU affinity", "include the idle CPUs"),
        ),
        (
            b.irq_us.unwrap_or(0.0),
            "interrupts".into(),
            "its CPU was busy with hard and soft interrupts: spread the interrupt load (IRQ \
             affinity in /proc/irq/*/smp_affinity, irqbalance, RPS/RFS) or move it off the CPUs \
             that take them (cpuset)"
                .into(),
            moving("/proc/irq/*/smp_affinity", "CPUs this cgroup does not use"),
        ),
        (
            b.steal_us.unwrap_or(0.0),
            "hypervisor steal".into(),
            "the VM's host ran other work on its vCPUs (steal): a larger or dedicated instance, \
             or fewer vCPUs overcommitted on the host"
                .into(),
            moving("the VM", "a dedicated or larger instance"),
        ),
    ];
    for n in &b.neighbours {
        let who = label(n);
        parts.push((
            n.wait_us,
            format!("behind {who}"),
            format!(
                "{who} held its CPUs: lower that cgroup's {weight} or move it to other CPUs (cpuset), or raise this one's {weight}"
            ),
            vec![
                Change::new(ChangeKind::Move, who.clone(), "other CPUs (its cpuset.cpus)"),
                Change::new(
                    ChangeKind::CgroupFile,
                    format!("{}/{weight}", who.trim_end_matches('/')),
                    "lower",
                ),
            ],
        ));
    }
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    let share = |us: f64| us / wait_us * 100.0;
    let shown: Vec<String> = parts
        .iter()
        .filter(|p| p.0 >= 0.1 * wait_us)
        .take(3)
        .map(|p| format!("{:.0} % {}", share(p.0), p.1))
        .collect();
    let evidence: Vec<String> = parts
        .iter()
        .filter(|p| p.0 > 0.0)
        .take(5)
        .map(|p| format!("{} {}", crate::hist::micros(p.0), p.1))
        .collect();
    let (us, what, suggestion, change) = parts.into_iter().next()?;
    Some(Advice {
        message: format!(
            "waited {} for a CPU: {}",
            crate::hist::micros(wait_us),
            shown.join(", ")
        ),
        evidence: format!(
            "{} waited: {}; {} unattributed",
            crate::hist::micros(wait_us),
            evidence.join(", "),
            crate::hist::micros(b.unattributed_us)
        ),
        suggestion,
        change,
        expected: Some(Expected {
            metric: "runq_wait_us".into(),
            change_percent: -share(us),
            words: format!(
                "run-queue wait −{:.0} % (the part {what}), if nothing else takes its place",
                share(us)
            ),
        }),
    })
}
