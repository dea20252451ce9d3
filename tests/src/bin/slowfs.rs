//! A tiny read-only FUSE filesystem whose reads are slow on purpose:
//!
//! `slowfs MOUNTPOINT [--delay-ms N] [--size BYTES] [--threads T]`
//!
//! It serves two regular files: `slow`, whose every FUSE read request sleeps N ms (default 50)
//! before answering, and `fast`, answered at once; both hold BYTES bytes (default 4096) of text.
//! Files are opened with `FOPEN_DIRECT_IO`, so the page cache never answers for the server: every
//! read(2) becomes one FUSE read request, including the one at EOF that returns 0 (so reading `slow`
//! to EOF with one large buffer takes two delays). T worker threads (default 4) serve requests, so
//! concurrent readers are not serialised behind one sleep. Mounted with `allow_other` and
//! `auto_unmount` (through fusermount3): the mount goes away when this process dies. Runs in the
//! foreground until unmounted.
use std::{ffi::OsStr, path::PathBuf, time::Duration, time::UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen,
    Request,
};

const ROOT: u64 = 1;
const SLOW: u64 = 2;
const FAST: u64 = 3;
const TTL: Duration = Duration::from_secs(1);

struct SlowFs {
    delay: Duration,
    content: Vec<u8>,
}

impl SlowFs {
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            SLOW | FAST => (FileType::RegularFile, 0o444, self.content.len() as u64, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }
}

impl Filesystem for SlowFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match (u64::from(parent), name.to_str()) {
            (ROOT, Some("slow")) => SLOW,
            (ROOT, Some("fast")) => FAST,
            _ => return reply.error(Errno::ENOENT),
        };
        match self.attr(ino) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.into()) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match u64::from(ino) {
            SLOW | FAST => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = u64::from(ino);
        if ino != SLOW && ino != FAST {
            return reply.error(Errno::ENOENT);
        }
        if ino == SLOW {
            std::thread::sleep(self.delay);
        }
        let start = (offset as usize).min(self.content.len());
        let end = (start + size as usize).min(self.content.len());
        reply.data(&self.content[start..end]);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (SLOW, FileType::RegularFile, "slow"),
            (FAST, FileType::RegularFile, "fast"),
        ];
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() -> Result<()> {
    let mut mountpoint = None;
    let (mut delay_ms, mut size, mut threads) = (50u64, 4096usize, 4usize);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |flag: &str| it.next().with_context(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--delay-ms" => delay_ms = val("--delay-ms")?.parse().context("--delay-ms")?,
            "--size" => size = val("--size")?.parse().context("--size")?,
            "--threads" => threads = val("--threads")?.parse().context("--threads")?,
            s if s.starts_with("--") => bail!("unknown flag {s}"),
            _ => mountpoint = Some(PathBuf::from(a)),
        }
    }
    let mountpoint = mountpoint
        .context("usage: slowfs MOUNTPOINT [--delay-ms N] [--size BYTES] [--threads T]")?;
    let line = b"cgtrace slowfs: every read of `slow` sleeps\n";
    let content: Vec<u8> = line.iter().copied().cycle().take(size).collect();
    let fs = SlowFs {
        delay: Duration::from_millis(delay_ms),
        content,
    };
    let mut cfg = Config::default();
    cfg.mount_options.extend([
        MountOption::RO,
        MountOption::FSName("cgtrace-slowfs".into()),
        MountOption::Subtype("slowfs".into()),
        MountOption::AutoUnmount,
        // allow_other (acl All below): readers in other users/containers too.
    ]);
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(threads.max(1));
    fuser::mount(fs, &mountpoint, &cfg)
        .with_context(|| format!("mounting slowfs at {}", mountpoint.display()))
}
