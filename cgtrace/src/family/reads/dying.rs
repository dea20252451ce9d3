//! The host's dying memcgs: removed memory cgroups the kernel still holds, each of which slows
//! every memcg statistics flush.

use std::path::{Path, PathBuf};

use super::DyingMemcgs;

/// Directory walks of a v1 memory hierarchy are at least this far apart; in between the count
/// follows the cgroups created and removed (churn events).
const DIR_WALK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Dying memcgs on the host: v2 from the root's `cgroup.stat`; v1 from /proc/cgroups minus the
/// directories of the memory hierarchy. On v1 the directories are counted by a walk every
/// [`DIR_WALK_EVERY`] and, between walks, by the window's churn in that hierarchy, so a host
/// with thousands of cgroups is not walked every second.
pub struct DyingCounter {
    mount: PathBuf,
    v2: bool,
    /// Directories at the last walk, adjusted by churn since, and when that walk was.
    dirs: Option<(i64, std::time::Instant)>,
}

impl DyingCounter {
    pub fn new(mount: PathBuf, v2: bool) -> Self {
        Self {
            mount,
            v2,
            dirs: None,
        }
    }

    /// The count at the end of a window; `churn` is that window's (created, removed) in the memory
    /// hierarchy, `None` when churn is not traced (then every window walks).
    pub fn read(&mut self, proc_cgroups: &Path, churn: Option<(u64, u64)>) -> Option<DyingMemcgs> {
        if self.v2 {
            let text = std::fs::read_to_string(self.mount.join("cgroup.stat")).ok()?;
            let total = text.lines().find_map(|l| {
                l.strip_prefix("nr_dying_descendants ")
                    .and_then(|v| v.trim().parse().ok())
            })?;
            return Some(DyingMemcgs {
                total,
                source: "cgroup.stat".into(),
            });
        }
        let num = crate::cgroup::hierarchy::num_cgroups(proc_cgroups, "memory")?;
        let dirs = match (self.dirs, churn) {
            (Some((n, at)), Some((created, removed))) if at.elapsed() < DIR_WALK_EVERY => {
                n + created as i64 - removed as i64
            }
            _ => {
                self.dirs = None;
                count_dirs(&self.mount) as i64
            }
        };
        self.dirs = Some((
            dirs,
            self.dirs.map_or_else(std::time::Instant::now, |d| d.1),
        ));
        Some(DyingMemcgs {
            total: (num as i64 - dirs).max(0) as u64,
            source: "proc_cgroups".into(),
        })
    }
}

/// Directories in a cgroup hierarchy, its root included.
fn count_dirs(root: &Path) -> u64 {
    let mut n = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        n += 1;
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_dying_count_walks_then_follows_churn() {
        let root = tempfile::tempdir().expect("tempdir");
        let mount = root.path().join("memory");
        for d in ["a", "a/b", "c"] {
            std::fs::create_dir_all(mount.join(d)).expect("mkdir");
        }
        let proc_cgroups = root.path().join("cgroups");
        let write = |n: u64| {
            std::fs::write(
                &proc_cgroups,
                format!("#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t4\t{n}\t1\n"),
            )
            .expect("write");
        };
        let mut c = DyingCounter::new(mount.clone(), false);
        // 4 directories (root included), 10 cgroups: 6 dying.
        write(10);
        assert_eq!(
            c.read(&proc_cgroups, Some((0, 0))).map(|d| d.total),
            Some(6)
        );
        // Two made and one removed since (not walked again): 11 cgroups, 5 directories.
        std::fs::create_dir(mount.join("d")).expect("mkdir");
        write(11);
        assert_eq!(
            c.read(&proc_cgroups, Some((2, 1))).map(|d| d.total),
            Some(6)
        );
        // Without churn every read walks: the real 5 directories.
        assert_eq!(c.read(&proc_cgroups, None).map(|d| d.total), Some(6));
        let mut fresh = DyingCounter::new(mount, false);
        assert_eq!(fresh.read(&proc_cgroups, None).map(|d| d.total), Some(6));
    }
}
