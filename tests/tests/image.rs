//! The container image (`scripts/setup.sh image`: a static binary FROM scratch) run as on a node:
//! host PID namespace, the host's /sys/fs/cgroup and /sys/kernel read-only, its own cgroup
//! namespace, capabilities instead of `--privileged`. Its stream names a cgroup the test made on
//! the host by its host path, with the busy workload's waits.
use std::process::Command;

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    record::{cgroup_sum, lines, windows},
    workload::{self, cpus},
};

const IMAGE: &str = "localhost/cgtrace:latest";

#[test]
fn the_image_traces_host_cgroups_from_its_own_cgroup_namespace() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let exists = Command::new("podman")
        .args(["image", "exists", IMAGE])
        .status()
        .context("podman is not installed (scripts/setup.sh installs it)")?;
    anyhow::ensure!(
        exists.success(),
        "{IMAGE} is not built: run scripts/setup.sh image"
    );
    let busy = workload::busy("image-busy", cpus() + 1)?;
    // This development VM forbids raising RLIMIT_NOFILE/NPROC, which podman's default ulimits
    // do: they are turned off here (a node does not need this).
    let conf = std::env::temp_dir().join(format!("cgtrace-containers-{}.conf", std::process::id()));
    std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n")?;
    let out = Command::new("podman")
        .env("CONTAINERS_CONF", &conf)
        .args([
            "--runtime",
            "runc",
            "run",
            "--rm",
            "--pid=host",
            "--uts=host",
            "--network=host",
            "--cgroupns=private",
            "-v",
            "/sys/fs/cgroup:/sys/fs/cgroup:ro",
            "-v",
            "/sys/kernel:/sys/kernel:ro",
            "--cap-add=BPF,PERFMON,SYS_ADMIN,DAC_READ_SEARCH,SYS_RESOURCE",
            "--security-opt",
            "seccomp=unconfined",
            IMAGE,
            "stream",
            "--duration",
            "5",
        ])
        .output()?;
    let _ = std::fs::remove_file(&conf);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "podman run failed: {err}");
    let stream = lines(&String::from_utf8_lossy(&out.stdout))?;
    assert_eq!(stream[0]["type"], "hello", "{err}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    assert_eq!(
        stream[0]["host"],
        host.trim(),
        "--uts=host: the node's name"
    );
    let waits = cgroup_sum(&windows(&stream), &busy.rel, "/runq/count");
    eprintln!("{}: {waits} waits seen from the container", busy.rel);
    assert!(
        waits > 100,
        "the container names the host cgroup {} by its host path",
        busy.rel
    );
    Ok(())
}
