//! Cgroup discovery, cgroup id → path resolution and human-readable cgroup names.
//!
//! The eBPF side identifies a task's cgroup by `kernfs_node.id`, which is the inode number of
//! the cgroup directory in one hierarchy (the hierarchy's root has id 1). This module finds the
//! hierarchies ([`Cgroups`]), turns ids into paths relative to a hierarchy's mount
//! ([`Resolver`]) and paths into names such as `nginx.service` or `kube-system/coredns-xyz`
//! ([`derive`], [`Names`]).

pub mod error;
pub mod hierarchy;
pub(crate) mod mountinfo;
pub mod name;
pub mod resolve;

pub use error::Error;
pub use hierarchy::{CgroupLayout, Cgroups, Hierarchy, Subsys, Version, num_cgroups};
pub use name::{Name, NameKind, Names, derive};
pub use resolve::Resolver;
