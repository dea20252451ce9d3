//! Asking the kernel: a cgroup opened by its kernfs id with `open_by_handle_at(2)` (needs
//! `CAP_DAC_READ_SEARCH` and a cgroup filesystem), and its path read back from
//! `/proc/self/fd/N`.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `FILEID_KERNFS` from `include/linux/exportfs.h`: the handle is the 64-bit kernfs node id.
const FILEID_KERNFS: i32 = 0xfe;
pub(super) const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
pub(super) const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
const DELETED_SUFFIX: &[u8] = b" (deleted)";

/// `struct file_handle` with room for a kernfs id.
#[repr(C)]
struct KernfsHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 8],
}

/// What reading an opened cgroup's path back gave.
pub(super) enum Lookup {
    Found(Arc<str>),
    /// Deleted, or not below the mount (a bind mount of a sub-cgroup).
    Gone,
    /// Transient failure; do not cache.
    Unknown,
}

/// Opens cgroup `id` (`O_PATH`) by its kernfs file handle, relative to the mount (`mount_fd`).
pub(super) fn open_handle(mount_fd: &File, id: u64) -> io::Result<OwnedFd> {
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
            mount_fd.as_raw_fd(),
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

/// Reads back the path of a directory opened by handle, relative to the mount (`mount`, whose
/// descriptor's link reads `fd_prefix`).
pub(super) fn read_back(fd: &OwnedFd, id: u64, fd_prefix: &[u8], mount: &Path) -> Lookup {
    let Ok(link) = fs::read_link(proc_fd_path(fd.as_raw_fd())) else {
        return Lookup::Unknown;
    };
    let link = link.as_os_str().as_bytes();
    let Some(rel) = strip_mount_prefix(link, fd_prefix) else {
        return Lookup::Gone;
    };
    if rel.ends_with(DELETED_SUFFIX) {
        // Either removed, or really named "... (deleted)": only the latter is found by
        // name with the same inode.
        let abs = mount.join(OsStr::from_bytes(&rel[1..]));
        if !fs::symlink_metadata(abs).is_ok_and(|md| md.ino() == id) {
            return Lookup::Gone;
        }
    }
    Lookup::Found(Arc::from(String::from_utf8_lossy(rel).as_ref()))
}

pub(super) fn proc_fd_path(fd: i32) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

pub(super) fn fstatfs_type(f: &File) -> io::Result<u64> {
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
pub(super) fn strip_mount_prefix<'a>(link: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
