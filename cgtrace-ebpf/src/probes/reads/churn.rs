//! Cgroup churn: each `cgroup_mkdir`/`cgroup_rmdir` sent to the daemon.
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_probe_read_kernel_str_bytes},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use cgtrace_common::{
    counters,
    event::{EventHeader, KIND_CGROUP_CHURN},
    reads::{CHURN_MKDIR, CHURN_PATH_LEN, CHURN_RMDIR, CgroupChurnEvent},
};

use super::{P, rd, rd_ptr};
use crate::{
    helpers::{cpu, current_task, now},
    kernel::{layout, task_cgroup_id},
    maps::{EVENTS, count, counters},
};

#[inline(always)]
fn churn(cgrp: P, path: P, op: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let task = current_task();
    let Some(mut slot) = EVENTS.reserve::<CgroupChurnEvent>(0) else {
        count(counters(), counters::RINGBUF_FULL);
        return;
    };
    let root = rd_ptr(cgrp, layout!(cgroup_root));
    let kn = rd_ptr(cgrp, layout!(cgroup_kn));
    let ev = slot.as_mut_ptr();
    // SAFETY: `ev` points to a reserved, writable record; every field is written before submit.
    unsafe {
        (*ev).header = EventHeader {
            kind: KIND_CGROUP_CHURN,
            cpu: cpu(),
            ts_ns: now(),
        };
        (*ev).hierarchy_id = rd::<i32>(root, layout!(root_hierarchy_id)).unwrap_or(-1) as u32;
        (*ev).op = op;
        (*ev).cgroup_id = rd(kn, layout!(kn_id)).unwrap_or(0);
        (*ev).level = rd::<i32>(cgrp, layout!(cgroup_level)).unwrap_or(0) as u32;
        (*ev).pid = pid_tgid as u32;
        (*ev).tgid = (pid_tgid >> 32) as u32;
        (*ev)._pad = 0;
        (*ev).actor_cgroup = task_cgroup_id::<false>(task).unwrap_or(0);
        (*ev).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        let buf = &mut (*ev).path;
        buf[0] = 0;
        let _ = bpf_probe_read_kernel_str_bytes(path, buf);
        buf[CHURN_PATH_LEN - 1] = 0;
    }
    slot.submit(0);
}

/// `cgroup_mkdir(cgrp, path)`
#[btf_tracepoint(function = "cgroup_mkdir")]
pub fn reads_cgroup_mkdir(ctx: BtfTracePointContext) -> u32 {
    churn(ctx.arg(0), ctx.arg(1), CHURN_MKDIR);
    0
}

/// `cgroup_rmdir(cgrp, path)`
#[btf_tracepoint(function = "cgroup_rmdir")]
pub fn reads_cgroup_rmdir(ctx: BtfTracePointContext) -> u32 {
    churn(ctx.arg(0), ctx.arg(1), CHURN_RMDIR);
    0
}
