//! Advice proven by applying it: a load runs under cgtrace, the change its flag names (`change`:
//! the cgroup file and value, or the thread count) is made exactly as given, the same load runs
//! again, and the kernel's own `cpu.stat` before and after says whether it worked — by at least
//! what the flag promised (`expected`), never by cgtrace's own account.
use std::{process::Command, thread::sleep, time::Duration, time::Instant};

use cgtrace_tests::{
    advice::{self, apply, median_flag, whatif_args},
    can_trace_on_cpus,
    cgroup::TestCgroup,
    stream::Stream,
    workload::{self, Task},
};
use serde_json::Value;

const SIGINT: i32 = 2;

/// One run of a load: cgtrace's lines, its recording, and the kernel's `cpu.stat` over the
/// load's life.
struct Run {
    lines: Vec<Value>,
    recording: std::path::PathBuf,
    secs: f64,
    nr_throttled: u64,
    throttled_us: f64,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.recording);
    }
}

impl Run {
    fn throttled_per_s(&self) -> f64 {
        self.nr_throttled as f64 / self.secs
    }

    /// `cgtrace whatif` on this run's recording for `path`, trying `args`: the JSON of the
    /// cgroup's answer.
    fn whatif(&self, path: &str, args: &[&str]) -> anyhow::Result<Value> {
        let out = Command::new(cgtrace_tests::stream::cgtrace_bin())
            .arg("whatif")
            .arg(&self.recording)
            .args(["--cgroup", path, "--json"])
            .args(args)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "whatif: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        Ok(v["cgroups"][0].clone())
    }

    /// How long into a throttled period the quota lasted, on average over `path`'s throttled
    /// periods (ms).
    fn mean_burned_in_ms(&self, path: &str) -> f64 {
        let v: Vec<f64> = self
            .lines
            .iter()
            .filter(|l| l["type"] == "window")
            .flat_map(|w| w["cgroups"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["path"] == path)
            .flat_map(|c| {
                c["throttle"]["periods"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|p| p["burned_in_ms"].as_f64())
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }

    /// The kernel's throttled time per throttled period: how long a throttled group stalls.
    fn stall_us(&self) -> f64 {
        self.throttled_us / self.nr_throttled.max(1) as f64
    }

    /// Every window's flags `code` of `path` (from the throttle family or the cgroup's own).
    fn flags(&self, path: &str, code: &str) -> Vec<Value> {
        advice::flags(&self.lines, path, code)
    }
}

/// Runs `spawn`'s load in `cg` (and its cpuacct twin, for usage on v1) for `secs` under
/// `cgtrace stream`, reading `cpu.stat` as the load starts and after it stopped.
fn run(
    cg: &TestCgroup,
    acct: Option<&TestCgroup>,
    secs: u64,
    spawn: impl Fn() -> anyhow::Result<Task>,
) -> anyhow::Result<Run> {
    let recording = std::env::temp_dir().join(format!(
        "cgtrace-advice-{}-{}.cgtrace",
        std::process::id(),
        rand_tag()
    ));
    let _ = std::fs::remove_file(&recording);
    let mut s = Stream::start_cmd(&[
        "record",
        "-o",
        &recording.display().to_string(),
        "--stream",
        "--interval",
        "1000",
    ])?;
    s.windows(1)?;
    let (t0, us0) = cg.kernel_throttling()?;
    let started = Instant::now();
    let task = spawn()?;
    if let Some(a) = acct {
        std::fs::write(a.procs_file(), task.pid().to_string())?;
    }
    s.windows(secs as usize)?;
    drop(task);
    let secs = started.elapsed().as_secs_f64();
    // The last throttled period ends at the next period timer.
    sleep(Duration::from_millis(300));
    let (t1, us1) = cg.kernel_throttling()?;
    let (_, lines) = s.stop(SIGINT)?;
    Ok(Run {
        lines,
        recording,
        secs,
        nr_throttled: t1 - t0,
        throttled_us: us1 - us0,
    })
}

/// A tag that tells two runs of one process apart.
fn rand_tag() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// `whatif`'s prediction for setting B (its first candidate, from the recording of a run under A)
/// against the kernel's `cpu.stat` of a run of the same length under B: throttled periods and
/// throttled time within 20 % (or one period's worth, where B is barely throttled).
fn check_prediction(what: &str, answer: &Value, b: &Run, period_ms: f64) {
    let p = &answer["candidates"][0]["predicted"];
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let (periods, ms) = (f(p, "throttled_periods"), f(p, "throttled_ms"));
    let (kernel_periods, kernel_ms) = (b.nr_throttled as f64, b.throttled_us / 1e3);
    eprintln!(
        "{what}: predicted {periods:.1} throttled periods, {ms:.0} ms throttled; kernel under it {kernel_periods:.0}, {kernel_ms:.0} ms"
    );
    assert!(
        (periods - kernel_periods).abs() <= (0.2 * kernel_periods).max(1.0),
        "{what}: predicted {periods:.1} throttled periods, the kernel counted {kernel_periods}: {answer}"
    );
    assert!(
        (ms - kernel_ms).abs() <= (0.2 * kernel_ms).max(period_ms),
        "{what}: predicted {ms:.0} ms throttled, the kernel {kernel_ms:.0} ms: {answer}"
    );
}

fn expected_percent(flag: &Value) -> f64 {
    flag["expected"]["change_percent"]
        .as_f64()
        .unwrap_or_else(|| panic!("the flag says what it should change: {flag}"))
}

/// Bursts well under the quota on average (2 threads × 80 ms every 1.03 s of a 1-CPU quota: 160
/// ms of demand when a burst falls in one period; the 1.03 s moves each burst 30 ms further into
/// the period, as real bursts land anywhere) are throttled; the burst the flag suggests, written
/// to the cgroup, takes away at least 80 % of the throttled periods (the kernel's `nr_throttled`
/// per second), and the flag's promise is met.
#[test]
fn the_suggested_burst_cuts_throttled_periods() -> anyhow::Result<()> {
    if !can_trace_on_cpus(2, "needs 2 CPUs for a burst to outrun a 1-CPU quota") {
        return Ok(());
    }
    let cg = TestCgroup::new("advice-burst")?;
    let acct = cg.cpuacct_twin()?;
    cg.set_quota(100_000, 100_000)?;
    let load = || {
        let mut cmd = Command::new(workload::bin("burst"));
        cmd.args(["2", "80", "1030"]);
        Task::spawn(cmd, Some(&cg.procs_file()), None, false)
    };
    let before = run(&cg, acct.as_ref(), 8, load)?;
    let flags = before.flags(&cg.rel, "throttled_below_quota");
    assert!(
        !flags.is_empty(),
        "bursts under the quota flagged (kernel: {} throttled periods)",
        before.nr_throttled
    );
    let flag = median_flag(&flags, 0);
    let promised = -expected_percent(&flag);
    // What `whatif` predicts from the first run's recording, before the change is made.
    let args = whatif_args(&flag);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let answer = before.whatif(&cg.rel, &args)?;
    let rate = |v: &Value| v["throttled_per_s"].as_f64().unwrap_or(f64::NAN);
    let replayed = rate(&answer["replayed"]);
    let predicted = rate(&answer["candidates"][0]["predicted"]);
    let written = apply(&cg, &flag)?;
    let after = run(&cg, acct.as_ref(), 8, load)?;
    let cut = 1.0 - after.throttled_per_s() / before.throttled_per_s();
    let predicted_cut = 1.0 - predicted / replayed;
    eprintln!(
        "whatif {args:?}: replayed as recorded {replayed:.2} throttled periods/s (kernel, same windows: {:.2}), predicted {predicted:.2}: cut {:.0} % (measured {:.0} %)",
        answer["recorded"]["nr_throttled"].as_f64().unwrap_or(0.0)
            / answer["recorded"]["secs"].as_f64().unwrap_or(1.0),
        predicted_cut * 100.0,
        cut * 100.0
    );
    assert!(
        replayed > 0.0,
        "the replay of the recorded demand is throttled: {answer}"
    );
    check_prediction("burst", &answer, &after, 100.0);
    assert!(
        (predicted_cut - cut).abs() <= 0.25,
        "whatif predicted a {:.0} % cut, the kernel measured {:.0} %: {answer}",
        predicted_cut * 100.0,
        cut * 100.0
    );
    eprintln!(
        "burst: {written:?}; throttled periods/s {:.2} -> {:.2} (kernel), cut {:.0} %, promised {promised:.0} %; flags {} -> {}",
        before.throttled_per_s(),
        after.throttled_per_s(),
        cut * 100.0,
        flags.len(),
        after.flags(&cg.rel, "throttled_below_quota").len()
    );
    assert!(before.nr_throttled > 0, "the bursts were throttled");
    assert!(
        cut >= 0.8,
        "at least 80 % fewer throttled periods: {:.0} %",
        cut * 100.0
    );
    assert!(
        cut * 100.0 >= promised - 25.0,
        "the cut ({:.0} %) is what the flag promised ({promised:.0} %)",
        cut * 100.0
    );
    Ok(())
}

/// The same bursts, five runs: the burst each run suggests (the median of its windows' flags) is
/// within 20 % of the median of the five — the advice of the workload, not of the run.
#[test]
fn the_suggested_burst_holds_from_run_to_run() -> anyhow::Result<()> {
    if !can_trace_on_cpus(2, "needs 2 CPUs for a burst to outrun a 1-CPU quota") {
        return Ok(());
    }
    let cg = TestCgroup::new("advice-burst-runs")?;
    let acct = cg.cpuacct_twin()?;
    cg.set_quota(100_000, 100_000)?;
    let load = || {
        let mut cmd = Command::new(workload::bin("burst"));
        cmd.args(["2", "80", "1030"]);
        Task::spawn(cmd, Some(&cg.procs_file()), None, false)
    };
    let mut bursts = Vec::new();
    for _ in 0..5 {
        let r = run(&cg, acct.as_ref(), 6, load)?;
        let flags = r.flags(&cg.rel, "throttled_below_quota");
        assert!(!flags.is_empty(), "bursts flagged in every run");
        let flag = median_flag(&flags, 0);
        let us: f64 = flag["change"][0]["value"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a burst in µs: {flag}"));
        bursts.push(us);
    }
    let mut sorted = bursts.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[2];
    eprintln!("suggested bursts over five runs (µs): {bursts:?}, median {median:.0}");
    for b in &bursts {
        assert!(
            (b / median - 1.0).abs() <= 0.2,
            "{b:.0} µs is more than 20 % from the median {median:.0} µs: {bursts:?}"
        );
    }
    Ok(())
}

/// A steady spinner under 20 ms / 100 ms stalls 80 ms of every period: the flag suggests a
/// quarter of the period with the same share. Written to the cgroup, the kernel's throttled time
/// per throttled period (one thread on one CPU: the stall) shrinks by at least the factor the flag
/// promised, within 25 %.
#[test]
fn the_suggested_period_shortens_stalls_by_the_promised_factor() -> anyhow::Result<()> {
    if !can_trace_on_cpus(2, "needs 2 CPUs") {
        return Ok(());
    }
    let cg = TestCgroup::new("advice-period")?;
    cg.set_quota(20_000, 100_000)?;
    let load = || workload::spin(1, &cg.procs_file(), Some(1));
    let before = run(&cg, None, 5, load)?;
    let flags = before.flags(&cg.rel, "long_throttle_waits");
    assert!(
        !flags.is_empty(),
        "long stalls flagged (kernel: {:.0} µs per throttled period)",
        before.stall_us()
    );
    let flag = median_flag(&flags, 0);
    let promised = 1.0 / (1.0 + expected_percent(&flag) / 100.0);
    let args = whatif_args(&flag);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let answer = before.whatif(&cg.rel, &args)?;
    let p99 = |v: &Value| v["stall_p99_ms"].as_f64().unwrap_or(f64::NAN) * 1e3;
    let (replayed, predicted) = (
        p99(&answer["replayed"]),
        p99(&answer["candidates"][0]["predicted"]),
    );
    let written = apply(&cg, &flag)?;
    let after = run(&cg, None, 5, load)?;
    let factor = before.stall_us() / after.stall_us();
    eprintln!(
        "whatif {args:?}: p99 stall replayed as recorded {replayed:.0} µs (kernel {:.0}), predicted {predicted:.0} µs (kernel after the change {:.0})",
        before.stall_us(),
        after.stall_us()
    );
    check_prediction("period", &answer, &after, 25.0);
    assert!(
        (predicted / after.stall_us() - 1.0).abs() <= 0.25,
        "whatif predicted a {predicted:.0} µs stall, the kernel measured {:.0} µs: {answer}",
        after.stall_us()
    );
    eprintln!(
        "period: {written:?}; stall {:.0} -> {:.0} µs per throttled period (kernel), {factor:.2}x shorter, promised {promised:.2}x",
        before.stall_us(),
        after.stall_us()
    );
    assert!(after.nr_throttled > 0, "still throttled, in shorter stalls");
    assert!(
        factor >= 0.75 * promised,
        "stalls {factor:.2}x shorter, promised {promised:.2}x"
    );
    Ok(())
}

/// Eight spinning threads burn a half-CPU quota in a quarter of the period on two CPUs: the flag
/// suggests a pool the size of the quota. Re-run with that many threads, the kernel throttles it
/// for less time per period, and the quota lasts later into the period, as far as promised
/// (within 25 %).
#[test]
fn the_suggested_thread_count_burns_the_quota_later() -> anyhow::Result<()> {
    if !can_trace_on_cpus(2, "needs 2 CPUs for 8 threads to outrun a half-CPU quota") {
        return Ok(());
    }
    let cg = TestCgroup::new("advice-threads")?;
    cg.set_quota(50_000, 100_000)?;
    let before = run(&cg, None, 5, || workload::spin(8, &cg.procs_file(), None))?;
    let flags = before.flags(&cg.rel, "many_threads_burn");
    assert!(!flags.is_empty(), "8 threads on a half-CPU quota flagged");
    let flag = median_flag(&flags, 0);
    let threads: usize = flag["change"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["knob"] == "thread pool size")
        .and_then(|c| c["value"].as_str()?.parse().ok())
        .unwrap_or_else(|| panic!("a thread count: {flag}"));
    let promised = 1.0 + expected_percent(&flag) / 100.0;
    let after = run(&cg, None, 5, || {
        workload::spin(threads, &cg.procs_file(), None)
    })?;
    let burned_in = |r: &Run| r.mean_burned_in_ms(&cg.rel);
    let (b0, b1) = (burned_in(&before), burned_in(&after));
    let per_period = |r: &Run| r.throttled_us / r.secs / 10.0;
    eprintln!(
        "threads: 8 -> {threads}; throttled {:.0} -> {:.0} µs per period (kernel); quota lasts {b0:.1} -> {b1:.1} ms, promised {promised:.2}x",
        per_period(&before),
        per_period(&after)
    );
    assert!(
        after.throttled_us / after.secs < 0.75 * before.throttled_us / before.secs,
        "throttled less with {threads} threads"
    );
    assert!(
        b1 >= 0.75 * promised * b0,
        "the quota lasts {b1:.1} ms, promised {:.1} ms",
        promised * b0
    );
    // The same eight threads under a whole CPU, as `whatif` predicts it from the first run.
    let answer = before.whatif(&cg.rel, &["--quota", "1"])?;
    cg.set_quota(100_000, 100_000)?;
    let whole = run(&cg, None, 5, || workload::spin(8, &cg.procs_file(), None))?;
    check_prediction("8 threads, 1 CPU", &answer, &whole, 100.0);
    Ok(())
}

/// A real JVM sized for the host (two app threads, G1 with two parallel GC threads on this
/// 2-CPU host) under half a CPU of quota burns it early in the period: the flag says to size the
/// pools to the quota (`-XX:ActiveProcessorCount`, the thread pool). Re-run with the JVM flag and
/// the pool as given, the quota lasts later into the period and the kernel throttles it for less
/// time per second.
#[test]
fn the_suggested_jvm_processor_count_burns_the_quota_later() -> anyhow::Result<()> {
    if !can_trace_on_cpus(
        2,
        "needs 2 CPUs for the JVM's threads to outrun a half-CPU quota",
    ) {
        return Ok(());
    }
    let gcburn = workload::GcBurn::compile("advice")?;
    let cg = TestCgroup::new("advice-jvm")?;
    cg.set_quota(50_000, 100_000)?;
    let jvm = |args: &[&str], threads: usize| {
        Task::spawn(
            gcburn.command(args, threads, 60),
            Some(&cg.procs_file()),
            None,
            false,
        )
    };
    let before = run(&cg, None, 6, || jvm(&[], 2))?;
    let flags = before.flags(&cg.rel, "many_threads_burn");
    assert!(
        !flags.is_empty(),
        "the host-sized JVM flagged (kernel: {} throttled periods)",
        before.nr_throttled
    );
    let flag = median_flag(&flags, 0);
    let change = |knob: &str| -> String {
        flag["change"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["knob"] == knob)
            .and_then(|c| c["value"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("{knob} in {flag}"))
    };
    let cpus = change("-XX:ActiveProcessorCount");
    let threads: usize = change("thread pool size").parse()?;
    let jvm_flag = format!("-XX:ActiveProcessorCount={cpus}");
    let after = run(&cg, None, 6, || jvm(&[&jvm_flag], threads))?;
    let burned_in = |r: &Run| r.mean_burned_in_ms(&cg.rel);
    let (b0, b1) = (burned_in(&before), burned_in(&after));
    let per_s = |r: &Run| r.throttled_us / r.secs / 1e3;
    eprintln!(
        "jvm: {jvm_flag}, {threads} app threads; throttled {:.0} -> {:.0} ms per second (kernel); quota lasts {b0:.1} -> {b1:.1} ms",
        per_s(&before),
        per_s(&after)
    );
    assert!(
        per_s(&after) < 0.75 * per_s(&before),
        "throttled less with {jvm_flag} and {threads} threads"
    );
    assert!(
        b1 > 1.25 * b0,
        "the quota lasts longer: {b0:.1} -> {b1:.1} ms"
    );
    Ok(())
}

/// Pins every thread of `pid` to `cpu`.
fn pin(pid: u32, cpu: usize) -> anyhow::Result<()> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
        let tid: i32 = t.file_name().to_string_lossy().parse()?;
        // SAFETY: a zeroed cpu_set_t is an empty set; sched_setaffinity reads it only.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set)
        };
        anyhow::ensure!(
            rc == 0,
            "sched_setaffinity({tid}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The run-queue wait of `task` under `cgtrace stream` for `secs` windows: the stream's lines,
/// and the kernel's `run_delay` of its threads per second over those windows (ms/s).
fn waited(task: &Task, secs: usize) -> anyhow::Result<(Vec<Value>, f64)> {
    let mut s = Stream::start(&["--interval", "1000"])?;
    s.windows(1)?;
    let d0 = cgtrace_tests::node::run_delay_ns(task.pid());
    let t0 = Instant::now();
    s.windows(secs)?;
    let d1 = cgtrace_tests::node::run_delay_ns(task.pid());
    let per_s = (d1 - d0) as f64 / 1e6 / t0.elapsed().as_secs_f64();
    let (_, lines) = s.stop(SIGINT)?;
    Ok((lines, per_s))
}

/// Run-queue advice, applied: a CPU-bound loop at a quarter of its neighbour's weight, both on
/// CPU 0, waits long behind it; `runq_long_waits` names the neighbour (the blame ledger's
/// culprit) with the change to move it to other CPUs. Moved there as the flag says (its threads
/// pinned to CPU 1), the same loop waits less — the kernel's `run_delay` of its thread per
/// second — by at least the share the flag promised (±25 points), and no flag names it again.
#[test]
fn moving_the_named_neighbour_takes_away_the_wait_it_caused() -> anyhow::Result<()> {
    if !can_trace_on_cpus(2, "needs 2 CPUs: one shared, one to move the neighbour to") {
        return Ok(());
    }
    let victim = TestCgroup::new("advice-victim")?;
    let neighbour = TestCgroup::new("advice-neighbour")?;
    let (file, value) = if victim.dir.join("cpu.shares").exists() {
        ("cpu.shares", "256")
    } else {
        ("cpu.weight", "25")
    };
    std::fs::write(victim.dir.join(file), value)?;
    let v = workload::spin(1, &victim.procs_file(), Some(0))?;
    let n = workload::spin(1, &neighbour.procs_file(), Some(0))?;
    let (lines, before) = waited(&v, 5)?;
    let flags = advice::flags(&lines, &victim.rel, "runq_long_waits");
    assert!(
        !flags.is_empty(),
        "a loop at a quarter of its neighbour's weight on one CPU waits long ({before:.0} ms/s of run_delay)"
    );
    let flag = flags.last().cloned().unwrap_or_default();
    let moves = flag["change"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["kind"] == "move" && c["knob"] == neighbour.rel.as_str());
    assert!(
        moves,
        "the flag says to move the neighbour {}: {flag}",
        neighbour.rel
    );
    let promised = -expected_percent(&flag);
    pin(n.pid(), 1)?;
    let (lines, after) = waited(&v, 5)?;
    let cut = (1.0 - after / before) * 100.0;
    // Other causes may still be flagged (cgtrace starting beside it on CPU 0 is host work in the
    // root cgroup), the neighbour no more.
    let still = advice::flags(&lines, &victim.rel, "runq_long_waits")
        .iter()
        .filter(|f| {
            f["message"]
                .as_str()
                .is_some_and(|m| m.contains(&neighbour.rel))
        })
        .count();
    eprintln!(
        "neighbour moved to CPU 1: run_delay {before:.0} -> {after:.1} ms/s (kernel), cut {cut:.0} %, promised {promised:.0} %; flags {} -> {still}: {}",
        flags.len(),
        flag["message"]
    );
    assert!(
        cut >= promised - 25.0,
        "the cut ({cut:.0} %) is what the flag promised ({promised:.0} %)"
    );
    assert_eq!(still, 0, "no flag names the neighbour once it is gone");
    Ok(())
}
