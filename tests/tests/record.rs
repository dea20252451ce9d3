//! `cgtrace record`, `replay`, `report` and `--prometheus` on the real kernel with real load.
//!
//! The recorder also prints the live stream (`record --stream`), so the same windows can be
//! compared line by line with what `replay --stream` gives back from the file.
use std::{
    collections::{BTreeMap, HashSet},
    fs,
    path::PathBuf,
    process::{Command, Stdio},
    sync::mpsc,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    cgroup::{TestCgroup, runq_mount},
    record::{
        cgroup_sum, cgtrace, free_port, lines, monotonic_ns, parse_openmetrics, python_parser,
        replay_stream, scrape, windows,
    },
    scratch::{Scratch, path_str as s},
    stream::{Stream, cgtrace_bin},
    workload::{self, cpus},
};
use serde_json::Value;

/// Per-cgroup run-queue totals over windows: path → (count, sum_us, merged buckets).
fn runq_totals(lines: &[&Value]) -> BTreeMap<String, (u64, f64, BTreeMap<u64, u64>)> {
    let mut out: BTreeMap<String, (u64, f64, BTreeMap<u64, u64>)> = BTreeMap::new();
    for w in lines {
        for c in w["cgroups"].as_array().into_iter().flatten() {
            let Some(path) = c["path"].as_str() else {
                continue;
            };
            let e = out.entry(path.to_string()).or_default();
            e.0 += c["runq"]["count"].as_u64().unwrap_or(0);
            e.1 += c["runq"]["sum_us"].as_f64().unwrap_or(0.0);
            for b in c["runq"]["buckets"].as_array().into_iter().flatten() {
                *e.2.entry(b[0].as_u64().unwrap()).or_insert(0) += b[1].as_u64().unwrap();
            }
        }
    }
    out
}

/// Event lines as sorted JSON strings (their order within a drain differs: the live stream
/// prints a turn's waits before its throttle lines, the replay prints records in file order).
fn event_lines(lines: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] != "window" && l["type"] != "hello" && l["type"] != "summary")
        .map(|l| l.to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_recorded_minute_replays_and_reports_what_the_live_stream_printed() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("record-minute")?;
    let file = scratch.file("minute.cgtr");
    let busy = TestCgroup::new("rec-busy")?;
    let throttled = TestCgroup::new("rec-throttled")?;
    let quiet = TestCgroup::new("rec-quiet")?;
    throttled.set_quota(20_000, 100_000)?;
    let _busy = workload::spin(cpus() + 1, &busy.procs_file(), None)?;
    let _thr = workload::spin(2, &throttled.procs_file(), None)?;
    let _quiet = workload::sleeper(10_000, Some(&quiet.procs_file()), None, false)?;
    let (code, out, err) = cgtrace(&[
        "record",
        "-o",
        s(&file),
        "--duration",
        "60",
        "--stream",
        "--events",
        "--event-min-ms",
        "4",
    ])?;
    eprint!("{err}");
    assert_eq!(code, 0, "record failed: {err}");
    assert!(err.contains("recording to"), "{err}");
    let mode = fs::metadata(&file)?;
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let live = lines(&out)?;
    let (rcode, replayed, rerr) = replay_stream(&file, &["--events"])?;
    assert_eq!(rcode, 0, "{rerr}");
    assert!(
        rerr.is_empty(),
        "a clean file replays without warnings: {rerr}"
    );

    // The same hello, every window identical and in order, the same summary.
    assert_eq!(live[0], replayed[0], "hello");
    let (lw, rw) = (windows(&live), windows(&replayed));
    assert!(lw.len() >= 59, "{} windows in a minute", lw.len());
    assert_eq!(lw.len(), rw.len(), "window count");
    for (a, b) in lw.iter().zip(&rw) {
        assert_eq!(a, b, "window {}", a["seq"]);
    }
    assert_eq!(live.last(), replayed.last(), "summary");
    assert_eq!(live.last().unwrap()["type"], "summary");
    // The same event lines, names included.
    let (le, re) = (event_lines(&live), event_lines(&replayed));
    assert!(
        !le.is_empty(),
        "the busy cgroup waited at least 4 ms now and then"
    );
    assert_eq!(le.len(), re.len(), "event lines");
    assert_eq!(le, re);
    assert!(
        replayed.iter().any(|l| l["type"] == "throttle"
            && l["path"] == throttled.rel.as_str()
            && l["period"]["top"][0]["comm"] == "spin"),
        "throttle lines with the threads that burned the quota"
    );

    // Per-cgroup aggregates over the whole minute, from the replay, equal the live stream's.
    let (lt, rt) = (runq_totals(&lw), runq_totals(&rw));
    for cg in [&busy, &throttled, &quiet] {
        let (l, r) = (&lt[&cg.rel], &rt[&cg.rel]);
        eprintln!(
            "{}: live {} waits / {:.0} us, replay {} / {:.0}",
            cg.rel, l.0, l.1, r.0, r.1
        );
        assert!(l.0 > 0, "{} has waits", cg.rel);
        assert_eq!(l, r, "{}", cg.rel);
    }
    let thr_live = cgroup_sum(&lw, &throttled.rel, "/throttle/nr_throttled");
    assert!(thr_live > 100, "throttled {thr_live} periods in a minute");

    // The report: the throttled cgroup with our counters and the kernel's, its episodes with the
    // threads that burned the quota, the busy cgroup among the worst run-queue waits.
    let (code, json, err) = cgtrace(&["report", s(&file), "--json"])?;
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&json)?;
    assert_eq!(r["windows"].as_u64(), Some(lw.len() as u64));
    let t = r["throttled"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["path"] == throttled.rel.as_str())
        .context("throttled cgroup in the report")?;
    assert_eq!(t["nr_throttled"].as_u64(), Some(thr_live));
    let (ours, kernel) = (
        t["ours_nr_throttled_matched"].as_u64().unwrap(),
        t["kernel_nr_throttled"].as_u64().unwrap(),
    );
    // Summed only over windows with a kernel reading: a period that lands between our map read
    // and the cpu.stat read is in a neighbouring window on each side, which cancels inside the
    // span but not at its two ends. Whole-run equality is tests/tests/throttle.rs's job.
    assert!(ours.abs_diff(kernel) <= 2, "ours {ours} kernel {kernel}");
    let ep = &r["longest_episodes"][0];
    assert_eq!(ep["path"], throttled.rel.as_str());
    assert_eq!(ep["period"]["top"][0]["comm"], "spin");
    assert!(ep["duration_us"].as_f64().unwrap() > 10_000.0);
    let worst: Vec<&str> = r["families"]["runq"]["worst_p99"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    assert!(
        worst.contains(&busy.rel.as_str()) || worst.contains(&throttled.rel.as_str()),
        "{worst:?}"
    );
    let (code, text, _) = cgtrace(&["report", s(&file)])?;
    assert_eq!(code, 0);
    eprintln!("{text}");
    assert!(text.contains("## throttled cgroups") && text.contains(&throttled.rel));
    assert!(text.contains("## longest throttle episodes") && text.contains("spin ["));
    Ok(())
}

/// `cgtrace record --stream` running, its stdout lines on a channel.
struct Recorder {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Recorder {
    fn start(args: &[&str]) -> Result<Self> {
        let mut child = Command::new(cgtrace_bin())
            .arg("record")
            .args(args)
            .arg("--stream")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let lines = cgtrace_tests::stream::line_channel(&mut child)?;
        Ok(Self { child, lines })
    }

    /// Waits for `n` window lines; returns them.
    fn windows(&self, n: usize) -> Result<Vec<Value>> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30 + 2 * n as u64);
        while got.len() < n {
            let l = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .context("no window from the recorder")?;
            let v: Value = serde_json::from_str(&l)?;
            if v["type"] == "window" {
                got.push(v);
            }
        }
        Ok(got)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn kill_9_loses_at_most_the_last_second() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("record-kill")?;
    let file = scratch.file("killed.cgtr");
    // More spinners than CPUs: a steady flow of waits of a millisecond and more.
    let _busy = workload::busy("rec-kill", cpus() + 2)?;
    let mut rec = Recorder::start(&["-o", s(&file), "--event-min-ms", "1"])?;
    let printed = rec.windows(5)?;
    // Mid-window, mid-chunk.
    sleep(Duration::from_millis(1500));
    let killed_at = monotonic_ns();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(rec.child.id() as i32, libc::SIGKILL) };
    rec.child.wait()?;
    let (code, replayed, err) = replay_stream(&file, &["--events", "runq"])?;
    eprintln!("replay after kill -9: {err}");
    assert_eq!(code, 0, "{err}");
    // Every window the recorder printed was on disk first.
    let rw = windows(&replayed);
    for w in &printed {
        assert!(
            rw.contains(&w),
            "window {} printed but not in the file",
            w["seq"]
        );
    }
    let last_event = replayed
        .iter()
        .filter(|l| l["type"] == "runq_wait")
        .filter_map(|l| l["ts_ns"].as_u64())
        .max()
        .context("events in the file")?;
    let lost_ms = killed_at.saturating_sub(last_event) as f64 / 1e6;
    eprintln!(
        "{} windows, last event {lost_ms:.0} ms before the kill",
        rw.len()
    );
    assert!(lost_ms <= 1000.0, "lost {lost_ms:.0} ms of events");
    // No summary and no end marker: it was killed.
    assert!(replayed.last().unwrap()["type"] != "summary");
    Ok(())
}

/// The only line of `err` (bad input says what and what to do in one line).
fn one_line(err: &str) -> &str {
    let l: Vec<&str> = err.lines().collect();
    assert_eq!(l.len(), 1, "one line on stderr, got: {err}");
    l[0]
}

#[test]
fn bad_files_say_what_is_wrong_in_one_line_and_replay_what_is_readable() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("record-bad")?;
    let good = scratch.file("good.cgtr");
    let _busy = workload::busy("rec-bad", cpus() + 1)?;
    let (code, _, err) = cgtrace(&[
        "record",
        "-o",
        s(&good),
        "--duration",
        "8",
        "--event-min-ms",
        "1",
    ])?;
    assert_eq!(code, 0, "{err}");
    let bytes = fs::read(&good)?;
    let (_, all, _) = replay_stream(&good, &[])?;
    let all_windows = windows(&all).len();
    assert!(all_windows >= 6);

    let write = |name: &str, b: &[u8]| -> Result<PathBuf> {
        let p = scratch.file(name);
        fs::write(&p, b)?;
        Ok(p)
    };
    // Refused with one line each, exit 1.
    let stream_file = {
        let (_, out, _) = cgtrace(&["replay", s(&good), "--stream"])?;
        write("stream.ndjson", out.as_bytes())?
    };
    let mut newer = bytes.clone();
    newer[8..10].copy_from_slice(&2u16.to_le_bytes());
    let cases = [
        (write("empty.cgtr", b"")?, "is empty"),
        (
            write("text.cgtr", b"just some text, not a recording\n")?,
            "not a cgtrace recording",
        ),
        (stream_file, "NDJSON stream, not a recording"),
        (
            write("newer.cgtr", &newer)?,
            "newer than this cgtrace reads (1.x): replay it with a newer cgtrace",
        ),
        (
            write("header.cgtr", &bytes[..20])?,
            "ends inside its header",
        ),
        (scratch.file("missing.cgtr"), "No such file"),
    ];
    for (path, want) in &cases {
        for cmd in ["replay", "report"] {
            let mut args = vec![cmd, s(path)];
            if cmd == "replay" {
                args.push("--stream");
            }
            let (code, out, err) = cgtrace(&args)?;
            let line = one_line(&err);
            eprintln!("{cmd} {}: {line}", path.display());
            assert_eq!(code, 1, "{line}");
            assert!(line.starts_with("cgtrace: error: "), "{line}");
            assert!(line.contains(want), "{line} (want {want:?})");
            assert!(out.is_empty());
        }
    }

    // The view needs a terminal; without one it says where to go instead.
    let (code, _, err) = cgtrace(&["replay", s(&good)])?;
    assert_eq!(code, 1);
    assert!(
        one_line(&err).contains("use `cgtrace replay --stream FILE`"),
        "{err}"
    );

    // Damaged but readable: a warning line, then what is readable.
    let sync: &[u8] = b"\xfeCGTchk\x01";
    let starts: Vec<usize> = bytes
        .windows(8)
        .enumerate()
        .filter(|(_, w)| *w == sync)
        .map(|(i, _)| i)
        .collect();
    let cut = write("truncated.cgtr", &bytes[..starts[starts.len() - 2] + 100])?;
    let (code, lines_cut, err) = replay_stream(&cut, &[])?;
    assert_eq!(code, 0);
    let line = one_line(&err);
    assert!(line.contains("ends inside a chunk"), "{line}");
    assert!(windows(&lines_cut).len() >= all_windows - 2);
    // Damage the middle chunk holding the most records (a window and its events; the cgroup and
    // file tables sit in chunks of their own with one record each, and losing one loses no line).
    let records_at = |i: usize| u32::from_le_bytes(bytes[i + 16..i + 20].try_into().unwrap());
    let pick = (1..starts.len() - 1)
        .max_by_key(|&k| records_at(starts[k]))
        .unwrap();
    assert!(
        records_at(starts[pick]) > 1,
        "no chunk holds a window and events"
    );
    let mut corrupt = bytes.clone();
    let mid = (starts[pick] + starts[pick + 1]) / 2;
    corrupt[mid] ^= 0xa5;
    let corrupt = write("corrupt.cgtr", &corrupt)?;
    let (code, lines_bad, err) = replay_stream(&corrupt, &["--events"])?;
    assert_eq!(code, 0);
    let line = one_line(&err);
    assert!(line.contains("skipped 1 damaged chunk"), "{line}");
    // The damaged chunk held a window or events (chunks are written per window and every
    // 600 ms): exactly that is missing, the rest is there.
    let (_, lines_all, _) = replay_stream(&good, &["--events"])?;
    let kept = windows(&lines_bad).len();
    let (ev_bad, ev_all) = (lines_bad.len() - kept, lines_all.len() - all_windows);
    eprintln!("damaged file: {kept} of {all_windows} windows, {ev_bad} of {ev_all} other lines");
    assert!(kept >= all_windows - 1);
    assert!(kept < all_windows || ev_bad < ev_all);
    let (code, _, err) = cgtrace(&["report", s(&corrupt)])?;
    assert_eq!(code, 0);
    assert!(one_line(&err).contains("damaged chunk"));

    // Outputs that cannot be written: one line, nothing traced for nothing.
    for (out, want) in [
        (
            "/proc/cgtrace-test.cgtr".to_string(),
            "creating /proc/cgtrace-test.cgtr",
        ),
        (
            format!("{}/no/such/dir/r.cgtr", scratch.0.display()),
            "No such file or directory",
        ),
        (
            s(&good).to_string(),
            "already exists: choose another name, or pass --force",
        ),
    ] {
        let (code, _, err) = cgtrace(&["record", "-o", &out, "--duration", "2"])?;
        let line = one_line(&err);
        eprintln!("record -o {out}: {line}");
        assert_eq!(code, 1);
        assert!(line.contains(want), "{line}");
    }
    assert_eq!(
        fs::read(&good)?,
        bytes,
        "the existing recording is untouched"
    );
    Ok(())
}

#[test]
fn a_full_disk_costs_chunks_not_the_run_and_keeps_every_whole_one() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("record-full")?;
    let mnt = scratch.file("tmpfs");
    fs::create_dir(&mnt)?;
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=96k", "cgtrace-test", s(&mnt)])
        .status()?
        .success();
    if !ok {
        cgtrace_tests::skip("cannot mount a tmpfs");
        return Ok(());
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let _busy = workload::busy("rec-full", cpus() + 2)?;
    // 64 KiB of the 96 taken: the recording fills the rest within seconds.
    fs::write(mnt.join("filler"), vec![0u8; 64 << 10])?;
    let file = mnt.join("full.cgtr");
    let (code, _, err) = cgtrace(&[
        "record",
        "-o",
        s(&file),
        "--duration",
        "8",
        "--event-min-ms",
        "1",
    ])?;
    eprintln!("{err}");
    // The run goes on to its end; what did not fit is counted and said.
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("could not be written"), "{last}");
    let (code, lines, rerr) = replay_stream(&file, &[])?;
    assert_eq!(code, 0, "{rerr}");
    assert!(rerr.is_empty(), "cut back to whole chunks: {rerr}");
    assert!(!windows(&lines).is_empty());
    Ok(())
}

#[test]
fn max_size_rotates_or_stops_and_says_which() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("record-size")?;
    let _busy = workload::busy("rec-size", cpus() + 2)?;
    let f = scratch.file("rot.cgtr");
    let (code, _, err) = cgtrace(&[
        "record",
        "-o",
        s(&f),
        "--duration",
        "30",
        "--event-min-ms",
        "1",
        "--max-size",
        "64K",
        "--rotate",
        "--keep",
        "1",
    ])?;
    eprintln!("{err}");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("rotates to") && err.contains("rotated"),
        "{err}"
    );
    let rotations: u64 = err
        .split(", ")
        .find_map(|p| {
            p.strip_suffix(" rotations)")
                .or(p.strip_suffix(" rotations)\n"))
        })
        .and_then(|n| n.trim().parse().ok())
        .context("rotation count on stderr")?;
    for name in ["rot.cgtr", "rot.cgtr.1"] {
        let p = scratch.file(name);
        assert!(fs::metadata(&p)?.len() <= 64 << 10, "{name}");
        let (code, lines, err) = replay_stream(&p, &[])?;
        assert_eq!(code, 0, "{name}: {err}");
        assert!(err.is_empty(), "{name}: {err}");
        assert!(!windows(&lines).is_empty(), "{name}");
    }
    if rotations >= 2 {
        assert!(!scratch.file("rot.cgtr.2").exists(), "--keep 1");
    }
    let f = scratch.file("stop.cgtr");
    let (code, _, err) = cgtrace(&[
        "record",
        "-o",
        s(&f),
        "--duration",
        "60",
        "--event-min-ms",
        "1",
        "--max-size",
        "64K",
    ])?;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped at --max-size"), "{err}");
    assert!(fs::metadata(&f)?.len() <= 64 << 10);
    let (code, _, err) = replay_stream(&f, &[])?;
    assert_eq!(code, 0);
    assert!(err.is_empty(), "{err}");
    Ok(())
}

/// `(cgroup, kind)` → cumulative counts by `le`, and the window seq, from one parsed scrape.
type Hists = BTreeMap<(String, String), BTreeMap<String, f64>>;

fn hists(samples: &[Value]) -> (u64, Hists) {
    let mut seq = 0;
    let mut h: Hists = BTreeMap::new();
    for s in samples {
        if s["name"] == "cgtrace_last_window_seq" {
            seq = s["value"].as_f64().unwrap() as u64;
        }
        if s["name"] == "cgtrace_runq_wait_seconds_bucket" {
            let l = &s["labels"];
            h.entry((
                l["cgroup"].as_str().unwrap().into(),
                l["kind"].as_str().unwrap().into(),
            ))
            .or_default()
            .insert(
                l["le"].as_str().unwrap().into(),
                s["value"].as_f64().unwrap(),
            );
        }
    }
    (seq, h)
}

/// A window's histogram of one kind, as cumulative counts at powers of two: le (seconds) → count.
fn window_le(kind_hist: &Value) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for bit in 10..=35u32 {
        let bound = 1u64 << bit;
        let n: u64 = kind_hist["buckets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b[0].as_u64().unwrap() < bound)
            .map(|b| b[1].as_u64().unwrap())
            .sum();
        out.insert(bit, n);
    }
    out
}

#[test]
fn prometheus_matches_the_stream_and_caps_series_under_cgroup_churn() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let python = python_parser();
    let busy = workload::busy("prom-busy", cpus() + 1)?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    const MAX: usize = 50;
    let mut stream = Stream::start(&[
        "--prometheus",
        &addr,
        "--max-series",
        &MAX.to_string(),
        "--series-ttl",
        "4",
        "--interval",
        "1000",
    ])?;
    stream.windows(1)?;
    // 5 000 short-lived cgroups, each with a run-queue wait of its own, created and removed
    // while scrapes go on.
    let (mount, _) = runq_mount();
    let churn = std::thread::spawn(move || -> Result<usize> {
        let root_tasks = mount.join("tasks");
        let tasks_file = if root_tasks.exists() {
            "tasks"
        } else {
            "cgroup.threads"
        };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() }.to_string();
        let mut made = 0;
        for i in 0..5000 {
            let d = mount.join(format!("cgtrace-test-churn-{}-{i}", std::process::id()));
            fs::create_dir(&d)?;
            fs::write(d.join(tasks_file), &tid)?;
            sleep(Duration::from_micros(200)); // a wakeup: one wait in this cgroup
            fs::write(mount.join(tasks_file), &tid)?;
            fs::remove_dir(&d)?;
            made += 1;
        }
        Ok(made)
    });
    let mut scrapes = Vec::new();
    let t0 = Instant::now();
    while !churn.is_finished() || t0.elapsed() < Duration::from_secs(6) {
        let (ctype, body) = scrape(&addr)?;
        assert_eq!(
            ctype,
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert!(body.ends_with("# EOF\n"));
        scrapes.push(body);
        sleep(Duration::from_millis(250));
    }
    let made = churn.join().expect("churn thread")?;
    assert_eq!(made, 5000);
    // Gone for longer than --series-ttl: their series are dropped. The windows printed meanwhile
    // are still queued here, so wait by their end times, not their number: the last churn
    // cgroup's last window ended at most one interval after the churn, its series goes in the
    // first window --series-ttl after that, and the window before the one read here is surely in
    // the exposition (the stream prints a window before the exporter takes it).
    let churn_end_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    loop {
        let w = stream.windows(1)?.remove(0);
        if w["end_unix_ms"].as_u64().unwrap_or(0) >= churn_end_ms + (1 + 4 + 2) * 1000 {
            break;
        }
    }
    let (_, last) = scrape(&addr)?;
    scrapes.push(last);
    let (code, lines) = stream.stop(libc::SIGINT)?;
    assert_eq!(code, 0);

    let mut parsed = Vec::new();
    let mut max_cgroups = 0;
    let mut saw_other = false;
    for body in &scrapes {
        let samples = parse_openmetrics(python, body)?;
        // The blame ledger's pair series are bounded by --max-pairs (default 20), not by
        // --max-series: their victims are counted apart.
        let is_pair = |s: &&serde_json::Value| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("cgtrace_runq_wait_delayed_by_seconds"))
        };
        let cgroups: HashSet<&str> = samples
            .iter()
            .filter(|s| !is_pair(s))
            .filter_map(|s| s["labels"]["cgroup"].as_str())
            .filter(|c| *c != "other")
            .collect();
        let pairs = samples.iter().filter(is_pair).count();
        assert!(
            pairs <= 2 * 21,
            "{pairs} pair samples, --max-pairs 20 and other"
        );
        max_cgroups = max_cgroups.max(cgroups.len());
        saw_other |= samples
            .iter()
            .filter(|s| !is_pair(s))
            .any(|s| s["labels"]["cgroup"] == "other");
        parsed.push(hists(&samples));
    }
    eprintln!(
        "{} scrapes, at most {max_cgroups} cgroups with series",
        scrapes.len()
    );
    assert!(
        max_cgroups <= MAX,
        "{max_cgroups} cgroups exported, cap {MAX}"
    );
    assert!(
        saw_other,
        "cgroups past the cap are summed into cgroup=\"other\""
    );
    let last = parse_openmetrics(python, scrapes.last().unwrap())?;
    let value = |name: &str| {
        last.iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["value"].as_f64())
            .unwrap_or(-1.0)
    };
    assert!(value("cgtrace_series_folded_total") > 1000.0);
    assert!(value("cgtrace_series_expired_total") > 0.0);
    eprintln!(
        "after the churn: {} cgroups with series, {} folded into other, {} expired",
        value("cgtrace_series_cgroups"),
        value("cgtrace_series_folded_total"),
        value("cgtrace_series_expired_total")
    );
    let stale: Vec<&str> = scrapes
        .last()
        .unwrap()
        .lines()
        .filter(|l| l.contains("cgtrace-test-churn"))
        .take(5)
        .collect();
    assert!(
        stale.is_empty(),
        "the removed cgroups' series are dropped after --series-ttl, but the last scrape has:\n{}",
        stale.join("\n")
    );

    // For each pair of scrapes one window apart, the busy cgroup's histogram grew by exactly that
    // window's histogram from the stream.
    let by_seq: BTreeMap<u64, &Value> = lines
        .iter()
        .filter(|l| l["type"] == "window")
        .map(|l| (l["seq"].as_u64().unwrap(), l))
        .collect();
    let mut compared = 0;
    for pair in parsed.windows(2) {
        let ((s0, h0), (s1, h1)) = (&pair[0], &pair[1]);
        if *s1 != s0 + 1 {
            continue;
        }
        let w = by_seq[s1];
        let Some(c) = w["cgroups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == busy.rel.as_str())
        else {
            continue;
        };
        for (kind, kh) in c["runq"]["kinds"].as_object().unwrap() {
            let key = (busy.rel.clone(), kind.clone());
            let want = window_le(kh);
            for (bit, n) in want {
                let le = format!("{:e}", (1u64 << bit) as f64 / 1e9);
                let le_py = h1[&key]
                    .keys()
                    .find(|k| k.parse::<f64>().ok() == le.parse::<f64>().ok())
                    .cloned()
                    .with_context(|| format!("le {le}"))?;
                let before = h0
                    .get(&key)
                    .and_then(|m| m.get(&le_py))
                    .copied()
                    .unwrap_or(0.0);
                assert_eq!(
                    h1[&key][&le_py] - before,
                    n as f64,
                    "window {s1} {kind} le {le}"
                );
            }
            compared += 1;
        }
    }
    eprintln!("{compared} window histograms of the busy cgroup matched the scrapes");
    assert!(compared >= 3);
    Ok(())
}

#[test]
fn serve_is_headless_and_scrapes_parse() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let python = python_parser();
    let (code, out, err) = cgtrace(&["serve", "--duration", "1"])?;
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        one_line(&err).contains("serve needs --prometheus ADDR"),
        "{err}"
    );
    let addr = format!("127.0.0.1:{}", free_port()?);
    let child = Command::new(cgtrace_bin())
        .args([
            "serve",
            "--prometheus",
            &addr,
            "--duration",
            "6",
            "--interval",
            "500",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        sleep(Duration::from_millis(300));
        if let Ok((_, b)) = scrape(&addr)
            && b.contains("cgtrace_windows_total 2")
        {
            break b;
        }
        assert!(Instant::now() < deadline, "no second window from serve");
    };
    let samples = parse_openmetrics(python, &body)?;
    let families: HashSet<&str> = samples
        .iter()
        .filter_map(|s| s["family"].as_str())
        .collect();
    for f in [
        "cgtrace_runq_wait_seconds",
        "cgtrace_events_seen",
        "cgtrace_windows",
    ] {
        assert!(families.contains(f), "{f} in {families:?}");
    }
    let out = child.wait_with_output()?;
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "headless");
    Ok(())
}
