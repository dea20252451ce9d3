//! `report --compare BEFORE AFTER` closed on the real kernel: a cgroup whose busy loop exceeds
//! its CPU quota is recorded, its quota raised well above its demand, and recorded again; the
//! comparison must show its throttled periods per second drop as the kernel's own `cpu.stat`
//! deltas (read here, before and after each recording) say they did, the throttle flag it had
//! cleared, and the same in `--json` and in the `--html` page rendered by headless Chromium.
use std::{fs, path::Path, time::Instant};

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    cgroup::TestCgroup,
    chromium,
    record::cgtrace,
    scratch::{Scratch, path_str as s},
    workload,
};
use serde_json::Value;

const SECS: u64 = 6;

/// Records `SECS` seconds to `file`; returns the kernel's `nr_throttled` delta of `cg` over the
/// recorder's run, and the seconds it ran (its start attaching programs included).
fn record(cg: &TestCgroup, file: &Path) -> Result<(u64, f64)> {
    let (n0, _) = cg.kernel_throttling()?;
    let t0 = Instant::now();
    let (code, _, err) = cgtrace(&[
        "record",
        "-o",
        s(file),
        "--duration",
        &SECS.to_string(),
        "--events",
    ])?;
    let (n1, _) = cg.kernel_throttling()?;
    let took = t0.elapsed().as_secs_f64();
    anyhow::ensure!(code == 0, "record failed: {err}");
    Ok((n1 - n0, took))
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
    let (kb, tb) = record(&cg, &before)?;
    // Well above what three threads can use on this host's CPUs.
    cg.set_quota(4_000_000, 100_000)?;
    let (ka, ta) = record(&cg, &after)?;
    assert!(
        kb as f64 / SECS as f64 >= 5.0,
        "the kernel throttled the cgroup before: {kb} periods in {SECS} s"
    );

    let (code, out, err) = cgtrace(&["report", "--compare", s(&before), s(&after), "--json"])?;
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(&out)?;
    let mine = c["cgroups"]
        .as_array()
        .context("cgroups")?
        .iter()
        .find(|g| g["path"].as_str() == Some(cg.rel.as_str()))
        .with_context(|| format!("{} among the changed cgroups: {out}", cg.rel))?;
    let per_s = |side: &str| {
        mine[side]["throttled_periods_per_s"]
            .as_f64()
            .unwrap_or(0.0)
    };
    let (pb, pa) = (per_s("before"), per_s("after"));
    // The kernel's rates over the recorders' runs.
    let (rb, ra) = (kb as f64 / tb, ka as f64 / ta);
    eprintln!(
        "throttled periods/s: cgtrace {pb:.1} → {pa:.1}, kernel cpu.stat {rb:.1} → {ra:.1} ({kb} periods in {tb:.1} s → {ka} in {ta:.1} s); flags cleared {}",
        mine["flags_cleared"]
    );
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
    let flagged: Vec<String> = mine["before"]["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .filter(|f| throttle_codes.contains(&f.as_str()))
        .collect();
    let cleared: Vec<&str> = mine["flags_cleared"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !flagged.is_empty(),
        "a throttle flag was raised before: {mine}"
    );
    // Every throttle flag raised before is cleared (others may clear too: runq_long_waits
    // does when the host is otherwise idle, not when three threads still queue behind load).
    assert!(
        flagged.iter().all(|f| cleared.contains(&f.as_str())),
        "every throttle flag raised before is cleared after: {flagged:?} cleared {cleared:?}"
    );

    let (code, text, err) = cgtrace(&["report", "--compare", s(&before), s(&after)])?;
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&cg.rel) && text.contains("flags cleared:"),
        "{text}"
    );

    let html = scratch.file("compare.html");
    let (code, _, err) = cgtrace(&[
        "report",
        "--compare",
        s(&before),
        s(&after),
        "--html",
        "-o",
        s(&html),
    ])?;
    assert_eq!(code, 0, "{err}");
    let dom = chromium::dom(&html)?;
    assert!(dom.contains(&cg.rel), "the page names the cgroup");
    assert!(
        dom.contains("throttled periods (/s)"),
        "the throttled periods heatmap"
    );
    assert!(
        dom.contains("background:rgba(30,160,60"),
        "a green (better) cell"
    );
    assert!(dom.contains(&flagged[0]), "the cleared flag on the page");

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
    drop(fs::remove_file(&html));
    Ok(())
}
