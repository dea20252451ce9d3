//! Memory cgroups for the slow-reads tests: where the memory hierarchy is mounted, how many memcgs
//! are dying (removed but still pinned, here by their page cache), and [`make_dying`], which
//! produces thousands of them for real so that a `memory.stat` read has a large rstat flush to do.
use std::{
    ffi::CString,
    fs,
    io::{Read, Seek, SeekFrom},
    os::unix::{ffi::OsStrExt, fs::FileExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// The mount of the memory controller and whether it is cgroup v1: v1 `/sys/fs/cgroup/memory`
/// when it has `memory.stat`, else the cgroup2 mount `/sys/fs/cgroup`.
pub fn memory_mount() -> (PathBuf, bool) {
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("memory.stat").exists() {
        (v1.to_path_buf(), true)
    } else {
        (PathBuf::from("/sys/fs/cgroup"), false)
    }
}

/// v1: `num_cgroups` of `memory` in `/proc/cgroups` (every memcg the kernel still holds, live or
/// dying) minus the cgroup directories that exist in the memory hierarchy (the live ones).
pub fn dying_memcgs_v1() -> Result<u64> {
    let (mount, v1) = memory_mount();
    if !v1 {
        bail!("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory");
    }
    let total = proc_cgroups_num("memory")?;
    let live = count_dirs(&mount)?;
    Ok(total.saturating_sub(live))
}

/// v2: `nr_dying_descendants` from the root's `cgroup.stat`.
pub fn dying_memcgs_v2() -> Result<u64> {
    let stat = Path::new("/sys/fs/cgroup/cgroup.stat");
    let text = fs::read_to_string(stat).with_context(|| format!("reading {}", stat.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("nr_dying_descendants ")?.trim().parse().ok())
        .with_context(|| format!("no nr_dying_descendants in {}", stat.display()))
}

/// The number of dying memory cgroups, v1 or v2 (see [`dying_memcgs_v1`], [`dying_memcgs_v2`]).
/// The host makes and frees dying memcgs on its own: compare deltas, not absolute values.
pub fn dying_memcgs() -> Result<u64> {
    if memory_mount().1 {
        dying_memcgs_v1()
    } else {
        dying_memcgs_v2()
    }
}

/// `num_cgroups` of `subsys` in `/proc/cgroups`.
fn proc_cgroups_num(subsys: &str) -> Result<u64> {
    let text = fs::read_to_string("/proc/cgroups").context("reading /proc/cgroups")?;
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 3 && cols[0] == subsys {
            return cols[2]
                .parse()
                .with_context(|| format!("bad /proc/cgroups line {line:?}"));
        }
    }
    bail!("no {subsys} line in /proc/cgroups")
}

/// Directories under and including `root` (cgroupfs has no symlinks). A directory removed while
/// walking is skipped.
fn count_dirs(root: &Path) -> Result<u64> {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != root => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
        };
        n += 1;
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(entry.path());
            }
        }
    }
    Ok(n)
}

static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Default page cache left behind by each dying memcg.
pub const DEFAULT_BYTES_EACH: usize = 16 * 1024;

/// What [`make_dying`] did. Holds the page-cache files that pin the dying memcgs: dropping it
/// deletes them (and the scratch directory), which lets the kernel free those memcgs (within
/// about a second here), and waits for that.
pub struct MakeDyingReport {
    /// Memcgs created, charged and removed.
    pub created: usize,
    /// Wall time of the whole creation.
    pub elapsed: Duration,
    /// [`dying_memcgs`] just before and just after.
    pub dying_before: u64,
    pub dying_after: u64,
    /// The scratch directory (on a disk-backed filesystem) holding one file per memcg.
    pub dir: PathBuf,
    /// The page-cache files, one per dying memcg.
    pub files: Vec<PathBuf>,
    /// Bytes of each file.
    pub bytes_each: usize,
}

impl MakeDyingReport {
    /// `dying_after - dying_before` (the host's own churn included).
    pub fn rise(&self) -> i64 {
        self.dying_after as i64 - self.dying_before as i64
    }

    /// Generates fresh memcg stat updates for every dying memcg, on every CPU this process may run
    /// on: a thread pinned to each CPU in turn re-reads every file and rewrites its first byte of
    /// each page (the same byte: the pages go clean → dirty, which the kernel accounts to the
    /// memcg that owns them, the dying one), then the filesystem is synced (dirty → writeback →
    /// clean, accounted again). The page cache stays charged to the dying memcgs. Afterwards the
    /// next `memory.stat` read (or the 2 s kworker) has one (memcg, CPU) pair per dying memcg and
    /// CPU on the rstat updated lists to flush.
    pub fn touch_cache(&self) -> Result<()> {
        let page = 4096;
        for cpu in allowed_cpus() {
            let files = self.files.clone();
            let bytes_each = self.bytes_each;
            std::thread::spawn(move || -> Result<()> {
                pin_to_cpu(cpu)?;
                let mut buf = vec![0u8; bytes_each.max(1)];
                for path in &files {
                    let mut f = fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .with_context(|| format!("opening {}", path.display()))?;
                    f.seek(SeekFrom::Start(0))?;
                    let n = f.read(&mut buf)?;
                    let mut off = 0;
                    while off < n {
                        f.write_all_at(&buf[off..off + 1], off as u64)?;
                        off += page;
                    }
                }
                Ok(())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("touch thread panicked"))??;
            // Writeback on this round so the next round dirties clean pages again.
            sync_fs(&self.dir)?;
        }
        Ok(())
    }
}

impl Drop for MakeDyingReport {
    /// Deletes the files, then waits (up to 10 s) for the count of dying memcgs to settle, so
    /// that the memcgs freed now do not disturb the next measurement.
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
        let _ = settle_dying(Duration::from_secs(10));
    }
}

/// Waits until [`dying_memcgs`] stops changing (the same value over 300 ms) or `timeout` passes;
/// returns the last value.
pub fn settle_dying(timeout: Duration) -> Result<u64> {
    let deadline = Instant::now() + timeout;
    let mut last = dying_memcgs()?;
    let mut stable_since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = dying_memcgs()?;
        if now != last {
            last = now;
            stable_since = Instant::now();
        } else if stable_since.elapsed() >= Duration::from_millis(300) || Instant::now() > deadline
        {
            return Ok(now);
        }
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`.
fn pin_to_cpu(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity only touch it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("pinning to CPU {cpu}"));
        }
    }
    Ok(())
}

/// `syncfs` on the filesystem holding `dir`.
fn sync_fs(dir: &Path) -> Result<()> {
    let f = fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    use std::os::fd::AsRawFd;
    // SAFETY: syncfs on an open fd has no memory-safety preconditions.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("syncfs");
    }
    Ok(())
}

/// Creates `n` child memcgs under `parent` (a directory of the memory hierarchy, see
/// [`memory_mount`]; on cgroup2 `+memory` is written to its `cgroup.subtree_control`), named
/// `dying-<pid>-<seq>-<i>`. For each: an empty file is created under
/// `/var/tmp/cgtrace-dying-<pid>-<seq>/` (disk-backed), then a forked child process moves itself
/// into the memcg (its `cgroup.procs`) before it touches anything, writes `bytes_each` bytes
/// (e.g. [`DEFAULT_BYTES_EACH`]) into that file and exits; the memcg is then removed. It stays
/// dying, pinned by the page cache charged to it, until the returned report is dropped and the
/// files are deleted. The count of dying memcgs is let settle first (see [`settle_dying`]) so
/// that [`MakeDyingReport::rise`] is not eaten by memcgs being freed at the same time.
///
/// The child runs only async-signal-safe system calls (open, write, close, _exit) on data prepared
/// before `fork`, so this is safe from a multi-threaded test. Speed: one mkdir + fork + wait +
/// rmdir per memcg, no exec, one worker thread per CPU (up to 4).
pub fn make_dying(parent: &Path, n: usize, bytes_each: usize) -> Result<MakeDyingReport> {
    let start = Instant::now();
    // Memcgs freed meanwhile (e.g. those of an earlier report just dropped) would hide ours.
    let dying_before = settle_dying(Duration::from_secs(10))?;
    let pid = std::process::id();
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(format!("/var/tmp/cgtrace-dying-{pid}-{seq}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
    // The report owns `dir` from here: an error below removes the files again.
    let mut report = MakeDyingReport {
        created: 0,
        elapsed: Duration::ZERO,
        dying_before,
        dying_after: dying_before,
        dir,
        files: Vec::with_capacity(n),
        bytes_each,
    };
    if !memory_mount().1 {
        // cgroup2: the children only get a memcg if the parent delegates the controller.
        let ctl = parent.join("cgroup.subtree_control");
        fs::write(&ctl, "+memory")
            .with_context(|| format!("enabling memory in {}", ctl.display()))?;
    }
    let data = vec![b'x'; bytes_each];
    // One worker per CPU (fork+wait is mostly waiting); worker k takes i = k, k+T, k+2T, …
    let workers = allowed_cpus().len().clamp(1, 4).min(n.max(1));
    let dir = report.dir.clone();
    let results: Vec<Result<Vec<(usize, PathBuf)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|k| {
                let (data, dir) = (&data, &dir);
                s.spawn(move || -> Result<Vec<(usize, PathBuf)>> {
                    let mut done = Vec::new();
                    for i in (k..n).step_by(workers) {
                        let cg = parent.join(format!("dying-{pid}-{seq}-{i}"));
                        let _ = fs::remove_dir(&cg);
                        fs::create_dir(&cg).with_context(|| format!("mkdir {}", cg.display()))?;
                        let file = dir.join(format!("f{i}"));
                        // Created here, in our own memcg: the inode and directory blocks the
                        // filesystem reads for it are charged to us, so only the file's data
                        // pages pin the dying memcg (and deleting the files frees them all).
                        let created = fs::File::create(&file)
                            .with_context(|| format!("creating {}", file.display()));
                        let result = created.and_then(|_| charge_in(&cg, &file, data));
                        let removed = remove_cgroup(&cg);
                        result?;
                        removed?;
                        done.push((i, file));
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("worker panicked")))
            })
            .collect()
    });
    let mut files = Vec::with_capacity(n);
    let mut first_err = None;
    for r in results {
        match r {
            Ok(done) => files.extend(done),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    files.sort();
    report.created = files.len();
    report.files = files.into_iter().map(|(_, f)| f).collect();
    if let Some(e) = first_err {
        return Err(e);
    }
    report.dying_after = dying_memcgs()?;
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Forks a child that joins the cgroup `cg`, writes `data` to a new `file`, and exits; waits for it.
fn charge_in(cg: &Path, file: &Path, data: &[u8]) -> Result<()> {
    let procs = CString::new(cg.join("cgroup.procs").as_os_str().as_bytes())?;
    let path = CString::new(file.as_os_str().as_bytes())?;
    // SAFETY: between fork and _exit the child only calls open/write/close/_exit on memory that
    // was allocated before the fork and is not freed by it.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if child == 0 {
        // SAFETY: see above; every path ends in _exit.
        unsafe {
            let code = child_charge(procs.as_ptr(), path.as_ptr(), data);
            libc::_exit(code);
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child into a local.
        let r = unsafe { libc::waitpid(child, &mut status, 0) };
        if r == child {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err).context("waitpid");
        }
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let step = match libc::WEXITSTATUS(status) {
            2 => "joining the cgroup",
            3 => "opening the file",
            4 => "writing the file",
            _ => "running",
        };
        bail!(
            "child charging {} failed {step} (status {status:#x})",
            cg.display()
        );
    }
    Ok(())
}

/// The forked child's body: async-signal-safe calls only. Returns the exit code.
unsafe fn child_charge(procs: *const libc::c_char, path: *const libc::c_char, data: &[u8]) -> i32 {
    // SAFETY: plain system calls on NUL-terminated paths and a live buffer.
    unsafe {
        let fd = libc::open(procs, libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 || libc::write(fd, b"0\n".as_ptr().cast(), 2) != 2 {
            return 2;
        }
        libc::close(fd);
        let fd = libc::open(path, libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 3;
        }
        let mut off = 0;
        while off < data.len() {
            let w = libc::write(fd, data[off..].as_ptr().cast(), data.len() - off);
            if w <= 0 {
                return 4;
            }
            off += w as usize;
        }
        libc::close(fd);
    }
    0
}

/// rmdir with retries: right after `waitpid` the exited child may still count as populating the
/// cgroup for a moment (EBUSY); back off from 20 µs to 5 ms, 2 s in all.
fn remove_cgroup(cg: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut pause = Duration::from_micros(20);
    loop {
        match fs::remove_dir(cg) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
            Err(e) => return Err(e).with_context(|| format!("rmdir {}", cg.display())),
        }
    }
}

/// Times one full read of `path` (open, read(2) until EOF, close).
pub fn time_read(path: &Path) -> Result<(Duration, usize)> {
    let start = Instant::now();
    let mut f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        total += n;
    }
    drop(f);
    Ok((start.elapsed(), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_dirs_of_a_tree() -> Result<()> {
        let root = std::env::temp_dir().join(format!("cgtrace-count-dirs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("a/b"))?;
        fs::create_dir_all(root.join("c"))?;
        fs::write(root.join("a/file"), "x")?;
        let n = count_dirs(&root)?;
        fs::remove_dir_all(&root)?;
        assert_eq!(n, 4);
        Ok(())
    }

    #[test]
    fn reads_proc_cgroups() {
        if memory_mount().1 {
            assert!(proc_cgroups_num("memory").unwrap() >= 1);
        }
    }
}
