//! `reads`: slow pseudo-file reads — every read of a cgroupfs, sysfs, procfs or FUSE file, timed
//! and attributed to the reader (its cgroup and comm) and the file; for memcg stat files the time
//! spent in rstat flushes and waiting on the flush lock; and cgroup creation/removal (the churn
//! that leaves dying memcgs behind).
//!
//! Outputs: per-(reader cgroup, comm, file) cumulative stats with a latency histogram in the
//! kernel (`READ_STATS`, read by the daemon once per interval), the file's name chain the first
//! time a file is seen (`READ_FILES`), and ring-buffer events for reads at or above the event
//! threshold ([`SlowReadEvent`]) and for cgroup mkdir/rmdir ([`CgroupChurnEvent`]).

use crate::{event::EventHeader, hist::NR_BUCKETS};

/// Superblock magics of the filesystems whose reads are traced.
pub const CGROUP_SUPER_MAGIC: u64 = 0x27e0eb;
pub const CGROUP2_SUPER_MAGIC: u64 = 0x63677270;
pub const SYSFS_MAGIC: u64 = 0x62656572;
pub const PROC_SUPER_MAGIC: u64 = 0x9fa0;
pub const FUSE_SUPER_MAGIC: u64 = 0x65735546;

/// Read syscalls traced in the syscall mode, by slot in `Config::read_syscalls`.
pub const NR_READ_SYSCALLS: usize = 6;
/// Unused slot in `Config::read_syscalls`.
pub const NO_SYSCALL: u32 = u32::MAX;

/// `ReadInflight::hook`: who opened the read (the matching exit closes only its own).
pub const HOOK_SYSCALL: u32 = 1;
pub const HOOK_KERNFS: u32 = 2;
pub const HOOK_SEQ: u32 = 3;
pub const HOOK_PROC: u32 = 4;
pub const HOOK_FUSE: u32 = 5;

/// `ReadKey::file` of the pseudo-file that stands for rstat flushes done outside any traced read
/// (the periodic kworker flush, reclaim): each lock hold is one "read" of it.
pub const FILE_RSTAT_FLUSH: u64 = u64::MAX;
/// Set in `ReadKey::file` when the file id is a hash of the name (procfs files under a numeric
/// `/proc/<pid>/` directory, so every pid's `stat` is one file).
pub const FILE_NAME_HASH: u64 = 1 << 63;

/// Levels of the name chain kept per file, and bytes per name.
pub const NAME_DEPTH: usize = 8;
pub const NAME_LEN: usize = 64;

/// Key of `READ_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadKey {
    /// The reader's cgroup (same hierarchy as `runq`).
    pub cgroup_id: u64,
    /// Inode number of the file within its superblock, [`FILE_NAME_HASH`]-flagged name hash, or
    /// [`FILE_RSTAT_FLUSH`].
    pub file: u64,
    /// `s_dev` of the file's superblock (0 for [`FILE_RSTAT_FLUSH`]).
    pub dev: u32,
    pub _pad: u32,
    /// The reader's comm.
    pub comm: [u8; 16],
}

/// Value of `READ_STATS`: cumulative since the entry was created (the daemon takes deltas).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ReadStats {
    pub count: u64,
    pub total_ns: u64,
    /// Time inside rstat flushes (lock held) during these reads.
    pub flush_ns: u64,
    /// Time waiting for the rstat lock during these reads.
    pub lock_wait_ns: u64,
    /// rstat lock acquisitions (one per CPU walked on 6.16+; per lock round before).
    pub flush_locks: u64,
    /// Reads during which a flush happened.
    pub flushed_reads: u64,
    /// Lock acquisitions that had to wait.
    pub contended: u64,
    /// Bytes returned.
    pub bytes: u64,
    /// Largest single read (racy maximum: enough for display).
    pub max_ns: u64,
    /// For cgroupfs files: the target cgroup (`kernfs_node.id` of the file's directory) and its
    /// `nr_dying_descendants` at the last read.
    pub target_cgroup: u64,
    pub target_dying: u32,
    /// Last reader's tid and tgid.
    pub last_pid: u32,
    pub last_tgid: u32,
    pub _pad: u32,
    pub buckets: [u64; NR_BUCKETS],
}

/// Key of `READ_FILES`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub file: u64,
    pub dev: u32,
    pub _pad: u32,
}

/// Value of `READ_FILES`: what a file is, written once when it is first read.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FileNames {
    /// Superblock magic.
    pub magic: u64,
    /// Names from the file up: `names[0]` is the file, `names[1]` its directory, … up to the
    /// superblock's root (excluded) or `NAME_DEPTH` levels.
    pub depth: u32,
    /// 1 if the walk reached the root (the chain is the whole path inside the filesystem).
    pub complete: u32,
    pub names: [[u8; NAME_LEN]; NAME_DEPTH],
}

/// Value of `READ_INFLIGHT`, keyed by tid: a traced read in progress and what it cost so far.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ReadInflight {
    pub start_ns: u64,
    pub key: ReadKey,
    pub magic: u64,
    pub target_cgroup: u64,
    pub flush_ns: u64,
    pub lock_wait_ns: u64,
    pub flush_locks: u64,
    pub contended: u64,
    /// When the rstat lock was taken / contention began (0: not now).
    pub locked_at: u64,
    pub contended_at: u64,
    /// Start of an rstat flush function (fentry mode), 0 when not inside one.
    pub flush_entry_at: u64,
    /// Time inside rstat flush functions (fentry mode: includes lock waits).
    pub flush_span_ns: u64,
    pub target_dying: u32,
    pub hook: u32,
    /// `memcg_flush_stats` said a flush was needed (or a flush function ran).
    pub needs_flush: u32,
    /// 1 while the read (or flush) is in progress. Entries stay after a read ends, so the next
    /// read of the same open file by the thread reuses the file's key (`file_ptr`, `inode_ptr`).
    pub open: u32,
    pub file_ptr: u64,
    pub inode_ptr: u64,
    /// cgroupfs: the target's `struct cgroup`, whose dying count is re-read at every read.
    pub target_cgrp: u64,
}

impl ReadInflight {
    /// A read (or flush) by `key`'s reader that starts at `start_ns`: open, nothing spent yet,
    /// no file or target known.
    pub const fn start(start_ns: u64, key: ReadKey, hook: u32) -> Self {
        Self {
            start_ns,
            key,
            magic: 0,
            target_cgroup: 0,
            flush_ns: 0,
            lock_wait_ns: 0,
            flush_locks: 0,
            contended: 0,
            locked_at: 0,
            contended_at: 0,
            flush_entry_at: 0,
            flush_span_ns: 0,
            target_dying: 0,
            hook,
            needs_flush: 0,
            open: 1,
            file_ptr: 0,
            inode_ptr: 0,
            target_cgrp: 0,
        }
    }
}

/// A read at or above the event threshold.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SlowReadEvent {
    pub header: EventHeader,
    pub key: ReadKey,
    pub magic: u64,
    pub start_ns: u64,
    pub duration_ns: u64,
    pub flush_ns: u64,
    pub lock_wait_ns: u64,
    pub flush_locks: u64,
    pub contended: u64,
    pub target_cgroup: u64,
    /// Bytes returned, or a negative errno.
    pub ret: i64,
    pub pid: u32,
    pub tgid: u32,
    pub target_dying: u32,
    pub needs_flush: u32,
}

/// `CgroupChurnEvent::op`.
pub const CHURN_MKDIR: u32 = 0;
pub const CHURN_RMDIR: u32 = 1;
/// Bytes of the cgroup path kept in a churn event.
pub const CHURN_PATH_LEN: usize = 128;

/// A cgroup created or removed (`cgroup:cgroup_mkdir` / `cgroup_rmdir`), with who did it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgroupChurnEvent {
    pub header: EventHeader,
    /// `cgroup_root.hierarchy_id` (v1 hierarchies are 1..; cgroup2 is 0).
    pub hierarchy_id: u32,
    pub op: u32,
    /// The created/removed cgroup's id and level.
    pub cgroup_id: u64,
    pub level: u32,
    pub pid: u32,
    pub tgid: u32,
    pub _pad: u32,
    /// The creator's cgroup (same hierarchy as `runq`).
    pub actor_cgroup: u64,
    pub comm: [u8; 16],
    pub path: [u8; CHURN_PATH_LEN],
}

/// FNV-1a over a name, stopping at its NUL; used for name-keyed procfs files.
#[inline(always)]
pub fn name_hash(name: &[u8; NAME_LEN]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < NAME_LEN {
        let b = name[i];
        if b == 0 {
            break;
        }
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] integers and byte arrays with explicit padding.
    unsafe impl aya::Pod for super::ReadKey {}
    // SAFETY: #[repr(C)] integers and byte arrays with explicit padding.
    unsafe impl aya::Pod for super::ReadStats {}
    // SAFETY: #[repr(C)] integers and byte arrays with explicit padding.
    unsafe impl aya::Pod for super::FileKey {}
    // SAFETY: #[repr(C)] integers and byte arrays with explicit padding.
    unsafe impl aya::Pod for super::FileNames {}
    // SAFETY: #[repr(C)] integers and byte arrays with explicit padding.
    unsafe impl aya::Pod for super::ReadInflight {}
}
