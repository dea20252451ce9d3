//! The `slowfs` FUSE fixture (see `src/bin/slowfs.rs`): a real FUSE mount whose file `slow` takes
//! a set time per read(2) and `fast` none, served by a child process, unmounted on drop.
use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::workload::bin;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A mounted `slowfs`.
pub struct SlowFs {
    /// The mount point (`/tmp/cgtrace-slowfs-<pid>-<n>`).
    pub mountpoint: PathBuf,
    /// Sleep per read request of `slow`.
    pub delay: Duration,
    child: Child,
}

impl SlowFs {
    /// Starts `slowfs` (built next to the test binary) on a fresh directory with `delay` per read
    /// of `slow`, and waits (up to 10 s) until the mount shows in `/proc/self/mountinfo` and
    /// `slow` can be stat-ed.
    pub fn mount(delay: Duration) -> Result<Self> {
        Self::mount_with(delay, 4096)
    }

    /// [`SlowFs::mount`] with files of `size` bytes.
    pub fn mount_with(delay: Duration, size: usize) -> Result<Self> {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let mountpoint = PathBuf::from(format!("/tmp/cgtrace-slowfs-{}-{n}", std::process::id()));
        lazy_unmount(&mountpoint);
        let _ = std::fs::remove_dir(&mountpoint);
        std::fs::create_dir_all(&mountpoint)
            .with_context(|| format!("mkdir {}", mountpoint.display()))?;
        let exe = bin("slowfs");
        let child = Command::new(&exe)
            .arg(&mountpoint)
            .arg("--delay-ms")
            .arg(delay.as_millis().to_string())
            .arg("--size")
            .arg(size.to_string())
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let mut fs = Self {
            mountpoint,
            delay,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if is_mounted(&fs.mountpoint, "fuse.slowfs")? && fs.path("slow").metadata().is_ok() {
                return Ok(fs);
            }
            if let Some(status) = fs.child.try_wait()? {
                bail!("slowfs exited before mounting: {status}");
            }
            if Instant::now() > deadline {
                bail!(
                    "slowfs not mounted at {} after 10 s",
                    fs.mountpoint.display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A file of the mount: `slow` or `fast`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.mountpoint.join(name)
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SlowFs {
    fn drop(&mut self) {
        // A clean unmount ends the server's session and the process.
        fusermount_unmount(&self.mountpoint);
        crate::reap(&mut self.child, Duration::from_secs(2));
        lazy_unmount(&self.mountpoint);
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}

/// Whether `path` is a mount point of type `fstype` (e.g. `fuse.slowfs`, `fuse.lxcfs`) in
/// `/proc/self/mountinfo`.
pub fn is_mounted(path: &Path, fstype: &str) -> Result<bool> {
    let info =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let want = path.to_string_lossy();
    Ok(info.lines().any(|l| {
        let Some((pre, post)) = l.split_once(" - ") else {
            return false;
        };
        // Field 5 is the mount point (octal-escaped), the first field after " - " the type.
        pre.split(' ').nth(4) == Some(&*want) && post.split(' ').next() == Some(fstype)
    }))
}

/// `umount2(path, MNT_DETACH)`, errors ignored.
/// `fusermount3 -u -z PATH`: the FUSE way to unmount (the server's session ends).
pub fn fusermount_unmount(path: &Path) {
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

pub fn lazy_unmount(path: &Path) {
    if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
        // SAFETY: umount2 reads a NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}
