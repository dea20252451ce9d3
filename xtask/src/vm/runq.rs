//! The `runq` scenario (`tests/vm/runq.sh`): run-queue latency lands on the right cgroup2 paths.

use super::*;

/// What the runq scenario's NDJSON showed, and what was wrong with it.
#[derive(Clone, Default, Debug)]
pub(super) struct StreamReport {
    pub(super) windows: usize,
    pub(super) seen: u64,
    pub(super) dropped: u64,
    pub(super) busy_count: u64,
    pub(super) quiet_count: u64,
    pub(super) runq_mode: Option<String>,
    /// The quiet sleeper's wait (µs), and the part of it the blame ledger charged to the busy
    /// loops' cgroup.
    pub(super) quiet_wait_us: f64,
    pub(super) quiet_by_busy_us: f64,
    /// The guest kernel's `run_delay` of the quiet sleeper (µs), from the `CGTRACE-RUNDELAY`
    /// line.
    pub(super) quiet_run_delay_us: Option<f64>,
    /// Cgroup windows whose `runq.blame` parts do not add up to their wait.
    pub(super) blame_mismatches: Vec<String>,
    pub(super) failures: Vec<String>,
}

/// Checks the `cgtrace stream` output between the stream markers in a captured serial log.
/// Lines that do not start with '{' (kernel noise) are ignored.
pub(super) fn check_stream(expected_kernel: &str, lines: &[String]) -> StreamReport {
    let mut report = StreamReport::default();
    let Some(objects) = stream_objects(lines, &mut report.failures) else {
        return report;
    };
    report.quiet_run_delay_us = run_delay_us(lines, "quiet_ns", &mut report.failures);
    match objects.iter().find(|o| o["type"] == "hello") {
        Some(hello) => {
            check_hello(expected_kernel, hello, &mut report.failures);
            report.runq_mode = hello_text(hello, "/families/runq/mode");
        }
        None => report.failures.push("no hello line".into()),
    }
    let mut dropped_reported = false;
    for window in objects.iter().filter(|o| o["type"] == "window") {
        report.windows += 1;
        report.seen += window
            .pointer("/events/seen")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if let Some(d) = window.pointer("/events/dropped").and_then(Value::as_u64) {
            report.dropped += d;
            dropped_reported = true;
        }
        report.busy_count += runq_count(window, "/cgtrace-vm-busy");
        report.quiet_count += runq_count(window, "/cgtrace-vm-quiet");
        check_blame(window, &mut report);
    }
    let f = &mut report.failures;
    if report.windows == 0 {
        f.push("no window lines".into());
    } else if !dropped_reported {
        f.push("no window reports events.dropped".into());
    }
    if report.busy_count == 0 {
        f.push("no runq count for cgroup2 /cgtrace-vm-busy".into());
    }
    if report.quiet_count == 0 {
        f.push("no runq count for cgroup2 /cgtrace-vm-quiet".into());
    }
    if report.quiet_count > 0
        && report.quiet_by_busy_us < BLAME_NEIGHBOUR_MIN * report.quiet_wait_us
    {
        f.push(format!(
            "the blame ledger charged {:.0} of /cgtrace-vm-quiet's {:.0} µs of waiting to \
             /cgtrace-vm-busy, whose loops held its CPU (want at least {:.0} %)",
            report.quiet_by_busy_us,
            report.quiet_wait_us,
            BLAME_NEIGHBOUR_MIN * 100.0
        ));
    }
    if let Some(kernel) = report.quiet_run_delay_us {
        let before = f.len();
        check_run_delay("/cgtrace-vm-quiet", report.quiet_wait_us, kernel, lines, f);
        // The kernel's count of the sleeper's runs tells lost waits from a skew in timing.
        let runs = run_delay_us(lines, "quiet_runs", &mut Vec::new()).map(|r| r * 1e3);
        if let (Some(last), Some(runs)) = (f.get_mut(before), runs) {
            last.push_str(&format!(
                "; {} waits counted, {runs:.0} runs by the kernel",
                report.quiet_count
            ));
        }
    }
    f.extend(report.blame_mismatches.iter().take(3).cloned());
    report
}

/// Adds up one window's blame: the quiet sleeper's wait and what of it was charged to the busy
/// loops; and for every cgroup with a `runq.blame`, its parts must add up to its wait.
fn check_blame(window: &Value, report: &mut StreamReport) {
    let Some(cgroups) = window["cgroups"].as_array() else {
        return;
    };
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    for c in cgroups {
        let runq = &c["runq"];
        let b = &runq["blame"];
        let neighbours = b["neighbours"].as_array().cloned().unwrap_or_default();
        if c["path"] == "/cgtrace-vm-quiet" {
            report.quiet_wait_us += f(runq, "sum_us");
            report.quiet_by_busy_us += neighbours
                .iter()
                .filter(|p| p["path"] == "/cgtrace-vm-busy")
                .map(|p| f(p, "wait_us"))
                .sum::<f64>();
        }
        report.blame_mismatches.extend(blame_mismatch(window, c));
    }
}

/// A failure when a cgroup's `runq.blame` parts in `window` do not add up to its wait (within
/// 1 % and 1 µs of rounding).
pub(super) fn blame_mismatch(window: &Value, c: &Value) -> Option<String> {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let runq = &c["runq"];
    let b = &runq["blame"];
    if !b.is_object() {
        return None;
    }
    let named: f64 = b["neighbours"]
        .as_array()
        .map_or(0.0, |n| n.iter().map(|p| f(p, "wait_us")).sum());
    let parts = f(b, "throttled_own_us")
        + f(b, "throttled_ancestor_us")
        + f(b, "siblings_us")
        + named
        + f(b, "neighbours_other_us")
        + f(b, "kernel_us")
        + f(b, "idle_us")
        + f(b, "idle_elsewhere_us")
        + f(b, "older_others_us")
        + f(b, "irq_us")
        + f(b, "steal_us")
        + f(b, "unattributed_us");
    let wait = f(runq, "sum_us");
    ((parts - wait).abs() > wait * 0.01 + 1.0).then(|| {
        format!(
            "window {}: {}'s blame parts add up to {parts:.1} µs, its wait is {wait:.1} µs",
            window["seq"], c["path"]
        )
    })
}

/// The JSON objects between the stream markers; `None` (with a failure) if the markers are
/// missing. Lines that start with '{' but do not parse are failures.
pub(super) fn stream_objects(lines: &[String], failures: &mut Vec<String>) -> Option<Vec<Value>> {
    let begin = lines.iter().position(|l| l.trim() == STREAM_BEGIN);
    let Some(begin) = begin else {
        failures.push(format!("no {STREAM_BEGIN} line"));
        return None;
    };
    let rest = &lines[begin + 1..];
    let Some(end) = rest.iter().position(|l| l.trim() == STREAM_END) else {
        failures.push(format!("no {STREAM_END} line"));
        return None;
    };
    let mut objects = Vec::new();
    for line in rest[..end]
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with('{'))
    {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => objects.push(v),
            Err(e) => failures.push(format!("bad JSON line ({e}): {:.120}", line)),
        }
    }
    Some(objects)
}

/// What every scenario wants of the `hello` line: pure cgroup2 and the booted kernel.
pub(super) fn check_hello(expected_kernel: &str, hello: &Value, f: &mut Vec<String>) {
    let text = |p: &str| {
        hello
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("<missing>")
    };
    if text("/cgroup/layout") != "v2" {
        f.push(format!(
            "hello cgroup.layout is {}, want v2",
            text("/cgroup/layout")
        ));
    }
    if text("/cgroup/runq_hierarchy") != "cgroup2" {
        f.push(format!(
            "hello cgroup.runq_hierarchy is {}, want cgroup2",
            text("/cgroup/runq_hierarchy")
        ));
    }
    if !text("/kernel").starts_with(&format!("{expected_kernel}.")) {
        f.push(format!(
            "hello kernel is {}, want {expected_kernel}.*",
            text("/kernel")
        ));
    }
    // Every matrix kernel has fair group scheduling: waits are read from the kernel's own stamps
    // (6.18+) or timed in the run queue's clock, the clock of run_delay.
    let detail = text("/families/runq/detail");
    if !detail.contains("waits timed in the run queue's clock")
        && !detail.contains("kernel's own stamps")
    {
        f.push(format!(
            "hello families.runq.detail times waits in neither the run queue's clock nor the kernel's own stamps: {detail}"
        ));
    }
    // The direct variants verify on every matrix kernel: the probe-read fallback is for kernels
    // that refuse them, and taking it here means a change pushed a program over the verifier's
    // budget (it costs more per switch, and seconds of verifying at every start).
    if !detail.contains("direct BTF field access") {
        f.push(format!(
            "hello families.runq.detail: the direct variants did not load: {detail}"
        ));
    }
}

pub(super) fn hello_text(hello: &Value, pointer: &str) -> Option<String> {
    hello
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// `runq.count` of the cgroup2 element with `path` in one window (0 if absent).
pub(super) fn runq_count(window: &Value, path: &str) -> u64 {
    let Some(cgroups) = window["cgroups"].as_array() else {
        return 0;
    };
    cgroups
        .iter()
        .filter(|c| c["path"] == path && c["hierarchy"] == "cgroup2")
        .filter_map(|c| c.pointer("/runq/count").and_then(Value::as_u64))
        .sum()
}

/// The word after `key=` on the scenario's `CGTRACE-RUNDELAY` line.
fn run_delay_field<'a>(lines: &'a [String], key: &str) -> Option<&'a str> {
    lines
        .iter()
        .find_map(|l| l.split_once(RUNDELAY).map(|(_, r)| r))?
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `key` (ns) of the scenario's `CGTRACE-RUNDELAY` line, in µs (a failure when missing).
pub(super) fn run_delay_us(lines: &[String], key: &str, failures: &mut Vec<String>) -> Option<f64> {
    let value = run_delay_field(lines, key).and_then(|v| v.parse::<u64>().ok());
    if value.is_none() {
        failures.push(format!("no {key} on a {RUNDELAY} line"));
    }
    value.map(|ns| ns as f64 / 1e3)
}

/// A cgroup's run-queue wait summed over the windows against its tasks' `run_delay`.
/// The guest's clocksource is on the line: off the TSC, the scheduler clock that run_delay uses
/// and CLOCK_MONOTONIC disagree within each tick (see `qemu_command`), and the failure says so.
pub(super) fn check_run_delay(
    path: &str,
    ours_us: f64,
    kernel_us: f64,
    lines: &[String],
    f: &mut Vec<String>,
) {
    if kernel_us <= 0.0 || (ours_us / kernel_us - 1.0).abs() > RUN_DELAY_TOLERANCE {
        let clock = match run_delay_field(lines, "clocksource") {
            Some("tsc") | None => String::new(),
            Some(other) => format!(
                " (the guest kept time on {other}, not the TSC: its scheduler clock and \
                 CLOCK_MONOTONIC differ within each tick)"
            ),
        };
        f.push(format!(
            "{path}: run-queue wait {ours_us:.0} µs vs the kernel's run_delay {kernel_us:.0} µs \
             (ratio {:.4}, allowed ±{:.0} %){clock}",
            ours_us / kernel_us.max(1e-9),
            RUN_DELAY_TOLERANCE * 100.0
        ));
    }
}
