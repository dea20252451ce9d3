//! The flight recorder on the day it is needed: `cgtrace record --rotate --prometheus` on a
//! real tmpfs that fills, a real ext4 that `fsfreeze` stalls, and restarted in a crash loop
//! (full disk, a leftover `FILE.next`, SIGKILL while rotating). What it must keep: answering
//! `/metrics`, the stream's windows, every part from before, a start that never refuses.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use cgtrace_tests::{
    can_trace,
    record::{cgtrace, free_port, replay_stream, scrape, windows},
    scratch::{Scratch, path_str as s},
    stream::{cgtrace_bin, line_channel},
    workload::{self, cpus},
};
use serde_json::Value;

/// A filesystem mounted for a test: thawed and unmounted on drop, whatever happened.
struct Mount {
    dir: PathBuf,
    frozen: bool,
}

impl Mount {
    /// `mount ARGS DIR`; `None` (skipped) if this machine cannot.
    fn new(dir: &Path, args: &[&str]) -> Result<Option<Self>> {
        fs::create_dir_all(dir)?;
        let ok = Command::new("mount")
            .args(args)
            .arg(dir)
            .status()?
            .success();
        if !ok {
            cgtrace_tests::skip(&format!("cannot mount {args:?}"));
            return Ok(None);
        }
        Ok(Some(Self {
            dir: dir.to_path_buf(),
            frozen: false,
        }))
    }

    /// A tmpfs of `size` bytes.
    fn tmpfs(dir: &Path, size: &str) -> Result<Option<Self>> {
        Self::new(
            dir,
            &["-t", "tmpfs", "-o", &format!("size={size}"), "cgtrace-test"],
        )
    }

    fn freeze(&mut self, on: bool) -> Result<()> {
        let flag = if on { "-f" } else { "-u" };
        let ok = Command::new("fsfreeze")
            .args([flag, s(&self.dir)])
            .status()?
            .success();
        ensure!(ok, "fsfreeze {flag} {}", self.dir.display());
        self.frozen = on;
        Ok(())
    }
}

/// Thaws a filesystem when dropped (whether or not it is frozen).
struct Thaw(PathBuf);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze")
            .arg("-u")
            .arg(&self.0)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.frozen {
            let _ = Command::new("fsfreeze").arg("-u").arg(&self.dir).status();
        }
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|st| st.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Fills the filesystem holding `dir` with `dir/filler` until a write fails (ENOSPC).
fn fill(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("filler");
    let mut f = fs::File::create(&p)?;
    let block = vec![0x5au8; 4096];
    loop {
        match f.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => bail!("filling {}: {e}", p.display()),
        }
    }
    let _ = f.sync_all();
    Ok(p)
}

/// `cgtrace record ARGS --stream`: its windows on a channel, its stderr in a file.
struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl Daemon {
    fn start(args: &[&str], stderr: &Path) -> Result<Self> {
        let mut child = Command::new(cgtrace_bin())
            .arg("record")
            .args(args)
            .arg("--stream")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(stderr)?)
            .spawn()?;
        let lines = line_channel(&mut child)?;
        Ok(Self {
            child,
            lines,
            stderr: stderr.to_path_buf(),
        })
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until stderr holds `what`; fails if the daemon exits first.
    fn wait_for(&mut self, what: &str, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if self.stderr().contains(what) {
                return Ok(());
            }
            if let Some(st) = self.child.try_wait()? {
                bail!(
                    "cgtrace exited ({st}) before saying {what:?}:\n{}",
                    self.stderr()
                );
            }
            ensure!(
                Instant::now() < deadline,
                "no {what:?} within {within:?}:\n{}",
                self.stderr()
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// The next window line. Within 30 s: the first comes after the programs are verified and
    /// attached, which on a 2-CPU VM under this file's spinners took over 10 s (a CI run failed
    /// so at the first window of the SIGKILL test).
    fn window(&self) -> Result<Value> {
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .context("no window from the recorder within 30 s")?;
            let v: Value = serde_json::from_str(&l)?;
            if v["type"] == "window" {
                return Ok(v);
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM, then its exit code (its stderr on ours).
    fn stop(mut self) -> Result<i32> {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait()? {
                eprintln!("{}", self.stderr());
                return Ok(st.code().unwrap_or(-1));
            }
            ensure!(Instant::now() < deadline, "no exit 20 s after SIGTERM");
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A window's counter (0 when absent).
fn counter(w: &Value, name: &str) -> u64 {
    w["events"]["counters"][name].as_u64().unwrap_or(0)
}

/// One sample's value in a Prometheus text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Window seqs in a recording, in order.
fn seqs_in(file: &Path) -> Result<Vec<u64>> {
    let (code, lines, err) = replay_stream(file, &[])?;
    ensure!(code == 0, "replay {}: {err}", file.display());
    Ok(windows(&lines)
        .iter()
        .filter_map(|w| w["seq"].as_u64())
        .collect())
}

/// `cgtrace report --json FILE`: exit 0 and its window count.
fn report_windows(file: &Path) -> Result<u64> {
    let (code, out, err) = cgtrace(&["report", "--json", s(file)])?;
    ensure!(code == 0, "report {}: {err}", file.display());
    let v: Value = serde_json::from_str(&out)?;
    v["windows"].as_u64().context("report without windows")
}

#[test]
fn a_full_disk_costs_chunks_not_metrics_the_stream_or_the_file() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("flight-full")?;
    let Some(mnt) = Mount::tmpfs(&scratch.file("mnt"), "4m")? else {
        return Ok(());
    };
    let _busy = workload::busy("flight-full", cpus() + 2)?;
    let file = mnt.dir.join("flight.cgtr");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut d = Daemon::start(
        &[
            "-o",
            s(&file),
            "--rotate",
            "--interval",
            "250",
            "--event-min-ms",
            "1",
            "--prometheus",
            &addr,
        ],
        &scratch.file("stderr"),
    )?;
    d.wait_for("recording to", Duration::from_secs(20))?;
    let mut before = Vec::new();
    for _ in 0..4 {
        before.push(d.window()?["seq"].as_u64().context("seq")?);
    }
    // A window is printed before its chunk reaches the disk (the disk thread writes behind the
    // stream): the disk fills only once the last of these is in the file, so "before" means
    // recorded, not just printed.
    let last = *before.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seqs_in(&file)?.contains(&last) {
        ensure!(
            Instant::now() < deadline,
            "window {last} not in the file 10 s after it was printed"
        );
        sleep(Duration::from_millis(100));
    }
    // The disk fills: the stream goes on window after window, /metrics answers and counts.
    let filler = fill(&mnt.dir)?;
    let mut seq = *before.last().unwrap();
    let mut dropped_in_stream = 0;
    let mut scraped = 0.0;
    for _ in 0..12 {
        let w = d.window()?;
        let next = w["seq"].as_u64().context("seq")?;
        assert_eq!(next, seq + 1, "the stream lost a window");
        seq = next;
        dropped_in_stream += counter(&w, "recorder_dropped_chunks");
        let (_, text) = scrape(&addr)?;
        scraped = sample(&text, "cgtrace_recorder_dropped_chunks_total").unwrap_or(0.0);
    }
    eprintln!("{}", d.stderr());
    assert!(
        dropped_in_stream > 0,
        "no recorder_dropped_chunks in the stream"
    );
    assert!(
        scraped > 0.0,
        "cgtrace_recorder_dropped_chunks_total not counted"
    );
    assert!(
        d.stderr().contains("No space left on device"),
        "{}",
        d.stderr()
    );
    // Space again: writing resumes (at the next retry, at most 8 s after three failed ones).
    fs::remove_file(&filler)?;
    let resumed = Instant::now();
    d.wait_for("again", Duration::from_secs(35))?;
    eprintln!("resumed {:?} after space was freed", resumed.elapsed());
    // Windows printed before it resumed are still queued on the channel.
    while d.lines.try_recv().is_ok() {}
    let mut after = Vec::new();
    for _ in 0..4 {
        after.push(d.window()?["seq"].as_u64().context("seq")?);
    }
    let code = d.stop()?;
    assert_eq!(code, 0);
    // Everything printed before the disk filled and after it resumed is in the file, the gap
    // between is what was counted.
    let got = seqs_in(&file)?;
    for s in before.iter().chain(&after) {
        assert!(got.contains(s), "window {s} not in the file: {got:?}");
    }
    assert!(
        got.windows(2).any(|p| p[1] > p[0] + 1),
        "no gap while the disk was full: {got:?}"
    );
    assert_eq!(report_windows(&file)?, got.len() as u64);
    // And the report says what is missing: the chunks the recorder counted.
    let (code, out, err) = cgtrace(&["report", "--json", s(&file)])?;
    ensure!(code == 0, "report: {err}");
    let r: Value = serde_json::from_str(&out)?;
    let unwritten = r["recorder_dropped_chunks"].as_u64().unwrap_or(0);
    assert!(
        unwritten > 0 && unwritten as f64 >= dropped_in_stream as f64 * 0.5,
        "report: {unwritten} chunks not written, the stream counted {dropped_in_stream}"
    );
    let (_, text, _) = cgtrace(&["report", s(&file)])?;
    assert!(
        text.contains("note: the recorder could not write "),
        "{text}"
    );
    Ok(())
}

#[test]
fn an_io_stall_holds_up_neither_metrics_nor_the_ring_buffer() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("flight-stall")?;
    let img = scratch.file("ext4.img");
    fs::File::create(&img)?.set_len(64 << 20)?;
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F", s(&img)])
        .status()?
        .success();
    if !ok {
        cgtrace_tests::skip("no mkfs.ext4");
        return Ok(());
    }
    let Some(mut mnt) = Mount::new(&scratch.file("mnt"), &["-o", "loop", s(&img)])? else {
        return Ok(());
    };
    let _busy = workload::busy("flight-stall", cpus() + 2)?;
    let file = mnt.dir.join("flight.cgtr");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut d = Daemon::start(
        &[
            "-o",
            s(&file),
            "--rotate",
            "--event-min-ms",
            "1",
            "--prometheus",
            &addr,
        ],
        &scratch.file("stderr"),
    )?;
    // Declared after the daemon so it is dropped first: a failing check thaws the filesystem
    // before the daemon is killed and waited for (a recorder blocked in a write to a frozen
    // filesystem cannot die until it is thawed).
    let _thaw = Thaw(mnt.dir.clone());
    d.wait_for("recording to", Duration::from_secs(20))?;
    let first = d.window()?;
    mnt.freeze(true)?;
    // Every scrape of the stall answers within 200 ms; the stream goes on.
    let mut worst = Duration::ZERO;
    let mut seen = vec![first];
    let stall = Instant::now();
    while stall.elapsed() < Duration::from_secs(20) {
        let t = Instant::now();
        let (_, text) = scrape(&addr)?;
        let took = t.elapsed();
        worst = worst.max(took);
        assert!(took < Duration::from_millis(200), "a scrape took {took:?}");
        assert!(text.contains("cgtrace_windows_total"));
        while let Ok(l) = d.lines.try_recv() {
            let v: Value = serde_json::from_str(&l)?;
            if v["type"] == "window" {
                seen.push(v);
            }
        }
        sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
    }
    mnt.freeze(false)?;
    eprintln!(
        "20 s frozen: slowest scrape {worst:?}, {} windows",
        seen.len()
    );
    assert!(
        seen.len() >= 16,
        "the stream stalled: {} windows",
        seen.len()
    );
    for _ in 0..2 {
        seen.push(d.window()?);
    }
    let code = d.stop()?;
    assert_eq!(code, 0);
    // Nothing lost from the ring buffer or the drain thread's queue.
    for name in ["ringbuf_full", "drain_full"] {
        let lost: u64 = seen.iter().map(|w| counter(w, name)).sum();
        assert_eq!(lost, 0, "{name}");
    }
    // The writer's queue held the stall's chunks (well under its 32 MiB): every window the
    // stream printed is in the file once the disk thawed.
    let queue_full: u64 = seen.iter().map(|w| counter(w, "recorder_queue_full")).sum();
    let rss = seen
        .iter()
        .filter_map(|w| w["self"]["rss_kib"].as_u64())
        .max()
        .unwrap_or(0);
    let got = seqs_in(&file)?;
    eprintln!(
        "{} windows in the file, {queue_full} chunks over the writer's queue, peak RSS {rss} KiB",
        got.len()
    );
    assert_eq!(queue_full, 0);
    for w in &seen {
        let seq = w["seq"].as_u64().unwrap_or(0);
        assert!(got.contains(&seq), "window {seq} not in the file: {got:?}");
    }
    assert_eq!(report_windows(&file)?, got.len() as u64);
    Ok(())
}

/// The parts FILE, FILE.1, … present, in order.
fn parts(file: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if file.exists() {
        out.push(file.to_path_buf());
    }
    for n in 1.. {
        let p = PathBuf::from(format!("{}.{n}", file.display()));
        if !p.exists() {
            break;
        }
        out.push(p);
    }
    out
}

/// The header of a recording (magic, versions, flags, hello length and checksum, hello), as a
/// recorder killed between creating FILE.next and its rename leaves it.
fn header_of(file: &Path) -> Result<Vec<u8>> {
    let b = fs::read(file)?;
    let hello = u32::from_le_bytes(b[16..20].try_into()?) as usize;
    Ok(b[..24 + hello].to_vec())
}

/// One start of a crash loop: it must get as far as recording, then it is killed before its
/// first window (each 0.25 s).
fn start_and_kill(file: &Path, keep: &str, stderr: &Path) -> Result<()> {
    let args = [
        "-o",
        s(file),
        "--rotate",
        "--keep",
        keep,
        "--interval",
        "250",
    ];
    let mut d = Daemon::start(&args, stderr)?;
    d.wait_for("recording to", Duration::from_secs(20))?;
    d.signal(libc::SIGKILL);
    let _ = d.child.wait();
    Ok(())
}

#[test]
fn a_crash_loop_on_a_full_disk_or_over_a_leftover_next_keeps_every_part() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("flight-loop")?;
    let Some(mnt) = Mount::tmpfs(&scratch.file("mnt"), "8m")? else {
        return Ok(());
    };
    let file = mnt.dir.join("flight.cgtr");
    let stderr = scratch.file("stderr");
    // Before the incident: two runs, two parts with windows.
    for _ in 0..2 {
        let d = Daemon::start(
            &[
                "-o",
                s(&file),
                "--rotate",
                "--keep",
                "4",
                "--interval",
                "250",
            ],
            &stderr,
        )?;
        for _ in 0..3 {
            d.window()?;
        }
        assert_eq!(d.stop()?, 0);
    }
    let before: Vec<Vec<u8>> = parts(&file)
        .iter()
        .map(fs::read)
        .collect::<Result<_, _>>()?;
    assert_eq!(before.len(), 2);
    let header = header_of(&file)?;
    // The disk is full: every start gets to recording (nothing written), is killed, and pushes
    // nothing out. The first start shifts the last run's part, as any start does.
    let filler = fill(&mnt.dir)?;
    let t = Instant::now();
    let restarts = 50;
    for _ in 0..restarts {
        start_and_kill(&file, "4", &stderr)?;
    }
    eprintln!("{restarts} restarts on a full disk in {:?}", t.elapsed());
    let now = parts(&file);
    assert!(
        fs::metadata(&file)?.len() < header.len() as u64 + 1,
        "FILE is header-only at most"
    );
    assert_eq!(now.len(), 3, "{now:?}");
    for (p, want) in now[1..].iter().zip(&before) {
        assert_eq!(&fs::read(p)?, want, "{} changed", p.display());
        assert!(report_windows(p)? >= 3);
    }
    // Space again, but every start finds a FILE.next left by a kill mid-rotation: header-only
    // ones are removed, garbage is set aside; no start refuses.
    fs::remove_file(filler)?;
    let next = PathBuf::from(format!("{}.next", file.display()));
    for i in 0..restarts {
        if i % 2 == 0 {
            fs::write(&next, &header)?;
        } else {
            fs::write(&next, b"half a header from another life")?;
        }
        start_and_kill(&file, "4", &stderr)?;
        let err = fs::read_to_string(&stderr)?;
        assert!(err.contains(".next"), "{err}");
    }
    let now = parts(&file);
    assert_eq!(now.len(), 3, "{now:?}");
    for (p, want) in now[1..].iter().zip(&before) {
        assert_eq!(&fs::read(p)?, want, "{} changed", p.display());
    }
    let orphans = fs::read_dir(&mnt.dir)?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().contains(".next.orphan-"))
        })
        .count();
    assert!(orphans >= 1, "garbage FILE.next set aside");
    Ok(())
}

#[test]
fn sigkill_at_random_points_while_rotating_loses_no_part() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("flight-kill")?;
    let Some(mnt) = Mount::tmpfs(&scratch.file("mnt"), "64m")? else {
        return Ok(());
    };
    let _busy = workload::busy("flight-kill", cpus() + 2)?;
    // Wakeups every 20 µs next to the spinners: tens of thousands of events a second, so a 64K
    // part fills several times a second.
    let _sleepers = (0..2)
        .map(|_| workload::sleeper(20, None, None, false))
        .collect::<Result<Vec<_>>>()?;
    let file = mnt.dir.join("flight.cgtr");
    let stderr = scratch.file("stderr");
    let args = [
        "-o",
        s(&file),
        "--rotate",
        "--keep",
        "1000",
        "--max-size",
        "64K",
        "--interval",
        "250",
        "--event-min-ms",
        "0",
    ];
    let d = Daemon::start(&args, &stderr)?;
    let t = Instant::now();
    while parts(&file).len() < 3 && t.elapsed() < Duration::from_secs(15) {
        d.window()?;
    }
    assert_eq!(d.stop()?, 0);
    let pre: Vec<Vec<u8>> = parts(&file)
        .iter()
        .map(fs::read)
        .collect::<Result<_, _>>()?;
    ensure!(pre.len() >= 2, "no rotation at 64K: {} parts", pre.len());
    // Kills at pseudo-random points of a run that rotates several times a second.
    let seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    eprintln!("seed {seed}");
    let mut x = seed;
    let t = Instant::now();
    let kills = 8;
    for _ in 0..kills {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut d = Daemon::start(&args, &stderr)?;
        d.wait_for("recording to", Duration::from_secs(20))?;
        sleep(Duration::from_millis(300 + (x >> 33) % 1200));
        d.signal(libc::SIGKILL);
        let _ = d.child.wait();
    }
    eprintln!("{kills} kills in {:?}", t.elapsed());
    // A last start never refuses and stops cleanly.
    let d = Daemon::start(&args, &stderr)?;
    d.window()?;
    let err = d.stderr();
    assert_eq!(d.stop()?, 0, "{err}");
    let all = parts(&file);
    let contents: Vec<Vec<u8>> = all.iter().map(fs::read).collect::<Result<_, _>>()?;
    for (i, want) in pre.iter().enumerate() {
        assert!(
            contents.contains(want),
            "part {i} of the run before the kills is gone"
        );
    }
    // Every part reads: a kill leaves at most a torn last chunk, which the reader skips with a
    // warning. A part rotated away mid-run may hold events but no window (a chunk flushed by
    // age or size, not by a window, that did not fit the part before): it is refused with the
    // one line that says so, nothing else.
    let (mut torn, mut no_window) = (0, 0);
    for p in &all {
        let (code, lines, err) = replay_stream(p, &[])?;
        if code != 0 && err.contains("but no window") && err.lines().count() == 1 {
            no_window += 1;
            continue;
        }
        ensure!(code == 0, "replay {}: {err}", p.display());
        torn += usize::from(!err.is_empty());
        ensure!(!windows(&lines).is_empty(), "{} has no window", p.display());
    }
    // The parts from before the kills report, except one that holds events but no window
    // (counted above).
    for want in &pre {
        let i = contents.iter().position(|c| c == want).unwrap_or(0);
        let (code, _, err) = replay_stream(&all[i], &[])?;
        if code != 0 && err.contains("but no window") {
            continue;
        }
        ensure!(report_windows(&all[i])? >= 1);
    }
    eprintln!(
        "{} parts: {torn} end in a torn chunk, {no_window} hold events but no window",
        all.len()
    );
    ensure!(no_window < all.len() / 2, "most parts hold no window");
    let next = PathBuf::from(format!("{}.next", file.display()));
    assert!(!next.exists(), "a FILE.next left after a clean stop");
    eprintln!("{} parts", all.len());
    Ok(())
}
