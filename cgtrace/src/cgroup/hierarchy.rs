//! Which cgroup hierarchies exist and where they are mounted.
//!
//! Sources: `/proc/self/mountinfo` (cgroup v1 mounts, fstype `cgroup`, and the cgroup2 mount,
//! fstype `cgroup2`) and `/proc/cgroups` (which controller is bound to which v1 hierarchy; a
//! hierarchy id of 0 means the controller is on cgroup2 or unbound).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::Error;
use super::mountinfo::{self, MountEntry};

/// Default location of the mount table.
pub const PROC_MOUNTINFO: &str = "/proc/self/mountinfo";
/// Default location of the controller table.
pub const PROC_CGROUPS: &str = "/proc/cgroups";

/// v1 controllers known to the kernel, used (together with `/proc/cgroups`) to tell controller
/// names from other super options such as `noprefix` or `xattr`.
const KNOWN_V1_CONTROLLERS: &[&str] = &[
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "debug",
    "devices",
    "freezer",
    "hugetlb",
    "io",
    "memory",
    "misc",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
    "rdma",
];

/// Cgroup version of a hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// One mounted cgroup hierarchy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hierarchy {
    /// Hierarchy id from `/proc/cgroups`; 0 for cgroup2 and for named v1 hierarchies without
    /// controllers (e.g. `name=systemd`), which `/proc/cgroups` does not list.
    pub id: u32,
    pub version: Version,
    /// v1: controllers from the mount's super options (named hierarchies appear as
    /// `name=<name>`). v2: the controllers listed in the mount's `cgroup.controllers`.
    pub controllers: Vec<String>,
    /// Where the hierarchy is mounted (mountinfo escapes decoded).
    pub mount: PathBuf,
    /// The cgroup of the hierarchy that is mounted at `mount` (mountinfo's root field). `/`
    /// unless only a bind mount of a sub-cgroup is visible (e.g. inside some containers); then
    /// ids above this cgroup cannot be resolved through `mount`.
    pub mount_root: PathBuf,
}

impl Hierarchy {
    /// Whether `controller` (e.g. `cpu`, or `name=systemd`) is attached to this hierarchy.
    pub fn has_controller(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

/// How cgroups are set up on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupLayout {
    /// Only v1 hierarchies.
    V1,
    /// Only cgroup2 (possibly with leftover named v1 hierarchies that carry no controller).
    V2,
    /// v1 controllers and a cgroup2 mount.
    Hybrid,
}

/// One row of `/proc/cgroups`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Subsys {
    pub name: String,
    /// v1 hierarchy id; 0 when the controller is on cgroup2 (or unbound).
    pub hierarchy: u32,
    pub num_cgroups: u64,
    pub enabled: bool,
}

/// The cgroup hierarchies of this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cgroups {
    pub layout: CgroupLayout,
    /// v1 hierarchies ordered by id, then the cgroup2 hierarchy (at most one).
    pub hierarchies: Vec<Hierarchy>,
    /// Rows of `/proc/cgroups` (empty if the file does not exist).
    pub subsystems: Vec<Subsys>,
}

impl Cgroups {
    /// Discovers hierarchies from `/proc/self/mountinfo` and `/proc/cgroups`.
    pub fn discover_system() -> Result<Cgroups, Error> {
        Self::discover(Path::new(PROC_MOUNTINFO), Path::new(PROC_CGROUPS))
    }

    /// Discovers hierarchies from a mountinfo file and a `/proc/cgroups` file.
    ///
    /// A missing `proc_cgroups` file is treated as empty. The cgroup2 hierarchy's controllers
    /// are read from `<mount>/cgroup.controllers` (empty if unreadable).
    pub fn discover(mountinfo: &Path, proc_cgroups: &Path) -> Result<Cgroups, Error> {
        let subsystems = match read_proc_cgroups(proc_cgroups) {
            Ok(s) => s,
            Err(Error::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        let text = fs::read(mountinfo).map_err(|source| Error::Read {
            path: mountinfo.to_path_buf(),
            source,
        })?;
        let mounts = mountinfo::parse(&String::from_utf8_lossy(&text), mountinfo)?;
        let hierarchies = select_hierarchies(&mounts, &subsystems);

        let real_v1 = hierarchies.iter().any(|h| {
            h.version == Version::V1 && h.controllers.iter().any(|c| !c.starts_with("name="))
        });
        let any_v1 = hierarchies.iter().any(|h| h.version == Version::V1);
        let v2 = hierarchies.iter().any(|h| h.version == Version::V2);
        let layout = match (real_v1, v2) {
            (true, true) => CgroupLayout::Hybrid,
            (false, true) => CgroupLayout::V2,
            _ if any_v1 => CgroupLayout::V1,
            _ => {
                return Err(Error::NoCgroups {
                    path: mountinfo.to_path_buf(),
                });
            }
        };
        Ok(Cgroups {
            layout,
            hierarchies,
            subsystems,
        })
    }

    /// The cgroup2 hierarchy, if mounted.
    pub fn v2(&self) -> Option<&Hierarchy> {
        self.hierarchies.iter().find(|h| h.version == Version::V2)
    }

    /// The hierarchy that carries `controller` (e.g. `"cpu"`): the v1 hierarchy it is bound to,
    /// else the cgroup2 hierarchy if the controller is listed in its root's
    /// `cgroup.controllers`, else `None` (also when the controller is disabled, or bound to a v1
    /// hierarchy that is not mounted in this mount namespace).
    pub fn for_controller(&self, controller: &str) -> Option<&Hierarchy> {
        if let Some(h) = self
            .hierarchies
            .iter()
            .find(|h| h.version == Version::V1 && h.has_controller(controller))
        {
            return Some(h);
        }
        if let Some(s) = self.subsystems.iter().find(|s| s.name == controller)
            && (!s.enabled || s.hierarchy != 0)
        {
            return None;
        }
        self.v2().filter(|h| h.has_controller(controller))
    }

    /// The hierarchy whose ids key run-queue statistics: the v1 hierarchy of `cpu` if mounted,
    /// else cgroup2 (the eBPF side then reads the default hierarchy, whatever its controllers).
    pub fn runq_hierarchy(&self) -> Option<&Hierarchy> {
        self.hierarchies
            .iter()
            .find(|h| h.version == Version::V1 && h.has_controller("cpu"))
            .or_else(|| self.v2())
    }
}

/// `num_cgroups` of `controller` in a `/proc/cgroups` file; `None` if the file is unreadable
/// or does not list the controller.
pub fn num_cgroups(proc_cgroups: &Path, controller: &str) -> Option<u64> {
    read_proc_cgroups(proc_cgroups)
        .ok()?
        .into_iter()
        .find(|s| s.name == controller)
        .map(|s| s.num_cgroups)
}

/// Parses a `/proc/cgroups` file.
pub fn read_proc_cgroups(path: &Path) -> Result<Vec<Subsys>, Error> {
    let text = fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_proc_cgroups(&text, path)
}

fn parse_proc_cgroups(text: &str, path: &Path) -> Result<Vec<Subsys>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |reason: &str| Error::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            reason: reason.to_string(),
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let [name, hierarchy, num, enabled] = f[..] else {
            return Err(err("expected 4 columns"));
        };
        out.push(Subsys {
            name: name.to_string(),
            hierarchy: hierarchy.parse().map_err(|_| err("bad hierarchy column"))?,
            num_cgroups: num.parse().map_err(|_| err("bad num_cgroups column"))?,
            enabled: enabled
                .parse::<u32>()
                .map_err(|_| err("bad enabled column"))?
                != 0,
        });
    }
    Ok(out)
}

/// Picks one visible mount per hierarchy, preferring mounts of the hierarchy's root.
fn select_hierarchies(mounts: &[MountEntry], subsystems: &[Subsys]) -> Vec<Hierarchy> {
    // A mount is hidden by a later mount on the same mount point.
    let mut last_at: HashMap<&Path, usize> = HashMap::new();
    for (i, m) in mounts.iter().enumerate() {
        last_at.insert(m.mount_point.as_path(), i);
    }
    let visible = |i: usize, m: &MountEntry| last_at.get(m.mount_point.as_path()) == Some(&i);

    // Candidate mounts grouped by (version, device), in mountinfo order.
    let mut groups: Vec<((Version, &str), Vec<&MountEntry>)> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        let version = match m.fstype.as_str() {
            "cgroup" => Version::V1,
            "cgroup2" => Version::V2,
            _ => continue,
        };
        if !visible(i, m) {
            continue;
        }
        let key = (version, m.dev.as_str());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(m),
            None => groups.push((key, vec![m])),
        }
    }
    let best = |v: &[&MountEntry]| -> Option<MountEntry> {
        v.iter()
            .find(|m| m.root == Path::new("/"))
            .or_else(|| v.first())
            .map(|m| (*m).clone())
    };

    let mut v1 = Vec::new();
    let mut v2: Option<MountEntry> = None;
    for ((version, _), entries) in &groups {
        let Some(m) = best(entries) else { continue };
        match version {
            Version::V1 => {
                let controllers = v1_controllers(&m.super_opts, subsystems);
                if controllers.is_empty() {
                    continue;
                }
                let id = controllers
                    .iter()
                    .find_map(|c| subsystems.iter().find(|s| s.name == *c))
                    .map_or(0, |s| s.hierarchy);
                v1.push(Hierarchy {
                    id,
                    version: Version::V1,
                    controllers,
                    mount: m.mount_point,
                    mount_root: m.root,
                });
            }
            Version::V2 => {
                // Only one cgroup2 hierarchy exists; several superblocks can show up with
                // cgroup namespaces. Prefer the first whole-hierarchy mount.
                let better = match &v2 {
                    None => true,
                    Some(cur) => cur.root != Path::new("/") && m.root == Path::new("/"),
                };
                if better {
                    v2 = Some(m);
                }
            }
        }
    }
    v1.sort_by(|a, b| (a.id, &a.mount).cmp(&(b.id, &b.mount)));
    let mut out = v1;
    if let Some(m) = v2 {
        let controllers = fs::read_to_string(m.mount_point.join("cgroup.controllers"))
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        out.push(Hierarchy {
            id: 0,
            version: Version::V2,
            controllers,
            mount: m.mount_point,
            mount_root: m.root,
        });
    }
    out
}

/// Controller names among a v1 mount's super options (`rw,cpu,cpuacct`, `rw,name=systemd`):
/// named hierarchies, the controllers the kernel knows and those `subsystems` lists.
pub(crate) fn v1_controllers(super_opts: &str, subsystems: &[Subsys]) -> Vec<String> {
    super_opts
        .split(',')
        .filter(|o| {
            o.starts_with("name=")
                || KNOWN_V1_CONTROLLERS.contains(o)
                || subsystems.iter().any(|s| s.name == *o)
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `mountinfo` (with `@ROOT@` replaced by a temp dir) and `cgroups` into a temp dir.
    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new(mountinfo: &str, cgroups: &str) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_str().unwrap().to_string();
            fs::write(
                dir.path().join("mountinfo"),
                mountinfo.replace("@ROOT@", &root),
            )
            .unwrap();
            fs::write(dir.path().join("cgroups"), cgroups).unwrap();
            Fixture { dir }
        }
        fn root(&self) -> &Path {
            self.dir.path()
        }
        fn discover(&self) -> Result<Cgroups, Error> {
            Cgroups::discover(
                &self.dir.path().join("mountinfo"),
                &self.dir.path().join("cgroups"),
            )
        }
    }

    const HYBRID_MOUNTINFO: &str = include_str!("testdata/mountinfo.hybrid");
    const HYBRID_CGROUPS: &str = include_str!("testdata/cgroups.hybrid");
    const V2_MOUNTINFO: &str = include_str!("testdata/mountinfo.v2");
    const V2_CGROUPS: &str = include_str!("testdata/cgroups.v2");
    const V1_MOUNTINFO: &str = include_str!("testdata/mountinfo.v1");
    const V1_CGROUPS: &str = include_str!("testdata/cgroups.v1");

    #[test]
    fn hybrid_host_layout() {
        let f = Fixture::new(HYBRID_MOUNTINFO, HYBRID_CGROUPS);
        let cg = f.discover().unwrap();
        assert_eq!(cg.layout, CgroupLayout::Hybrid);
        let cpu = cg.for_controller("cpu").unwrap();
        assert_eq!(cpu.version, Version::V1);
        assert_eq!(cpu.id, 1);
        assert_eq!(cpu.controllers, vec!["cpu"]);
        assert_eq!(cpu.mount, Path::new("/sys/fs/cgroup/cpu"));
        assert_eq!(cpu.mount_root, Path::new("/"));
        assert_eq!(cg.runq_hierarchy(), Some(cpu));
        let sd = cg.for_controller("name=systemd").unwrap();
        assert_eq!((sd.id, sd.version), (0, Version::V1));
        let v2 = cg.v2().unwrap();
        assert_eq!(v2.mount, f.root().join("unified"));
        assert!(v2.controllers.is_empty());
        // net_cls is enabled but not bound to v1, and the (unreadable) cgroup2 root lists no
        // controllers.
        assert_eq!(cg.for_controller("net_cls"), None);
        assert_eq!(cg.for_controller("nonexistent"), None);
        // v1 sorted by id, v2 last.
        let ids: Vec<u32> = cg.hierarchies.iter().map(|h| h.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
        assert_eq!(cg.hierarchies.last().unwrap().version, Version::V2);
    }

    #[test]
    fn pure_v2_layout_reads_cgroup_controllers() {
        let f = Fixture::new(V2_MOUNTINFO, V2_CGROUPS);
        fs::create_dir(f.root().join("cg2")).unwrap();
        fs::write(
            f.root().join("cg2/cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        let cg = f.discover().unwrap();
        assert_eq!(cg.layout, CgroupLayout::V2);
        assert_eq!(cg.hierarchies.len(), 1);
        let h = cg.for_controller("cpu").unwrap();
        assert_eq!(h.version, Version::V2);
        assert_eq!(h.id, 0);
        assert_eq!(h.mount, f.root().join("cg2"));
        assert!(h.has_controller("memory"));
        assert_eq!(cg.runq_hierarchy(), Some(h));
        // Listed in /proc/cgroups but not enabled on the cgroup2 root.
        assert_eq!(cg.for_controller("net_cls"), None);
        // Disabled (cgroup_disable=hugetlb) even though cgroup.controllers lists it.
        assert_eq!(cg.for_controller("hugetlb"), None);
    }

    #[test]
    fn pure_v2_without_proc_cgroups() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        fs::write(
            dir.path().join("mountinfo"),
            V2_MOUNTINFO.replace("@ROOT@", root),
        )
        .unwrap();
        fs::create_dir(dir.path().join("cg2")).unwrap();
        fs::write(dir.path().join("cg2/cgroup.controllers"), "cpu memory\n").unwrap();
        let cg =
            Cgroups::discover(&dir.path().join("mountinfo"), &dir.path().join("missing")).unwrap();
        assert!(cg.subsystems.is_empty());
        assert_eq!(cg.layout, CgroupLayout::V2);
        assert!(cg.for_controller("cpu").is_some());
        assert!(cg.for_controller("hugetlb").is_none());
    }

    #[test]
    fn v1_combined_controllers_escapes_binds_and_shadowing() {
        let f = Fixture::new(V1_MOUNTINFO, V1_CGROUPS);
        let cg = f.discover().unwrap();
        assert_eq!(cg.layout, CgroupLayout::V1);
        assert!(cg.v2().is_none());
        let cpu = cg.for_controller("cpu").unwrap();
        assert_eq!(cpu.controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(cpu.id, 4);
        // The bind mount of /docker/abc (listed first) loses against the root mount.
        assert_eq!(cpu.mount, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(cg.for_controller("cpuacct"), Some(cpu));
        assert_eq!(cg.runq_hierarchy(), Some(cpu));
        // Escaped mount point; `noprefix`/`xattr`/`release_agent=` are not controllers.
        let mem = cg.for_controller("memory").unwrap();
        assert_eq!(mem.mount, Path::new("/mnt/my cgroups\\mem"));
        assert_eq!(mem.controllers, vec!["memory"]);
        // Only a bind of a sub-cgroup is visible for pids.
        let pids = cg.for_controller("pids").unwrap();
        assert_eq!(pids.mount, Path::new("/sys/fs/cgroup/pids"));
        assert_eq!(pids.mount_root, Path::new("/kubepods/pod1"));
        // The freezer mount is hidden by a tmpfs mounted later on the same mount point.
        assert_eq!(cg.for_controller("freezer"), None);
        let nc = cg.for_controller("net_prio").unwrap();
        assert_eq!(nc.controllers, vec!["net_cls", "net_prio"]);
        // Bound to a v1 hierarchy (hierarchy 9) that is not mounted here.
        assert_eq!(cg.for_controller("devices"), None);
    }

    #[test]
    fn no_cgroup_mounts_is_an_error() {
        let f = Fixture::new(
            "22 1 0:21 / /proc rw,nosuid - proc proc rw\n",
            HYBRID_CGROUPS,
        );
        assert!(matches!(f.discover(), Err(Error::NoCgroups { .. })));
    }

    #[test]
    fn malformed_inputs() {
        let f = Fixture::new("22 1 0:21 / /proc rw,nosuid proc proc rw x y\n", "");
        assert!(matches!(f.discover(), Err(Error::Parse { line: 1, .. })));
        let f = Fixture::new(HYBRID_MOUNTINFO, "#subsys_name\ncpu 1 x 1\n");
        let e = f.discover().unwrap_err();
        assert!(matches!(e, Error::Parse { line: 2, .. }), "{e:?}");
        let e = Cgroups::discover(
            Path::new("/nonexistent/mountinfo"),
            Path::new("/nonexistent"),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Read { .. }));
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn num_cgroups_helper() {
        let f = Fixture::new(HYBRID_MOUNTINFO, HYBRID_CGROUPS);
        let p = f.root().join("cgroups");
        assert_eq!(num_cgroups(&p, "memory"), Some(41));
        assert_eq!(num_cgroups(&p, "cpu"), Some(1));
        assert_eq!(num_cgroups(&p, "nope"), None);
        assert_eq!(num_cgroups(&f.root().join("missing"), "memory"), None);
    }

    #[test]
    fn serializes_lowercase() {
        let f = Fixture::new(HYBRID_MOUNTINFO, HYBRID_CGROUPS);
        let cg = f.discover().unwrap();
        let json = serde_json::to_value(&cg).unwrap();
        assert_eq!(json["layout"], "hybrid");
        assert_eq!(json["hierarchies"][1]["version"], "v1");
        assert_eq!(json["hierarchies"][1]["controllers"][0], "cpu");
        assert_eq!(json["hierarchies"][9]["version"], "v2");
        assert_eq!(json["hierarchies"][1]["mount"], "/sys/fs/cgroup/cpu");
        assert_eq!(serde_json::to_value(CgroupLayout::V1).unwrap(), "v1");
        assert_eq!(serde_json::to_value(CgroupLayout::V2).unwrap(), "v2");
    }

    /// Runs against this host's real files; checks internal consistency only.
    #[test]
    fn this_host() {
        if !Path::new(PROC_MOUNTINFO).exists() {
            eprintln!("skipping: no {PROC_MOUNTINFO}");
            return;
        }
        let cg = Cgroups::discover_system().unwrap();
        eprintln!("{:?}: {:#?}", cg.layout, cg.hierarchies);
        let cpu_v1 = cg
            .subsystems
            .iter()
            .any(|s| s.name == "cpu" && s.hierarchy != 0);
        let runq = cg.runq_hierarchy().unwrap();
        if cpu_v1 {
            assert_eq!(runq.version, Version::V1);
            assert_eq!(cg.for_controller("cpu"), Some(runq));
        } else {
            assert_eq!(runq.version, Version::V2);
        }
        for h in &cg.hierarchies {
            assert!(h.mount.is_dir(), "{h:?}");
        }
    }
}
