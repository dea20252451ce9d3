//! Human-readable names for cgroup paths.
//!
//! [`derive`] recognises the cgroup layouts of Kubernetes (cgroupfs and systemd drivers),
//! Docker, podman, containerd/nerdctl, LXC and systemd from the path alone (`path`). [`Names`]
//! adds Kubernetes namespace/pod/container names from kubelet's log directories and containerd's
//! CRI annotations, and Docker container names from Docker's state directory (`metadata`).

mod metadata;
mod model;
mod path;

pub use metadata::{
    DEFAULT_CONTAINERD_STATE, DEFAULT_MAX_ENTRIES, DEFAULT_REFRESH, Names, SANDBOX_CONTAINER,
};
pub use model::{Name, NameKind, Parts};

/// Derives a name from a cgroup path relative to its hierarchy's mount (e.g.
/// `/system.slice/nginx.service`). `None` for the root and unrecognised paths.
pub fn derive(path: &str) -> Option<Name> {
    path::parse(path).map(|p| p.name)
}

/// The ids the tests of both halves name.
#[cfg(test)]
mod test_ids {
    pub const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    pub const CID2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    pub const UID: &str = "5f3c2a1e-9b8d-4c7f-a6e5-d4c3b2a19f80";
    pub const UID_US: &str = "5f3c2a1e_9b8d_4c7f_a6e5_d4c3b2a19f80";
}
