//! Which files are traced: a file whose super block is a pseudo file system (cgroupfs, sysfs,
//! procfs, FUSE); an fd's file; and the name chain of a file seen for the first time
//! (`READ_FILES`).
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_probe_read_kernel_str_bytes};
use cgtrace_common::{
    counters,
    reads::{
        CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, FUSE_SUPER_MAGIC, FileKey, NAME_DEPTH,
        PROC_SUPER_MAGIC, SYSFS_MAGIC,
    },
};

use super::{P, is_self, rd, rd_ptr};
use crate::{
    kernel::layout,
    maps::{READ_FILES, READ_NAMES_SCRATCH, count, counters},
};

#[inline(always)]
fn traced_magic(m: u64) -> bool {
    m == CGROUP_SUPER_MAGIC
        || m == CGROUP2_SUPER_MAGIC
        || m == SYSFS_MAGIC
        || m == PROC_SUPER_MAGIC
        || m == FUSE_SUPER_MAGIC
}

/// `current->files->fdt->fd[fd]`.
#[inline(always)]
pub(super) fn fd_file(task: P, fd: u64) -> Option<P> {
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
pub(super) fn remember_names(key: &FileKey, magic: u64, dentry: P) {
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
        let parent = rd_ptr(d, layout!(dentry_parent));
        if parent.is_null() || parent == d {
            names.complete = 1;
            break;
        }
        let name = rd_ptr(d, layout!(dentry_name));
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
        let parent = rd_ptr(d, layout!(dentry_parent));
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

/// `file`'s inode, super block and file-system magic when its reads are traced: a pseudo file
/// system ([`traced_magic`]), and not cgtrace's own read.
#[inline(always)]
pub(super) fn traced_file(file: P) -> Option<(P, P, u64)> {
    let inode = rd::<P>(file, layout!(file_inode))?;
    let sb = rd::<P>(inode, layout!(inode_sb))?;
    let magic = rd::<u64>(sb, layout!(sb_magic))?;
    (traced_magic(magic) && !is_self()).then_some((inode, sb, magic))
}
