//! Cgroup discovery, cgroup id → path resolution and human-readable cgroup names.
//!
//! The eBPF side identifies a task's cgroup by `kernfs_node.id`, which is the inode number of
//! the cgroup directory in one hierarchy (the hierarchy's root has id 1). This module finds the
//! hierarchies ([`Cgroups`]), turns ids into paths relative to a hierarchy's mount
//! ([`Resolver`]) and paths into names such as `nginx.service` or `kube-system/coredns-xyz`
//! ([`derive`], [`Names`]).

use std::io;
use std::path::PathBuf;

pub mod hierarchy;
pub(crate) mod mountinfo;
pub mod name;
pub mod resolve;

pub use hierarchy::{CgroupLayout, Cgroups, Hierarchy, Subsys, Version, num_cgroups};
pub use name::{Name, NameKind, Names, derive};
pub use resolve::Resolver;

/// Errors of the cgroup module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file (`/proc/self/mountinfo`, `/proc/cgroups`, ...) could not be read.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file was read but a line of it is malformed.
    #[error("{path}:{line}: {reason}")]
    Parse {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// Neither a cgroup v1 nor a cgroup2 filesystem is mounted.
    #[error("no cgroup filesystem found in {path}")]
    NoCgroups { path: PathBuf },
    /// A hierarchy mount could not be opened or inspected.
    #[error("cannot open cgroup mount {path}")]
    Mount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
