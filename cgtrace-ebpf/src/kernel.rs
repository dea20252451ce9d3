//! Reads of kernel struct fields at offsets taken from `LAYOUT` (resolved from the running
//! kernel's BTF by the daemon), so the same object is right on every kernel.
//!
//! Two ways to read, chosen per program at load time:
//! - `DIRECT = true`: plain loads from the BTF-typed pointers tracepoints hand us. `LAYOUT` lives
//!   in frozen read-only `.rodata`, so the verifier knows each offset as a constant and checks the
//!   access against the kernel's BTF; loaded pointer fields stay typed, so chains like
//!   `task->cgroups->dfl_cgrp->kn->id` need no helper call. Faults read as 0.
//! - `DIRECT = false`: `bpf_probe_read_kernel` for every field, for verifiers that refuse the above.
//!
//! Offsets are widened to `usize` before use so that a spill to the stack keeps them constant for
//! verifiers that only track 64-bit spills (5.10).
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf};
use cgtrace_common::layout::{ABSENT, CGROUP_MODE_V1};

/// One `LAYOUT` field, read through a volatile load so the compiler cannot fold the placeholder.
macro_rules! layout {
    ($field:ident) => {{
        #[allow(unused_unsafe)]
        // SAFETY: LAYOUT is a plain static in .rodata.
        let v = unsafe { core::ptr::read_volatile(&raw const crate::LAYOUT.$field) };
        v
    }};
}
pub(crate) use layout;

/// Reads a `T` at `base + off`; `None` if the field is absent on this kernel or `base` is null.
#[inline(always)]
pub fn read<T: Copy, const DIRECT: bool>(base: *const u8, off: u32) -> Option<T> {
    if off == ABSENT || base.is_null() {
        return None;
    }
    let p = base.wrapping_add(off as usize).cast::<T>();
    if DIRECT {
        // SAFETY: `base` is a BTF-typed kernel pointer and `off` a field offset from the kernel's
        // own BTF; the verifier checks the access and turns faults into zeros.
        Some(unsafe { core::ptr::read_volatile(p) })
    } else {
        // SAFETY: bpf_probe_read_kernel checks the address; a bad one is an error, not a fault.
        unsafe { bpf_probe_read_kernel(p).ok() }
    }
}

/// A task's pid (thread id).
#[inline(always)]
pub fn task_pid<const DIRECT: bool>(task: *const u8) -> Option<u32> {
    read::<u32, DIRECT>(task, layout!(task_pid))
}

/// A task's tgid (process id).
#[inline(always)]
pub fn task_tgid<const DIRECT: bool>(task: *const u8) -> Option<u32> {
    read::<u32, DIRECT>(task, layout!(task_tgid))
}

/// A task's comm (zeroed if unreadable). Always through the helper: it is only read for rare
/// events, and a 16-byte array is not a single load.
#[inline(always)]
pub fn task_comm(task: *const u8) -> [u8; 16] {
    let mut comm = [0u8; 16];
    let off = layout!(task_comm);
    if off != ABSENT && !task.is_null() {
        // SAFETY: as in `read`.
        let _ = unsafe { bpf_probe_read_kernel_buf(task.wrapping_add(off as usize), &mut comm) };
    }
    comm
}

/// A task's scheduling state (`__state` or `state`), for kernels whose `sched_switch` has no
/// `prev_state` argument.
#[inline(always)]
pub fn task_state<const DIRECT: bool>(task: *const u8) -> Option<u64> {
    if layout!(task_state_size) == 8 {
        read::<u64, DIRECT>(task, layout!(task_state))
    } else {
        read::<u32, DIRECT>(task, layout!(task_state)).map(u64::from)
    }
}

/// `kernfs_node.id` of the task's cgroup in the traced hierarchy: v1 the `cpu` controller's
/// cgroup (`cgroups->subsys[cpu]->cgroup`), v2 its own cgroup (`cgroups->dfl_cgrp`). Never derived
/// from `sched_task_group`, whose `css.cgroup` is NULL for autogroups.
#[inline(always)]
pub fn task_cgroup_id<const DIRECT: bool>(task: *const u8) -> Option<u64> {
    let cset: *const u8 = read::<_, DIRECT>(task, layout!(task_cgroups))?;
    let cgrp: *const u8 = if layout!(cgroup_mode) == CGROUP_MODE_V1 {
        let slot = layout!(css_set_subsys).wrapping_add(layout!(cpu_subsys_id).wrapping_mul(8));
        let css: *const u8 = read::<_, DIRECT>(cset, slot)?;
        read::<_, DIRECT>(css, layout!(css_cgroup))?
    } else {
        read::<_, DIRECT>(cset, layout!(css_set_dfl_cgrp))?
    };
    let kn: *const u8 = read::<_, DIRECT>(cgrp, layout!(cgroup_kn))?;
    read::<u64, DIRECT>(kn, layout!(kn_id))
}

/// Reads a `u64` (`WIDE`) or `u32` at `base + off` without a branch: a null or bad `base` reads
/// as 0 (direct loads from BTF-typed pointers fault to 0; `bpf_probe_read_kernel` zeroes its
/// destination on error). For reads on every scheduler event: an early return per null check
/// gives the verifier one more path through the rest of `sched_switch` each.
#[inline(always)]
pub fn read_unchecked<const DIRECT: bool, const WIDE: bool>(base: *const u8, off: u32) -> u64 {
    let p = base.wrapping_add(off as usize);
    if DIRECT {
        // SAFETY: as in `read`: a BTF-typed pointer and an offset from the kernel's own BTF; the
        // verifier turns a faulting load into 0.
        unsafe {
            if WIDE {
                core::ptr::read_volatile(p.cast::<u64>())
            } else {
                u64::from(core::ptr::read_volatile(p.cast::<u32>()))
            }
        }
    } else {
        let mut v = 0u64;
        let size = if WIDE { 8 } else { 4 };
        // SAFETY: the helper checks the address and zeroes `v` on error; little-endian, so a
        // 4-byte read fills the low half.
        unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                (&raw mut v).cast(),
                size,
                p.cast(),
            );
        }
        v
    }
}

/// The run queue `task` is on (through `se.cfs_rq->rq`; null where it cannot be read).
#[inline(always)]
fn task_rq<const DIRECT: bool>(task: *const u8) -> *const u8 {
    let cfs_rq = read_unchecked::<DIRECT, true>(task, layout!(task_se_cfs_rq)) as *const u8;
    read_unchecked::<DIRECT, true>(cfs_rq, layout!(cfs_rq_rq)) as *const u8
}

/// The clock of the run queue `task` is on (`rq.clock`), which the scheduler has just updated
/// wherever the scheduler tracepoints fire; 0 where it cannot be read.
#[inline(always)]
pub fn task_rq_clock<const DIRECT: bool>(task: *const u8) -> u64 {
    read_unchecked::<DIRECT, true>(task_rq::<DIRECT>(task), layout!(rq_clock))
}

/// The run queue `task` is on as a wait start keeps it (`RunqStart::rq_cpu`, `rq_clock_lo`): 1 +
/// its CPU and its clock, or (0, 0) where this kernel's BTF has no way to them (waits are then
/// timed in ktime).
/// Two full words, no `Option`: 5.10's verifier refuses a later 8-byte read of a stack slot the
/// compiler filled with 4 (a spilled `Option<(u64, u32)>`).
#[derive(Clone, Copy)]
pub struct RqClock {
    pub cpu: u64,
    pub clock: u64,
}

/// See [`RqClock`].
#[inline(always)]
pub fn task_rq_cpu_clock<const DIRECT: bool>(task: *const u8) -> RqClock {
    if layout!(rq_clock) == ABSENT || layout!(rq_cpu) == ABSENT {
        return RqClock { cpu: 0, clock: 0 };
    }
    // No branch here: every branch on the switch path is one more path through the rest of
    // `sched_switch` for the verifier (a `clock != 0` test here kept 6.1 guests verifying for
    // minutes). A task's `se.cfs_rq` is always set, so the reads do not fail in practice.
    let rq = task_rq::<DIRECT>(task);
    RqClock {
        cpu: read_unchecked::<DIRECT, false>(rq, layout!(rq_cpu)) + 1,
        clock: read_unchecked::<DIRECT, true>(rq, layout!(rq_clock)),
    }
}

/// A task's involuntary context switches (`nivcsw`, an `unsigned long`).
#[inline(always)]
pub fn task_nivcsw<const DIRECT: bool>(task: *const u8) -> u64 {
    read_unchecked::<DIRECT, true>(task, layout!(task_nivcsw))
}

/// The interrupt and steal time (cumulative ns) the run queue `task` is on has accounted so far
/// (`rq.prev_irq_time`, `rq.prev_steal_time_rq`), each 0 where this kernel cannot tell. Updated
/// with the run queue's clock, which the scheduler has just done at a `sched_switch`.
#[inline(always)]
pub fn rq_irq_steal<const DIRECT: bool>(task: *const u8) -> (u64, u64) {
    let (irq_off, steal_off) = (layout!(rq_prev_irq_time), layout!(rq_prev_steal_time_rq));
    if irq_off == ABSENT && steal_off == ABSENT {
        return (0, 0);
    }
    let rq = task_rq::<DIRECT>(task);
    let irq = if irq_off == ABSENT {
        0
    } else {
        read_unchecked::<DIRECT, true>(rq, irq_off)
    };
    let steal = if steal_off == ABSENT {
        0
    } else {
        read_unchecked::<DIRECT, true>(rq, steal_off)
    };
    (irq, steal)
}

/// How many CPUs `task` may run on (`nr_cpus_allowed`; 1 where unknown).
#[inline(always)]
pub fn task_nr_cpus_allowed<const DIRECT: bool>(task: *const u8) -> u64 {
    if layout!(task_nr_cpus_allowed) == ABSENT {
        return 1;
    }
    read_unchecked::<DIRECT, false>(task, layout!(task_nr_cpus_allowed))
}

/// Where `task`'s allowed-CPU mask (`cpus_mask`) is, null where it cannot be read.
#[inline(always)]
pub fn task_cpus_mask(task: *const u8) -> *const u8 {
    let off = layout!(task_cpus_mask);
    if off == ABSENT || task.is_null() {
        return core::ptr::null();
    }
    task.wrapping_add(off as usize)
}

/// Word `i` (0-7: CPUs `64 i` to `64 i + 63`) of an allowed-CPU mask from [`task_cpus_mask`], 0
/// where it cannot be read. Through the helper (a variable offset).
#[inline(always)]
pub fn task_cpus_mask_word(mask: *const u8, i: u64) -> u64 {
    if mask.is_null() {
        return 0;
    }
    // Bounded (at most 8 words, CPUs 0-511): the verifier refuses an unbounded offset to a
    // typed pointer, even for the helper.
    read_unchecked::<false, true>(mask.wrapping_add(((i & 7) as usize) * 8), 0)
}
