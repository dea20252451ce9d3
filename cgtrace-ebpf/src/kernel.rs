//! Reads of kernel struct fields at offsets taken from `LAYOUT` (resolved from the running
//! kernel's BTF by the daemon), so the same object is right on every kernel.
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf};
use cgtrace_common::layout::{ABSENT, CGROUP_MODE_V1, Layout};

use crate::LAYOUT;

/// The layout, read through a volatile load so the compiler cannot fold the placeholder values.
#[inline(always)]
pub fn layout() -> Layout {
    // SAFETY: LAYOUT is a plain static in .rodata.
    unsafe { core::ptr::read_volatile(&raw const LAYOUT) }
}

/// Reads a `T` at `base + off`; `None` if the field is absent on this kernel or the read faults.
#[inline(always)]
pub fn read<T>(base: *const u8, off: u32) -> Option<T> {
    if off == ABSENT || base.is_null() {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error, not a fault.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize).cast::<T>()).ok() }
}

/// A task's pid (thread id).
#[inline(always)]
pub fn task_pid(l: &Layout, task: *const u8) -> Option<u32> {
    read::<u32>(task, l.task_pid)
}

/// A task's tgid (process id).
#[inline(always)]
pub fn task_tgid(l: &Layout, task: *const u8) -> Option<u32> {
    read::<u32>(task, l.task_tgid)
}

/// A task's comm (zeroed if unreadable).
#[inline(always)]
pub fn task_comm(l: &Layout, task: *const u8) -> [u8; 16] {
    let mut comm = [0u8; 16];
    if l.task_comm != ABSENT && !task.is_null() {
        // SAFETY: as in `read`.
        let _ = unsafe {
            bpf_probe_read_kernel_buf(task.wrapping_add(l.task_comm as usize), &mut comm)
        };
    }
    comm
}

/// A task's scheduling state (`__state` or `state`), for kernels whose `sched_switch` has no
/// `prev_state` argument.
#[inline(always)]
pub fn task_state(l: &Layout, task: *const u8) -> Option<u64> {
    if l.task_state_size == 8 {
        read::<u64>(task, l.task_state)
    } else {
        read::<u32>(task, l.task_state).map(u64::from)
    }
}

/// `kernfs_node.id` of the task's cgroup in the traced hierarchy: v1 the `cpu` controller's
/// cgroup (`cgroups->subsys[cpu]->cgroup`), v2 its own cgroup (`cgroups->dfl_cgrp`). Never derived
/// from `sched_task_group`, whose `css.cgroup` is NULL for autogroups.
#[inline(always)]
pub fn task_cgroup_id(l: &Layout, task: *const u8) -> Option<u64> {
    let cset: *const u8 = read(task, l.task_cgroups)?;
    let cgrp: *const u8 = if l.cgroup_mode == CGROUP_MODE_V1 {
        let slot = l
            .css_set_subsys
            .wrapping_add(l.cpu_subsys_id.wrapping_mul(8));
        let css: *const u8 = read(cset, slot)?;
        read(css, l.css_cgroup)?
    } else {
        read(cset, l.css_set_dfl_cgrp)?
    };
    let kn: *const u8 = read(cgrp, l.cgroup_kn)?;
    read::<u64>(kn, l.kn_id)
}
