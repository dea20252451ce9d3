//! Cgroup id (`kernfs_node.id`, the inode number of the cgroup directory) → path.
//!
//! [`Resolver`] serves one hierarchy. Lookups go through a bounded LRU cache. On a miss it asks
//! the kernel directly with `open_by_handle_at(2)` and a kernfs file handle (needs
//! `CAP_DAC_READ_SEARCH` and a cgroup filesystem), then reads the path back from
//! `/proc/self/fd/N`. Where that is not possible it walks the mount, `lstat`ing every directory,
//! at most once per walk interval.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Error;

/// `FILEID_KERNFS` from `include/linux/exportfs.h`: the handle is the 64-bit kernfs node id.
const FILEID_KERNFS: i32 = 0xfe;
const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
const DELETED_SUFFIX: &[u8] = b" (deleted)";

/// Default minimum time between two full directory walks.
pub const DEFAULT_WALK_INTERVAL: Duration = Duration::from_secs(1);
/// Default time a "no such cgroup" answer is remembered.
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(2);

/// `struct file_handle` with room for a kernfs id.
#[repr(C)]
struct KernfsHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `open_by_handle_at` works for this mount.
    Handles,
    /// Directory walks only.
    Walk,
}

/// What reading an opened cgroup's path back gave.
enum Lookup {
    Found(Arc<str>),
    /// Deleted, or not below the mount (a bind mount of a sub-cgroup).
    Gone,
    /// Transient failure; do not cache.
    Unknown,
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
        self.mode == Mode::Handles && self.open_handle(id).is_ok()
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

    fn open_handle(&self, id: u64) -> io::Result<OwnedFd> {
        let mut handle = KernfsHandle {
            handle_bytes: 8,
            handle_type: FILEID_KERNFS,
            // The kernel reads the id as a native-endian u64 (little-endian on x86/arm64).
            f_handle: id.to_ne_bytes(),
        };
        // SAFETY: `handle` is a valid `struct file_handle` with `handle_bytes` bytes of payload
        // and outlives the call; the returned fd is owned by nobody else.
        let fd = unsafe {
            libc::open_by_handle_at(
                self.mount_fd.as_raw_fd(),
                (&raw mut handle).cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is not owned elsewhere.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Reads back the path of a directory opened by handle, relative to the mount.
    fn read_back(&self, fd: &OwnedFd, id: u64) -> Lookup {
        let Ok(link) = fs::read_link(proc_fd_path(fd.as_raw_fd())) else {
            return Lookup::Unknown;
        };
        let link = link.as_os_str().as_bytes();
        let Some(rel) = strip_mount_prefix(link, &self.fd_prefix) else {
            return Lookup::Gone;
        };
        if rel.ends_with(DELETED_SUFFIX) {
            // Either removed, or really named "... (deleted)": only the latter is found by
            // name with the same inode.
            let abs = self.mount.join(std::ffi::OsStr::from_bytes(&rel[1..]));
            if !fs::symlink_metadata(abs).is_ok_and(|md| md.ino() == id) {
                return Lookup::Gone;
            }
        }
        Lookup::Found(Arc::from(String::from_utf8_lossy(rel).as_ref()))
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

fn proc_fd_path(fd: i32) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

fn fstatfs_type(f: &File) -> io::Result<u64> {
    let mut st = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` is a properly sized out-buffer and the fd is valid for the call.
    let rc = unsafe { libc::fstatfs(f.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded and initialised `st`.
    let st = unsafe { st.assume_init() };
    // f_type is a signed word on some targets; magic numbers are 32-bit.
    Ok(st.f_type as u64 & 0xffff_ffff)
}

/// `link` relative to `prefix`, starting with `/`; `None` if `link` is not below `prefix`.
fn strip_mount_prefix<'a>(link: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    if prefix == b"/" {
        return link.starts_with(b"/").then_some(link);
    }
    let rest = link.strip_prefix(prefix)?;
    if rest.is_empty() {
        Some(b"/")
    } else if rest.starts_with(b"/") {
        Some(rest)
    } else {
        None
    }
}

/// Inode → relative path of every directory below `mount` on device `dev` (the mount itself
/// included as `/`). Directories that vanish or cannot be read mid-walk are skipped.
fn walk(mount: &Path, dev: u64) -> HashMap<u64, Arc<str>> {
    let mut out = HashMap::new();
    if let Ok(md) = fs::symlink_metadata(mount) {
        out.insert(md.ino(), Arc::from("/"));
    }
    let mut stack: Vec<(PathBuf, String)> = vec![(mount.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            let Ok(md) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !md.is_dir() || md.dev() != dev {
                continue;
            }
            let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
            out.insert(md.ino(), Arc::from(child.as_str()));
            stack.push((path, child));
        }
    }
    out
}

/// Least-recently-used map id → path with a fixed capacity.
struct Lru {
    capacity: usize,
    tick: u64,
    map: HashMap<u64, (Arc<str>, u64)>,
    /// tick of last use → id
    order: BTreeMap<u64, u64>,
}

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru {
            capacity: capacity.max(1),
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Looks up and marks as most recently used.
    fn get(&mut self, id: u64) -> Option<Arc<str>> {
        let t = self.next_tick();
        let (path, used) = self.map.get_mut(&id)?;
        self.order.remove(used);
        *used = t;
        self.order.insert(t, id);
        Some(path.clone())
    }

    /// Looks up without touching the recency order.
    fn peek(&self, id: u64) -> Option<Arc<str>> {
        self.map.get(&id).map(|(p, _)| p.clone())
    }

    fn insert(&mut self, id: u64, path: Arc<str>) {
        self.remove(id);
        while self.map.len() >= self.capacity {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&old);
        }
        let t = self.next_tick();
        self.map.insert(id, (path, t));
        self.order.insert(t, id);
    }

    fn remove(&mut self, id: u64) {
        if let Some((_, used)) = self.map.remove(&id) {
            self.order.remove(&used);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;

    fn ino(p: &Path) -> u64 {
        fs::symlink_metadata(p).unwrap().ino()
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for p in ["a/b/c", "a/x", "with space/y", "z"] {
            fs::create_dir_all(d.path().join(p)).unwrap();
        }
        fs::write(d.path().join("a/file"), "").unwrap();
        d
    }

    #[test]
    fn walk_fallback_resolves_tree() {
        let d = tree();
        let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
        assert!(!r.uses_file_handles());
        assert_eq!(r.mount(), d.path());
        assert_eq!(r.path_of(ino(d.path())).as_deref(), Some("/"));
        assert_eq!(
            r.path_of(ino(&d.path().join("a/b/c"))).as_deref(),
            Some("/a/b/c")
        );
        // The walk prefilled the cache with the rest of the tree.
        assert_eq!(r.len(), 7);
        assert_eq!(r.path_of(ino(&d.path().join("a"))).as_deref(), Some("/a"));
        assert_eq!(
            r.path_of(ino(&d.path().join("with space/y"))).as_deref(),
            Some("/with space/y")
        );
        // Files are not cgroups; id 0 is "unreadable".
        assert_eq!(r.path_of(ino(&d.path().join("a/file"))), None);
        assert_eq!(r.path_of(0), None);
        assert!(r.exists(ino(&d.path().join("a/b"))));
        assert!(!r.exists(0));
    }

    #[test]
    fn capacity_is_never_exceeded() {
        let d = tempfile::tempdir().unwrap();
        let mut ids = Vec::new();
        for i in 0..30 {
            let p = d.path().join(format!("g{i}/sub"));
            fs::create_dir_all(&p).unwrap();
            ids.push((ino(&p), format!("/g{i}/sub")));
        }
        let mut r = Resolver::new(d.path().to_path_buf(), 5).unwrap();
        r.set_walk_interval(Duration::ZERO);
        for _round in 0..2 {
            for (id, want) in &ids {
                assert_eq!(r.path_of(*id).as_deref(), Some(want.as_str()));
                assert!(r.len() <= 5, "{}", r.len());
            }
        }
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut l = Lru::new(3);
        l.insert(1, Arc::from("/1"));
        l.insert(2, Arc::from("/2"));
        l.insert(3, Arc::from("/3"));
        assert_eq!(l.get(1).as_deref(), Some("/1"));
        l.insert(4, Arc::from("/4"));
        assert_eq!(l.peek(2), None);
        assert_eq!(l.len(), 3);
        l.insert(5, Arc::from("/5"));
        assert_eq!(l.peek(3), None);
        assert!(l.peek(1).is_some() && l.peek(4).is_some() && l.peek(5).is_some());
        // Re-inserting an id replaces it without growing.
        l.insert(5, Arc::from("/5b"));
        assert_eq!(l.len(), 3);
        assert_eq!(l.peek(5).as_deref(), Some("/5b"));
        l.remove(5);
        assert_eq!(l.len(), 2);
        assert_eq!(l.order.len(), 2);
        assert_eq!(Lru::new(0).capacity, 1);
    }

    #[test]
    fn removed_dir_is_negative_and_forget_drops_cache() {
        let d = tree();
        let c = d.path().join("a/b/c");
        let id = ino(&c);
        let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
        r.set_walk_interval(Duration::ZERO);
        assert_eq!(r.path_of(id).as_deref(), Some("/a/b/c"));
        assert!(r.exists(id));
        fs::remove_dir(&c).unwrap();
        assert!(!r.exists(id));
        // Cached answers are not re-validated...
        assert_eq!(r.path_of(id).as_deref(), Some("/a/b/c"));
        // ...until forgotten.
        r.forget(id);
        assert_eq!(r.path_of(id), None);
        assert!(r.negative.contains_key(&id));
        // A negative answer expires.
        r.set_negative_ttl(Duration::ZERO);
        fs::create_dir(d.path().join("new")).unwrap();
        let new = ino(&d.path().join("new"));
        r.forget(new);
        assert_eq!(r.path_of(new).as_deref(), Some("/new"));
    }

    #[test]
    fn renamed_dir_no_longer_exists_at_cached_path() {
        let d = tree();
        let id = ino(&d.path().join("z"));
        let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
        assert_eq!(r.path_of(id).as_deref(), Some("/z"));
        fs::rename(d.path().join("z"), d.path().join("z2")).unwrap();
        assert!(!r.exists(id));
    }

    #[test]
    fn walks_are_rate_limited() {
        let d = tree();
        let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
        r.set_walk_interval(Duration::from_secs(3600));
        assert!(r.path_of(ino(&d.path().join("a"))).is_some());
        fs::create_dir(d.path().join("late")).unwrap();
        let late = ino(&d.path().join("late"));
        // No second walk within the interval; the miss is not remembered as negative.
        assert_eq!(r.path_of(late), None);
        assert!(!r.negative.contains_key(&late));
        r.set_walk_interval(Duration::ZERO);
        assert_eq!(r.path_of(late).as_deref(), Some("/late"));
    }

    #[test]
    fn snapshot_answers_within_interval_when_cache_is_small() {
        let d = tree();
        let mut r = Resolver::new(d.path().to_path_buf(), 1).unwrap();
        r.set_walk_interval(Duration::from_secs(3600));
        assert_eq!(
            r.path_of(ino(&d.path().join("a/x"))).as_deref(),
            Some("/a/x")
        );
        assert_eq!(r.path_of(ino(&d.path().join("z"))).as_deref(), Some("/z"));
        assert_eq!(r.len(), 1);
        assert!(r.exists(ino(&d.path().join("a/x"))));
    }

    #[test]
    fn walk_survives_concurrent_churn() {
        let d = tree();
        let stop = Arc::new(AtomicBool::new(false));
        let churn_root = d.path().join("churn");
        fs::create_dir(&churn_root).unwrap();
        let worker = {
            let stop = stop.clone();
            let root = churn_root.clone();
            thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let p = root.join(format!("d{}", i % 7)).join("e/f");
                    let _ = fs::create_dir_all(&p);
                    let _ = fs::remove_dir_all(root.join(format!("d{}", (i + 3) % 7)));
                    i += 1;
                }
            })
        };
        let dev = fs::metadata(d.path()).unwrap().dev();
        let c = ino(&d.path().join("a/b/c"));
        for _ in 0..200 {
            let m = walk(d.path(), dev);
            assert_eq!(m.get(&c).map(|p| &**p), Some("/a/b/c"));
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
    }

    #[test]
    fn missing_mount_is_an_error() {
        let e = Resolver::new(PathBuf::from("/nonexistent/cgroup"), 8)
            .err()
            .unwrap();
        assert!(matches!(e, Error::Mount { .. }));
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn prefix_stripping() {
        let pre = b"/sys/fs/cgroup/cpu".as_slice();
        assert_eq!(
            strip_mount_prefix(b"/sys/fs/cgroup/cpu", pre),
            Some(&b"/"[..])
        );
        assert_eq!(
            strip_mount_prefix(b"/sys/fs/cgroup/cpu/a/b", pre),
            Some(&b"/a/b"[..])
        );
        assert_eq!(strip_mount_prefix(b"/sys/fs/cgroup/cpuset/a", pre), None);
        assert_eq!(strip_mount_prefix(b"/elsewhere", pre), None);
        assert_eq!(strip_mount_prefix(b"/a/b", b"/"), Some(&b"/a/b"[..]));
    }

    /// Creates `<mount>/cgdev-test-<pid>-<tag>/inner` on a real cgroup mount and checks
    /// resolution through file handles, the walk fallback and removal. Skips itself (returning
    /// false) unless running as root with `mount` present.
    fn real_cgroup_roundtrip(mount: &Path, tag: &str) -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !mount.join("cgroup.procs").exists() {
            eprintln!("skipping: needs root and {}", mount.display());
            return false;
        }
        let name = format!("cgdev-test-{}-{tag}", std::process::id());
        let dir = mount.join(&name);
        let nested = dir.join("inner");
        fs::create_dir(&dir).unwrap();
        fs::create_dir(&nested).unwrap();
        let id = ino(&dir);
        let nested_id = ino(&nested);
        let result = std::panic::catch_unwind(|| {
            let mut r = Resolver::new(mount.to_path_buf(), 64).unwrap();
            assert!(
                r.uses_file_handles(),
                "open_by_handle_at should work as root"
            );
            assert_eq!(r.path_of(1).as_deref(), Some("/"));
            assert_eq!(r.path_of(id).as_deref(), Some(format!("/{name}").as_str()));
            assert_eq!(
                r.path_of(nested_id).as_deref(),
                Some(format!("/{name}/inner").as_str())
            );
            // Handle lookups do not walk.
            assert!(r.last_walk.is_none());
            assert!(r.exists(id));
            // Through a symlink to the mount, paths are still relative to the mount.
            let tmp = tempfile::tempdir().unwrap();
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(mount, &link).unwrap();
            let mut via_link = Resolver::new(link, 8).unwrap();
            assert!(via_link.uses_file_handles());
            assert_eq!(
                via_link.path_of(nested_id).as_deref(),
                Some(format!("/{name}/inner").as_str())
            );
            // A directory removed while open by handle reads back with " (deleted)".
            let held = r.open_handle(nested_id).unwrap();
            fs::remove_dir(&nested).unwrap();
            assert!(matches!(r.read_back(&held, nested_id), Lookup::Gone));
            let link = fs::read_link(proc_fd_path(held.as_raw_fd())).unwrap();
            eprintln!("removed cgroup reads back as {}", link.display());
            drop(held);
            fs::create_dir(&nested).unwrap();
            let nested_id = ino(&nested);
            // The walk fallback finds the same path (inode == kernfs id).
            let mut w = Resolver::new(mount.to_path_buf(), 64).unwrap();
            w.force_walk_mode();
            assert_eq!(w.path_of(nested_id), r.path_of(nested_id));
            assert!(w.last_walk.is_some());
            (r, nested_id)
        });
        let _ = fs::remove_dir(&nested);
        let _ = fs::remove_dir(&dir);
        let (mut r, nested_id) = result.unwrap();
        assert!(!r.exists(id));
        assert!(!r.exists(nested_id));
        r.forget(id);
        assert_eq!(r.path_of(id), None);
        assert!(r.negative.contains_key(&id));
        let mut fresh = Resolver::new(mount.to_path_buf(), 64).unwrap();
        assert_eq!(fresh.path_of(nested_id), None);
        assert_eq!(fresh.path_of(id), None);
        assert!(fresh.uses_file_handles());
        true
    }

    /// Needs root and cgroup v1 `cpu` at /sys/fs/cgroup/cpu; skips itself otherwise.
    #[test]
    fn real_cgroup_v1_cpu() {
        if real_cgroup_roundtrip(Path::new("/sys/fs/cgroup/cpu"), "v1") {
            eprintln!("real_cgroup_v1_cpu: ran against /sys/fs/cgroup/cpu");
        }
    }

    /// Same on the cgroup2 mount (hybrid hosts: /sys/fs/cgroup/unified; v2 hosts:
    /// /sys/fs/cgroup).
    #[test]
    fn real_cgroup2() {
        let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|m| m.join("cgroup.controllers").exists());
        match mount {
            Some(m) if real_cgroup_roundtrip(m, "v2") => {
                eprintln!("real_cgroup2: ran against {}", m.display());
            }
            _ => eprintln!("skipping: no cgroup2 mount"),
        }
    }

    /// Resolves existing cgroups of every mounted hierarchy of this host, whichever mode the
    /// privileges allow (root: file handles; others: walks).
    #[test]
    fn real_hierarchies_existing_cgroups() {
        let Ok(cg) = super::super::Cgroups::discover_system() else {
            eprintln!("skipping: no cgroups");
            return;
        };
        for h in &cg.hierarchies {
            let Ok(mut r) = Resolver::new(h.mount.clone(), 256) else {
                continue;
            };
            // Up to 50 directories, breadth first.
            let mut want = Vec::new();
            let mut queue = vec![(h.mount.clone(), String::new())];
            while let Some((dir, rel)) = queue.pop() {
                let Ok(entries) = fs::read_dir(&dir) else {
                    continue;
                };
                for e in entries.flatten() {
                    if want.len() >= 50 || !e.file_type().is_ok_and(|t| t.is_dir()) {
                        continue;
                    }
                    let child = format!("{rel}/{}", e.file_name().to_string_lossy());
                    want.push((ino(&e.path()), child.clone()));
                    queue.insert(0, (e.path(), child));
                }
            }
            for (id, path) in &want {
                assert_eq!(r.path_of(*id).as_deref(), Some(path.as_str()), "{h:?}");
            }
            eprintln!(
                "{}: {} cgroups resolved, file handles: {}",
                h.mount.display(),
                want.len(),
                r.uses_file_handles()
            );
        }
    }
}
