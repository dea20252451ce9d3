//! Human-readable names for cgroup paths.
//!
//! [`derive`] recognises the cgroup layouts of Kubernetes (cgroupfs and systemd drivers),
//! Docker, podman, containerd/nerdctl, LXC and systemd from the path alone. [`Names`] adds
//! Kubernetes namespace/pod/container names from kubelet's log directories and Docker
//! container names from Docker's state directory.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    /// container id, `pod<uid>`; enriched by [`Names`]: `ns/pod`, `ns/pod/container`, the
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
}

/// The structured parts of a name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Parts {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
}

/// Derives a name from a cgroup path relative to its hierarchy's mount (e.g.
/// `/system.slice/nginx.service`). `None` for the root and unrecognised paths.
pub fn derive(path: &str) -> Option<Name> {
    parse(path).map(|p| p.name)
}

/// A derived name plus what enrichment needs to know.
struct Parsed {
    name: Name,
    /// The cgroup is crio's/podman's `conmon` monitor of the container, not the container.
    conmon: bool,
}

fn parse(path: &str) -> Option<Parsed> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    kubernetes(&comps)
        .or_else(|| container(&comps))
        .or_else(|| systemd(&comps))
}

const SHORT_ID: usize = 12;

fn short(cid: &str) -> String {
    cid.chars().take(SHORT_ID).collect()
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && is_hex(s)
}

/// A pod uid: a UUID with `sep` as separator, or a 32-hex static-pod hash.
fn is_pod_uid(s: &str, sep: u8) -> bool {
    let b = s.as_bytes();
    match b.len() {
        32 => is_hex(s),
        36 => b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == sep,
            _ => c.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

/// Recognises a container cgroup directory name: `<cid>`, `<runtime>-<cid>` or
/// `<runtime>-<cid>.scope`. Returns the id, whether the runtime is Docker, and whether it is
/// a `conmon` monitor cgroup.
fn container_dir(c: &str) -> Option<(String, bool, bool)> {
    if is_container_id(c) {
        return Some((c.to_string(), false, false));
    }
    let stem = c.strip_suffix(".scope").unwrap_or(c);
    const PREFIXES: &[(&str, bool, bool)] = &[
        ("cri-containerd-", false, false),
        ("crio-conmon-", false, true),
        ("crio-", false, false),
        ("docker-", true, false),
        ("libpod-conmon-", false, true),
        ("libpod-", false, false),
        ("nerdctl-", false, false),
        ("containerd-", false, false),
    ];
    PREFIXES.iter().find_map(|&(prefix, docker, conmon)| {
        let cid = stem.strip_prefix(prefix)?;
        is_container_id(cid).then(|| (cid.to_string(), docker, conmon))
    })
}

fn kubernetes(comps: &[&str]) -> Option<Parsed> {
    for (i, &c) in comps.iter().enumerate() {
        if !comps[..i].iter().any(|p| p.contains("kubepods")) {
            continue;
        }
        let uid = if let Some(u) = c.strip_prefix("pod").filter(|u| is_pod_uid(u, b'-')) {
            // cgroupfs driver: /kubepods[/burstable|/besteffort]/pod<uid>
            u.to_string()
        } else if let Some(stem) = c.strip_suffix(".slice")
            && stem.contains("kubepods")
            && let Some(pos) = stem.rfind("-pod")
            && is_pod_uid(&stem[pos + 4..], b'_')
        {
            // systemd driver: [kubelet-]kubepods[-<qos>]-pod<uid with _>.slice
            stem[pos + 4..].replace('_', "-")
        } else {
            continue;
        };
        let qos = ["burstable", "besteffort"]
            .into_iter()
            .find(|q| {
                comps[..=i].iter().any(|p| {
                    *p == *q
                        || p.strip_suffix(".slice")
                            .is_some_and(|s| s.split('-').any(|part| part == *q))
                })
            })
            .unwrap_or("guaranteed");
        let container = comps.get(i + 1).and_then(|c| container_dir(c));
        let (kind, display, container_id, conmon) = match container {
            Some((cid, _, conmon)) => {
                let d = if conmon {
                    format!("conmon-{}", short(&cid))
                } else {
                    short(&cid)
                };
                (NameKind::Container, d, Some(cid), conmon)
            }
            None => (NameKind::Pod, format!("pod{uid}"), None, false),
        };
        return Some(Parsed {
            name: Name {
                kind,
                display,
                pod_uid: Some(uid),
                container_id,
                qos: Some(qos.to_string()),
                parts: Parts::default(),
                container_unmatched: false,
            },
            conmon,
        });
    }
    None
}

/// Containers outside Kubernetes; the deepest match wins (nested containers).
fn container(comps: &[&str]) -> Option<Parsed> {
    for i in (0..comps.len()).rev() {
        let c = comps[i];
        if let Some((cid, docker, conmon)) = container_dir(c) {
            let docker = docker || (i > 0 && comps[i - 1] == "docker" && !conmon);
            let display = if conmon {
                format!("conmon-{}", short(&cid))
            } else {
                short(&cid)
            };
            return Some(Parsed {
                name: Name {
                    kind: if docker {
                        NameKind::Docker
                    } else {
                        NameKind::Container
                    },
                    display,
                    pod_uid: None,
                    container_id: Some(cid),
                    qos: None,
                    parts: Parts::default(),
                    container_unmatched: false,
                },
                conmon,
            });
        }
        // LXC: /lxc/<name>, /lxc.payload/<name>, /lxc.payload.<name>
        let lxc = if let Some(n) = c.strip_prefix("lxc.payload.") {
            Some(n)
        } else if i > 0 && (comps[i - 1] == "lxc" || comps[i - 1] == "lxc.payload") {
            Some(c)
        } else {
            None
        };
        if let Some(n) = lxc.filter(|n| !n.is_empty()) {
            return Some(Parsed {
                name: Name {
                    kind: NameKind::Container,
                    display: n.to_string(),
                    pod_uid: None,
                    container_id: None,
                    qos: None,
                    parts: Parts::default(),
                    container_unmatched: false,
                },
                conmon: false,
            });
        }
    }
    None
}

const UNIT_SUFFIXES: &[&str] = &[".service", ".scope", ".slice", ".socket", ".mount", ".swap"];

fn is_unit(c: &str) -> bool {
    UNIT_SUFFIXES
        .iter()
        .any(|s| c.len() > s.len() && c.ends_with(s))
}

/// systemd units; the deepest unit wins.
fn systemd(comps: &[&str]) -> Option<Parsed> {
    let i = comps.iter().rposition(|c| is_unit(c))?;
    let unit = comps[i];
    let user_manager = comps[..i].iter().rev().find_map(|c| {
        c.strip_prefix("user@")
            .and_then(|r| r.strip_suffix(".service"))
    });
    let in_user_slice = comps[..i]
        .iter()
        .any(|c| c.starts_with("user-") && c.ends_with(".slice"));
    let (kind, display) =
        if unit.starts_with("session-") && unit.ends_with(".scope") && in_user_slice {
            (NameKind::Session, unit.to_string())
        } else if let Some(uid) = user_manager {
            (NameKind::Systemd, format!("user@{uid}/{unit}"))
        } else {
            (NameKind::Systemd, unit.to_string())
        };
    Some(Parsed {
        name: Name {
            kind,
            display,
            pod_uid: None,
            container_id: None,
            qos: None,
            parts: Parts::default(),
            container_unmatched: false,
        },
        conmon: false,
    })
}

/// Default time between rescans of the name sources.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5);
/// Default bound on remembered pods, containers and Docker names (each).
pub const DEFAULT_MAX_ENTRIES: usize = 16384;

#[derive(Clone, Debug, PartialEq)]
struct PodRef {
    namespace: String,
    pod: String,
}

#[derive(Clone, Debug, PartialEq)]
struct ContainerRef {
    namespace: String,
    pod: String,
    container: String,
}

/// Names enriched with Kubernetes and Docker metadata read from the filesystem:
///
/// - pod uid → `namespace/pod` from `<log_root>/pods/<namespace>_<pod>_<uid>/`;
/// - container id → container from `<log_root>/containers/<pod>_<namespace>_<container>-<id>.log`;
/// - Docker container id → name from `<docker_root>/containers/<id>/config.v2.json`.
///
/// Kubernetes directories are rescanned on a miss, at most once per refresh interval; Docker
/// configs are read per container on a miss and remembered (misses for one refresh interval).
pub struct Names {
    log_root: PathBuf,
    docker_root: PathBuf,
    refresh: Duration,
    max_entries: usize,
    last_scan: Option<Instant>,
    pods: HashMap<String, PodRef>,
    containers: HashMap<String, ContainerRef>,
    /// Docker id → name (`None`: not found, retried after `refresh`), and when read.
    docker: HashMap<String, (Option<String>, Instant)>,
}

impl Names {
    /// `log_root` is kubelet's log root (`/var/log`), `docker_root` Docker's data root
    /// (`/var/lib/docker`).
    pub fn new(log_root: PathBuf, docker_root: PathBuf) -> Names {
        Names {
            log_root,
            docker_root,
            refresh: DEFAULT_REFRESH,
            max_entries: DEFAULT_MAX_ENTRIES,
            last_scan: None,
            pods: HashMap::new(),
            containers: HashMap::new(),
            docker: HashMap::new(),
        }
    }

    /// [`Names::new`] with `/var/log` and `/var/lib/docker`.
    pub fn system() -> Names {
        Names::new(PathBuf::from("/var/log"), PathBuf::from("/var/lib/docker"))
    }

    /// Minimum time between rescans (default [`DEFAULT_REFRESH`]).
    pub fn set_refresh_interval(&mut self, refresh: Duration) {
        self.refresh = refresh;
    }

    /// Bound on each of the pod, container and Docker maps (default [`DEFAULT_MAX_ENTRIES`]).
    pub fn set_max_entries(&mut self, max: usize) {
        self.max_entries = max.max(1);
    }

    /// The name of cgroup `path`, enriched where metadata is available.
    pub fn name(&mut self, path: &str) -> Option<Name> {
        let Parsed { mut name, conmon } = parse(path)?;
        match name.kind {
            NameKind::Pod | NameKind::Container if name.pod_uid.is_some() => {
                self.enrich_k8s(&mut name, conmon)
            }
            NameKind::Docker => {
                if let Some(n) = name
                    .container_id
                    .as_deref()
                    .and_then(|c| self.docker_name(c))
                {
                    name.parts.container = Some(n.clone());
                    name.display = n;
                }
            }
            _ => {}
        }
        Some(name)
    }

    fn enrich_k8s(&mut self, name: &mut Name, conmon: bool) {
        let (Some(uid), cid) = (name.pod_uid.clone(), name.container_id.clone()) else {
            return;
        };
        let known = |s: &Self| match &cid {
            Some(c) => s.containers.contains_key(c),
            None => s.pods.contains_key(&uid),
        };
        if !known(self) {
            self.maybe_rescan();
        }
        let suffix = if conmon { "-conmon" } else { "" };
        if let Some(c) = cid.as_ref().and_then(|c| self.containers.get(c)) {
            name.display = format!("{}/{}/{}{suffix}", c.namespace, c.pod, c.container);
            name.parts = Parts {
                namespace: Some(c.namespace.clone()),
                pod: Some(c.pod.clone()),
                container: Some(format!("{}{suffix}", c.container)),
            };
        } else if let Some(p) = self.pods.get(&uid) {
            name.parts = Parts {
                namespace: Some(p.namespace.clone()),
                pod: Some(p.pod.clone()),
                container: cid.is_some().then(|| name.display.clone()),
            };
            name.container_unmatched = cid.is_some();
            name.display = match &cid {
                Some(_) => format!("{}/{}/{}", p.namespace, p.pod, name.display),
                None => format!("{}/{}", p.namespace, p.pod),
            };
        }
    }

    fn maybe_rescan(&mut self) {
        if self.last_scan.is_some_and(|t| t.elapsed() < self.refresh) {
            return;
        }
        self.last_scan = Some(Instant::now());
        self.pods = scan_pods(&self.log_root.join("pods"), self.max_entries);
        self.containers = scan_containers(&self.log_root.join("containers"), self.max_entries);
    }

    fn docker_name(&mut self, cid: &str) -> Option<String> {
        if let Some((name, at)) = self.docker.get(cid)
            && (name.is_some() || at.elapsed() < self.refresh)
        {
            return name.clone();
        }
        let path = self
            .docker_root
            .join("containers")
            .join(cid)
            .join("config.v2.json");
        let name = fs::read_to_string(path)
            .ok()
            .and_then(|text| json_top_level_string(&text, "Name"))
            .map(|n| n.trim_start_matches('/').to_string())
            .filter(|n| !n.is_empty());
        if self.docker.len() >= self.max_entries {
            self.docker.retain(|_, (n, _)| n.is_some());
            if self.docker.len() >= self.max_entries {
                self.docker.clear();
            }
        }
        self.docker
            .insert(cid.to_string(), (name.clone(), Instant::now()));
        name
    }
}

/// The entries of `dir` whose names `parse` accepts, keyed as it says; at most `max`.
fn scan_names<T>(
    dir: &Path,
    max: usize,
    parse: impl Fn(&str) -> Option<(String, T)>,
) -> HashMap<String, T> {
    let Ok(entries) = fs::read_dir(dir) else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(&parse))
        .take(max)
        .collect()
}

/// `<namespace>_<pod>_<uid>` directory names.
fn scan_pods(dir: &Path, max: usize) -> HashMap<String, PodRef> {
    scan_names(dir, max, |name| {
        match name.split('_').collect::<Vec<_>>()[..] {
            [ns, pod, uid] if !ns.is_empty() && !pod.is_empty() && is_pod_uid(uid, b'-') => Some((
                uid.to_string(),
                PodRef {
                    namespace: ns.to_string(),
                    pod: pod.to_string(),
                },
            )),
            _ => None,
        }
    })
}

/// `<pod>_<namespace>_<container>-<64 hex id>.log` file (symlink) names.
fn scan_containers(dir: &Path, max: usize) -> HashMap<String, ContainerRef> {
    scan_names(dir, max, |name| {
        let (front, cid) = name.strip_suffix(".log")?.rsplit_once('-')?;
        if !is_container_id(cid) {
            return None;
        }
        match front.split('_').collect::<Vec<_>>()[..] {
            [pod, ns, container] if !pod.is_empty() && !ns.is_empty() && !container.is_empty() => {
                Some((
                    cid.to_string(),
                    ContainerRef {
                        namespace: ns.to_string(),
                        pod: pod.to_string(),
                        container: container.to_string(),
                    },
                ))
            }
            _ => None,
        }
    })
}

/// The string value of top-level `key` in a JSON object, without a JSON library: nested
/// objects (e.g. Docker's `MountPoints.*.Name`) and string contents are skipped correctly.
fn json_top_level_string(text: &str, key: &str) -> Option<String> {
    let b = text.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut depth = 0usize;
    let mut expect_key = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                expect_key = depth == 1;
                i += 1;
            }
            b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                i += 1;
            }
            b',' => {
                expect_key = depth == 1;
                i += 1;
            }
            b'"' => {
                let (s, end) = json_string(b, i)?;
                i = end;
                if depth == 1 && expect_key {
                    expect_key = false;
                    i = skip_ws(i);
                    if b.get(i) != Some(&b':') {
                        return None;
                    }
                    i = skip_ws(i + 1);
                    if s == key {
                        return (b.get(i) == Some(&b'"'))
                            .then(|| json_string(b, i).map(|(v, _)| v))
                            .flatten();
                    }
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Parses the JSON string starting at `b[start] == b'"'`; returns it and the index after it.
fn json_string(b: &[u8], start: usize) -> Option<(String, usize)> {
    let mut out = Vec::new();
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Some((String::from_utf8_lossy(&out).into_owned(), i + 1)),
            b'\\' => {
                let e = *b.get(i + 1)?;
                i += 2;
                match e {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'u' => {
                        let hex = std::str::from_utf8(b.get(i..i + 4)?).ok()?;
                        let cp = u32::from_str_radix(hex, 16).ok()?;
                        let ch = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        i += 4;
                    }
                    other => out.push(other),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const CID2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    const UID: &str = "5f3c2a1e-9b8d-4c7f-a6e5-d4c3b2a19f80";
    const UID_US: &str = "5f3c2a1e_9b8d_4c7f_a6e5_d4c3b2a19f80";
    const STATIC_UID: &str = "6a8f0c2b4d6e8f0a1c3e5b7d9f1a3c5e";

    /// Each path derives the name given.
    fn derives(cases: &[(&str, Name)]) {
        for (path, want) in cases {
            assert_eq!(&n(path), want, "{path}");
        }
    }

    fn n(path: &str) -> Name {
        derive(path).unwrap_or_else(|| panic!("no name for {path}"))
    }

    fn pod(uid: &str, qos: &str) -> Name {
        Name {
            kind: NameKind::Pod,
            display: format!("pod{uid}"),
            pod_uid: Some(uid.to_string()),
            container_id: None,
            qos: Some(qos.to_string()),
            parts: Parts::default(),
            container_unmatched: false,
        }
    }

    fn pod_container(uid: &str, qos: &str, cid: &str) -> Name {
        Name {
            kind: NameKind::Container,
            display: cid[..12].to_string(),
            pod_uid: Some(uid.to_string()),
            container_id: Some(cid.to_string()),
            qos: Some(qos.to_string()),
            parts: Parts::default(),
            container_unmatched: false,
        }
    }

    fn unit(kind: NameKind, display: &str) -> Name {
        Name {
            kind,
            display: display.to_string(),
            pod_uid: None,
            container_id: None,
            qos: None,
            parts: Parts::default(),
            container_unmatched: false,
        }
    }

    fn other_container(kind: NameKind, cid: &str) -> Name {
        Name {
            kind,
            display: cid[..12].to_string(),
            pod_uid: None,
            container_id: Some(cid.to_string()),
            qos: None,
            parts: Parts::default(),
            container_unmatched: false,
        }
    }

    #[test]
    fn k8s_cgroupfs_guaranteed_pod_and_container() {
        derives(&[
            (&format!("/kubepods/pod{UID}"), pod(UID, "guaranteed")),
            (
                &format!("/kubepods/pod{UID}/{CID}"),
                pod_container(UID, "guaranteed", CID),
            ),
        ]);
    }

    #[test]
    fn k8s_cgroupfs_burstable_and_besteffort() {
        derives(&[
            (
                &format!("/kubepods/burstable/pod{UID}/{CID}"),
                pod_container(UID, "burstable", CID),
            ),
            (
                &format!("/kubepods/besteffort/pod{UID}"),
                pod(UID, "besteffort"),
            ),
        ]);
        // crio with the cgroupfs driver prefixes the id.
        derives(&[(
            &format!("/kubepods/besteffort/pod{UID}/crio-{CID}"),
            pod_container(UID, "besteffort", CID),
        )]);
    }

    #[test]
    fn k8s_cgroupfs_under_a_prefix_and_static_pod() {
        // kubelet --cgroup-root, or kind/k3s nodes running inside Docker.
        derives(&[
            (
                &format!("/kubelet/kubepods/burstable/pod{UID}/{CID}"),
                pod_container(UID, "burstable", CID),
            ),
            (
                &format!("/docker/{CID2}/kubepods/pod{UID}/{CID}"),
                pod_container(UID, "guaranteed", CID),
            ),
            (
                &format!("/kubepods/burstable/pod{STATIC_UID}"),
                pod(STATIC_UID, "burstable"),
            ),
        ]);
    }

    #[test]
    fn k8s_systemd_driver() {
        let base = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice"
        );
        derives(&[(&base, pod(UID, "burstable"))]);
        for runtime in ["cri-containerd", "crio", "docker"] {
            assert_eq!(
                n(&format!("{base}/{runtime}-{CID}.scope")),
                pod_container(UID, "burstable", CID),
                "{runtime}"
            );
        }
        derives(&[
            (
                &format!("/kubepods.slice/kubepods-pod{UID_US}.slice/cri-containerd-{CID}.scope"),
                pod_container(UID, "guaranteed", CID),
            ),
            (
                &format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice"
                ),
                pod(UID, "besteffort"),
            ),
        ]);
        // kind node with the systemd driver, nested in a Docker container.
        derives(&[(
            &format!(
                "/system.slice/docker-{CID2}.scope/kubelet.slice/kubelet-kubepods.slice/\
                 kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_US}.slice/\
                 cri-containerd-{CID}.scope"
            ),
            pod_container(UID, "besteffort", CID),
        )]);
    }

    #[test]
    fn k8s_crio_conmon() {
        let got = n(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice/crio-conmon-{CID}.scope"
        ));
        assert_eq!(got.kind, NameKind::Container);
        assert_eq!(got.display, format!("conmon-{}", &CID[..12]));
        assert_eq!(got.container_id.as_deref(), Some(CID));
    }

    #[test]
    fn k8s_not_a_pod() {
        assert_eq!(derive("/kubepods/burstable"), None);
        assert_eq!(derive("/kubepods/podnot-a-uid"), None);
        // A pod-looking directory outside kubepods is not a pod.
        assert_eq!(derive(&format!("/other/pod{UID}")), None);
        derives(&[(
            "/kubepods.slice/kubepods-burstable.slice",
            unit(NameKind::Systemd, "kubepods-burstable.slice"),
        )]);
    }

    #[test]
    fn docker_cgroupfs_and_systemd() {
        derives(&[
            (
                &format!("/docker/{CID}"),
                other_container(NameKind::Docker, CID),
            ),
            (
                &format!("/system.slice/docker-{CID}.scope"),
                other_container(NameKind::Docker, CID),
            ),
        ]);
        // Docker in Docker: the innermost container.
        derives(&[(
            &format!("/docker/{CID2}/docker/{CID}"),
            other_container(NameKind::Docker, CID),
        )]);
    }

    #[test]
    fn systemd_units() {
        derives(&[
            (
                "/system.slice/nginx.service",
                unit(NameKind::Systemd, "nginx.service"),
            ),
            ("/init.scope", unit(NameKind::Systemd, "init.scope")),
            ("/system.slice", unit(NameKind::Systemd, "system.slice")),
            (
                "/system.slice/system-getty.slice/getty@tty1.service",
                unit(NameKind::Systemd, "getty@tty1.service"),
            ),
        ]);
        // A delegated subtree below a unit is named after the unit.
        derives(&[(
            "/system.slice/foo.service/worker",
            unit(NameKind::Systemd, "foo.service"),
        )]);
    }

    #[test]
    fn systemd_user_session_and_user_units() {
        derives(&[
            (
                "/user.slice/user-1000.slice/session-3.scope",
                unit(NameKind::Session, "session-3.scope"),
            ),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service",
                unit(NameKind::Systemd, "user@1000/foo.service"),
            ),
            (
                "/user.slice/user-1000.slice/user@1000.service",
                unit(NameKind::Systemd, "user@1000.service"),
            ),
            (
                "/user.slice/user-1000.slice",
                unit(NameKind::Systemd, "user-1000.slice"),
            ),
        ]);
    }

    #[test]
    fn podman_containerd_and_generic_ids() {
        derives(&[
            (
                &format!("/machine.slice/libpod-{CID}.scope"),
                other_container(NameKind::Container, CID),
            ),
            (
                &format!("/machine.slice/libpod-{CID}.scope/container"),
                other_container(NameKind::Container, CID),
            ),
        ]);
        let conmon = n(&format!("/machine.slice/libpod-conmon-{CID}.scope"));
        assert_eq!(conmon.display, format!("conmon-{}", &CID[..12]));
        derives(&[(
            &format!("/system.slice/nerdctl-{CID}.scope"),
            other_container(NameKind::Container, CID),
        )]);
        // containerd namespaces with the cgroupfs driver (`/default/<id>`), BuildKit, ...
        derives(&[(
            &format!("/default/{CID}"),
            other_container(NameKind::Container, CID),
        )]);
    }

    #[test]
    fn lxc() {
        let c = unit(NameKind::Container, "web1");
        derives(&[
            ("/lxc/web1", c.clone()),
            ("/lxc.payload.web1", c.clone()),
            ("/lxc.payload/web1", c.clone()),
            // systemd inside the container is attributed to the container.
            ("/lxc.payload.web1/system.slice/nginx.service", c),
        ]);
        assert_eq!(derive("/lxc"), None);
    }

    #[test]
    fn unrecognised() {
        assert_eq!(derive("/"), None);
        assert_eq!(derive(""), None);
        assert_eq!(derive("/foo/bar"), None);
        assert_eq!(derive("/.service"), None);
        assert_eq!(derive(&format!("/docker/{}", &CID[..63])), None);
    }

    #[test]
    fn serializes_lowercase() {
        let v = serde_json::to_value(n(&format!("/kubepods/pod{UID}"))).unwrap();
        assert_eq!(v["kind"], "pod");
        assert_eq!(v["qos"], "guaranteed");
        assert_eq!(v["container_id"], serde_json::Value::Null);
        for (k, s) in [
            (NameKind::Container, "container"),
            (NameKind::Docker, "docker"),
            (NameKind::Systemd, "systemd"),
            (NameKind::Session, "session"),
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), s);
        }
    }

    #[test]
    fn json_top_level_name() {
        let cfg = r#"{"StreamConfig":{},"State":{"Running":true,"Name":"bad"},
            "Config":{"Labels":{"Name":"label","x":"\"Name\":\"esc\""}},
            "Args":["Name",{"Name":"arr"}],
            "NetworkSettings":{"Networks":{"bridge":{"Name":"net"}}},
            "Name" : "/web\u0031",
            "MountPoints":{"/data":{"Name":"vol"}}}"#;
        assert_eq!(json_top_level_string(cfg, "Name").as_deref(), Some("/web1"));
        assert_eq!(json_top_level_string(r#"{"A":1}"#, "Name"), None);
        assert_eq!(json_top_level_string(r#"{"Name":5}"#, "Name"), None);
        assert_eq!(json_top_level_string(r#"{"Name":"/a"#, "Name"), None);
        assert_eq!(json_top_level_string("", "Name"), None);
    }

    struct Roots {
        dir: tempfile::TempDir,
    }

    impl Roots {
        fn new() -> Roots {
            let dir = tempfile::tempdir().unwrap();
            for d in ["log/pods", "log/containers", "docker/containers"] {
                fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            Roots { dir }
        }
        fn names(&self) -> Names {
            Names::new(self.dir.path().join("log"), self.dir.path().join("docker"))
        }
        fn add_pod(&self, ns: &str, pod: &str, uid: &str) {
            fs::create_dir_all(
                self.dir
                    .path()
                    .join(format!("log/pods/{ns}_{pod}_{uid}/app")),
            )
            .unwrap();
        }
        fn add_container(&self, ns: &str, pod: &str, uid: &str, container: &str, cid: &str) {
            let link = self
                .dir
                .path()
                .join(format!("log/containers/{pod}_{ns}_{container}-{cid}.log"));
            let target = format!("/var/log/pods/{ns}_{pod}_{uid}/{container}/0.log");
            std::os::unix::fs::symlink(target, link).unwrap();
        }
        fn add_docker(&self, cid: &str, json: &str) {
            let d = self.dir.path().join(format!("docker/containers/{cid}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("config.v2.json"), json).unwrap();
        }
    }

    #[test]
    fn names_enrich_pods_and_containers() {
        let r = Roots::new();
        r.add_pod("kube-system", "coredns-5d78c9869d-abcde", UID);
        r.add_container(
            "kube-system",
            "coredns-5d78c9869d-abcde",
            UID,
            "coredns",
            CID,
        );
        // Noise that must be ignored.
        r.add_pod("bad", "name", "not-a-uid");
        fs::write(r.dir.path().join("log/containers/garbage.log"), "").unwrap();
        let mut names = r.names();
        let base = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice"
        );
        let p = names.name(&base).unwrap();
        assert_eq!(p.display, "kube-system/coredns-5d78c9869d-abcde");
        assert_eq!(p.kind, NameKind::Pod);
        assert_eq!(p.qos.as_deref(), Some("burstable"));
        let c = names
            .name(&format!("{base}/cri-containerd-{CID}.scope"))
            .unwrap();
        assert_eq!(c.display, "kube-system/coredns-5d78c9869d-abcde/coredns");
        assert_eq!(c.container_id.as_deref(), Some(CID));
        // The labels are the metadata's own parts, not a split of the display string.
        assert_eq!(
            c.labels(),
            Parts {
                namespace: Some("kube-system".into()),
                pod: Some("coredns-5d78c9869d-abcde".into()),
                container: Some("coredns".into()),
            }
        );
        assert_eq!(
            p.labels(),
            Parts {
                namespace: Some("kube-system".into()),
                pod: Some("coredns-5d78c9869d-abcde".into()),
                container: None,
            }
        );
        // A container without a log link (e.g. the sandbox) gets the pod plus short id.
        let s = names
            .name(&format!("{base}/cri-containerd-{CID2}.scope"))
            .unwrap();
        assert_eq!(
            s.display,
            format!("kube-system/coredns-5d78c9869d-abcde/{}", &CID2[..12])
        );
        let m = names
            .name(&format!("{base}/crio-conmon-{CID}.scope"))
            .unwrap();
        assert_eq!(
            m.display,
            "kube-system/coredns-5d78c9869d-abcde/coredns-conmon"
        );
        assert_eq!(s.labels().container.as_deref(), Some(&CID2[..12]));
        // Non-k8s names pass through.
        let unit = names.name("/system.slice/nginx.service").unwrap();
        assert_eq!(unit.display, "nginx.service");
        assert_eq!(unit.labels(), Parts::default());
        assert_eq!(names.name("/"), None);
    }

    #[test]
    fn names_rescan_is_rate_limited() {
        let r = Roots::new();
        let mut names = r.names();
        names.set_refresh_interval(Duration::from_secs(3600));
        let path = format!("/kubepods/besteffort/pod{UID}");
        assert_eq!(names.name(&path).unwrap().display, format!("pod{UID}"));
        r.add_pod("default", "web-0", UID);
        // Within the refresh interval the directory is not rescanned.
        assert_eq!(names.name(&path).unwrap().display, format!("pod{UID}"));
        names.set_refresh_interval(Duration::ZERO);
        assert_eq!(names.name(&path).unwrap().display, "default/web-0");
    }

    /// kubelet links a container's log after making the container: a container named while
    /// only its pod is known awaits its own name, and gets it at the next rescan.
    #[test]
    fn container_named_before_its_log_link_is_named_again() {
        let r = Roots::new();
        r.add_pod("payments", "web-341", UID);
        let mut names = r.names();
        let path = format!("/kubepods/burstable/pod{UID}/{CID}");
        let early = names.name(&path).unwrap();
        assert_eq!(early.display, format!("payments/web-341/{}", &CID[..12]));
        assert!(early.awaits_metadata(), "named by its pod only: {early:?}");
        r.add_container("payments", "web-341", UID, "main", CID);
        names.set_refresh_interval(Duration::ZERO);
        let late = names.name(&path).unwrap();
        assert_eq!(late.display, "payments/web-341/main");
        assert!(!late.awaits_metadata());
        assert!(
            !names
                .name(&format!("/kubepods/burstable/pod{UID}"))
                .unwrap()
                .awaits_metadata()
        );
    }

    #[test]
    fn names_are_bounded() {
        let r = Roots::new();
        for i in 0..10 {
            r.add_pod(
                "ns",
                &format!("p{i}"),
                &format!("5f3c2a1e-9b8d-4c7f-a6e5-d4c3b2a19f8{i}"),
            );
        }
        let mut names = r.names();
        names.set_max_entries(4);
        let _ = names.name(&format!("/kubepods/pod{UID}"));
        assert_eq!(names.pods.len(), 4);
        names.set_refresh_interval(Duration::ZERO);
        for i in 0..10 {
            r.add_docker(&format!("{i}{}", &CID[1..]), r#"{"Name":"/x"}"#);
            let _ = names.name(&format!("/docker/{i}{}", &CID[1..]));
            assert!(names.docker.len() <= 4);
        }
    }

    #[test]
    fn names_docker() {
        let r = Roots::new();
        r.add_docker(
            CID,
            r#"{"State":{"Running":true},"Config":{"Labels":{"Name":"nope"}},"Name":"/web","MountPoints":{"/d":{"Name":"vol"}}}"#,
        );
        let mut names = r.names();
        let d = names
            .name(&format!("/system.slice/docker-{CID}.scope"))
            .unwrap();
        assert_eq!(d.kind, NameKind::Docker);
        assert_eq!(d.display, "web");
        assert_eq!(d.container_id.as_deref(), Some(CID));
        assert_eq!(
            names.name(&format!("/docker/{CID}")).unwrap().display,
            "web"
        );
        // Unknown container: short id, miss remembered until the refresh interval passes.
        assert_eq!(
            names.name(&format!("/docker/{CID2}")).unwrap().display,
            &CID2[..12]
        );
        r.add_docker(CID2, r#"{"Name":"/late"}"#);
        names.set_refresh_interval(Duration::from_secs(3600));
        assert_eq!(
            names.name(&format!("/docker/{CID2}")).unwrap().display,
            &CID2[..12]
        );
        names.set_refresh_interval(Duration::ZERO);
        assert_eq!(
            names.name(&format!("/docker/{CID2}")).unwrap().display,
            "late"
        );
    }

    #[test]
    fn names_with_missing_roots() {
        let mut names = Names::new(
            PathBuf::from("/nonexistent/log"),
            PathBuf::from("/nonexistent/docker"),
        );
        assert_eq!(
            names.name(&format!("/kubepods/pod{UID}/{CID}")),
            derive(&format!("/kubepods/pod{UID}/{CID}"))
        );
        assert_eq!(
            names.name(&format!("/docker/{CID}")),
            derive(&format!("/docker/{CID}"))
        );
    }
}
