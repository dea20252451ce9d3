//! What a read file is: its path, built from the names the kernel recorded (`READ_FILES`) below
//! the mount that shows its filesystem, its filesystem, and for a cgroup file its hierarchy and
//! directory.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use cgtrace_common::reads::{
    CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, FUSE_SUPER_MAGIC, FileNames, PROC_SUPER_MAGIC,
    SYSFS_MAGIC,
};

use super::{is_memcg_stat_file, name_str};
use crate::cgroup::{hierarchy::v1_controllers, mountinfo};

/// One mount: where a superblock is visible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mount {
    point: PathBuf,
    /// `cgroup` mounts: the controllers (`memory`, `cpu,cpuacct`); `cgroup2` for cgroup2.
    hierarchy: Option<String>,
}

/// `s_dev` -> the mount showing that superblock's root, from a mount table
/// (`/proc/self/mountinfo`); lines that do not parse are passed over.
pub(super) fn mounts_by_dev(text: &str) -> HashMap<u32, Mount> {
    let mut out: HashMap<u32, Mount> = HashMap::new();
    for m in text.lines().filter_map(|l| mountinfo::parse_line(l).ok()) {
        let Some(dev) = s_dev(&m.dev) else {
            continue;
        };
        let hierarchy = match m.fstype.as_str() {
            "cgroup2" => Some("cgroup2".to_string()),
            "cgroup" => Some(v1_controllers(&m.super_opts, &[]).join(",")),
            _ => None,
        };
        // Prefer the first mount of the superblock's root; a bind mount of a subdirectory
        // only gives the hierarchy (its point does not lead to the root).
        let have_root = out
            .get(&dev)
            .is_some_and(|m| !m.point.as_os_str().is_empty());
        if m.root == Path::new("/") && !have_root {
            out.insert(
                dev,
                Mount {
                    point: m.mount_point,
                    hierarchy,
                },
            );
        } else {
            out.entry(dev).or_insert(Mount {
                point: PathBuf::new(),
                hierarchy,
            });
        }
    }
    out
}

/// mountinfo's `major:minor` as the kernel's `s_dev` (`MKDEV`: major << 20 | minor), the
/// device the BPF side keys files by.
fn s_dev(dev: &str) -> Option<u32> {
    let (maj, min) = dev.split_once(':')?;
    let (maj, min) = (maj.parse::<u32>().ok()?, min.parse::<u32>().ok()?);
    Some((maj << 20) | min)
}

fn fs_name(magic: u64) -> &'static str {
    match magic {
        CGROUP_SUPER_MAGIC => "cgroup",
        CGROUP2_SUPER_MAGIC => "cgroup2",
        SYSFS_MAGIC => "sysfs",
        PROC_SUPER_MAGIC => "proc",
        FUSE_SUPER_MAGIC => "fuse",
        _ => "other",
    }
}

/// What a file is, resolved once.
#[derive(Clone, Debug)]
pub(super) struct FileInfo {
    pub path: String,
    pub fs: &'static str,
    /// cgroupfs: (hierarchy, path of the file's directory within it), and whether the file is
    /// a memcg stat file.
    pub cgroup: Option<(String, String)>,
    pub memcg_stat: bool,
}

/// Builds a file's path from its name chain and its mount.
pub(super) fn file_info(names: &FileNames, mount: Option<&Mount>, name_hashed: bool) -> FileInfo {
    let depth = (names.depth as usize).min(names.names.len());
    let mut parts: Vec<String> = names.names[..depth]
        .iter()
        .rev()
        .map(|n| name_str(n))
        .collect();
    if name_hashed {
        for p in &mut parts {
            if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) {
                *p = "<pid>".into();
            }
        }
    }
    let inner = if names.complete != 0 {
        format!("/{}", parts.join("/"))
    } else {
        format!("/…/{}", parts.join("/"))
    };
    let fs = fs_name(names.magic);
    let point = mount
        .map(|m| m.point.to_string_lossy().into_owned())
        .filter(|p| !p.is_empty() && p != "/")
        .unwrap_or_default();
    let path = format!("{point}{inner}");
    let cgroup =
        (names.magic == CGROUP_SUPER_MAGIC || names.magic == CGROUP2_SUPER_MAGIC).then(|| {
            let hierarchy = mount
                .and_then(|m| m.hierarchy.clone())
                .unwrap_or_else(|| fs.to_string());
            let dir = match inner.rfind('/') {
                Some(0) | None => "/".to_string(),
                Some(i) => inner[..i].to_string(),
            };
            (hierarchy, dir)
        });
    let file_name = parts.last().cloned().unwrap_or_default();
    FileInfo {
        path,
        fs,
        memcg_stat: cgroup.is_some() && is_memcg_stat_file(&file_name),
        cgroup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cgtrace_common::reads::{NAME_DEPTH, NAME_LEN};

    fn names(magic: u64, chain: &[&str], complete: bool) -> FileNames {
        let mut n = FileNames {
            magic,
            depth: chain.len() as u32,
            complete: u32::from(complete),
            names: [[0; NAME_LEN]; NAME_DEPTH],
        };
        for (i, s) in chain.iter().enumerate() {
            n.names[i][..s.len()].copy_from_slice(s.as_bytes());
        }
        n
    }

    const MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
24 1 0:22 / /sys rw - sysfs sysfs rw
30 24 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
31 24 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 1 0:50 / /var/lib/lxc\\040fs rw - fuse.lxcfs lxcfs rw,user_id=0
41 1 0:50 /proc/meminfo /other/meminfo rw - fuse.lxcfs lxcfs rw
42 1 0:51 / /mnt/x\\089\\400 rw - tmpfs tmpfs rw
43 24 0:52 / /sys/fs/cgroup/debug rw - cgroup cgroup rw,debug,memory
";

    #[test]
    fn mountinfo_maps_devices_to_mounts_and_hierarchies() {
        let m = mounts_by_dev(MOUNTINFO);
        assert_eq!(m[&26].point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(m[&26].hierarchy.as_deref(), Some("memory"));
        assert_eq!(m[&27].hierarchy.as_deref(), Some("cpu,cpuacct"));
        assert_eq!(m[&50].point, PathBuf::from("/var/lib/lxc fs"));
        assert_eq!(m[&21].hierarchy, None);
        // The cgroup module's mountinfo parser: `\089` and `\400` are no octal escapes (8 is no
        // octal digit, 0o400 no byte), and its v1 controller names.
        assert_eq!(m[&51].point, PathBuf::from(r"/mnt/x\089\400"));
        assert_eq!(m[&52].hierarchy.as_deref(), Some("debug,memory"));
    }

    #[test]
    fn paths_are_built_from_the_name_chain() {
        let m = mounts_by_dev(MOUNTINFO);
        let i = file_info(
            &names(CGROUP_SUPER_MAGIC, &["memory.stat", "b", "a"], true),
            m.get(&26),
            false,
        );
        assert_eq!(i.path, "/sys/fs/cgroup/memory/a/b/memory.stat");
        assert!(i.memcg_stat);
        assert_eq!(i.cgroup, Some(("memory".into(), "/a/b".into())));
        let root = file_info(
            &names(CGROUP_SUPER_MAGIC, &["memory.stat"], true),
            m.get(&26),
            false,
        );
        assert_eq!(root.cgroup, Some(("memory".into(), "/".into())));
        let p = file_info(
            &names(PROC_SUPER_MAGIC, &["stat", "4242"], true),
            m.get(&21),
            true,
        );
        assert_eq!(p.path, "/proc/<pid>/stat");
        assert_eq!(p.fs, "proc");
        let cut = file_info(
            &names(SYSFS_MAGIC, &["scaling_cur_freq", "cpufreq"], false),
            m.get(&22),
            false,
        );
        assert_eq!(cut.path, "/sys/…/cpufreq/scaling_cur_freq");
        let fuse = file_info(
            &names(FUSE_SUPER_MAGIC, &["meminfo", "proc"], true),
            m.get(&50),
            false,
        );
        assert_eq!(fuse.path, "/var/lib/lxc fs/proc/meminfo");
        assert!(!fuse.memcg_stat);
    }
}
