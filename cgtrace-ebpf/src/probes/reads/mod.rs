//! `reads`: pseudo-file reads timed per (reader cgroup, comm, file), the rstat flush work done
//! inside them, and cgroup churn.
//!
//! Two ways to see a read, chosen by the loader:
//! - syscall mode (every kernel; the only one where fentry is refused): tp_btf on the raw
//!   `sys_enter`/`sys_exit` tracepoints (read, pread64, readv, preadv, preadv2, and sendfile,
//!   whose in_fd is the file read: busybox `cat` uses it). The syscall number is compared first, so other syscalls
//!   cost one compare; a read's fd is resolved to its file and kept only if the file's superblock
//!   is cgroupfs, sysfs, procfs or FUSE. Ordinary file reads pay the fd lookup and nothing else.
//! - fentry mode: fentry/fexit on the pseudo-filesystems' read functions (`kernfs_fop_read_iter`,
//!   `seq_read_iter`, `proc_reg_read_iter`, `proc_reg_read`, `fuse_file_read_iter`): only
//!   pseudo-file reads pay anything. Nested calls (kernfs -> seq_file) keep the outermost.
//!
//! The rstat tracepoints (`cgroup_rstat_lock_contended/locked/unlock`, 6.10+) and, in fentry mode,
//! the flush functions (`css_rstat_flush`, `cgroup_rstat_flush*`) charge flush work to the read
//! in progress on the same thread; a flush outside any read (the periodic kworker flush, reclaim)
//! is accounted as reads of the pseudo-file `FILE_RSTAT_FLUSH` by that thread.
//!
//! Every kernel field is read with `bpf_probe_read_kernel` at offsets from `LAYOUT`.
//!
//! The files, one job each:
//! - `syscall.rs`: syscall mode's programs;
//! - `fentry.rs`: fentry mode's programs;
//! - `files.rs`: which files are traced (a file's pseudo file system, an fd's file) and the name
//!   chain of a file seen for the first time;
//! - `inflight.rs`: a read's life on its thread (`READ_INFLIGHT`): opened, closed, or lost;
//! - `stats.rs`: a finished read added to `READ_STATS`, and sent as an event when slow;
//! - `flush.rs`: rstat flush work, charged to the read in progress or to a flush-only entry;
//! - `churn.rs`: cgroup creation and removal;
//! - this file: what they share.
mod churn;
mod fentry;
mod files;
mod flush;
mod inflight;
mod stats;
mod syscall;

use aya_ebpf::helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid};
use cgtrace_common::reads::ReadKey;

use crate::{
    helpers::config,
    kernel::{read, task_cgroup_id},
};

/// `READ_INFLIGHT::hook` of a flush seen outside any traced read.
const HOOK_FLUSH: u32 = 0;

/// An untyped kernel pointer.
type P = *const u8;

/// A field at `base + off`, always through `bpf_probe_read_kernel` (see above).
#[inline(always)]
fn rd<T: Copy>(base: P, off: u32) -> Option<T> {
    read::<T, false>(base, off)
}

/// A pointer field read with `rd`; null where it cannot be read.
#[inline(always)]
fn rd_ptr(base: P, off: u32) -> P {
    rd(base, off).unwrap_or(core::ptr::null())
}

/// The key of a read of `file` (on `dev`) by the current thread.
#[inline(always)]
fn reader_key(task: P, file: u64, dev: u32) -> ReadKey {
    ReadKey {
        cgroup_id: task_cgroup_id::<false>(task).unwrap_or(0),
        file,
        dev,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    }
}

/// Whether the current thread is cgtrace's own (its reads are not traced).
#[inline(always)]
fn is_self() -> bool {
    let me = config!(self_tgid);
    me != 0 && (bpf_get_current_pid_tgid() >> 32) as u32 == me
}
