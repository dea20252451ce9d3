//! The container image (`scripts/setup.sh image`: a static binary FROM scratch) run as on a node:
//! host PID namespace, the host's /sys/fs/cgroup and /sys/kernel read-only, its own cgroup
//! namespace, capabilities instead of `--privileged` (the chart's, `CAP_SETPCAP` included, with
//! `--require-drop`), and the shipped seccomp profile (`deploy/seccomp/cgtrace.json`) instead of
//! `Unconfined`. Its stream names a cgroup the test made on the host by its host path, with the
//! busy workload's waits; `record --rotate --prometheus` in it serves scrapes and writes a
//! recording `report` reads.
use std::process::Command;

use anyhow::{Context, Result};
use cgtrace_tests::{
    Killed, can_trace,
    record::{cgroup_sum, cgtrace, free_port, lines, scrape, windows},
    workload::{self, cpus},
};

/// The image `scripts/setup.sh image` builds (`CGTRACE_IMAGE` names another).
fn image() -> String {
    std::env::var("CGTRACE_IMAGE").unwrap_or_else(|_| "localhost/cgtrace:latest".into())
}

/// `podman run` as on a node: host PID, UTS and network, its own cgroup namespace, the host's
/// cgroup and kernel trees read-only, the chart's capabilities and cgtrace's seccomp profile.
fn podman_run(conf: &std::path::Path, volumes: &[String], args: &[&str]) -> Command {
    let profile =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/seccomp/cgtrace.json");
    let mut c = Command::new("podman");
    c.env("CONTAINERS_CONF", conf).args([
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
        "--cap-add=BPF,PERFMON,SYS_ADMIN,DAC_READ_SEARCH,SYS_RESOURCE,SETPCAP",
        "--security-opt",
    ]);
    c.arg(format!("seccomp={}", profile.display()));
    for v in volumes {
        c.args(["-v", v]);
    }
    c.arg(image()).args(args);
    c
}

#[test]
fn the_image_traces_host_cgroups_from_its_own_cgroup_namespace() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let exists = Command::new("podman")
        .args(["image", "exists", &image()])
        .status()
        .context("podman is not installed (scripts/setup.sh installs it)")?;
    anyhow::ensure!(
        exists.success(),
        "{} is not built: run scripts/setup.sh image",
        image()
    );
    let busy = workload::busy("image-busy", cpus() + 1)?;
    // This development VM forbids raising RLIMIT_NOFILE/NPROC, which podman's default ulimits
    // do: they are turned off here (a node does not need this).
    let conf = std::env::temp_dir().join(format!("cgtrace-containers-{}.conf", std::process::id()));
    std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n")?;
    let out = podman_run(&conf, &[], &["stream", "--duration", "5", "--require-drop"]).output()?;
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

    // The chart's command: a flight recorder with metrics, under the same profile.
    let dir = std::env::temp_dir().join(format!("cgtrace-image-rec-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n")?;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut rec = Killed(
        podman_run(
            &conf,
            &[format!("{}:/var/lib/cgtrace", dir.display())],
            &[
                "record",
                "-o",
                "/var/lib/cgtrace/flight.cgtr",
                "--rotate",
                "--prometheus",
                &addr,
                "--require-drop",
                "--duration",
                "6",
            ],
        )
        .stdout(std::process::Stdio::null())
        .spawn()?,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let body = loop {
        if let Ok((_, body)) = scrape(&addr) {
            break body;
        }
        anyhow::ensure!(rec.0.try_wait()?.is_none(), "record exited before serving");
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no /metrics within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(body.contains("cgtrace_windows_total"), "{body}");
    let status = rec.0.wait()?;
    let _ = std::fs::remove_file(&conf);
    assert!(status.success(), "record in the container: {status}");
    let file = dir.join("flight.cgtr");
    let (code, report, err) = cgtrace(&["report", file.to_str().context("path")?, "--json"])?;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert!(report.contains("\"windows\""), "{report}");
    Ok(())
}
