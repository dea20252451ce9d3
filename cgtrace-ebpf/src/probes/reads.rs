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
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_probe_read_kernel_str_bytes},
    macros::{btf_tracepoint, fentry, fexit},
    programs::{BtfTracePointContext, FEntryContext, FExitContext},
};
use cgtrace_common::{
    counters,
    event::{EventHeader, KIND_CGROUP_CHURN, KIND_SLOW_READ},
    reads::{
        CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, CHURN_MKDIR, CHURN_PATH_LEN, CHURN_RMDIR,
        CgroupChurnEvent, FILE_NAME_HASH, FILE_RSTAT_FLUSH, FUSE_SUPER_MAGIC, FileKey, HOOK_FUSE,
        HOOK_KERNFS, HOOK_PROC, HOOK_SEQ, HOOK_SYSCALL, NAME_DEPTH, NAME_LEN, NR_READ_SYSCALLS,
        PROC_SUPER_MAGIC, ReadInflight, ReadKey, ReadStats, SYSFS_MAGIC, SlowReadEvent, name_hash,
    },
};

use crate::{
    helpers::{atomic_add, bucket_index, config, cpu, current_task, event_header, now, tid},
    kernel::{layout, read, task_cgroup_id},
    maps::{
        EVENTS, READ_FILES, READ_INFLIGHT, READ_LOST_INNER, READ_NAMES_SCRATCH, READ_STATS,
        READ_ZERO, count, counters,
    },
};

/// `READ_INFLIGHT::hook` of a flush seen outside any traced read.
const HOOK_FLUSH: u32 = 0;

type P = *const u8;

#[inline(always)]
fn rd<T: Copy>(base: P, off: u32) -> Option<T> {
    read::<T, false>(base, off)
}

#[inline(always)]
fn traced_magic(m: u64) -> bool {
    m == CGROUP_SUPER_MAGIC
        || m == CGROUP2_SUPER_MAGIC
        || m == SYSFS_MAGIC
        || m == PROC_SUPER_MAGIC
        || m == FUSE_SUPER_MAGIC
}

#[inline(always)]
fn is_read_syscall(id: u64) -> bool {
    let mut i = 0;
    while i < NR_READ_SYSCALLS {
        if u64::from(config!(read_syscalls[i])) == id {
            return true;
        }
        i += 1;
    }
    false
}

/// `current->files->fdt->fd[fd]`.
#[inline(always)]
fn fd_file(task: P, fd: u64) -> Option<P> {
    let files: P = rd(task, layout!(task_files))?;
    let fdt: P = rd(files, layout!(files_fdt))?;
    let max: u32 = rd(fdt, layout!(fdt_max_fds))?;
    if fd >= u64::from(max) {
        return None;
    }
    let arr: P = rd(fdt, layout!(fdt_fd))?;
    let file: P = rd(arr.wrapping_add((fd as usize) * 8), 0)?;
    (!file.is_null()).then_some(file)
}

/// Stores the name chain of a file seen for the first time.
#[inline(always)]
fn remember_names(key: &FileKey, magic: u64, dentry: P) {
    // SAFETY: lookup only.
    if unsafe { READ_FILES.get(key) }.is_some() {
        return;
    }
    let Some(names) = READ_NAMES_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's scratch slot; no other program on this CPU runs in between.
    let names = unsafe { &mut *names };
    names.magic = magic;
    names.depth = 0;
    names.complete = 0;
    let mut d = dentry;
    let mut i = 0;
    while i < NAME_DEPTH {
        let parent: P = rd(d, layout!(dentry_parent)).unwrap_or(core::ptr::null());
        if parent.is_null() || parent == d {
            names.complete = 1;
            break;
        }
        let name: P = rd(d, layout!(dentry_name)).unwrap_or(core::ptr::null());
        let slot = &mut names.names[i];
        slot[0] = 0;
        if !name.is_null() {
            // SAFETY: the helper checks the address.
            let _ = unsafe { bpf_probe_read_kernel_str_bytes(name, slot) };
        }
        names.depth = i as u32 + 1;
        d = parent;
        i += 1;
    }
    if i == NAME_DEPTH {
        // Did the walk end exactly at the root?
        let parent: P = rd(d, layout!(dentry_parent)).unwrap_or(core::ptr::null());
        if parent.is_null() || parent == d {
            names.complete = 1;
        }
    }
    if READ_FILES.insert(key, names, u64::from(BPF_NOEXIST)).is_err()
        // SAFETY: lookup only, to tell "already there" from "map full".
        && unsafe { READ_FILES.get(key) }.is_none()
    {
        count(counters(), counters::READ_FILES_FULL);
    }
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

/// `file`'s inode, super block and file-system magic when its reads are traced: a pseudo file
/// system ([`traced_magic`]), and not cgtrace's own read.
#[inline(always)]
fn traced_file(file: P) -> Option<(P, P, u64)> {
    let inode = rd::<P>(file, layout!(file_inode))?;
    let sb = rd::<P>(inode, layout!(inode_sb))?;
    let magic = rd::<u64>(sb, layout!(sb_magic))?;
    (traced_magic(magic) && !is_self()).then_some((inode, sb, magic))
}

/// Starts timing a read of `file` by the current thread if the file is a traced pseudo-file.
#[inline(always)]
fn open_read(task: P, file: P, hook: u32) {
    let Some((inode, sb, magic)) = traced_file(file) else {
        return;
    };
    let t = tid();
    if let Some(e) = READ_INFLIGHT.get_ptr_mut(&t) {
        // SAFETY: this thread's live map value; only this thread writes it.
        unsafe {
            // Nested hooks (kernfs -> seq_read_iter) keep the outer read.
            if (*e).open != 0 && (*e).hook != HOOK_FLUSH {
                return;
            }
            // The same open file as this thread's last read: reuse its key.
            if (*e).open == 0 && (*e).file_ptr == file as u64 && (*e).inode_ptr == inode as u64 {
                let mut r =
                    ReadInflight::start(now(), reader_key(task, (*e).key.file, (*e).key.dev), hook);
                r.magic = (*e).magic;
                r.target_cgroup = (*e).target_cgroup;
                r.target_cgrp = (*e).target_cgrp;
                r.file_ptr = (*e).file_ptr;
                r.inode_ptr = (*e).inode_ptr;
                if r.target_cgrp != 0 {
                    r.target_dying =
                        rd::<i32>(r.target_cgrp as P, layout!(cgroup_nr_dying)).unwrap_or(0) as u32;
                }
                *e = r;
                return;
            }
        }
    }
    let start_ns = now();
    let dev: u32 = rd(sb, layout!(sb_dev)).unwrap_or(0);
    let mut file_id: u64 = rd(inode, layout!(inode_ino)).unwrap_or(0);
    let dentry: P = rd(file, layout!(file_dentry)).unwrap_or(core::ptr::null());
    let mut target_cgroup = 0u64;
    let mut target_dying = 0u32;
    let mut target_cgrp: P = core::ptr::null();
    if magic == CGROUP_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC {
        // The file's kernfs node, its directory's node, and that directory's `struct cgroup`.
        let kn: P = rd(inode, layout!(inode_private)).unwrap_or(core::ptr::null());
        let dir: P = rd(kn, layout!(kn_parent)).unwrap_or(core::ptr::null());
        target_cgroup = rd(dir, layout!(kn_id)).unwrap_or(0);
        target_cgrp = rd(dir, layout!(kn_priv)).unwrap_or(core::ptr::null());
        target_dying = rd::<i32>(target_cgrp, layout!(cgroup_nr_dying)).unwrap_or(0) as u32;
    } else if magic == PROC_SUPER_MAGIC {
        // /proc/<pid>/x and /proc/<pid>/task/<tid>/x: one file per name, not per pid.
        let parent: P = rd(dentry, layout!(dentry_parent)).unwrap_or(core::ptr::null());
        let pname: P = rd(parent, layout!(dentry_name)).unwrap_or(core::ptr::null());
        let first: u8 = rd(pname, 0).unwrap_or(0);
        if first.is_ascii_digit()
            && let Some(names) = READ_NAMES_SCRATCH.get_ptr_mut(0)
        {
            // SAFETY: this CPU's scratch slot.
            let slot = unsafe { &mut (*names).names[0] };
            *slot = [0; NAME_LEN];
            let name: P = rd(dentry, layout!(dentry_name)).unwrap_or(core::ptr::null());
            // SAFETY: the helper checks the address.
            let _ = unsafe { bpf_probe_read_kernel_str_bytes(name, slot) };
            file_id = FILE_NAME_HASH | name_hash(slot);
        }
    }
    remember_names(
        &FileKey {
            file: file_id,
            dev,
            _pad: 0,
        },
        magic,
        dentry,
    );
    let mut inflight = ReadInflight::start(start_ns, reader_key(task, file_id, dev), hook);
    inflight.magic = magic;
    inflight.target_cgroup = target_cgroup;
    inflight.target_dying = target_dying;
    inflight.target_cgrp = target_cgrp as u64;
    inflight.file_ptr = file as u64;
    inflight.inode_ptr = inode as u64;
    // Replaces this thread's last entry (a finished read, or a stale flush-only one). If it
    // cannot be stored, the read's end finds no entry and counts it (`READ_INFLIGHT_LOST`).
    let _ = READ_INFLIGHT.insert(&t, &inflight, 0);
}

/// Counts `ns` in the histogram of `s`.
#[inline(always)]
fn add_bucket(s: *mut ReadStats, ns: u64) {
    bucket_index!(let idx = ns, else return);
    // SAFETY: `s` points into a live map value; the index is checked.
    unsafe { atomic_add(&raw mut (*s).buckets[idx], 1) };
}

/// Ends the current thread's read opened by `hook` and accounts it. Returns true when the thread
/// has no entry of a read: the caller then looks at the file ([`lost_read`]).
#[inline(always)]
fn close_read(hook: u32, ret: i64) -> bool {
    let t = tid();
    let Some(e) = READ_INFLIGHT.get_ptr_mut(&t) else {
        return true;
    };
    // SAFETY: this thread's live map value; it is copied before being marked closed.
    let r = unsafe {
        // A flush-only entry stands where the read's was: the read's was evicted.
        if (*e).hook == HOOK_FLUSH {
            return true;
        }
        // Closed: an untraced read after a traced one (the entry is the file cache), or the
        // inner hook of a nested pair already ended it. Another hook: the inner of a pair.
        if (*e).open == 0 || (*e).hook != hook {
            return false;
        }
        (*e).open = 0;
        *e
    };
    account(&r, now(), ret);
    false
}

/// A read ended and the thread has no entry of it. If `file` is a traced pseudo-file the read
/// was traced and its entry is gone: evicted from the LRU `READ_INFLIGHT` by other threads'
/// reads while it ran, never stored, or the read began before cgtrace attached. Ordinary files
/// pay three loads, and only on threads that have no entry. Counted once: a nested pair (kernfs
/// or proc around seq_file) ends twice, so the inner `seq_read_iter` exit leaves a per-CPU mark
/// that the enclosing exit, which follows at once on the same thread, takes instead of counting.
#[inline(always)]
fn lost_read(hook: u32, file: Option<P>) {
    let Some(file) = file else {
        return;
    };
    if traced_file(file).is_none() {
        return;
    }
    if let Some(mark) = READ_LOST_INNER.get_ptr_mut(0) {
        let me = [u64::from(tid()), file as u64];
        // SAFETY: this CPU's slot; programs do not nest on a CPU between these lines.
        unsafe {
            if hook == HOOK_SEQ {
                *mark = me;
            } else if (hook == HOOK_KERNFS || hook == HOOK_PROC) && *mark == me {
                *mark = [0, 0];
                return;
            }
        }
    }
    count(counters(), counters::READ_INFLIGHT_LOST);
}

/// Adds one finished read (or flush) to `READ_STATS` and sends it as an event if slow.
#[inline(always)]
fn account(r: &ReadInflight, end: u64, ret: i64) {
    let duration = end.saturating_sub(r.start_ns);
    // With only the flush functions hooked (fentry mode without rstat tracepoints), the span is
    // the flush, lock waits included.
    let flush_ns = if r.flush_ns == 0 && r.flush_span_ns > 0 {
        r.flush_span_ns.saturating_sub(r.lock_wait_ns)
    } else {
        r.flush_ns
    };
    let flushed = u64::from(r.needs_flush != 0 || r.flush_locks > 0 || r.flush_span_ns > 0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let c = counters();
    let mut stats = READ_STATS.get_ptr_mut(&r.key);
    if stats.is_none() {
        if let Some(zero) = READ_ZERO.get_ptr(0) {
            // SAFETY: the per-CPU zero value stays valid while the program runs.
            let _ = READ_STATS.insert(&r.key, unsafe { &*zero }, u64::from(BPF_NOEXIST));
        }
        stats = READ_STATS.get_ptr_mut(&r.key);
    }
    match stats {
        Some(s) => {
            // SAFETY: live map value; counters are added atomically, the rest are last-writer
            // values.
            unsafe {
                atomic_add(&raw mut (*s).count, 1);
                atomic_add(&raw mut (*s).total_ns, duration);
                // Most reads flush nothing: skip those atomic adds.
                if flushed != 0 {
                    atomic_add(&raw mut (*s).flush_ns, flush_ns);
                    atomic_add(&raw mut (*s).lock_wait_ns, r.lock_wait_ns);
                    atomic_add(&raw mut (*s).flush_locks, r.flush_locks);
                    atomic_add(&raw mut (*s).flushed_reads, flushed);
                    atomic_add(&raw mut (*s).contended, r.contended);
                }
                if ret > 0 {
                    atomic_add(&raw mut (*s).bytes, ret as u64);
                }
                add_bucket(s, duration);
                if duration > (*s).max_ns {
                    (*s).max_ns = duration;
                }
                (*s).target_cgroup = r.target_cgroup;
                (*s).target_dying = r.target_dying;
                (*s).last_pid = pid_tgid as u32;
                (*s).last_tgid = (pid_tgid >> 32) as u32;
            }
        }
        None => count(c, counters::READ_STATS_FULL),
    }
    if duration < config!(read_event_min_ns) {
        return;
    }
    let Some(mut slot) = EVENTS.reserve::<SlowReadEvent>(0) else {
        count(c, counters::RINGBUF_FULL);
        return;
    };
    let ev = slot.as_mut_ptr();
    // SAFETY: `ev` points to a reserved, writable record; every field is written before submit.
    unsafe {
        (*ev).header = event_header(KIND_SLOW_READ, end);
        (*ev).key = r.key;
        (*ev).magic = r.magic;
        (*ev).start_ns = r.start_ns;
        (*ev).duration_ns = duration;
        (*ev).flush_ns = flush_ns;
        (*ev).lock_wait_ns = r.lock_wait_ns;
        (*ev).flush_locks = r.flush_locks;
        (*ev).contended = r.contended;
        (*ev).target_cgroup = r.target_cgroup;
        (*ev).ret = ret;
        (*ev).pid = pid_tgid as u32;
        (*ev).tgid = (pid_tgid >> 32) as u32;
        (*ev).target_dying = r.target_dying;
        (*ev).needs_flush = flushed as u32;
    }
    slot.submit(0);
}

// ---------------------------------------------------------------------------------------------
// syscall mode

/// `sys_enter(regs, id)`.
#[btf_tracepoint(function = "sys_enter")]
pub fn reads_sys_enter(ctx: BtfTracePointContext) -> u32 {
    let id: u64 = ctx.arg(1);
    if !is_read_syscall(id) {
        return 0;
    }
    let regs: P = ctx.arg(0);
    if let Some(file) = syscall_file(regs, id) {
        open_read(current_task(), file, HOOK_SYSCALL);
    }
    0
}

/// The file a read syscall `nr` reads, from its saved registers.
#[inline(always)]
fn syscall_file(regs: P, nr: u64) -> Option<P> {
    // The last slot is sendfile(out_fd, in_fd, ...): the file read is the second argument.
    let sendfile = nr == u64::from(config!(read_syscalls[NR_READ_SYSCALLS - 1]));
    let slot = if sendfile {
        layout!(regs_arg1)
    } else {
        layout!(regs_arg0)
    };
    let fd = rd::<u64>(regs, slot)?;
    fd_file(current_task(), fd)
}

/// `sys_exit(regs, ret)`: the syscall number is read back from `regs`, so other syscalls cost
/// one load and a compare.
#[btf_tracepoint(function = "sys_exit")]
pub fn reads_sys_exit(ctx: BtfTracePointContext) -> u32 {
    let regs: P = ctx.arg(0);
    let Some(nr) = rd::<u64>(regs, layout!(regs_nr)) else {
        return 0;
    };
    if !is_read_syscall(nr) {
        return 0;
    }
    let ret: i64 = ctx.arg(1);
    if close_read(HOOK_SYSCALL, ret) {
        lost_read(HOOK_SYSCALL, syscall_file(regs, nr));
    }
    0
}

// ---------------------------------------------------------------------------------------------
// fentry mode: `f(struct kiocb *, struct iov_iter *)` and `proc_reg_read(struct file *, ...)`

#[inline(always)]
fn iocb_file(iocb: P) -> Option<P> {
    rd::<P>(iocb, layout!(kiocb_filp))
}

#[inline(always)]
fn iter_enter(iocb: P, hook: u32) {
    if let Some(file) = iocb_file(iocb) {
        open_read(current_task(), file, hook);
    }
}

#[fentry(function = "kernfs_fop_read_iter")]
pub fn reads_kernfs_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_KERNFS);
    0
}

#[fexit(function = "kernfs_fop_read_iter")]
pub fn reads_kernfs_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_KERNFS, ctx.arg(2)) {
        lost_read(HOOK_KERNFS, iocb_file(ctx.arg(0)));
    }
    0
}

#[fentry(function = "seq_read_iter")]
pub fn reads_seq_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_SEQ);
    0
}

#[fexit(function = "seq_read_iter")]
pub fn reads_seq_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_SEQ, ctx.arg(2)) {
        lost_read(HOOK_SEQ, iocb_file(ctx.arg(0)));
    }
    0
}

#[fentry(function = "proc_reg_read_iter")]
pub fn reads_proc_iter_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_PROC);
    0
}

#[fexit(function = "proc_reg_read_iter")]
pub fn reads_proc_iter_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_PROC, ctx.arg(2)) {
        lost_read(HOOK_PROC, iocb_file(ctx.arg(0)));
    }
    0
}

#[fentry(function = "proc_reg_read")]
pub fn reads_proc_enter(ctx: FEntryContext) -> u32 {
    open_read(current_task(), ctx.arg(0), HOOK_PROC);
    0
}

#[fexit(function = "proc_reg_read")]
pub fn reads_proc_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_PROC, ctx.arg(4)) {
        lost_read(HOOK_PROC, Some(ctx.arg(0)));
    }
    0
}

#[fentry(function = "fuse_file_read_iter")]
pub fn reads_fuse_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_FUSE);
    0
}

#[fexit(function = "fuse_file_read_iter")]
pub fn reads_fuse_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_FUSE, ctx.arg(2)) {
        lost_read(HOOK_FUSE, iocb_file(ctx.arg(0)));
    }
    0
}

// ---------------------------------------------------------------------------------------------
// rstat flush work

/// The current thread's entry, creating a flush-only one (charged to `FILE_RSTAT_FLUSH`) when it
/// is in no traced read.
#[inline(always)]
fn inflight_or_flush() -> Option<*mut ReadInflight> {
    let t = tid();
    let existing = READ_INFLIGHT.get_ptr_mut(&t);
    // SAFETY: this thread's live map value.
    if let Some(p) = existing
        && unsafe { (*p).open } != 0
    {
        return Some(p);
    }
    // Flushes by cgtrace's own reads are not charged to anyone.
    if is_self() {
        return None;
    }
    let mut r = ReadInflight::start(
        now(),
        reader_key(current_task(), FILE_RSTAT_FLUSH, 0),
        HOOK_FLUSH,
    );
    r.needs_flush = 1;
    if let Some(p) = existing {
        // SAFETY: this thread's live map value (a finished read's entry, reused).
        unsafe { *p = r };
        return Some(p);
    }
    if READ_INFLIGHT.insert(&t, &r, 0).is_err() {
        count(counters(), counters::READ_INFLIGHT_FULL);
        return None;
    }
    READ_INFLIGHT.get_ptr_mut(&t)
}

/// `memcg_flush_stats(memcg, stats_updates, force, needs_flush)` (6.11+).
#[btf_tracepoint(function = "memcg_flush_stats")]
pub fn reads_memcg_flush(ctx: BtfTracePointContext) -> u32 {
    let needs: u64 = ctx.arg(3);
    if needs & 0xff == 0 {
        return 0;
    }
    if let Some(r) = READ_INFLIGHT.get_ptr_mut(&tid()) {
        // SAFETY: live map value of this thread.
        unsafe {
            if (*r).open != 0 {
                (*r).needs_flush = 1;
            }
        }
    }
    0
}

/// `cgroup_rstat_lock_contended(cgrp, cpu, contended)`: the lock is busy; waiting begins.
#[btf_tracepoint(function = "cgroup_rstat_lock_contended")]
pub fn reads_rstat_contended(_ctx: BtfTracePointContext) -> u32 {
    if let Some(r) = inflight_or_flush() {
        // SAFETY: live map value of this thread.
        unsafe { (*r).contended_at = now() };
    }
    0
}

/// `cgroup_rstat_locked(cgrp, cpu, contended)`: the lock is held from now.
#[btf_tracepoint(function = "cgroup_rstat_locked")]
pub fn reads_rstat_locked(_ctx: BtfTracePointContext) -> u32 {
    let Some(r) = inflight_or_flush() else {
        return 0;
    };
    let t = now();
    // SAFETY: live map value of this thread.
    unsafe {
        if (*r).contended_at != 0 {
            (*r).lock_wait_ns += t.saturating_sub((*r).contended_at);
            (*r).contended += 1;
            (*r).contended_at = 0;
        }
        (*r).flush_locks += 1;
        (*r).locked_at = t;
    }
    0
}

/// `cgroup_rstat_unlock(cgrp, cpu, contended)`: one lock hold ends. A flush-only entry is
/// accounted per hold (one "read" of `FILE_RSTAT_FLUSH` per CPU walked on 6.16+).
#[btf_tracepoint(function = "cgroup_rstat_unlock")]
pub fn reads_rstat_unlock(_ctx: BtfTracePointContext) -> u32 {
    let t_id = tid();
    let Some(r) = READ_INFLIGHT.get_ptr_mut(&t_id) else {
        return 0;
    };
    let t = now();
    // SAFETY: live map value of this thread.
    unsafe {
        if (*r).open == 0 {
            return 0;
        }
        if (*r).locked_at != 0 {
            (*r).flush_ns += t.saturating_sub((*r).locked_at);
            (*r).locked_at = 0;
        }
        if (*r).hook == HOOK_FLUSH && (*r).flush_entry_at == 0 {
            (*r).open = 0;
            let done = *r;
            account(&done, t, 0);
        }
    }
    0
}

/// fentry mode, kernels without rstat tracepoints: the flush function's span.
#[inline(always)]
fn flush_enter() {
    if let Some(r) = inflight_or_flush() {
        // SAFETY: live map value of this thread.
        unsafe {
            if (*r).flush_entry_at == 0 {
                (*r).flush_entry_at = now();
            }
        }
    }
}

#[inline(always)]
fn flush_exit() {
    let t_id = tid();
    let Some(r) = READ_INFLIGHT.get_ptr_mut(&t_id) else {
        return;
    };
    let t = now();
    // SAFETY: live map value of this thread.
    unsafe {
        if (*r).open == 0 {
            return;
        }
        if (*r).flush_entry_at != 0 {
            (*r).flush_span_ns += t.saturating_sub((*r).flush_entry_at);
            (*r).flush_entry_at = 0;
            (*r).needs_flush = 1;
        }
        if (*r).hook == HOOK_FLUSH {
            (*r).open = 0;
            let done = *r;
            account(&done, t, 0);
        }
    }
}

#[fentry(function = "css_rstat_flush")]
pub fn reads_flush_enter(_ctx: FEntryContext) -> u32 {
    flush_enter();
    0
}

#[fexit(function = "css_rstat_flush")]
pub fn reads_flush_exit(_ctx: FExitContext) -> u32 {
    flush_exit();
    0
}

/// Kernels before 6.16 (`cgroup_rstat_flush`, and `cgroup_rstat_flush_irqsafe` on 6.1).
#[fentry(function = "cgroup_rstat_flush")]
pub fn reads_flush_old_enter(_ctx: FEntryContext) -> u32 {
    flush_enter();
    0
}

#[fexit(function = "cgroup_rstat_flush")]
pub fn reads_flush_old_exit(_ctx: FExitContext) -> u32 {
    flush_exit();
    0
}

#[fentry(function = "cgroup_rstat_flush_irqsafe")]
pub fn reads_flush_irqsafe_enter(_ctx: FEntryContext) -> u32 {
    flush_enter();
    0
}

#[fexit(function = "cgroup_rstat_flush_irqsafe")]
pub fn reads_flush_irqsafe_exit(_ctx: FExitContext) -> u32 {
    flush_exit();
    0
}

// ---------------------------------------------------------------------------------------------
// cgroup churn

#[inline(always)]
fn churn(cgrp: P, path: P, op: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let task = current_task();
    let Some(mut slot) = EVENTS.reserve::<CgroupChurnEvent>(0) else {
        count(counters(), counters::RINGBUF_FULL);
        return;
    };
    let root: P = rd(cgrp, layout!(cgroup_root)).unwrap_or(core::ptr::null());
    let kn: P = rd(cgrp, layout!(cgroup_kn)).unwrap_or(core::ptr::null());
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
