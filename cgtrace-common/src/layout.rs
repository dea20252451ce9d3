//! Kernel struct field offsets, resolved by the daemon from the running kernel's BTF at start-up
//! and handed to the eBPF programs as the read-only global `LAYOUT`.
//!
//! rustc emits no CO-RE relocations for BPF, so the programs never use compiled-in offsets: every
//! kernel field they read is `bpf_probe_read_kernel(base + LAYOUT.field)`. A field the running
//! kernel does not have is [`ABSENT`].

/// Marks a field this kernel does not have.
pub const ABSENT: u32 = u32::MAX;

/// Cgroup identity is read from `task->cgroups->dfl_cgrp` (cgroup2).
pub const CGROUP_MODE_V2: u32 = 0;
/// Cgroup identity is read from `task->cgroups->subsys[LAYOUT.cpu_subsys_id]->cgroup` (v1).
pub const CGROUP_MODE_V1: u32 = 1;

/// Waits are not split by the kernel's throttled clock (6.18+ throttles task by task and the
/// switch-out marks the wait; or this kernel has no such clock).
pub const THR_CLOCK_NONE: u32 = 0;
/// `throttled_clock_self_time` in `rq->clock` (6.8+): the same clock as `cpu.stat`'s throttled
/// time, exact.
pub const THR_CLOCK_SELF: u32 = 1;
/// `throttled_clock_pelt_time` in `rq->clock_pelt` (6.0–6.7): the PELT clock, which leaves out
/// IRQ and steal time and runs slower than wall time on a CPU clocked below its maximum when the
/// kernel is frequency invariant.
pub const THR_CLOCK_PELT: u32 = 2;
/// `throttled_clock_task_time` in `rq->clock_task` (before 6.0): leaves out IRQ and steal time.
pub const THR_CLOCK_TASK: u32 = 3;

/// Offsets (bytes) of the kernel fields the programs read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `task_struct.pid`
    pub task_pid: u32,
    /// `task_struct.tgid`
    pub task_tgid: u32,
    /// `task_struct.comm`
    pub task_comm: u32,
    /// `task_struct.cgroups` (a `css_set *`)
    pub task_cgroups: u32,
    /// `task_struct.__state` (5.14+) or `task_struct.state`; read only where `sched_switch` has
    /// no `prev_state` argument (before 5.18).
    pub task_state: u32,
    /// Size of that state field in bytes (4 or 8).
    pub task_state_size: u32,
    /// `css_set.subsys` (array of `cgroup_subsys_state *`)
    pub css_set_subsys: u32,
    /// `css_set.dfl_cgrp`
    pub css_set_dfl_cgrp: u32,
    /// `cgroup_subsys_state.cgroup`
    pub css_cgroup: u32,
    /// `cgroup.kn`
    pub cgroup_kn: u32,
    /// `kernfs_node.id` (u64 since 5.5)
    pub kn_id: u32,
    /// `enum cgroup_subsys_id` value of `cpu_cgrp_id`.
    pub cpu_subsys_id: u32,
    /// [`CGROUP_MODE_V1`] or [`CGROUP_MODE_V2`].
    pub cgroup_mode: u32,
    /// 1 if `sched_switch` passes `prev_state` as its 4th argument (5.18+).
    pub switch_has_prev_state: u32,

    // --- throttle family (all ABSENT when it is unavailable) ---
    /// `task_struct.throttled` (task-based throttling, 6.18+).
    pub task_throttled: u32,
    /// `task_struct.se.cfs_rq`
    pub task_se_cfs_rq: u32,
    /// `task_struct.se`
    pub task_se: u32,
    /// `sched_entity.parent`
    pub se_parent: u32,
    /// `sched_entity.cfs_rq`
    pub se_cfs_rq: u32,
    /// Byte holding `cfs_rq.throttled`, and the bit shift and width of the flag in it (width 0
    /// when it is a plain `int`, read as 4 bytes).
    pub cfs_rq_throttled: u32,
    pub cfs_rq_throttled_shift: u32,
    pub cfs_rq_throttled_bits: u32,
    /// `cfs_rq.throttle_count`
    pub cfs_rq_throttle_count: u32,
    /// `cfs_rq.h_nr_queued` (6.14+) or `cfs_rq.h_nr_running`
    pub cfs_rq_h_nr: u32,
    /// `cfs_rq.tg`
    pub cfs_rq_tg: u32,
    /// `task_group.css`
    pub tg_css: u32,
    /// `task_group.cfs_bandwidth`
    pub tg_cfs_bandwidth: u32,
    /// `cfs_bandwidth.period_timer`
    pub cfs_b_period_timer: u32,
    /// `cfs_bandwidth.throttled_cfs_rq` (a `list_head`)
    pub cfs_b_throttled_list: u32,
    /// `hrtimer.function`
    pub hrtimer_function: u32,
    /// `task_struct.se.sum_exec_runtime` and `task_struct.se.prev_sum_exec_runtime` (the latter
    /// is set when the task is picked, so their difference at switch-out is the slice just run).
    pub task_sum_exec: u32,
    pub task_prev_sum_exec: u32,
    /// `cfs_rq.runtime_enabled` (the group has a quota)
    pub cfs_rq_runtime_enabled: u32,
    /// `cfs_bandwidth.throttled_time`
    pub cfs_b_throttled_time: u32,
    /// `task_group.cfs_rq` (per-CPU `cfs_rq *` array), `task_group.parent`, `rq.cpu`: the
    /// tg-walk mode finds a group's cfs_rq on the walked rq's CPU.
    pub tg_cfs_rq: u32,
    pub tg_parent: u32,
    pub rq_cpu: u32,
    /// `cfs_bandwidth.nr_periods` and `cfs_bandwidth.nr_throttled` (`int`): their change across
    /// one period-timer callback is how many periods it counted (overrun included) and whether
    /// it found the group throttled, decided by the kernel under `cfs_b->lock`.
    pub cfs_b_nr_periods: u32,
    pub cfs_b_nr_throttled: u32,
    /// The kernel's own per-`cfs_rq` clock of time spent in a throttled hierarchy, which splits a
    /// wait on kernels before task-based throttling (6.18): the cumulative field
    /// (`cfs_rq.throttled_clock_self_time`, `throttled_clock_pelt_time` or
    /// `throttled_clock_task_time`), the start of the open interval (`throttled_clock_self`,
    /// `throttled_clock_pelt`, `throttled_clock_task`), `cfs_rq.rq` and the `rq` clock they are
    /// kept in (`clock`, `clock_pelt`, `clock_task`). `thr_clock_kind` is one of the
    /// `THR_CLOCK_*` values; [`THR_CLOCK_NONE`] leaves waits unsplit (6.18+, or no such field).
    pub cfs_rq_thr_clock_time: u32,
    pub cfs_rq_thr_clock: u32,
    pub cfs_rq_rq: u32,
    pub rq_thr_clock: u32,
    /// `rq.lost_idle_time`, subtracted from `rq.clock_pelt` (PELT clock only; else ABSENT).
    pub rq_thr_clock_sub: u32,
    pub thr_clock_kind: u32,
    /// `rq.clock`, read through `task_struct.se.cfs_rq` and `cfs_rq.rq`: the clock the scheduler
    /// stamps run-queue waits with (ABSENT: not resolved).
    pub rq_clock: u32,
    /// `task_struct.sched_info.run_delay` and `.last_queued` (`CONFIG_SCHED_INFO`): the kernel's
    /// own total run-queue wait of the task and the start of the queued stretch in progress, both
    /// in `rq.clock`; `sched_switch` sees them before `sched_info_switch` adds the ending wait.
    pub task_run_delay: u32,
    pub task_last_queued: u32,
    /// `task_struct.nivcsw`: involuntary context switches (the task left the CPU still runnable).
    pub task_nivcsw: u32,
    /// `rq.prev_irq_time` (`CONFIG_IRQ_TIME_ACCOUNTING`) and `rq.prev_steal_time_rq`
    /// (`CONFIG_PARAVIRT_TIME_ACCOUNTING`): the interrupt and steal time the run queue's clock
    /// has accounted so far; their advance over a slice is the part of it the CPU spent in
    /// interrupts or the hypervisor ran something else (ABSENT: the kernel cannot tell).
    pub rq_prev_irq_time: u32,
    pub rq_prev_steal_time_rq: u32,
    /// `task_struct.cpus_mask` (a `cpumask_t`, 5.3+) and `task_struct.nr_cpus_allowed` (`int`):
    /// the CPUs a task may run on, for `idle_elsewhere` (ABSENT: not resolved).
    pub task_cpus_mask: u32,
    pub task_nr_cpus_allowed: u32,
    /// Kernel addresses (from /proc/kallsyms) of `sched_cfs_period_timer`,
    /// `sched_cfs_slack_timer` and `__cfsb_csd_unthrottle` (0: unknown).
    pub period_timer_fn: u64,
    pub slack_timer_fn: u64,
    pub csd_unthrottle_fn: u64,

    // --- reads family (all ABSENT when it is unavailable) ---
    /// `task_struct.files`, `files_struct.fdt`, `fdtable.max_fds`, `fdtable.fd`: fd -> file.
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    /// `file.f_inode`, `file.f_path.dentry`
    pub file_inode: u32,
    pub file_dentry: u32,
    /// `inode.i_sb`, `inode.i_ino`, `inode.i_private` (the `kernfs_node` on kernfs)
    pub inode_sb: u32,
    pub inode_ino: u32,
    pub inode_private: u32,
    /// `super_block.s_magic` (unsigned long), `super_block.s_dev` (u32)
    pub sb_magic: u32,
    pub sb_dev: u32,
    /// `dentry.d_parent`, `dentry.d_name.name`
    pub dentry_parent: u32,
    pub dentry_name: u32,
    /// `kernfs_node.__parent` (6.15+) or `kernfs_node.parent`; `kernfs_node.priv`
    pub kn_parent: u32,
    pub kn_priv: u32,
    /// `cgroup.nr_dying_descendants` (int), `cgroup.level` (int), `cgroup.root`,
    /// `cgroup_root.hierarchy_id` (int)
    pub cgroup_nr_dying: u32,
    pub cgroup_level: u32,
    pub cgroup_root: u32,
    pub root_hierarchy_id: u32,
    /// `kiocb.ki_filp`
    pub kiocb_filp: u32,
    /// `pt_regs` slot of a syscall's first argument and of its number at exit (x86_64 `di` and
    /// `orig_ax`).
    pub regs_arg0: u32,
    pub regs_nr: u32,
    /// `pt_regs` slot of a syscall's second argument (`sendfile`'s in_fd; x86_64 `si`).
    pub regs_arg1: u32,
    pub _pad2: u32,
}

impl Layout {
    /// Every field absent: what the programs see if the loader forgot to set `LAYOUT`.
    pub const UNSET: Self = Self {
        rq_prev_irq_time: ABSENT,
        rq_prev_steal_time_rq: ABSENT,
        task_cpus_mask: ABSENT,
        task_nr_cpus_allowed: ABSENT,
        task_pid: ABSENT,
        task_tgid: ABSENT,
        task_comm: ABSENT,
        task_cgroups: ABSENT,
        task_state: ABSENT,
        task_state_size: 0,
        css_set_subsys: ABSENT,
        css_set_dfl_cgrp: ABSENT,
        css_cgroup: ABSENT,
        cgroup_kn: ABSENT,
        kn_id: ABSENT,
        cpu_subsys_id: ABSENT,
        cgroup_mode: CGROUP_MODE_V2,
        switch_has_prev_state: 0,
        task_throttled: ABSENT,
        task_se_cfs_rq: ABSENT,
        task_se: ABSENT,
        se_parent: ABSENT,
        se_cfs_rq: ABSENT,
        cfs_rq_throttled: ABSENT,
        cfs_rq_throttled_shift: 0,
        cfs_rq_throttled_bits: 0,
        cfs_rq_throttle_count: ABSENT,
        cfs_rq_h_nr: ABSENT,
        cfs_rq_tg: ABSENT,
        tg_css: ABSENT,
        tg_cfs_bandwidth: ABSENT,
        cfs_b_period_timer: ABSENT,
        cfs_b_throttled_list: ABSENT,
        hrtimer_function: ABSENT,
        task_sum_exec: ABSENT,
        task_prev_sum_exec: ABSENT,
        cfs_rq_runtime_enabled: ABSENT,
        cfs_b_throttled_time: ABSENT,
        tg_cfs_rq: ABSENT,
        tg_parent: ABSENT,
        rq_cpu: ABSENT,
        cfs_b_nr_periods: ABSENT,
        cfs_b_nr_throttled: ABSENT,
        cfs_rq_thr_clock_time: ABSENT,
        cfs_rq_thr_clock: ABSENT,
        cfs_rq_rq: ABSENT,
        rq_thr_clock: ABSENT,
        rq_thr_clock_sub: ABSENT,
        thr_clock_kind: THR_CLOCK_NONE,
        rq_clock: ABSENT,
        task_run_delay: ABSENT,
        task_last_queued: ABSENT,
        task_nivcsw: ABSENT,
        period_timer_fn: 0,
        slack_timer_fn: 0,
        csd_unthrottle_fn: 0,
        task_files: ABSENT,
        files_fdt: ABSENT,
        fdt_max_fds: ABSENT,
        fdt_fd: ABSENT,
        file_inode: ABSENT,
        file_dentry: ABSENT,
        inode_sb: ABSENT,
        inode_ino: ABSENT,
        inode_private: ABSENT,
        sb_magic: ABSENT,
        sb_dev: ABSENT,
        dentry_parent: ABSENT,
        dentry_name: ABSENT,
        kn_parent: ABSENT,
        kn_priv: ABSENT,
        cgroup_nr_dying: ABSENT,
        cgroup_level: ABSENT,
        cgroup_root: ABSENT,
        root_hierarchy_id: ABSENT,
        kiocb_filp: ABSENT,
        regs_arg0: ABSENT,
        regs_nr: ABSENT,
        regs_arg1: ABSENT,
        _pad2: 0,
    };
}

/// Run-time settings of the programs, the read-only global `CONFIG`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Waits at least this long (ns) are also sent as [`crate::runq::RunqEvent`]s.
    pub runq_event_min_ns: u64,
    /// Wake the reader once this many bytes are pending in the ring buffer.
    pub ringbuf_wakeup_bytes: u64,
    /// Pseudo-file reads at least this long (ns) are also sent as `SlowReadEvent`s.
    pub read_event_min_ns: u64,
    /// Syscall numbers of the read syscalls on this architecture, `reads::NO_SYSCALL` for unused
    /// slots: `read`, `pread64`, `readv`, `preadv`, `preadv2` (fd in the first argument) and, in
    /// the last slot, `sendfile` (fd in the second: busybox `cat` reads that way).
    pub read_syscalls: [u32; crate::reads::NR_READ_SYSCALLS],
    /// cgtrace's own process: its reads of cgroup and proc files (and the rstat flushes they
    /// cause) are not traced.
    pub self_tgid: u32,
    /// Where run-queue wait starts are kept: 1 in task-local storage (`RUNQ_START_TASK`), 0 in
    /// the `RUNQ_START` hash (kernels before 6.1, or `CGTRACE_RUNQ_START=hash`).
    pub runq_start_task: u32,
    /// Waits at least this long (ns) are charged to whoever held the CPU meanwhile (`BLAME`);
    /// `u64::MAX` turns the blame ledger off (no slice ring either).
    pub blame_min_ns: u64,
    /// How many CPUs a charged wait's `idle_elsewhere` looks at (the possible CPUs, at most
    /// `runq::IDLE_SCAN_MAX_CPUS`; 0: not computed, the kernel cannot tell it).
    pub idle_scan_cpus: u32,
    pub _pad: u32,
    /// The traced hierarchy's root cgroup id: the ledger keeps slices of its tasks by process
    /// (`runq::culprit_task`) to name them (0: not known, kept as the cgroup).
    pub root_cgroup_id: u64,
}

impl Config {
    /// Defaults that make the programs usable even if the loader set nothing.
    pub const DEFAULT: Self = Self {
        runq_event_min_ns: 10_000_000,
        ringbuf_wakeup_bytes: 64 * 1024,
        read_event_min_ns: 5_000_000,
        read_syscalls: [crate::reads::NO_SYSCALL; crate::reads::NR_READ_SYSCALLS],
        self_tgid: 0,
        runq_start_task: 0,
        blame_min_ns: u64::MAX,
        idle_scan_cpus: 0,
        _pad: 0,
        root_cgroup_id: 0,
    };
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] integers with explicit padding.
    unsafe impl aya::Pod for super::Layout {}
    // SAFETY: plain #[repr(C)] integers with explicit padding.
    unsafe impl aya::Pod for super::Config {}
}
