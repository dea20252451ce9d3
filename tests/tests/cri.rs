//! Names from a real container runtime: containerd v2 with its CRI plugin (built by
//! `scripts/setup.sh` from the Go module proxy, Debian's runc underneath), driven by crictl as
//! kubelet drives it, runs a pod — its sandbox and one container — from images built here with
//! podman (`FROM scratch`, static binaries; nothing is pulled) under kubelet's cgroupfs layout
//! (`/kubepods/burstable/pod<uid>/<container id>`). No kubelet runs, so no
//! `/var/log/containers` link names a container: cgtrace must name the container and the
//! sandbox from containerd's own CRI metadata (`--containerd-state`).
use std::{fs, time::Instant};

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    cri::{Containerd, PAUSE_C, SPIN_C, image, remove_cgroup_tree, require},
    record::{cgtrace, lines, windows},
    scratch::{Scratch, path_str as s},
};
use serde_json::Value;

/// What the test made outside its scratch directory, undone on drop (also when it fails): the
/// pod stopped and removed (by containerd's drop), the pod's cgroups and log directory removed.
struct Cleanup {
    uid: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        remove_cgroup_tree(&format!("kubepods/burstable/pod{}", self.uid));
        for d in ["kubepods/burstable", "kubepods"] {
            for h in fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = fs::remove_dir(h.path().join(d));
            }
        }
        let _ = fs::remove_dir_all(format!("/var/log/pods/default_web-0_{}", self.uid));
        let _ = fs::remove_dir("/var/log/pods");
    }
}

#[test]
fn a_real_cri_pods_sandbox_and_container_are_named_from_containerd() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    require(&["containerd", "containerd-shim-runc-v2", "ctr", "crictl"])?;
    let scratch = Scratch::new("cri")?;
    let dir = scratch.0.clone();
    let pause = image(&dir, "pause", PAUSE_C, "localhost/cgtrace-pause:test")?;
    let spin = image(&dir, "spin", SPIN_C, "localhost/cgtrace-spin:test")?;
    let uid = format!(
        "{:08x}-c0de-4000-8000-{:012x}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() as u64 & 0xffff_ffff_ffff
    );
    let _cleanup = Cleanup { uid: uid.clone() };
    let node = Containerd::start(&dir, "localhost/cgtrace-pause:test")?;
    for archive in [&pause, &spin] {
        node.import(archive)?;
    }
    let pod_json = dir.join("pod.json");
    fs::write(
        &pod_json,
        serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "default", "uid": uid, "attempt": 0},
            "log_directory": format!("/var/log/pods/default_web-0_{uid}"),
            "linux": {
                "cgroup_parent": format!("/kubepods/burstable/pod{uid}"),
                "security_context": {"namespace_options": {"network": 2}}
            }
        })
        .to_string(),
    )?;
    let ctr_json = dir.join("container.json");
    fs::write(
        &ctr_json,
        serde_json::json!({
            "metadata": {"name": "main", "attempt": 0},
            "image": {"image": "localhost/cgtrace-spin:test"},
            "log_path": "main/0.log",
            "linux": {"resources": {"cpu_shares": 512, "cpu_period": 100000, "cpu_quota": 20000}}
        })
        .to_string(),
    )?;
    let pod = node
        .crictl(&["runp", s(&pod_json)])
        .map_err(|e| anyhow::anyhow!("{e}; containerd: {}", node.log()))?;
    let container = node.crictl(&["create", &pod, s(&ctr_json), s(&pod_json)])?;
    node.crictl(&["start", &container])?;

    let (code, stdout, err) = cgtrace(&[
        "stream",
        "--duration",
        "3",
        "--containerd-state",
        s(&node.state()),
    ])?;
    assert_eq!(code, 0, "{err}");
    let stream = lines(&stdout)?;
    let named = |id: &str| -> Option<(String, Value)> {
        windows(&stream)
            .iter()
            .flat_map(|w| w["cgroups"].as_array().into_iter().flatten())
            .find(|c| {
                c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(&format!("/pod{uid}/{id}")))
            })
            .map(|c| (c["name"].as_str().unwrap_or("").to_string(), c.clone()))
    };
    let (main, c) = named(&container).context("the container's cgroup in the windows")?;
    let (sandbox, _) = named(&pod).context("the sandbox's cgroup in the windows")?;
    eprintln!("containerd's pod: container {main:?}, sandbox {sandbox:?}");
    assert_eq!(main, "default/web-0/main", "{c}");
    assert_eq!(sandbox, "default/web-0/POD");
    Ok(())
}
