//! Names from a cgroup path alone: Kubernetes pods and their containers (cgroupfs and systemd
//! drivers, crio's `conmon`), containers of Docker, podman, containerd/nerdctl and LXC, and
//! systemd units and sessions. The first of these that recognises the path names it.

use super::model::{Name, NameKind};

/// A derived name plus what enrichment needs to know.
pub(super) struct Parsed {
    pub name: Name,
    /// The cgroup is crio's/podman's `conmon` monitor of the container, not the container.
    pub conmon: bool,
}

/// The name of cgroup `path` (relative to its hierarchy's mount), if a layout recognises it.
pub(super) fn parse(path: &str) -> Option<Parsed> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    kubernetes(&comps)
        .or_else(|| container(&comps))
        .or_else(|| systemd(&comps))
}

const SHORT_ID: usize = 12;

/// A container's short name: the first 12 digits of its id, after `conmon-` for its monitor.
fn container_display(cid: &str, conmon: bool) -> String {
    let short: String = cid.chars().take(SHORT_ID).collect();
    if conmon {
        format!("conmon-{short}")
    } else {
        short
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A full container id: 64 hex digits.
pub(super) fn is_container_id(s: &str) -> bool {
    s.len() == 64 && is_hex(s)
}

/// A pod uid: a UUID with `sep` as separator, or a 32-hex static-pod hash.
pub(super) fn is_pod_uid(s: &str, sep: u8) -> bool {
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
            Some((cid, _, conmon)) => (
                NameKind::Container,
                container_display(&cid, conmon),
                Some(cid),
                conmon,
            ),
            None => (NameKind::Pod, format!("pod{uid}"), None, false),
        };
        return Some(Parsed {
            name: Name {
                pod_uid: Some(uid),
                container_id,
                qos: Some(qos.to_string()),
                ..Name::of(kind, display)
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
            let kind = if docker {
                NameKind::Docker
            } else {
                NameKind::Container
            };
            let display = container_display(&cid, conmon);
            return Some(Parsed {
                name: Name {
                    container_id: Some(cid),
                    ..Name::of(kind, display)
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
                name: Name::of(NameKind::Container, n.to_string()),
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
        name: Name::of(kind, display),
        conmon: false,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{derive, test_ids::*};
    use super::*;

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
            pod_uid: Some(uid.to_string()),
            qos: Some(qos.to_string()),
            ..Name::of(NameKind::Pod, format!("pod{uid}"))
        }
    }

    fn pod_container(uid: &str, qos: &str, cid: &str) -> Name {
        Name {
            pod_uid: Some(uid.to_string()),
            qos: Some(qos.to_string()),
            ..other_container(NameKind::Container, cid)
        }
    }

    fn unit(kind: NameKind, display: &str) -> Name {
        Name::of(kind, display.to_string())
    }

    fn other_container(kind: NameKind, cid: &str) -> Name {
        Name {
            container_id: Some(cid.to_string()),
            ..Name::of(kind, cid[..12].to_string())
        }
    }

    /// Each path names container [`CID`] of `kind` (outside Kubernetes).
    fn contain(kind: NameKind, paths: &[String]) {
        for p in paths {
            assert_eq!(n(p), other_container(kind, CID), "{p}");
        }
    }

    /// In QoS class `qos`: each of `pods` names pod [`UID`], each of `containers` its container
    /// [`CID`].
    fn k8s(qos: &str, pods: &[String], containers: &[String]) {
        for p in pods {
            assert_eq!(n(p), pod(UID, qos), "{p}");
        }
        for p in containers {
            assert_eq!(n(p), pod_container(UID, qos, CID), "{p}");
        }
    }

    #[test]
    fn k8s_cgroupfs_guaranteed_pod_and_container() {
        k8s(
            "guaranteed",
            &[format!("/kubepods/pod{UID}")],
            &[format!("/kubepods/pod{UID}/{CID}")],
        );
    }

    #[test]
    fn k8s_cgroupfs_burstable_and_besteffort() {
        k8s(
            "burstable",
            &[],
            &[format!("/kubepods/burstable/pod{UID}/{CID}")],
        );
        k8s(
            "besteffort",
            &[format!("/kubepods/besteffort/pod{UID}")],
            // crio with the cgroupfs driver prefixes the id.
            &[format!("/kubepods/besteffort/pod{UID}/crio-{CID}")],
        );
    }

    #[test]
    fn k8s_cgroupfs_under_a_prefix_and_static_pod() {
        // kubelet --cgroup-root, or kind/k3s nodes running inside Docker.
        k8s(
            "burstable",
            &[],
            &[format!("/kubelet/kubepods/burstable/pod{UID}/{CID}")],
        );
        k8s(
            "guaranteed",
            &[],
            &[format!("/docker/{CID2}/kubepods/pod{UID}/{CID}")],
        );
        derives(&[(
            &format!("/kubepods/burstable/pod{STATIC_UID}"),
            pod(STATIC_UID, "burstable"),
        )]);
    }

    #[test]
    fn k8s_systemd_driver() {
        let base = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_US}.slice"
        );
        let runtimes = ["cri-containerd", "crio", "docker"];
        k8s(
            "burstable",
            std::slice::from_ref(&base),
            &runtimes.map(|r| format!("{base}/{r}-{CID}.scope")),
        );
        k8s(
            "guaranteed",
            &[],
            &[format!(
                "/kubepods.slice/kubepods-pod{UID_US}.slice/cri-containerd-{CID}.scope"
            )],
        );
        k8s(
            "besteffort",
            &[format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_US}.slice"
            )],
            // kind node with the systemd driver, nested in a Docker container.
            &[format!(
                "/system.slice/docker-{CID2}.scope/kubelet.slice/kubelet-kubepods.slice/\
                 kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_US}.slice/\
                 cri-containerd-{CID}.scope"
            )],
        );
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
        contain(
            NameKind::Docker,
            &[
                format!("/docker/{CID}"),
                format!("/system.slice/docker-{CID}.scope"),
                // Docker in Docker: the innermost container.
                format!("/docker/{CID2}/docker/{CID}"),
            ],
        );
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
        contain(
            NameKind::Container,
            &[
                format!("/machine.slice/libpod-{CID}.scope"),
                format!("/machine.slice/libpod-{CID}.scope/container"),
                format!("/system.slice/nerdctl-{CID}.scope"),
                // containerd namespaces with the cgroupfs driver (`/default/<id>`), BuildKit, ...
                format!("/default/{CID}"),
            ],
        );
        let conmon = n(&format!("/machine.slice/libpod-conmon-{CID}.scope"));
        assert_eq!(conmon.display, format!("conmon-{}", &CID[..12]));
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
}
