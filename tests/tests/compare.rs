//! `report --compare BEFORE AFTER` closed on the real kernel: a cgroup whose busy loop exceeds
//! its CPU quota is recorded, its quota raised well above its demand, and recorded again; the
//! comparison must show its throttled periods per second drop as the kernel's own `cpu.stat`
//! deltas (read here, before and after each recording) say they did, the throttle flag it had
//! cleared, and the same in `--json` and in the `--html` page rendered by headless Chromium.
//! Then the same around the change a flag suggests: bursts throttled below their quota are
//! recorded, the burst the flag names written to the cgroup exactly as given, and recorded again.
use std::{fs, path::Path, process::Command, time::Instant};

use anyhow::{Context, Result};
use cgtrace_tests::{
    advice, can_trace, can_trace_on_cpus,
    cgroup::TestCgroup,
    chromium,
    record::cgtrace,
    scratch::{Scratch, path_str as s},
    workload::{self, Task},
};
use serde_json::Value;

const SECS: u64 = 6;

/// One recording, and the kernel's `nr_throttled` delta of the cgroup over the recorder's run.
struct Recorded {
    nr_throttled: u64,
    /// The seconds the recorder ran (its start attaching programs included).
    secs: f64,
    /// Its stream (`record --stream`).
    lines: Vec<Value>,
}

impl Recorded {
    fn throttled_per_s(&self) -> f64 {
        self.nr_throttled as f64 / self.secs
    }
}

/// Records `secs` seconds to `file`, its stream kept.
fn record(cg: &TestCgroup, file: &Path, secs: u64) -> Result<Recorded> {
    let (n0, _) = cg.kernel_throttling()?;
    let t0 = Instant::now();
    let (code, out, err) = cgtrace(&[
        "record",
        "-o",
        s(file),
        "--duration",
        &secs.to_string(),
        "--events",
        "--stream",
    ])?;
    let (n1, _) = cg.kernel_throttling()?;
    let took = t0.elapsed().as_secs_f64();
    anyhow::ensure!(code == 0, "record failed: {err}");
    let lines = out
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<Value>, _>>()
        .context("record --stream prints NDJSON")?;
    Ok(Recorded {
        nr_throttled: n1 - n0,
        secs: took,
        lines,
    })
}

/// `report --compare --json`'s entry for the cgroup at `path`.
fn compared(before: &Path, after: &Path, path: &str) -> Result<Value> {
    let (code, out, err) = cgtrace(&["report", "--compare", s(before), s(after), "--json"])?;
    anyhow::ensure!(code == 0, "{err}");
    let c: Value = serde_json::from_str(&out)?;
    c["cgroups"]
        .as_array()
        .context("cgroups")?
        .iter()
        .find(|g| g["path"].as_str() == Some(path))
        .cloned()
        .with_context(|| format!("{path} among the changed cgroups: {out}"))
}

/// Throttled periods per second before and after, by the comparison's entry `mine` and by the
/// kernel over the recorders' runs: `[cgtrace before, after, kernel before, after]`, printed
/// with `what` changed.
fn rates(mine: &Value, kb: &Recorded, ka: &Recorded, what: &str) -> [f64; 4] {
    let per_s = |side: &str| {
        mine[side]["throttled_periods_per_s"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let r = [
        per_s("before"),
        per_s("after"),
        kb.throttled_per_s(),
        ka.throttled_per_s(),
    ];
    eprintln!(
        "{what}: throttled periods/s cgtrace {:.2} → {:.2}, kernel cpu.stat {:.2} → {:.2} ({} periods in {:.1} s → {} in {:.1} s); flags cleared {}",
        r[0],
        r[1],
        r[2],
        r[3],
        kb.nr_throttled,
        kb.secs,
        ka.nr_throttled,
        ka.secs,
        mine["flags_cleared"]
    );
    r
}

/// The flag codes in `v` (an array of codes).
fn codes(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

/// The comparison's text and its HTML page (rendered by headless Chromium) name `path` and
/// `flag`, and the page has the throttled-periods heatmap with a cell gone better.
fn check_text_and_page(
    scratch: &Scratch,
    before: &Path,
    after: &Path,
    path: &str,
    flag: &str,
) -> Result<()> {
    let (code, text, err) = cgtrace(&["report", "--compare", s(before), s(after)])?;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(path) && text.contains("flags cleared:") && text.contains(flag),
        "{text}"
    );
    let html = scratch.file("compare.html");
    let (code, _, err) = cgtrace(&[
        "report",
        "--compare",
        s(before),
        s(after),
        "--html",
        "-o",
        s(&html),
    ])?;
    assert_eq!(code, 0, "{err}");
    let dom = chromium::dom(&html)?;
    assert!(dom.contains(path), "the page names the cgroup");
    assert!(
        dom.contains("throttled periods (/s)"),
        "the throttled periods heatmap"
    );
    assert!(
        dom.contains("background:rgba(30,160,60"),
        "a green (better) cell"
    );
    assert!(dom.contains(flag), "the cleared flag on the page");
    drop(fs::remove_file(&html));
    Ok(())
}

#[test]
fn raising_a_quota_shows_as_fewer_throttled_periods_and_a_cleared_flag() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("compare")?;
    let (before, after) = (scratch.file("before.cgtr"), scratch.file("after.cgtr"));
    let cg = TestCgroup::new("cmp-quota")?;
    // Three spinning threads under 0.2 CPUs: throttled every period, the quota burned early.
    cg.set_quota(20_000, 100_000)?;
    let _spin = workload::spin(3, &cg.procs_file(), None)?;
    let kb = record(&cg, &before, SECS)?;
    // Well above what three threads can use on this host's CPUs.
    cg.set_quota(4_000_000, 100_000)?;
    let ka = record(&cg, &after, SECS)?;
    assert!(
        kb.nr_throttled as f64 / SECS as f64 >= 5.0,
        "the kernel throttled the cgroup before: {} periods in {SECS} s",
        kb.nr_throttled
    );

    let mine = compared(&before, &after, &cg.rel)?;
    let [pb, pa, rb, ra] = rates(&mine, &kb, &ka, "quota raised");
    assert!(
        (pb - rb).abs() <= 0.25 * rb,
        "before: {pb:.1}/s by cgtrace against {rb:.1}/s by the kernel"
    );
    assert!(
        (pa - ra).abs() <= 0.25 * rb,
        "after: {pa:.1}/s by cgtrace against {ra:.1}/s by the kernel"
    );
    assert!(
        ra < 0.2 * rb,
        "the kernel says the raise worked: {rb:.1} → {ra:.1}/s"
    );
    assert!(
        pa < 0.2 * pb,
        "the comparison shows the drop: {pb:.1} → {pa:.1}/s"
    );
    // The throttle family's flags (others, e.g. run-queue waits of three threads on this host's
    // CPUs, may stay).
    let throttle_codes = [
        "throttled_below_quota",
        "many_threads_burn",
        "long_throttle_waits",
    ];
    let flagged: Vec<String> = codes(&mine["before"]["flags"])
        .into_iter()
        .filter(|f| throttle_codes.contains(&f.as_str()))
        .collect();
    let cleared = codes(&mine["flags_cleared"]);
    assert!(
        !flagged.is_empty(),
        "a throttle flag was raised before: {mine}"
    );
    // Every throttle flag raised before is cleared (others may clear too: runq_long_waits
    // does when the host is otherwise idle, not when three threads still queue behind load).
    assert!(
        flagged.iter().all(|f| cleared.contains(f)),
        "every throttle flag raised before is cleared after: {flagged:?} cleared {cleared:?}"
    );
    check_text_and_page(&scratch, &before, &after, &cg.rel, &flagged[0])?;

    // One unreadable file: an error naming which.
    let missing = scratch.file("missing.cgtr");
    let (code, _, err) = cgtrace(&["report", "--compare", s(&before), s(&missing)])?;
    assert_ne!(code, 0);
    assert!(
        err.starts_with("cgtrace: error: AFTER recording")
            && err.ends_with('\n')
            && err.lines().count() == 1,
        "{err}"
    );
    Ok(())
}

/// Bursts under their quota (2 threads × 80 ms every 1.03 s under 1 CPU, as advice.rs runs them)
/// are recorded and flagged `throttled_below_quota`; the burst the flag names is written to the
/// cgroup exactly as given and the bursts recorded again. The kernel's `nr_throttled` says the
/// burst worked (≥ 80 % fewer throttled periods per second), and the comparison shows the same
/// drop and the flag cleared, in JSON, text and the page.
#[test]
fn applying_the_suggested_burst_shows_as_fewer_throttled_periods_and_a_cleared_flag() -> Result<()>
{
    if !can_trace_on_cpus(2, "needs 2 CPUs for a burst to outrun a 1-CPU quota") {
        return Ok(());
    }
    const FLAG: &str = "throttled_below_quota";
    let scratch = Scratch::new("compare-burst")?;
    let (before, after) = (scratch.file("before.cgtr"), scratch.file("after.cgtr"));
    let cg = TestCgroup::new("cmp-burst")?;
    let acct = cg.cpuacct_twin()?;
    cg.set_quota(100_000, 100_000)?;
    let mut cmd = Command::new(workload::bin("burst"));
    cmd.args(["2", "80", "1030"]);
    let bursts = Task::spawn(cmd, Some(&cg.procs_file()), None, false)?;
    if let Some(a) = &acct {
        fs::write(a.procs_file(), bursts.pid().to_string())?;
    }
    let kb = record(&cg, &before, 8)?;
    let flags = advice::flags(&kb.lines, &cg.rel, FLAG);
    assert!(
        !flags.is_empty(),
        "bursts under the quota flagged (kernel: {} throttled periods)",
        kb.nr_throttled
    );
    let written = advice::apply(&cg, &advice::median_flag(&flags, 0))?;
    let ka = record(&cg, &after, 8)?;
    drop(bursts);

    let mine = compared(&before, &after, &cg.rel)?;
    let [pb, pa, rb, ra] = rates(&mine, &kb, &ka, &format!("{written:?}"));
    assert!(
        kb.nr_throttled > 0,
        "the kernel throttled the bursts before"
    );
    assert!(
        ra <= 0.2 * rb,
        "the kernel says the burst worked: {rb:.2} → {ra:.2}/s"
    );
    assert!(
        pb > 0.0,
        "the comparison shows the throttling before: {mine}"
    );
    assert!(
        pa <= 0.2 * pb,
        "the comparison shows the drop: {pb:.2} → {pa:.2}/s"
    );
    assert!(
        codes(&mine["before"]["flags"]).iter().any(|f| f == FLAG)
            && codes(&mine["flags_cleared"]).iter().any(|f| f == FLAG),
        "{FLAG} raised before and cleared after: {mine}"
    );
    check_text_and_page(&scratch, &before, &after, &cg.rel, FLAG)
}
