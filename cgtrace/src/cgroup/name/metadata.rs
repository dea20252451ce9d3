//! Names from metadata on disk: Kubernetes namespace, pod and container names from kubelet's log
//! directories, or from containerd's CRI annotations where those have no link (the sandbox, a
//! container kubelet did not start), Docker container names from Docker's per-container
//! `config.v2.json`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{
    model::{Name, NameKind, Parts},
    path::{Parsed, is_container_id, is_pod_uid, parse},
};

/// Default time between rescans of the name sources.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5);
/// Default bound on remembered pods, containers and Docker names (each).
pub const DEFAULT_MAX_ENTRIES: usize = 16384;
/// containerd's default state directory (k3s: `/run/k3s/containerd`).
pub const DEFAULT_CONTAINERD_STATE: &str = "/run/containerd";
/// The container name given to a pod's sandbox (pause) container, as kubelet named it in Docker
/// (`k8s_POD_…`) and crictl lists it.
pub const SANDBOX_CONTAINER: &str = "POD";
/// Bytes of a CRI bundle's `config.json` read at most (an OCI spec is a few KiB).
const MAX_SPEC_BYTES: u64 = 1 << 20;

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
/// - container id → container from `<log_root>/containers/<pod>_<namespace>_<container>-<id>.log`,
///   else from the CRI annotations of containerd's bundle,
///   `<containerd_state>/io.containerd.runtime.v2.task/k8s.io/<id>/config.json`
///   (`io.kubernetes.cri.container-name`, `…sandbox-name`, `…sandbox-namespace`; a sandbox is
///   named [`SANDBOX_CONTAINER`]);
/// - Docker container id → name from `<docker_root>/containers/<id>/config.v2.json`.
///
/// Kubernetes directories are rescanned on a miss, at most once per refresh interval; Docker
/// configs and CRI bundles are read per container on a miss and remembered (misses for one
/// refresh interval).
pub struct Names {
    log_root: PathBuf,
    docker_root: PathBuf,
    containerd_state: PathBuf,
    refresh: Duration,
    max_entries: usize,
    last_scan: Option<Instant>,
    pods: HashMap<String, PodRef>,
    containers: HashMap<String, ContainerRef>,
    /// Docker id → name (`None`: not found, retried after `refresh`), and when read.
    docker: HashMap<String, (Option<String>, Instant)>,
    /// Container id → its CRI names, as `docker`.
    cri: HashMap<String, (Option<ContainerRef>, Instant)>,
}

impl Names {
    /// `log_root` is kubelet's log root (`/var/log`), `docker_root` Docker's data root
    /// (`/var/lib/docker`).
    pub fn new(log_root: PathBuf, docker_root: PathBuf) -> Names {
        Names {
            log_root,
            docker_root,
            containerd_state: PathBuf::from(DEFAULT_CONTAINERD_STATE),
            refresh: DEFAULT_REFRESH,
            max_entries: DEFAULT_MAX_ENTRIES,
            last_scan: None,
            pods: HashMap::new(),
            containers: HashMap::new(),
            docker: HashMap::new(),
            cri: HashMap::new(),
        }
    }

    /// containerd's state directory, whose CRI bundles name containers without a log link
    /// (default [`DEFAULT_CONTAINERD_STATE`]).
    pub fn set_containerd_state(&mut self, dir: PathBuf) {
        self.containerd_state = dir;
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
        let cri = match &cid {
            Some(c) if !self.containers.contains_key(c) => self.cri_ref(c),
            _ => None,
        };
        if let Some(c) = cid
            .as_ref()
            .and_then(|c| self.containers.get(c))
            .or(cri.as_ref())
        {
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

    /// The CRI names of container `cid` from its containerd bundle's annotations.
    fn cri_ref(&mut self, cid: &str) -> Option<ContainerRef> {
        let path = self
            .containerd_state
            .join("io.containerd.runtime.v2.task/k8s.io")
            .join(cid)
            .join("config.json");
        remembered(&mut self.cri, cid, self.refresh, self.max_entries, || {
            read_bounded(&path).and_then(|text| cri_annotations(&text))
        })
    }

    fn docker_name(&mut self, cid: &str) -> Option<String> {
        let path = self
            .docker_root
            .join("containers")
            .join(cid)
            .join("config.v2.json");
        remembered(
            &mut self.docker,
            cid,
            self.refresh,
            self.max_entries,
            || {
                fs::read_to_string(path)
                    .ok()
                    .and_then(|text| config_name(&text))
                    .map(|n| n.trim_start_matches('/').to_string())
                    .filter(|n| !n.is_empty())
            },
        )
    }
}

/// A per-container lookup remembered in `cache`: a hit is kept, a miss for `refresh`, then
/// `read` again. Past `max` entries the misses go first, then everything.
fn remembered<T: Clone>(
    cache: &mut HashMap<String, (Option<T>, Instant)>,
    cid: &str,
    refresh: Duration,
    max: usize,
    read: impl FnOnce() -> Option<T>,
) -> Option<T> {
    if let Some((v, at)) = cache.get(cid)
        && (v.is_some() || at.elapsed() < refresh)
    {
        return v.clone();
    }
    let v = read();
    if cache.len() >= max {
        cache.retain(|_, (v, _)| v.is_some());
        if cache.len() >= max {
            cache.clear();
        }
    }
    cache.insert(cid.to_string(), (v.clone(), Instant::now()));
    v
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

/// At most [`MAX_SPEC_BYTES`] of the file at `path`, as text.
fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    fs::File::open(path)
        .ok()?
        .take(MAX_SPEC_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The names in the CRI annotations of an OCI spec (containerd's bundle `config.json`): the
/// sandbox's namespace and name, and the container's name ([`SANDBOX_CONTAINER`] for the sandbox
/// itself). `None` when the text is not such a spec.
fn cri_annotations(text: &str) -> Option<ContainerRef> {
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(default)]
        annotations: HashMap<String, String>,
    }
    let spec: Spec = serde_json::from_str(text).ok()?;
    let get = |k: &str| {
        spec.annotations
            .get(&format!("io.kubernetes.cri.{k}"))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let container = match get("container-type")?.as_str() {
        "sandbox" => SANDBOX_CONTAINER.to_string(),
        "container" => get("container-name")?,
        _ => return None,
    };
    Some(ContainerRef {
        namespace: get("sandbox-namespace")?,
        pod: get("sandbox-name")?,
        container,
    })
}

/// The `Name` of a Docker `config.v2.json` (`/web`): the top-level one only (volumes, networks
/// and labels have names of their own, nested), and only a string. `None` when the text is not
/// a JSON object.
fn config_name(text: &str) -> Option<String> {
    let config: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    config.get("Name")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::super::{derive, test_ids::*};
    use super::*;

    /// A Docker `config.v2.json` as Docker writes it (abridged), with `Name`s nested at every
    /// depth and in strings.
    const DOCKER_CONFIG: &str = r#"{"StreamConfig":{},"State":{"Running":true,"Name":"bad"},
        "Config":{"Labels":{"Name":"label","x":"\"Name\":\"esc\""}},
        "Args":["Name",{"Name":"arr"}],
        "NetworkSettings":{"Networks":{"bridge":{"Name":"net"}}},
        "Name" : "/web\u0031",
        "MountPoints":{"/data":{"Name":"vol"}}}"#;

    /// The top-level `Name` and nothing else; `None` for text that is not a JSON object or whose
    /// `Name` is not a string. The hand-written scanner serde_json replaced answered the same
    /// but on the last rows: it took a name it reached before the text went wrong, the first of
    /// two (Go's encoding/json, which Docker reads the file with, takes the last), and the halves
    /// of a surrogate pair as two U+FFFD.
    #[test]
    fn config_name_is_the_top_level_string() {
        for (text, want) in [
            (DOCKER_CONFIG, Some("/web1")),
            (r#"{"N\u0061me":"/esc"}"#, Some("/esc")),
            (r#"{"Name":""}"#, Some("")),
            (r#"{"A":1}"#, None),
            (r#"{"Name":5}"#, None),
            (r#"{"Name":null}"#, None),
            (r#"{"Name":{"Name":"/x"}}"#, None),
            (r#"{"Name":"/a"#, None),
            (r#"{"Name" "/a"}"#, None),
            (r#"{"A":"x","#, None),
            (r#"["Name","/a"]"#, None),
            (r#"[{"Name":"/a"}]"#, None),
            (r#""Name""#, None),
            ("", None),
            ("{", None),
            ("}", None),
            ("not json", None),
            // Malformed after the name: the old scanner answered Some("/a").
            (r#"{"Name":"/a""#, None),
            (r#"{"Name":"/a",}"#, None),
            (r#"{"Name":"/a"} trailing"#, None),
            (r#"{"Name":"/a\q"}"#, None),
            (r#"{"Name":"/a","X":1e400}"#, None),
            ("\u{feff}{\"Name\":\"/a\"}", None),
            // The old scanner: Some("/a") and Some("/\u{fffd}\u{fffd}").
            (r#"{"Name":"/a","Name":"/b"}"#, Some("/b")),
            (r#"{"Name":"/\ud83d\ude00"}"#, Some("/\u{1f600}")),
        ] {
            assert_eq!(config_name(text).as_deref(), want, "{text}");
        }
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
        /// A containerd CRI bundle for `cid` whose spec is `json`.
        fn add_cri(&self, cid: &str, json: &str) {
            let d = self.dir.path().join(format!(
                "containerd/io.containerd.runtime.v2.task/k8s.io/{cid}"
            ));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("config.json"), json).unwrap();
        }
        fn add_docker(&self, cid: &str, json: &str) {
            let d = self.dir.path().join(format!("docker/containers/{cid}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("config.v2.json"), json).unwrap();
        }
    }

    /// Containers without a log link are named from containerd's CRI annotations: the sandbox
    /// as `POD`, a container by its name; a bundle that is not a CRI spec names nothing.
    #[test]
    fn containers_without_a_log_link_are_named_from_cri_annotations() {
        let r = Roots::new();
        r.add_pod("default", "web-0", UID);
        let spec = |kind: &str, name: &str| {
            format!(
                r#"{{"ociVersion":"1.2.0","process":{{"args":["/pause"]}},"annotations":{{
                "io.kubernetes.cri.container-type":"{kind}",{name}
                "io.kubernetes.cri.sandbox-name":"web-0",
                "io.kubernetes.cri.sandbox-namespace":"default",
                "io.kubernetes.cri.sandbox-uid":"{UID}"}}}}"#
            )
        };
        r.add_cri(CID, &spec("sandbox", ""));
        r.add_cri(
            CID2,
            &spec("container", r#""io.kubernetes.cri.container-name":"main","#),
        );
        let mut names = r.names();
        names.set_containerd_state(r.dir.path().join("containerd"));
        let base = format!("/kubepods/burstable/pod{UID}");
        let sandbox = names.name(&format!("{base}/{CID}")).unwrap();
        assert_eq!(sandbox.display, "default/web-0/POD");
        let main = names.name(&format!("{base}/{CID2}")).unwrap();
        assert_eq!(main.display, "default/web-0/main");
        assert_eq!(main.labels().container.as_deref(), Some("main"));
        assert!(!main.container_unmatched);
        // Not a CRI spec, or no bundle: the pod and a short id, as before.
        for (i, text) in [
            "{}",
            "not json",
            r#"{"annotations":{"io.kubernetes.cri.container-type":"sandbox"}}"#,
        ]
        .into_iter()
        .enumerate()
        {
            let cid = format!("{:064x}", i + 1);
            r.add_cri(&cid, text);
            let n = names.name(&format!("{base}/{cid}")).unwrap();
            assert_eq!(n.display, format!("default/web-0/{}", &cid[..12]), "{text}");
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
