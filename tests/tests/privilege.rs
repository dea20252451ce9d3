//! Least privilege on the real kernel: once attached, every thread of the running daemon
//! (`stream`, `record`, `serve`) has dropped `CAP_SYS_ADMIN` and every capability but `CAP_BPF`
//! and `CAP_DAC_READ_SEARCH`, and goes on working (windows keep coming, scrapes answer). The
//! rest of the privileged suite runs against the same dropped daemon.
use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    record::{free_port, scrape},
    stream::cgtrace_bin,
};

const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Every thread's effective capability set.
fn thread_caps(pid: u32) -> Result<Vec<(u32, u64)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let e = e?;
        let tid: u32 = e.file_name().to_string_lossy().parse()?;
        let status = std::fs::read_to_string(e.path().join("status"))?;
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .context("CapEff")?;
        out.push((tid, u64::from_str_radix(eff.trim(), 16)?));
    }
    Ok(out)
}

fn assert_dropped(pid: u32, what: &str) -> Result<()> {
    let caps = thread_caps(pid)?;
    assert!(!caps.is_empty());
    for (tid, eff) in caps {
        eprintln!("{what}: thread {tid} CapEff {eff:016x}");
        assert_eq!(
            eff & (1 << CAP_SYS_ADMIN),
            0,
            "{what}: thread {tid} kept CAP_SYS_ADMIN"
        );
        assert_eq!(
            eff & !((1 << CAP_BPF) | (1 << CAP_DAC_READ_SEARCH)),
            0,
            "{what}: thread {tid} kept more than CAP_BPF and CAP_DAC_READ_SEARCH: {eff:x}"
        );
    }
    Ok(())
}

/// Starts `cgtrace ARGS` and waits for its first window line on stdout.
fn started(args: &[&str]) -> Result<(Child, std::io::Lines<BufReader<std::process::ChildStdout>>)> {
    let mut child = Command::new(cgtrace_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        anyhow::ensure!(Instant::now() < deadline, "no window within 30 s");
        let l = lines.next().context("stdout closed before a window")??;
        if l.contains("\"type\":\"window\"") {
            return Ok((child, lines));
        }
    }
}

#[test]
fn the_running_daemon_keeps_only_bpf_and_dac_read_search() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    // stream with metrics: every thread dropped, and it keeps streaming and serving.
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let (mut child, mut lines) = started(&[
        "stream",
        "--duration",
        "20",
        "--prometheus",
        &addr,
        "--reads-mode",
        "syscall",
    ])?;
    assert_dropped(child.id(), "stream")?;
    let mut windows = 0;
    while windows < 3 {
        let l = lines.next().context("stream ended")??;
        windows += usize::from(l.contains("\"type\":\"window\""));
    }
    let (_, body) = scrape(&addr)?;
    assert!(body.contains("cgtrace_windows_total"), "{body}");
    assert_dropped(child.id(), "stream, later")?;
    let _ = child.kill();
    let _ = child.wait();

    // record --stream: the same.
    let dir = std::env::temp_dir().join(format!("cgtrace-priv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("r.cgtr");
    let (mut child, _lines) = started(&[
        "record",
        "-o",
        file.to_str().context("path")?,
        "--duration",
        "20",
        "--stream",
    ])?;
    assert_dropped(child.id(), "record")?;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    // The hello says what is kept, and so does doctor.
    let out = Command::new(cgtrace_bin())
        .args(["stream", "--duration", "1"])
        .output()?;
    let hello = String::from_utf8_lossy(&out.stdout);
    let hello = hello.lines().next().context("hello")?;
    assert!(
        hello.contains(r#""kept_capabilities":["CAP_BPF","CAP_DAC_READ_SEARCH"]"#),
        "{hello}"
    );
    let doctor = Command::new(cgtrace_bin()).arg("doctor").output()?;
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor.contains("keeps CAP_BPF, CAP_DAC_READ_SEARCH and drops every other capability"),
        "{doctor}"
    );
    Ok(())
}
