//! What a derived name is: its kind ([`NameKind`]), the text the outputs show ([`Name`]) and its
//! structured parts ([`Parts`]). A leaf: both ways of naming (`path`, `metadata`) build these.

use serde::Serialize;

/// What a cgroup belongs to.
#[derive(Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum NameKind {
    /// A Kubernetes pod's own cgroup.
    Pod,
    /// A container: in a Kubernetes pod (`pod_uid` set), or of podman, containerd, LXC, ...
    Container,
    /// A Docker container outside Kubernetes.
    Docker,
    /// A systemd unit (service, scope, slice, ...).
    Systemd,
    /// A user's login session scope (`session-N.scope`).
    Session,
    /// A kind named by a newer cgtrace (read from a recording).
    #[serde(other)]
    Unknown,
}

impl NameKind {
    /// The stream's name for the kind (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pod => "pod",
            Self::Container => "container",
            Self::Docker => "docker",
            Self::Systemd => "systemd",
            Self::Session => "session",
            Self::Unknown => "unknown",
        }
    }
}

/// The name of a cgroup.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Name {
    pub kind: NameKind,
    /// Short label: `nginx.service`, `session-3.scope`, `user@1000/foo.service`, a 12-hex
    /// container id, `pod<uid>`; enriched by [`Names`](super::Names): `ns/pod`, `ns/pod/container`, the
    /// Docker container name.
    pub display: String,
    pub pod_uid: Option<String>,
    /// Full container id (64 hex) when known.
    pub container_id: Option<String>,
    /// Kubernetes QoS class: `guaranteed`, `burstable` or `besteffort`.
    pub qos: Option<String>,
    /// What the name is made of, as metadata gave it (Kubernetes namespace and pod, the
    /// container's name): labels for metrics, never split out of `display`.
    #[serde(skip)]
    pub parts: Parts,
    /// A Kubernetes container whose pod kubelet's logs named but whose own log link was not
    /// there (yet): kubelet makes the link after the container, so its cgroup is often seen
    /// first. Named again until the link shows (a sandbox never has one: one rescan per refresh
    /// interval at most).
    #[serde(skip)]
    pub container_unmatched: bool,
}

impl Name {
    /// A Kubernetes pod or container that kubelet's logs have not named yet (a container: not
    /// by its own name).
    pub fn awaits_metadata(&self) -> bool {
        matches!(self.kind, NameKind::Pod | NameKind::Container)
            && self.pod_uid.is_some()
            && (self.parts.pod.is_none() || self.container_unmatched)
    }

    /// Metric labels: the structured parts, or for a container or pod without metadata its
    /// short name as `container` or `pod`.
    pub fn labels(&self) -> Parts {
        let mut p = self.parts.clone();
        match self.kind {
            NameKind::Container | NameKind::Docker if p.container.is_none() => {
                p.container = Some(self.display.clone());
            }
            NameKind::Pod if p.pod.is_none() => p.pod = Some(self.display.clone()),
            _ => {}
        }
        p
    }

    /// A name of `kind` shown as `display`, nothing else known (yet).
    pub(super) fn of(kind: NameKind, display: String) -> Name {
        Name {
            kind,
            display,
            pod_uid: None,
            container_id: None,
            qos: None,
            parts: Parts::default(),
            container_unmatched: false,
        }
    }
}

/// The structured parts of a name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Parts {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
}
