//! Resolves [`cgtrace_common::layout::Layout`] from the running kernel's BTF.

use cgtrace_common::layout::{
    ABSENT, CGROUP_MODE_V1, CGROUP_MODE_V2, Layout, THR_CLOCK_PELT, THR_CLOCK_SELF, THR_CLOCK_TASK,
};

use crate::bpf::btf::Btf;

/// A field the programs need is missing from this kernel's BTF.
#[derive(Debug, thiserror::Error)]
#[error("kernel BTF has no {what}; this kernel is not supported for {family}")]
pub struct MissingField {
    pub what: String,
    pub family: &'static str,
}

fn off(btf: &Btf, s: &str, f: &str) -> Result<u32, MissingField> {
    btf.field(s, f)
        .map(|i| i.offset)
        .ok_or_else(|| MissingField {
            what: format!("{s}.{f}"),
            family: "runq",
        })
}

/// Offsets for the `runq` family. `cgroup_v1` selects the cpu controller's v1 cgroup as identity;
/// otherwise the task's own cgroup2 cgroup.
pub fn resolve(btf: &Btf, cgroup_v1: bool) -> Result<Layout, MissingField> {
    let (task_state, task_state_size) = match btf
        .field("task_struct", "__state")
        .or_else(|| btf.field("task_struct", "state"))
    {
        Some(f) => (f.offset, f.size),
        None => (ABSENT, 0),
    };
    let cpu_subsys_id = btf
        .enum_value("cgroup_subsys_id", "cpu_cgrp_id")
        .map(|v| v as u32)
        .unwrap_or(ABSENT);
    if cgroup_v1 && cpu_subsys_id == ABSENT {
        return Err(MissingField {
            what: "cgroup_subsys_id::cpu_cgrp_id (kernel without CONFIG_CGROUP_SCHED)".into(),
            family: "runq",
        });
    }
    let switch_args = btf
        .tracepoint_args("sched_switch")
        .ok_or_else(|| MissingField {
            what: "tracepoint sched_switch".into(),
            family: "runq",
        })?;
    let mut layout = Layout {
        task_pid: off(btf, "task_struct", "pid")?,
        task_tgid: off(btf, "task_struct", "tgid")?,
        task_comm: off(btf, "task_struct", "comm")?,
        task_cgroups: off(btf, "task_struct", "cgroups")?,
        task_state,
        task_state_size,
        css_set_subsys: off(btf, "css_set", "subsys")?,
        css_set_dfl_cgrp: off(btf, "css_set", "dfl_cgrp")?,
        css_cgroup: off(btf, "cgroup_subsys_state", "cgroup")?,
        cgroup_kn: off(btf, "cgroup", "kn")?,
        kn_id: off(btf, "kernfs_node", "id")?,
        cpu_subsys_id,
        cgroup_mode: if cgroup_v1 {
            CGROUP_MODE_V1
        } else {
            CGROUP_MODE_V2
        },
        switch_has_prev_state: u32::from(switch_args >= 4),
        ..Layout::UNSET
    };
    if layout.switch_has_prev_state == 0 && layout.task_state == ABSENT {
        return Err(MissingField {
            what: "task_struct.__state or task_struct.state".into(),
            family: "runq",
        });
    }
    resolve_rq_clock(btf, &mut layout);
    resolve_kernel_stamps(btf, &mut layout);
    resolve_blame_extras(btf, &mut layout);
    Ok(layout)
}

/// The run queue's clock that the scheduler stamps waits with (`rq.clock`, reached through
/// `task_struct.se.cfs_rq` and `cfs_rq.rq`, `CONFIG_FAIR_GROUP_SCHED`), with `rq.cpu` to tell
/// whether a wait ended on the run queue it began on. cgtrace's own wait stamps are taken in it
/// where these fields exist (else with `bpf_ktime_get_ns`, which is read after the work the
/// scheduler did since it updated the clock — a throttle, a lock — and a preempted vCPU can
/// stretch that to milliseconds), and the kernel-stamps mode needs it. All or none.
fn resolve_rq_clock(btf: &Btf, layout: &mut Layout) {
    if let Some([se_cfs_rq, cfs_rq_rq, clock, cpu]) = all_offsets(
        btf,
        [
            ("task_struct", "se.cfs_rq"),
            ("cfs_rq", "rq"),
            ("rq", "clock"),
            ("rq", "cpu"),
        ],
    ) {
        layout.task_se_cfs_rq = se_cfs_rq;
        layout.cfs_rq_rq = cfs_rq_rq;
        layout.rq_clock = clock;
        layout.rq_cpu = cpu;
    }
}

/// What the blame ledger's `irq`, `steal` and `idle_elsewhere` parts read, each on its own: the
/// run queue's accounted interrupt time (`rq.prev_irq_time`, `CONFIG_IRQ_TIME_ACCOUNTING`) and
/// steal time (`rq.prev_steal_time_rq`, `CONFIG_PARAVIRT_TIME_ACCOUNTING`), both reached like
/// `rq.clock` ([`resolve_rq_clock`]), and a task's allowed CPUs (`task_struct.cpus_mask`, 5.3+,
/// with `nr_cpus_allowed`). A field this kernel lacks stays ABSENT: that part is unknown here,
/// and `hello` and `doctor` say so.
fn resolve_blame_extras(btf: &Btf, layout: &mut Layout) {
    if layout.rq_clock != ABSENT {
        if let Some(f) = btf.field("rq", "prev_irq_time") {
            layout.rq_prev_irq_time = f.offset;
        }
        if let Some(f) = btf.field("rq", "prev_steal_time_rq") {
            layout.rq_prev_steal_time_rq = f.offset;
        }
    }
    if let Some([mask, nr]) = all_offsets(
        btf,
        [
            ("task_struct", "cpus_mask"),
            ("task_struct", "nr_cpus_allowed"),
        ],
    ) {
        layout.task_cpus_mask = mask;
        layout.task_nr_cpus_allowed = nr;
    }
}

/// The offsets of every `(struct, dotted field path)`, or none if one is missing.
fn all_offsets<const N: usize>(btf: &Btf, fields: [(&str, &str); N]) -> Option<[u32; N]> {
    let mut out = [0; N];
    for (o, (strukt, path)) in out.iter_mut().zip(fields) {
        *o = btf.field_path(strukt, path)?.offset;
    }
    Some(out)
}

/// What waits need to be read from the kernel's own stamps (`sched_info`, see
/// `family::runq::starts::WaitStarts::KernelStamps`), with the run queue's clock
/// ([`resolve_rq_clock`]): the task's `sched_info.run_delay` and `.last_queued`
/// (`CONFIG_SCHED_INFO`) and its `nivcsw`. All or none.
fn resolve_kernel_stamps(btf: &Btf, layout: &mut Layout) {
    if let Some([run_delay, last_queued, nivcsw]) = all_offsets(
        btf,
        [
            ("task_struct", "sched_info.run_delay"),
            ("task_struct", "sched_info.last_queued"),
            ("task_struct", "nivcsw"),
        ],
    ) {
        layout.task_run_delay = run_delay;
        layout.task_last_queued = last_queued;
        layout.task_nivcsw = nivcsw;
    }
}

/// Kernel functions the tracepoint-only throttle mode recognises by address.
pub const THROTTLE_SYMBOLS: [&str; 3] = [
    "sched_cfs_period_timer",
    "sched_cfs_slack_timer",
    "__cfsb_csd_unthrottle",
];

/// Fills in the `throttle` family's fields (tracepoint-only mode), or says what is missing.
pub fn resolve_throttle(
    btf: &Btf,
    syms: &std::collections::HashMap<String, u64>,
    layout: &mut Layout,
) -> Result<(), MissingField> {
    let miss = |what: &str| MissingField {
        what: what.to_string(),
        family: "throttle",
    };
    let f = |s: &str, f: &str| btf.field(s, f).ok_or_else(|| miss(&format!("{s}.{f}")));
    let fp = |s: &str, path: &str| {
        btf.field_path(s, path)
            .ok_or_else(|| miss(&format!("{s}.{path}")))
    };
    for tp in [
        "hrtimer_expire_entry",
        "hrtimer_expire_exit",
        "sched_switch",
    ] {
        btf.tracepoint_args(tp)
            .ok_or_else(|| miss(&format!("tracepoint {tp}")))?;
    }
    let throttled = f("cfs_rq", "throttled")?;
    layout.cfs_rq_throttled = throttled.offset;
    match throttled.bitfield {
        Some((shift, bits)) => {
            layout.cfs_rq_throttled_shift = shift;
            layout.cfs_rq_throttled_bits = bits;
        }
        None => layout.cfs_rq_throttled_bits = 0,
    }
    layout.task_throttled = btf
        .field("task_struct", "throttled")
        .map_or(ABSENT, |i| i.offset);
    layout.task_se = f("task_struct", "se")?.offset;
    layout.task_se_cfs_rq = fp("task_struct", "se.cfs_rq")?.offset;
    layout.se_parent = f("sched_entity", "parent")?.offset;
    layout.se_cfs_rq = f("sched_entity", "cfs_rq")?.offset;
    layout.cfs_rq_throttle_count = f("cfs_rq", "throttle_count")?.offset;
    layout.cfs_rq_h_nr = btf
        .field("cfs_rq", "h_nr_queued")
        .or_else(|| btf.field("cfs_rq", "h_nr_running"))
        .ok_or_else(|| miss("cfs_rq.h_nr_queued or h_nr_running"))?
        .offset;
    layout.cfs_rq_tg = f("cfs_rq", "tg")?.offset;
    layout.tg_css = f("task_group", "css")?.offset;
    layout.tg_cfs_bandwidth = f("task_group", "cfs_bandwidth")?.offset;
    layout.cfs_b_period_timer = f("cfs_bandwidth", "period_timer")?.offset;
    layout.cfs_b_throttled_list = f("cfs_bandwidth", "throttled_cfs_rq")?.offset;
    layout.hrtimer_function = f("hrtimer", "function")?.offset;
    layout.task_sum_exec = fp("task_struct", "se.sum_exec_runtime")?.offset;
    layout.task_prev_sum_exec = fp("task_struct", "se.prev_sum_exec_runtime")?.offset;
    layout.cfs_rq_runtime_enabled = f("cfs_rq", "runtime_enabled")?.offset;
    layout.cfs_b_throttled_time = f("cfs_bandwidth", "throttled_time")?.offset;
    layout.tg_cfs_rq = f("task_group", "cfs_rq")?.offset;
    layout.tg_parent = f("task_group", "parent")?.offset;
    layout.rq_cpu = f("rq", "cpu")?.offset;
    layout.cfs_b_nr_periods = f("cfs_bandwidth", "nr_periods")?.offset;
    layout.cfs_b_nr_throttled = f("cfs_bandwidth", "nr_throttled")?.offset;
    resolve_wait_split(btf, layout);
    let sym = |name: &str| {
        syms.get(name).copied().ok_or_else(|| {
            miss(&format!(
                "address of {name} in /proc/kallsyms (hidden by kernel.kptr_restrict, or inlined)"
            ))
        })
    };
    layout.period_timer_fn = sym("sched_cfs_period_timer")?;
    layout.slack_timer_fn = syms.get("sched_cfs_slack_timer").copied().unwrap_or(0);
    // Before 6.2 remote unthrottles run inside the period timer: no CSD to watch.
    layout.csd_unthrottle_fn = syms.get("__cfsb_csd_unthrottle").copied().unwrap_or(0);
    Ok(())
}

/// The kernel clock that splits waits into their throttled part and the rest, in order of
/// preference: (cumulative field, open-interval start, `rq` clock, `rq` field subtracted from
/// it, kind).
const THR_CLOCKS: [(&str, &str, &str, Option<&str>, u32); 3] = [
    (
        "throttled_clock_self_time",
        "throttled_clock_self",
        "clock",
        None,
        THR_CLOCK_SELF,
    ),
    (
        "throttled_clock_pelt_time",
        "throttled_clock_pelt",
        "clock_pelt",
        Some("lost_idle_time"),
        THR_CLOCK_PELT,
    ),
    (
        "throttled_clock_task_time",
        "throttled_clock_task",
        "clock_task",
        None,
        THR_CLOCK_TASK,
    ),
];

/// Chooses how waits are split on this kernel (after the throttle fields are resolved): nothing
/// to do with task-based throttling (6.18+, `task_struct.throttled`), else the first of
/// [`THR_CLOCKS`] this kernel has. Without one, waits stay unsplit.
fn resolve_wait_split(btf: &Btf, layout: &mut Layout) {
    if layout.task_throttled != ABSENT {
        return;
    }
    let Some(cfs_rq_rq) = btf.field("cfs_rq", "rq") else {
        return;
    };
    for (time, since, clock, sub, kind) in THR_CLOCKS {
        let (Some(time), Some(since), Some(clock)) = (
            btf.field("cfs_rq", time),
            btf.field("cfs_rq", since),
            btf.field("rq", clock),
        ) else {
            continue;
        };
        let sub = match sub {
            Some(name) => match btf.field("rq", name) {
                Some(f) => f.offset,
                None => continue,
            },
            None => ABSENT,
        };
        layout.cfs_rq_thr_clock_time = time.offset;
        layout.cfs_rq_thr_clock = since.offset;
        layout.cfs_rq_rq = cfs_rq_rq.offset;
        layout.rq_thr_clock = clock.offset;
        layout.rq_thr_clock_sub = sub;
        layout.thr_clock_kind = kind;
        return;
    }
}

/// How run-queue waits are split into their throttled part and the rest on this kernel
/// (`hello.wait_split`, `doctor`).
pub fn wait_split(layout: &Layout) -> crate::model::WaitSplit {
    use crate::model::WaitSplit;
    let (method, exact, detail) = if layout.cfs_rq_throttled == ABSENT {
        (
            "none",
            false,
            "throttle fields unavailable: waits of a throttled group count as wakeup or preempt",
        )
    } else if layout.task_throttled != ABSENT {
        (
            "task_throttle",
            true,
            "tasks are throttled one by one (6.18+): a wait is throttled from its task's \
             switch-out into the throttled group to the group's unthrottle",
        )
    } else {
        match layout.thr_clock_kind {
            THR_CLOCK_SELF => (
                "throttled_clock_self",
                true,
                "the kernel's throttled clock of each cfs_rq (throttled_clock_self_time, rq \
                 clock, the clock of cpu.stat) splits every wait",
            ),
            THR_CLOCK_PELT => (
                "throttled_clock_pelt",
                false,
                "the kernel's PELT-clock throttled time of each cfs_rq splits every wait: it \
                 leaves out IRQ and steal time and runs slow on a CPU below its top frequency \
                 (frequency-invariant hosts), so the throttled part can be short by as much",
            ),
            THR_CLOCK_TASK => (
                "throttled_clock_task",
                false,
                "the kernel's task-clock throttled time of each cfs_rq splits every wait: it \
                 leaves out IRQ and steal time, so the throttled part can be short by as much",
            ),
            _ => (
                "switch_out",
                false,
                "this kernel keeps no throttled clock per cfs_rq: only a task switched out into \
                 a throttled group is marked throttled; its queued siblings count as wakeup or \
                 preempt",
            ),
        }
    };
    WaitSplit {
        method: method.into(),
        exact,
        detail: detail.into(),
    }
}

/// Read syscall numbers on this architecture: `read`, `pread64`, `readv`, `preadv`, `preadv2`;
/// and the `pt_regs` fields holding a syscall's first argument and its number at exit.
#[cfg(target_arch = "x86_64")]
const READ_SYSCALLS: Option<([u32; 6], [&str; 3])> =
    Some(([0, 17, 19, 295, 327, 40], ["di", "si", "orig_ax"]));
#[cfg(not(target_arch = "x86_64"))]
const READ_SYSCALLS: Option<([u32; 6], [&str; 3])> = None;

/// What the `reads` family can use on this kernel, beyond its field offsets.
#[derive(Clone, Debug, Default)]
pub struct ReadsSupport {
    /// The syscall mode's syscall numbers (`None`: not on this architecture).
    pub syscalls: Option<[u32; cgtrace_common::reads::NR_READ_SYSCALLS]>,
    /// rstat lock tracepoints (6.10+) and `memcg_flush_stats` (6.11+).
    pub rstat_tracepoints: bool,
    pub memcg_flush_tracepoint: bool,
    pub churn_tracepoints: bool,
}

/// Fills in the `reads` family's fields, or says what is missing.
pub fn resolve_reads(btf: &Btf, layout: &mut Layout) -> Result<ReadsSupport, MissingField> {
    let miss = |what: &str| MissingField {
        what: what.to_string(),
        family: "reads",
    };
    let f = |s: &str, f: &str| {
        btf.field(s, f)
            .map(|i| i.offset)
            .ok_or_else(|| miss(&format!("{s}.{f}")))
    };
    let fp = |s: &str, path: &str| {
        btf.field_path(s, path)
            .map(|i| i.offset)
            .ok_or_else(|| miss(&format!("{s}.{path}")))
    };
    layout.task_files = f("task_struct", "files")?;
    layout.files_fdt = f("files_struct", "fdt")?;
    layout.fdt_max_fds = f("fdtable", "max_fds")?;
    layout.fdt_fd = f("fdtable", "fd")?;
    layout.file_inode = f("file", "f_inode")?;
    layout.file_dentry = fp("file", "f_path.dentry")?;
    layout.inode_sb = f("inode", "i_sb")?;
    layout.inode_ino = f("inode", "i_ino")?;
    layout.inode_private = f("inode", "i_private")?;
    layout.sb_magic = f("super_block", "s_magic")?;
    layout.sb_dev = f("super_block", "s_dev")?;
    layout.dentry_parent = f("dentry", "d_parent")?;
    layout.dentry_name = fp("dentry", "d_name.name")?;
    layout.kn_parent = f("kernfs_node", "__parent").or_else(|_| f("kernfs_node", "parent"))?;
    layout.kn_priv = f("kernfs_node", "priv")?;
    if layout.kn_id == ABSENT {
        layout.kn_id = f("kernfs_node", "id")?;
    }
    if layout.cgroup_kn == ABSENT {
        layout.cgroup_kn = f("cgroup", "kn")?;
    }
    layout.cgroup_nr_dying = f("cgroup", "nr_dying_descendants")?;
    layout.cgroup_level = f("cgroup", "level")?;
    layout.cgroup_root = f("cgroup", "root")?;
    layout.root_hierarchy_id = f("cgroup_root", "hierarchy_id")?;
    layout.kiocb_filp = f("kiocb", "ki_filp")?;
    let mut support = ReadsSupport {
        rstat_tracepoints: [
            "cgroup_rstat_lock_contended",
            "cgroup_rstat_locked",
            "cgroup_rstat_unlock",
        ]
        .iter()
        .all(|tp| btf.tracepoint_args(tp).is_some()),
        memcg_flush_tracepoint: btf
            .tracepoint_args("memcg_flush_stats")
            .is_some_and(|n| n >= 4),
        churn_tracepoints: btf.tracepoint_args("cgroup_mkdir").is_some()
            && btf.tracepoint_args("cgroup_rmdir").is_some(),
        syscalls: None,
    };
    if let Some((nrs, [arg0, arg1, nr])) = READ_SYSCALLS
        && let (Ok(a0), Ok(a1), Ok(n)) = (f("pt_regs", arg0), f("pt_regs", arg1), f("pt_regs", nr))
    {
        layout.regs_arg0 = a0;
        layout.regs_arg1 = a1;
        layout.regs_nr = n;
        support.syscalls = Some(nrs);
    }
    Ok(support)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_layout_resolves_in_both_modes() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("skipping: no readable kernel BTF");
            return;
        };
        let v1 = resolve(&btf, true).expect("v1 layout");
        let v2 = resolve(&btf, false).expect("v2 layout");
        assert_eq!(v1.cgroup_mode, CGROUP_MODE_V1);
        assert_eq!(v2.cgroup_mode, CGROUP_MODE_V2);
        assert_ne!(v1.task_pid, ABSENT);
        assert!(v1.task_pid < v1.task_comm || v1.task_comm < v1.task_pid);
        assert!(v1.cpu_subsys_id < 16);
        assert!(v1.task_state_size == 4 || v1.task_state_size == 8);
    }

    #[test]
    fn host_throttle_layout_resolves() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("skipping: no readable kernel BTF");
            return;
        };
        let mut l = resolve(&btf, true).expect("layout");
        let syms: std::collections::HashMap<String, u64> = THROTTLE_SYMBOLS
            .iter()
            .map(|s| (s.to_string(), 0xffff_ffff_8100_0000))
            .collect();
        resolve_throttle(&btf, &syms, &mut l).expect("throttle layout");
        let reads = resolve_reads(&btf, &mut l).expect("reads layout");
        assert!(reads.syscalls.is_some());
        assert_ne!(l.kn_parent, ABSENT);
        assert!(l.dentry_name > l.dentry_parent || l.dentry_parent > l.dentry_name);
        assert_ne!(l.cfs_rq_throttled, ABSENT);
        assert_ne!(l.cfs_b_period_timer, ABSENT);
        assert_eq!(l.period_timer_fn, 0xffff_ffff_8100_0000);
        // 6.18 has a one-bit bitfield; older kernels an int.
        assert!(l.cfs_rq_throttled_bits == 0 || l.cfs_rq_throttled_bits == 1);
        let missing = resolve_throttle(&btf, &Default::default(), &mut l).expect_err("no symbols");
        assert!(missing.what.contains("sched_cfs_period_timer"), "{missing}");
    }
}
