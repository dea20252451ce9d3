//! Who burned the quota: the slices of a recently throttled group's threads, summed per thread
//! and period (`THROTTLE_SLICE_SUMS`) and sent to the daemon once per thread and period.
use aya_ebpf::bindings::BPF_NOEXIST;
use cgtrace_common::{
    counters::{self, Counters},
    event::{EventHeader, KIND_THROTTLE_SLICE},
    layout::ABSENT,
    throttle::{SLICE_CPU_BITS, SLICE_ONE, SliceEvent, SliceKey, SliceSum},
};

use super::{cfs_rq_tg, periods::period_of, tg_cgroup_id};
use crate::{
    helpers::{cpu, now},
    kernel::{layout, read, task_comm, task_tgid},
    maps::{EVENTS, THROTTLE_SLICE_SUMS, THROTTLE_WATCH, count},
};

/// From `sched_switch`, for every task switched out while some group is watched (`watching`):
/// if it belongs to a group with a quota that was throttled within `WATCH_NS`, add the slice it
/// just ran to its sum for the group's current period (who burned the quota). The sum goes to the daemon once, when the thread comes off the
/// CPU in a later period: one record per thread and period, not one per switch.
///
/// Not inlined: a BPF-to-BPF call, so the verifier walks its branches once per call instead of
/// once per path through the rest of `sched_switch` (inlined, the program passed the
/// verifier's million-instruction budget).
#[inline(never)]
pub fn slice_out<const DIRECT: bool>(c: *mut Counters, task: *const u8, pid: u32) {
    let enabled_off = layout!(cfs_rq_runtime_enabled);
    if enabled_off == ABSENT {
        return;
    }
    let Some(mut cfs_rq) = read::<*const u8, DIRECT>(task, layout!(task_se_cfs_rq)) else {
        return;
    };
    let mut se: *const u8 = task.wrapping_add(layout!(task_se) as usize);
    let mut found = false;
    for _ in 0..4 {
        if cfs_rq.is_null() {
            return;
        }
        if read::<i32, DIRECT>(cfs_rq, enabled_off).unwrap_or(0) != 0 {
            found = true;
            break;
        }
        let Some(parent) = read::<*const u8, DIRECT>(se, layout!(se_parent)) else {
            return;
        };
        se = parent;
        let Some(next) = read::<*const u8, DIRECT>(se, layout!(se_cfs_rq)) else {
            return;
        };
        cfs_rq = next;
    }
    if !found {
        return;
    }
    let tg = cfs_rq_tg::<DIRECT>(cfs_rq);
    let Some(cgroup_id) = tg_cgroup_id::<DIRECT>(tg) else {
        return;
    };
    // SAFETY: the value is copied out.
    let Some(until) = (unsafe { THROTTLE_WATCH.get(&cgroup_id) }).copied() else {
        return;
    };
    let now = now();
    if now > until {
        return;
    }
    count(c, counters::THROTTLE_SLICES);
    let sum = read::<u64, DIRECT>(task, layout!(task_sum_exec)).unwrap_or(0);
    let prev = read::<u64, DIRECT>(task, layout!(task_prev_sum_exec)).unwrap_or(0);
    let runtime = sum.saturating_sub(prev);
    let period = period_of(tg.wrapping_add(layout!(tg_cfs_bandwidth) as usize));
    let cpu = cpu();
    let key = SliceKey {
        cgroup_id,
        tid: pid,
        _pad: 0,
    };
    if let Some(s) = THROTTLE_SLICE_SUMS.get_ptr_mut(&key) {
        // SAFETY: live map value. Only this thread's switch-outs write it (a thread is off the
        // CPU once at a time); the daemon reads it concurrently and deletes it only after its
        // period was taken.
        unsafe {
            if (*s).period != period {
                // A later period: the finished sum goes to the daemon, this slice starts the next.
                send_sum(c, &key, &*s, now, 0);
                (*s).period = period;
                (*s).slices = 0;
                (*s).runtime_ns = 0;
                (*s).first_ns = now;
                (*s).cpus = 0;
                (*s).cpu_mask = [0; (SLICE_CPU_BITS / 64) as usize];
                (*s).tgid = task_tgid::<DIRECT>(task).unwrap_or(0);
                (*s).comm = task_comm(task);
            }
            (*s).slices += 1;
            (*s).runtime_ns += runtime;
            (*s).last_ns = now;
            add_cpu(&mut *s, cpu);
        }
        return;
    }
    let mut fresh = SliceSum {
        period,
        slices: 1,
        runtime_ns: runtime,
        first_ns: now,
        last_ns: now,
        tgid: task_tgid::<DIRECT>(task).unwrap_or(0),
        last_cpu: cpu,
        cpus: 0,
        _pad: 0,
        cpu_mask: [0; (SLICE_CPU_BITS / 64) as usize],
        comm: task_comm(task),
    };
    add_cpu(&mut fresh, cpu);
    if THROTTLE_SLICE_SUMS
        .insert(&key, &fresh, u64::from(BPF_NOEXIST))
        .is_err()
    {
        // No room: this slice goes alone, as every slice did before sums.
        count(c, counters::THROTTLE_SLICE_SUMS_FULL);
        send_sum(c, &key, &fresh, now, SLICE_ONE);
    }
}

/// Counts `cpu` into the sum's distinct CPUs.
#[inline(always)]
fn add_cpu(s: &mut SliceSum, cpu: u32) {
    if cpu < SLICE_CPU_BITS {
        // A match, not an index: older verifiers (5.10) lose the index's bound through LLVM's
        // folding of the shift and mask.
        let [w0, w1, w2, w3] = &mut s.cpu_mask;
        let word = match cpu >> 6 {
            0 => w0,
            1 => w1,
            2 => w2,
            _ => w3,
        };
        let bit = 1u64 << (cpu & 63);
        if *word & bit == 0 {
            *word |= bit;
            s.cpus += 1;
        }
    } else if cpu != s.last_cpu || s.cpus == 0 {
        s.cpus += 1;
    }
    s.last_cpu = cpu;
}

/// Sends a thread's sum (or, with `SLICE_ONE`, a lone slice) to the daemon.
#[inline(always)]
fn send_sum(c: *mut Counters, key: &SliceKey, s: &SliceSum, now: u64, flags: u32) {
    let Some(mut slot) = EVENTS.reserve::<SliceEvent>(0) else {
        count(c, counters::RINGBUF_FULL);
        return;
    };
    // SAFETY: a reserved, writable record; every field is written before submit.
    unsafe {
        let ev = slot.as_mut_ptr();
        (*ev).header = EventHeader {
            kind: KIND_THROTTLE_SLICE,
            cpu: s.last_cpu,
            ts_ns: now,
        };
        (*ev).cgroup_id = key.cgroup_id;
        (*ev).runtime_ns = s.runtime_ns;
        (*ev).pid = key.tid;
        (*ev).tgid = s.tgid;
        (*ev).comm = s.comm;
        (*ev).period = s.period;
        (*ev).slices = s.slices;
        (*ev).cpus = s.cpus;
        (*ev).flags = flags;
        (*ev).first_ns = s.first_ns;
    }
    slot.submit(crate::maps::wakeup_flags());
    count(c, counters::THROTTLE_SLICE_RECORDS);
}
