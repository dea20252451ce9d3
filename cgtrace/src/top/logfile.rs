//! The view's log: a file, never the screen. While the view runs, stderr (fd 2) also goes to the
//! file, so nothing any library prints can tear the display; it comes back on exit and in the
//! panic hook.

use std::{
    fs::File,
    io::Write,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicI32, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

/// Where the log goes without `--log`: `$XDG_STATE_HOME/cgtrace/top.log`, else
/// `~/.local/state/cgtrace/top.log`, else `/var/log/cgtrace/top.log`.
pub fn default_path() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/log"));
    state.join("cgtrace/top.log")
}

#[derive(Debug, thiserror::Error)]
#[error("opening the log file {path}: {source}")]
pub struct LogError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Opens (appends to, creating it and its directory) the log file: owner-only, never through a
/// symlink.
pub fn open(path: &Path) -> Result<File, LogError> {
    let err = |source| LogError {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    crate::safety::files::append(path).map_err(err)
}

struct FileLogger {
    file: Mutex<File>,
}

impl log::Log for FileLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        if let Ok(mut f) = self.file.lock() {
            let _ = writeln!(
                f,
                "{}.{:03} {:<5} {}: {}",
                now.as_secs(),
                now.subsec_millis(),
                record.level(),
                record.target(),
                record.args()
            );
        }
    }

    fn flush(&self) {
        if let Ok(mut f) = self.file.lock() {
            let _ = f.flush();
        }
    }
}

/// Sends `log` records (cgtrace's and its libraries') to `file`. A logger already installed
/// (tests) is left alone.
pub fn install(file: File) {
    if log::set_boxed_logger(Box::new(FileLogger {
        file: Mutex::new(file),
    }))
    .is_ok()
    {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// The real stderr while it is redirected; -1 when not.
static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);

/// Points fd 2 at `file` until dropped.
pub struct StderrRedirect(());

impl StderrRedirect {
    pub fn to(file: &File) -> std::io::Result<Self> {
        // SAFETY: dup/dup2 on valid descriptors; the saved copy is closed when restored.
        unsafe {
            let saved = libc::dup(2);
            if saved < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::dup2(file.as_raw_fd(), 2) < 0 {
                let e = std::io::Error::last_os_error();
                libc::close(saved);
                return Err(e);
            }
            SAVED_STDERR.store(saved, Ordering::SeqCst);
        }
        Ok(Self(()))
    }
}

impl Drop for StderrRedirect {
    fn drop(&mut self) {
        restore_stderr();
    }
}

/// Gives fd 2 back to the real stderr (idempotent; called from the panic hook too).
pub fn restore_stderr() {
    let saved = SAVED_STDERR.swap(-1, Ordering::SeqCst);
    if saved >= 0 {
        // SAFETY: `saved` is the descriptor dup'ed in `StderrRedirect::to`, owned here.
        unsafe {
            libc::dup2(saved, 2);
            libc::close(saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_file_is_private_and_refuses_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tmp");
        let p = tmp.path().join("a/b/top.log");
        let f = open(&p).expect("open");
        drop(f);
        let mode = std::fs::metadata(&p).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let link = tmp.path().join("link.log");
        std::os::unix::fs::symlink(&p, &link).expect("symlink");
        assert!(open(&link).is_err());
    }

    #[test]
    fn default_path_is_under_a_state_dir() {
        assert!(default_path().ends_with("cgtrace/top.log"));
    }
}
