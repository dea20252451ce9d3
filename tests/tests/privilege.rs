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

/// The chart's capability list (`securityContext.capabilities` in values.yaml), as setpriv
/// names them.
fn chart_caps() -> Result<Vec<String>> {
    let values = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/cgtrace/values.yaml"),
    )?;
    let list = values
        .lines()
        .find_map(|l| l.trim().strip_prefix("capabilities: ["))
        .and_then(|l| l.strip_suffix(']'))
        .context("no `capabilities: [...]` in values.yaml")?;
    Ok(list.split(',').map(|c| c.trim().to_lowercase()).collect())
}

/// `cgtrace ARGS` as root with only `caps` (bounding set, hence permitted and effective).
fn with_caps(caps: &[String], args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!(
        "--bounding-set=-all,{}",
        caps.iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(",")
    ))
    .arg("--")
    .arg(cgtrace_bin())
    .args(args);
    c
}

/// A field of /proc/PID/task/TID/status as a number (hex for the capability sets).
fn status_field(status: &str, name: &str) -> Result<u64> {
    let v = status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .with_context(|| format!("no {name}"))?
        .trim();
    Ok(if name.starts_with("Cap") {
        u64::from_str_radix(v, 16)?
    } else {
        v.parse()?
    })
}

/// Every thread of `pid`: CapBnd, CapPrm and CapEff hold only the kept two, nothing inheritable
/// or ambient, and NoNewPrivs is set.
fn assert_locked(pid: u32, what: &str) -> Result<()> {
    let kept = (1u64 << CAP_BPF) | (1 << CAP_DAC_READ_SEARCH);
    let mut threads = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let e = e?;
        let status = std::fs::read_to_string(e.path().join("status"))?;
        let tid = e.file_name().to_string_lossy().into_owned();
        for set in ["CapBnd", "CapPrm", "CapEff"] {
            let v = status_field(&status, set)?;
            assert_eq!(v & !kept, 0, "{what}: thread {tid} {set} {v:016x}");
        }
        for set in ["CapInh", "CapAmb"] {
            assert_eq!(status_field(&status, set)?, 0, "{what}: thread {tid} {set}");
        }
        assert_eq!(
            status_field(&status, "NoNewPrivs")?,
            1,
            "{what}: thread {tid}"
        );
        eprintln!(
            "{what}: thread {tid} CapBnd {:016x} CapEff {:016x} NoNewPrivs 1",
            status_field(&status, "CapBnd")?,
            status_field(&status, "CapEff")?
        );
        threads += 1;
    }
    assert!(threads >= 2, "{what}: {threads} threads");
    Ok(())
}

/// Waits until `/metrics` answers on `addr` (the daemon has attached and dropped by then).
fn serving(child: &mut Child, addr: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((_, body)) = scrape(addr) {
            return Ok(body);
        }
        anyhow::ensure!(child.try_wait()?.is_none(), "cgtrace exited before serving");
        anyhow::ensure!(Instant::now() < deadline, "no /metrics within 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn serve_and_record_under_the_charts_capabilities_lock_the_bounding_set_and_no_new_privs()
-> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let caps = chart_caps()?;
    assert!(caps.contains(&"setpcap".to_string()), "{caps:?}");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut serve = cgtrace_tests::Killed(
        with_caps(
            &caps,
            &[
                "serve",
                "--prometheus",
                &addr,
                "--require-drop",
                "--duration",
                "30",
            ],
        )
        .spawn()?,
    );
    let body = serving(&mut serve.0, &addr)?;
    assert!(body.contains("cgtrace_windows_total"), "{body}");
    assert_locked(serve.0.id(), "serve")?;
    drop(serve);

    let dir = std::env::temp_dir().join(format!("cgtrace-priv-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("flight.cgtr");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut record = cgtrace_tests::Killed(
        with_caps(
            &caps,
            &[
                "record",
                "-o",
                file.to_str().context("path")?,
                "--rotate",
                "--prometheus",
                &addr,
                "--require-drop",
                "--duration",
                "30",
            ],
        )
        .spawn()?,
    );
    serving(&mut record.0, &addr)?;
    assert_locked(record.0.id(), "record")?;
    drop(record);
    let _ = std::fs::remove_dir_all(&dir);

    // Without CAP_SETPCAP the bounding set cannot be trimmed: --require-drop exits 1 with one
    // line that says what to grant.
    let without: Vec<String> = caps.into_iter().filter(|c| c != "setpcap").collect();
    let addr = format!("127.0.0.1:{}", free_port()?);
    let out = with_caps(
        &without,
        &[
            "serve",
            "--prometheus",
            &addr,
            "--require-drop",
            "--duration",
            "20",
        ],
    )
    .stdout(Stdio::null())
    .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("without CAP_SETPCAP: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.starts_with("cgtrace: error: serve: could not drop capabilities")
            && last.contains("CAP_SETPCAP"),
        "{err}"
    );
    assert!(err.ends_with('\n'));
    Ok(())
}
