//! Incident artifacts on the real kernel: a recording of real load whose tenants name their
//! processes and cgroups with escape sequences, its HTML report opened in a real headless
//! Chromium, its text report and replay escaped; recordings that cannot be trusted (garbage,
//! sparse, FIFOs) read in bounded memory; a link planted where the recorder's next part goes.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    cgroup::TestCgroup,
    chromium,
    record::{cgtrace, lines, replay_stream},
    scratch::{Scratch, path_str as s},
    stream::cgtrace_bin,
    workload::{self, cpus},
};
use serde_json::Value;

/// What a tenant may put in a name: a terminal escape (colour, title), a bell, a bidi override.
const EVIL: &str = "\u{1b}[7m\u{7}\u{202e}";

/// No raw escape, bell or bidi override in `text` (what `what` printed).
fn assert_clean(text: &str, what: &str) {
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(
            !text.contains(bad),
            "{what} shows {bad:?} raw: {}",
            &text[text.find(bad).unwrap().saturating_sub(80)..][..120.min(text.len())]
        );
    }
}

/// The `slow_read` lines, sorted, as strings.
fn slow_reads(lines: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] == "slow_read")
        .map(Value::to_string)
        .collect();
    v.sort();
    v
}

#[test]
fn html_report_of_a_real_recording_renders_in_chromium_and_tenant_names_are_escaped() -> Result<()>
{
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("artifacts")?;
    let file = scratch.file("incident.cgtr");
    let busy = TestCgroup::new("art-busy")?;
    // A cgroup named with escape sequences, under a quota, with a reader named likewise.
    let evil = TestCgroup::new(&format!("art-{EVIL}"))?;
    evil.set_quota(20_000, 100_000)?;
    let _busy = workload::spin(cpus() + 1, &busy.procs_file(), None)?;
    let _thr = workload::spin(2, &evil.procs_file(), None)?;
    // v1 with cpuacct mounted apart: the same cgroup there too, as container runtimes make it,
    // so the report has the CPU use to draw against the quota.
    let acct = Path::new("/sys/fs/cgroup/cpuacct");
    let _evil_acct = if acct.join("cpuacct.usage").exists() && !evil.dir.starts_with(acct) {
        let c = TestCgroup::at(acct, &evil.rel)?;
        fs::write(c.procs_file(), _thr.pid().to_string())?;
        Some(c)
    } else {
        None
    };
    let comm = format!("rd{EVIL}x");
    let mut reader = Command::new(workload::bin("reader"))
        .args([
            "--file",
            s(&evil.dir.join("cpu.stat")),
            "--count",
            "100000",
            "--interval-ms",
            "20",
            "--comm",
            &comm,
            "--cgroup",
            s(&evil.dir),
            "--quiet",
        ])
        .stdout(Stdio::null())
        .spawn()?;
    let (code, out, err) = cgtrace(&[
        "record",
        "-o",
        s(&file),
        "--duration",
        "8",
        "--stream",
        "--events",
        "--event-min-ms",
        "4",
        "--reads-mode",
        "syscall",
        "--slow-read-ms",
        "0.01",
    ])?;
    let _ = reader.kill();
    let _ = reader.wait();
    assert_eq!(code, 0, "record failed: {err}");
    assert_clean(&out, "the live stream");
    let live = lines(&out)?;

    // replay --stream: the same slow_read lines as live (file names recorded), escaped the same.
    let (rcode, replayed, rerr) = replay_stream(&file, &["--events"])?;
    assert_eq!(rcode, 0, "{rerr}");
    let (ls, rs) = (slow_reads(&live), slow_reads(&replayed));
    assert!(
        ls.iter().any(|l| l.contains("cpu.stat")),
        "the reader's slow reads were streamed live"
    );
    assert_eq!(
        ls, rs,
        "replay prints the slow reads the live stream printed"
    );
    let (_, raw_replay, _) = cgtrace(&["replay", s(&file), "--stream", "--events"])?;
    assert_clean(&raw_replay, "replay --stream");
    // Escaped on the wire, not altered: the JSON values are the tenant's own strings.
    assert!(
        replayed
            .iter()
            .any(|l| l["type"] == "slow_read" && l["comm"].as_str() == Some(comm.as_str())),
        "the reader's comm comes back intact from the JSON"
    );
    assert!(
        replayed
            .iter()
            .filter(|l| l["type"] == "window")
            .flat_map(|w| w["cgroups"].as_array().into_iter().flatten())
            .any(|c| c["path"] == evil.rel.as_str()),
        "the escaped cgroup's path comes back intact"
    );

    // The text report: escaped, with the escapes visible.
    let (code, text, err) = cgtrace(&["report", s(&file)])?;
    assert_eq!(code, 0, "{err}");
    assert_clean(&text, "report");
    assert!(text.contains("art-\\x1b[7m\\x07\\u{202e}"), "{text}");

    // The HTML report, opened in Chromium.
    let html = scratch.file("incident.html");
    let (code, _, err) = cgtrace(&["report", s(&file), "--html", "-o", s(&html)])?;
    assert_eq!(code, 0, "{err}");
    let page = fs::read_to_string(&html)?;
    assert_clean(&page, "report --html");
    assert!(!page.contains("<script"), "no script");
    assert!(
        !page.contains("src=\"http") && !page.contains("href=\"http"),
        "nothing to fetch"
    );
    let dom = chromium::dom(&html)?;
    assert!(dom.contains(&busy.rel), "the DOM names the busy cgroup");
    assert!(
        dom.matches("class=\"heatmap\"").count() >= 2,
        "host and cgroup heatmaps"
    );
    assert!(dom.contains("<svg"), "pictures");
    assert!(dom.contains("CFS throttling") && dom.contains("Who burned the quota"));
    assert!(
        dom.contains("art-\\x1b[7m\\x07\\u{202e}"),
        "the escaped name is shown escaped"
    );
    let shot = scratch.file("shot.png");
    chromium::screenshot(&html, &shot)?;
    let png = fs::read(&shot)?;
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a rendered page"
    );
    if let Some(keep) = std::env::var_os("CGTRACE_KEEP_REPORT") {
        fs::copy(&html, Path::new(&keep).with_extension("html"))?;
        fs::copy(&shot, Path::new(&keep).with_extension("png"))?;
    }
    Ok(())
}

/// Runs `cgtrace report FILE`; returns (exit code, stderr, peak RSS in KiB, time taken).
fn report_rss(file: &Path) -> Result<(i32, String, i64, Duration)> {
    let t = Instant::now();
    let child = Command::new(cgtrace_bin())
        .args(["report", s(file)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.context("stderr")?;
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err)?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    anyhow::ensure!(r == pid, "wait4");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok((code, err, ru.ru_maxrss, t.elapsed()))
}

/// A real recording's header (magic, version, hello) for forged files.
fn real_header(dir: &Path) -> Result<Vec<u8>> {
    let f = dir.join("tiny.cgtr");
    let (code, _, err) = cgtrace(&[
        "record",
        "-o",
        s(&f),
        "--duration",
        "1",
        "--reads-mode",
        "off",
    ])?;
    anyhow::ensure!(code == 0, "record: {err}");
    let b = fs::read(&f)?;
    let hello_len = u32::from_le_bytes(b[16..20].try_into()?) as usize;
    Ok(b[..24 + hello_len].to_vec())
}

#[test]
fn a_gigabyte_of_garbage_or_holes_is_read_in_bounded_memory_and_a_fifo_is_refused() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("bounded")?;
    let header = real_header(&scratch.0)?;
    const GIB: u64 = 1 << 30;
    // 1 GiB of random bytes, alone and behind a real header.
    let garbage = scratch.file("garbage");
    let status = Command::new("head")
        .args(["-c", &GIB.to_string(), "/dev/urandom"])
        .stdout(fs::File::create(&garbage)?)
        .status()?;
    anyhow::ensure!(status.success());
    let behind = scratch.file("header-then-garbage");
    {
        let mut f = fs::File::create(&behind)?;
        std::io::Write::write_all(&mut f, &header)?;
        let mut g = fs::File::open(&garbage)?;
        std::io::copy(&mut g, &mut f)?;
    }
    // 1 GiB sparse files: all hole, and a real header then hole.
    let sparse = scratch.file("sparse");
    fs::File::create(&sparse)?.set_len(GIB)?;
    let sparse_behind = scratch.file("header-then-sparse");
    {
        let mut f = fs::File::create(&sparse_behind)?;
        std::io::Write::write_all(&mut f, &header)?;
        f.set_len(GIB)?;
    }
    for (f, says) in [
        (&garbage, "not a cgtrace recording"),
        (&sparse, "not a cgtrace recording"),
        (&behind, "no readable window"),
        (&sparse_behind, "no readable window"),
    ] {
        let (code, err, rss_kib, took) = report_rss(f)?;
        eprintln!(
            "{}: exit {code}, peak RSS {} MiB, {:.1} s: {}",
            f.display(),
            rss_kib / 1024,
            took.as_secs_f64(),
            err.trim_end()
        );
        assert_ne!(code, 0);
        assert!(err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.ends_with('\n'));
        assert!(rss_kib < 256 * 1024, "peak RSS {rss_kib} KiB");
    }
    // A FIFO with no writer: refused at once, not waited on.
    let fifo = scratch.file("fifo");
    let c = std::ffi::CString::new(s(&fifo))?;
    // SAFETY: a valid NUL-terminated path.
    anyhow::ensure!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0, "mkfifo");
    let t = Instant::now();
    let (code, _, err) = cgtrace(&["report", s(&fifo)])?;
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_ne!(code, 0);
    assert!(
        err.contains("FIFO") && err.contains("regular file"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    Ok(())
}

#[test]
fn a_link_planted_where_the_next_part_goes_is_left_alone_and_the_recorder_goes_on_saying_why()
-> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("rotation-link")?;
    let file = scratch.file("r.cgtr");
    let target = scratch.file("precious");
    fs::write(&target, b"precious\n")?;
    let _busy = workload::busy("rot-busy", cpus() + 1)?;
    let mut child = Command::new(cgtrace_bin())
        .args([
            "record",
            "-o",
            s(&file),
            "--duration",
            "120",
            "--max-size",
            "64K",
            "--rotate",
            "--keep",
            "2",
            "--events",
            "--event-min-ms",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    // Plant the link once the recorder has made its file (before any rotation: the first part
    // takes more than a second to fill).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let next = PathBuf::from(format!("{}.next", file.display()));
    std::os::unix::fs::symlink(&target, &next)?;
    // Until the recorder says it could not rotate (the first part fills at the rate the load
    // makes events: 15 s was not always enough on a busy CI machine), then SIGINT ends it.
    let lines = lines_of(child.stderr.take().context("the recorder's stderr")?);
    let mut err = String::new();
    let deadline = Instant::now() + Duration::from_secs(110);
    while Instant::now() < deadline {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => {
                err.push_str(&l);
                err.push('\n');
                if l.contains("still writing to") {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // It may have ended already (--duration): then there is nobody to signal.
    let _ = cgtrace_tests::signal(child.id(), libc::SIGINT);
    let status = child.wait()?;
    while let Ok(l) = lines.recv_timeout(Duration::from_secs(5)) {
        err.push_str(&l);
        err.push('\n');
    }
    eprint!("{err}");
    assert!(status.success(), "{err}");
    assert_eq!(
        fs::read(&target)?,
        b"precious\n",
        "the link's target is untouched"
    );
    assert!(fs::symlink_metadata(&next)?.file_type().is_symlink());
    // The rotation fails; the recorder says why and goes on in the old part (up to twice
    // --max-size), trying again later.
    assert!(
        err.contains("r.cgtr.next") && err.contains("still writing to"),
        "the recorder says why it could not rotate: {err}"
    );
    assert!(!scratch.file("r.cgtr.1").exists(), "nothing was rotated");
    assert!(
        !err.contains(": rotated"),
        "a rotation that failed is not said to have worked: {err}"
    );
    assert!(fs::metadata(&file)?.len() <= 128 << 10);
    // What it recorded is whole and readable.
    let (code, replayed, rerr) = replay_stream(&file, &[])?;
    assert_eq!(code, 0, "{rerr}");
    assert!(rerr.is_empty(), "{rerr}");
    assert!(replayed.iter().any(|l| l["type"] == "window"));
    // Files are created exclusively, never through a link.
    let link = scratch.file("link.cgtr");
    std::os::unix::fs::symlink(&target, &link)?;
    let (code, _, err) = cgtrace(&["record", "-o", s(&link), "--duration", "1"])?;
    assert_ne!(code, 0);
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read(&target)?, b"precious\n");
    Ok(())
}

/// The lines `stream` gives, on a channel (a thread reads them until it ends).
fn lines_of(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(stream)).map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}
