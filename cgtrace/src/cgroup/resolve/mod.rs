//! Cgroup id (`kernfs_node.id`, the inode number of the cgroup directory) → path.
//!
//! [`Resolver`] serves one hierarchy. Lookups go through a bounded LRU cache. On a miss it asks
//! the kernel directly with `open_by_handle_at(2)` and a kernfs file handle (needs
//! `CAP_DAC_READ_SEARCH` and a cgroup filesystem), then reads the path back from
//! `/proc/self/fd/N` (`handle`). Where that is not possible it walks the mount, `lstat`ing every
//! directory, at most once per walk interval (`walk`). The cache is `lru`'s.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::Error;

mod handle;
mod lru;
mod walk;

use handle::{CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, Lookup, fstatfs_type, proc_fd_path};
use lru::Lru;
use walk::walk;

/// Default minimum time between two full directory walks.
pub const DEFAULT_WALK_INTERVAL: Duration = Duration::from_secs(1);
/// Default time a "no such cgroup" answer is remembered.
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `open_by_handle_at` works for this mount.
    Handles,
    /// Directory walks only.
    Walk,
}

/// Resolves cgroup ids of one hierarchy to paths relative to its mount.
///
/// Paths start with `/` (`/` is the mount itself) and are converted lossily to UTF-8. Cached
/// paths are not re-validated on hits: kernfs ids are never reused on 64-bit kernels, so a
/// cached answer is never wrong for another cgroup, but it outlives a removed cgroup until it is
/// evicted or [`forget`](Self::forget)ten; use [`exists`](Self::exists) to check.
pub struct Resolver {
    mount: PathBuf,
    mount_fd: File,
    mount_dev: u64,
    root_ino: u64,
    root_path: Arc<str>,
    /// `readlink(/proc/self/fd/<mount_fd>)`: the prefix stripped from paths read back from
    /// handle-opened fds (it differs from `mount` when `mount` goes through a symlink).
    fd_prefix: Vec<u8>,
    mode: Mode,
    cache: Lru,
    negative: HashMap<u64, Instant>,
    negative_ttl: Duration,
    walk_interval: Duration,
    last_walk: Option<Instant>,
    /// The last walk's full result, consulted until `walk_interval` has passed (kept, with
    /// one entry per cgroup, until the next walk replaces it).
    snapshot: HashMap<u64, Arc<str>>,
}

impl Resolver {
    /// Opens cgroup `id` (`O_PATH`) by its kernfs file handle, relative to the mount.
    fn open_handle(&self, id: u64) -> io::Result<std::os::fd::OwnedFd> {
        handle::open_handle(&self.mount_fd, id)
    }

    /// Reads back the path of a directory opened by handle, relative to the mount.
    fn read_back(&self, fd: &std::os::fd::OwnedFd, id: u64) -> Lookup {
        handle::read_back(fd, id, &self.fd_prefix, &self.mount)
    }

    /// Opens `mount` (a hierarchy's mount point, or any directory tree for the walk fallback)
    /// with a cache of at most `capacity` paths (at least 1).
    pub fn new(mount: PathBuf, capacity: usize) -> Result<Resolver, Error> {
        let mount_err = |source: io::Error| Error::Mount {
            path: mount.clone(),
            source,
        };
        let mount_fd = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&mount)
            .map_err(mount_err)?;
        let md = mount_fd.metadata().map_err(mount_err)?;
        let fs_type = fstatfs_type(&mount_fd).map_err(mount_err)?;
        let fd_prefix = fs::read_link(proc_fd_path(mount_fd.as_raw_fd()))
            .map(|p| p.as_os_str().as_bytes().to_vec())
            .ok();
        let mut r = Resolver {
            mount,
            mount_fd,
            mount_dev: md.dev(),
            root_ino: md.ino(),
            root_path: Arc::from("/"),
            fd_prefix: fd_prefix.clone().unwrap_or_default(),
            mode: Mode::Walk,
            cache: Lru::new(capacity),
            negative: HashMap::new(),
            negative_ttl: DEFAULT_NEGATIVE_TTL,
            walk_interval: DEFAULT_WALK_INTERVAL,
            last_walk: None,
            snapshot: HashMap::new(),
        };
        // Use handles only on cgroup filesystems, and only if the mount's own handle opens
        // and reads back as the mount (this also detects missing privileges up front).
        let cgroup_fs = fs_type == CGROUP_SUPER_MAGIC || fs_type == CGROUP2_SUPER_MAGIC;
        if cgroup_fs
            && fd_prefix.is_some()
            && let Ok(fd) = r.open_handle(r.root_ino)
            && matches!(r.read_back(&fd, r.root_ino), Lookup::Found(p) if &*p == "/")
        {
            r.mode = Mode::Handles;
        }
        Ok(r)
    }

    /// The directory this resolver serves.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Whether lookups use `open_by_handle_at` (false: directory walks).
    pub fn uses_file_handles(&self) -> bool {
        self.mode == Mode::Handles
    }

    /// Number of cached paths (never more than the capacity).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.len() == 0
    }

    /// Minimum time between full walks (default [`DEFAULT_WALK_INTERVAL`]).
    pub fn set_walk_interval(&mut self, interval: Duration) {
        self.walk_interval = interval;
    }

    /// How long "no such cgroup" is remembered (default [`DEFAULT_NEGATIVE_TTL`]).
    pub fn set_negative_ttl(&mut self, ttl: Duration) {
        self.negative_ttl = ttl;
    }

    /// The path of cgroup `id` relative to the mount (`/` for the mount itself, `/a/b` below),
    /// or `None` if it does not exist (anymore), is not below the mount, or cannot be found
    /// right now (a walk is needed but the last one is more recent than the walk interval).
    pub fn path_of(&mut self, id: u64) -> Option<Arc<str>> {
        if id == 0 {
            return None;
        }
        if id == self.root_ino {
            return Some(self.root_path.clone());
        }
        if let Some(p) = self.cache.get(id) {
            return Some(p);
        }
        if let Some(at) = self.negative.get(&id) {
            if at.elapsed() < self.negative_ttl {
                return None;
            }
            self.negative.remove(&id);
        }
        if self.mode == Mode::Handles {
            match self.open_handle(id) {
                Ok(fd) => {
                    return match self.read_back(&fd, id) {
                        Lookup::Found(p) => {
                            self.cache.insert(id, p.clone());
                            Some(p)
                        }
                        Lookup::Gone => {
                            self.remember_missing(id);
                            None
                        }
                        Lookup::Unknown => None,
                    };
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::ESTALE | libc::ENOENT | libc::ENOTDIR) => {
                        self.remember_missing(id);
                        return None;
                    }
                    Some(
                        libc::EPERM | libc::EACCES | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS,
                    ) => self.mode = Mode::Walk,
                    _ => return None,
                },
            }
        }
        self.walk_lookup(id)
    }

    /// Drops everything known about `id`.
    pub fn forget(&mut self, id: u64) {
        self.cache.remove(id);
        self.negative.remove(&id);
        self.snapshot.remove(&id);
    }

    /// Whether cgroup `id` still exists. For a cached id this `lstat`s the cached path and
    /// compares inode and device; otherwise it tries `open_by_handle_at` when available, and
    /// answers `false` in walk mode (unknown ids are not searched for).
    pub fn exists(&self, id: u64) -> bool {
        if id == 0 {
            return false;
        }
        if id == self.root_ino {
            return true;
        }
        let known = self
            .cache
            .peek(id)
            .or_else(|| self.snapshot.get(&id).cloned());
        if let Some(rel) = known {
            let abs = self.mount.join(rel.trim_start_matches('/'));
            return fs::symlink_metadata(abs)
                .is_ok_and(|md| md.ino() == id && md.dev() == self.mount_dev);
        }
        // A removed cgroup whose node something still holds can open by handle: its path then
        // reads back as "… (deleted)".
        self.mode == Mode::Handles
            && self
                .open_handle(id)
                .is_ok_and(|fd| !matches!(self.read_back(&fd, id), Lookup::Gone))
    }

    /// Whether cgroup `id` is known to be gone: its cached path no longer holds it, or its handle
    /// no longer opens. An id this resolver cannot look up (walk mode, or a path outside what it
    /// sees, e.g. in a cgroup namespace) is not known to be gone.
    pub fn gone(&self, id: u64) -> bool {
        if id == 0 || id == self.root_ino {
            return false;
        }
        let known = self.cache.peek(id).is_some() || self.snapshot.contains_key(&id);
        if known || self.mode == Mode::Handles {
            return !self.exists(id);
        }
        false
    }

    fn remember_missing(&mut self, id: u64) {
        if self.negative.len() >= self.cache.capacity {
            let ttl = self.negative_ttl;
            self.negative.retain(|_, at| at.elapsed() < ttl);
            if self.negative.len() >= self.cache.capacity {
                self.negative.clear();
            }
        }
        self.negative.insert(id, Instant::now());
    }

    fn walk_lookup(&mut self, id: u64) -> Option<Arc<str>> {
        let recent = self
            .last_walk
            .is_some_and(|t| t.elapsed() < self.walk_interval);
        if recent {
            let p = self.snapshot.get(&id).cloned()?;
            self.cache.insert(id, p.clone());
            return Some(p);
        }
        self.snapshot = walk(&self.mount, self.mount_dev);
        self.last_walk = Some(Instant::now());
        let Some(found) = self.snapshot.get(&id).cloned() else {
            self.remember_missing(id);
            return None;
        };
        // Use free capacity for the other cgroups seen (no eviction), then the one asked for.
        for (&other, p) in &self.snapshot {
            if self.cache.len() + 1 >= self.cache.capacity {
                break;
            }
            if other != id && other != self.root_ino && self.cache.peek(other).is_none() {
                self.cache.insert(other, p.clone());
            }
        }
        self.cache.insert(id, found.clone());
        Some(found)
    }

    #[cfg(test)]
    fn force_walk_mode(&mut self) {
        self.mode = Mode::Walk;
    }
}

#[cfg(test)]
mod tests;
