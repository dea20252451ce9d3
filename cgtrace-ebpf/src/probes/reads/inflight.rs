//! A read's life on its thread, in `READ_INFLIGHT`: opened at the hook's entry, closed and
//! accounted at its exit, or counted as lost when the exit finds no entry of it.
use aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes;
use cgtrace_common::{
    counters,
    reads::{
        CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, FILE_NAME_HASH, FileKey, HOOK_KERNFS, HOOK_PROC,
        HOOK_SEQ, NAME_LEN, PROC_SUPER_MAGIC, ReadInflight, name_hash,
    },
};

use super::{
    HOOK_FLUSH, P,
    files::{remember_names, traced_file},
    rd, rd_ptr, reader_key,
    stats::account,
};
use crate::{
    helpers::{now, tid},
    kernel::layout,
    maps::{READ_INFLIGHT, READ_LOST_INNER, READ_NAMES_SCRATCH, count, counters},
};

/// Starts timing a read of `file` by the current thread if the file is a traced pseudo-file.
#[inline(always)]
pub(super) fn open_read(task: P, file: P, hook: u32) {
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
    let dentry = rd_ptr(file, layout!(file_dentry));
    let mut target_cgroup = 0u64;
    let mut target_dying = 0u32;
    let mut target_cgrp: P = core::ptr::null();
    if magic == CGROUP_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC {
        // The file's kernfs node, its directory's node, and that directory's `struct cgroup`.
        let kn = rd_ptr(inode, layout!(inode_private));
        let dir = rd_ptr(kn, layout!(kn_parent));
        target_cgroup = rd(dir, layout!(kn_id)).unwrap_or(0);
        target_cgrp = rd_ptr(dir, layout!(kn_priv));
        target_dying = rd::<i32>(target_cgrp, layout!(cgroup_nr_dying)).unwrap_or(0) as u32;
    } else if magic == PROC_SUPER_MAGIC {
        // /proc/<pid>/x and /proc/<pid>/task/<tid>/x: one file per name, not per pid.
        let parent = rd_ptr(dentry, layout!(dentry_parent));
        let pname = rd_ptr(parent, layout!(dentry_name));
        let first: u8 = rd(pname, 0).unwrap_or(0);
        if first.is_ascii_digit()
            && let Some(names) = READ_NAMES_SCRATCH.get_ptr_mut(0)
        {
            // SAFETY: this CPU's scratch slot.
            let slot = unsafe { &mut (*names).names[0] };
            *slot = [0; NAME_LEN];
            let name = rd_ptr(dentry, layout!(dentry_name));
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

/// Ends the current thread's read opened by `hook` and accounts it. Returns true when the thread
/// has no entry of a read: the caller then looks at the file ([`lost_read`]).
#[inline(always)]
pub(super) fn close_read(hook: u32, ret: i64) -> bool {
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
pub(super) fn lost_read(hook: u32, file: Option<P>) {
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
