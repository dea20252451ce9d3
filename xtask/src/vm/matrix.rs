//! `vm run` and `vm matrix`: boots per kernel and scenario, the rows and the verdict table.

use super::*;

pub(super) fn run_one(cache: &Path, args: &RunArgs) -> Result<()> {
    let spec = kernel_spec(&args.kernel)?;
    let bins: Vec<GuestBin> = args
        .bins
        .iter()
        .map(|p| GuestBin {
            host: p.clone(),
            guest_name: file_name(p),
        })
        .collect();
    let script = &args.script;
    let scenario = fs::read(script).with_context(|| format!("reading {}", script.display()))?;
    let outcome = boot(cache, spec, spec.name, &bins, &scenario, &args.boot)?;
    println!("{}: {}", spec.name, outcome.summary());
    ensure!(
        outcome.passed(),
        "{}: no `{EXIT_MARKER} 0` in the serial log",
        spec.name
    );
    Ok(())
}

pub(super) fn run_matrix(cache: &Path, args: &MatrixArgs) -> Result<()> {
    let bins = [GuestBin {
        host: args.bin.clone(),
        guest_name: "cgtrace".into(),
    }];
    let runq = matches!(args.scenario, Scenario::Runq | Scenario::All);
    let throttle = matches!(args.scenario, Scenario::Throttle | Scenario::All);
    let reads = matches!(args.scenario, Scenario::Reads | Scenario::All);
    let mut reads_rows: Vec<(&'static str, String, ReadsReport)> = Vec::new();
    let mut rows = Vec::new();
    let mut throttle_rows = Vec::new();
    for spec in select_kernels(&args.kernel) {
        if runq {
            println!("=== kernel {} ===", spec.name);
            let row = match boot(
                cache,
                spec,
                spec.name,
                &bins,
                RUNQ_SCENARIO.as_bytes(),
                &args.boot,
            ) {
                Ok(outcome) => matrix_row(spec, &outcome),
                Err(e) => MatrixRow::error(spec, format!("{e:#}")),
            };
            rows.push(row);
        }
        if reads {
            println!("=== kernel {} reads ===", spec.name);
            let label = format!("{}-reads", spec.name);
            let mut opts = args.boot.clone();
            opts.append = format!(
                "{} cgtrace.reads_mode={}",
                opts.append,
                reads::expected_mode(spec.name)
            )
            .trim()
            .to_string();
            let report = match boot(cache, spec, &label, &bins, READS_SCENARIO.as_bytes(), &opts) {
                Ok(outcome) => {
                    let mut failures = Vec::new();
                    if !outcome.passed() {
                        failures.push(format!("guest: {}", outcome.summary()));
                    }
                    let objects = stream_objects(&outcome.lines, &mut failures);
                    let r = check_reads(spec.name, objects, &outcome.lines, failures);
                    reads_rows.push((spec.name, outcome_timing(&outcome), r));
                    None
                }
                Err(e) => Some(e),
            };
            if let Some(e) = report {
                reads_rows.push((
                    spec.name,
                    "-".into(),
                    ReadsReport {
                        failures: vec![format!("{e:#}")],
                        ..ReadsReport::default()
                    },
                ));
            }
        }
        if !throttle {
            continue;
        }
        for &mode in &args.throttle_modes {
            println!("=== kernel {} throttle {} ===", spec.name, mode.as_str());
            let mut opts = args.boot.clone();
            opts.append = format!(
                "{} cgtrace.throttle_mode={} cgtrace.throttle_secs={} cgtrace.throttle_threads={}",
                opts.append,
                mode.as_str(),
                args.throttle_secs,
                args.throttle_threads
            )
            .trim()
            .to_string();
            let label = format!("{}-throttle-{}", spec.name, mode.as_str());
            let scenario = THROTTLE_SCENARIO.as_bytes();
            let row = match boot(cache, spec, &label, &bins, scenario, &opts) {
                Ok(outcome) => throttle_row(spec, mode, &outcome),
                Err(e) => ThrottleRow::error(spec, mode, format!("{e:#}")),
            };
            throttle_rows.push(row);
        }
    }
    if throttle
        && args.wide_smp > 0
        && let Some(spec) = select_kernels(&args.kernel)
            .into_iter()
            .find(|s| s.name == "6.12")
    {
        let cpus = args.wide_smp;
        println!("=== kernel {} throttle auto, {cpus} CPUs ===", spec.name);
        let mut opts = args.boot.clone();
        opts.smp = cpus;
        opts.mem = opts.mem.max(2048);
        // Booting and loading under TCG slow down with the vCPU count.
        opts.timeout = opts.timeout.max(150) + u64::from(cpus) * 4;
        // Every loop pinned, one per vCPU, the ancestor-quota loop alone on the last: unpinned
        // under TCG, a loop sharing a vCPU waited behind a neighbour's slices (stretched by the
        // host) for more than half of its wait, and two loops on one CPU broke the loops/CPUs
        // estimate of the throttled wait. The ancestor's quota is 20 %, not 2 %: a vCPU the host
        // leaves unscheduled overruns a quota by up to ~180 ms, which at 2 ms a period kept that
        // loop throttled in debt past the end of the run.
        opts.append = format!(
            "{} cgtrace.throttle_mode=auto cgtrace.throttle_secs={} cgtrace.throttle_threads={} \
             cgtrace.throttle_quota={} cgtrace.throttle_anc_quota=20000 \
             cgtrace.throttle_pin=1",
            opts.append,
            args.throttle_secs,
            cpus.saturating_sub(1).max(1),
            u64::from(cpus / 4).max(1) * 100_000
        )
        .trim()
        .to_string();
        let label = format!("{}-throttle-wide{cpus}", spec.name);
        let mut row = match boot(
            cache,
            spec,
            &label,
            &bins,
            THROTTLE_SCENARIO.as_bytes(),
            &opts,
        ) {
            Ok(outcome) => {
                let mut row = throttle_row(spec, ThrottleMode::Auto, &outcome);
                if let Some(r) = &row.report {
                    let extra = check_wide(r, cpus);
                    row.failures.extend(extra);
                }
                row
            }
            Err(e) => ThrottleRow::error(spec, ThrottleMode::Auto, format!("{e:#}")),
        };
        row.kernel = Box::leak(format!("{} x{cpus}", spec.name).into_boxed_str());
        throttle_rows.push(row);
    }
    print_table(&rows, &throttle_rows);
    print_reads_table(&reads_rows);
    let failed = rows.iter().filter(|r| !r.failures.is_empty()).count()
        + reads_rows
            .iter()
            .filter(|r| !r.2.failures.is_empty())
            .count()
        + throttle_rows
            .iter()
            .filter(|r| !r.failures.is_empty())
            .count();
    let total = rows.len() + throttle_rows.len() + reads_rows.len();
    println!("{} passed, {failed} failed", total - failed);
    if failed > 0 {
        // The summary stays the last line of the output.
        std::process::exit(1);
    }
    Ok(())
}

pub(super) struct MatrixRow {
    pub(super) kernel: &'static str,
    pub(super) uname: String,
    pub(super) timing: String,
    pub(super) report: Option<StreamReport>,
    pub(super) failures: Vec<String>,
}

impl MatrixRow {
    pub(super) fn error(spec: &'static KernelSpec, error: String) -> Self {
        let (uname, timing) = ("-".into(), "-".into());
        Self {
            kernel: spec.name,
            uname,
            timing,
            report: None,
            failures: vec![error],
        }
    }
}

pub(super) fn matrix_row(spec: &'static KernelSpec, outcome: &Outcome) -> MatrixRow {
    let report = check_stream(spec.name, &outcome.lines);
    let mut failures = report.failures.clone();
    if !outcome.passed() {
        failures.insert(0, format!("guest: {}", outcome.summary()));
    }
    MatrixRow {
        kernel: spec.name,
        uname: outcome.uname.clone().unwrap_or_else(|| "-".into()),
        timing: outcome_timing(outcome),
        report: Some(report),
        failures,
    }
}

/// "<seconds to init>/<seconds in total>" of one boot.
pub(super) fn outcome_timing(outcome: &Outcome) -> String {
    let boot = outcome
        .booted_after
        .map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64()));
    format!("{boot}/{:.1}", outcome.elapsed.as_secs_f64())
}

pub(super) struct ThrottleRow {
    pub(super) kernel: &'static str,
    pub(super) mode: ThrottleMode,
    pub(super) uname: String,
    pub(super) timing: String,
    pub(super) report: Option<ThrottleReport>,
    pub(super) failures: Vec<String>,
}

impl ThrottleRow {
    pub(super) fn error(spec: &'static KernelSpec, mode: ThrottleMode, error: String) -> Self {
        Self {
            kernel: spec.name,
            mode,
            uname: "-".into(),
            timing: "-".into(),
            report: None,
            failures: vec![error],
        }
    }
}

pub(super) fn throttle_row(
    spec: &'static KernelSpec,
    mode: ThrottleMode,
    outcome: &Outcome,
) -> ThrottleRow {
    let report = check_throttle(spec.name, mode, &outcome.lines);
    let mut failures = report.failures.clone();
    if !outcome.passed() {
        failures.insert(0, format!("guest: {}", outcome.summary()));
    }
    ThrottleRow {
        kernel: spec.name,
        mode,
        uname: outcome.uname.clone().unwrap_or_else(|| "-".into()),
        timing: outcome_timing(outcome),
        report: Some(report),
        failures,
    }
}

pub(super) fn print_reads_table(rows: &[(&'static str, String, ReadsReport)]) {
    if rows.is_empty() {
        return;
    }
    println!(
        "{:<8}{:<8}{:>12}  {:<20}{:>8}{:>7}{:>11}{:>11}{:>11}{:>6}{:>18}",
        "kernel",
        "result",
        "boot/total s",
        "reads mode (want)",
        "windows",
        "reads",
        "total ms",
        "max ms",
        "flush ms",
        "slow",
        "dying ours/kern"
    );
    for (kernel, timing, r) in rows {
        println!(
            "{:<8}{:<8}{:>12}  {:<20}{:>8}{:>7}{:>11.2}{:>11.2}{:>11.2}{:>6}{:>18}",
            kernel,
            verdict(&r.failures),
            timing,
            format!(
                "{} ({})",
                r.mode.as_deref().unwrap_or("-"),
                reads::expected_mode(kernel)
            ),
            r.windows,
            r.reads,
            r.read_us / 1e3,
            r.max_us / 1e3,
            r.flush_us / 1e3,
            r.slow_reads,
            format!(
                "{}/{}",
                r.dying_ours.map_or("-".into(), |v| v.to_string()),
                r.dying_kernel.map_or("-".into(), |v| v.to_string())
            )
        );
    }
    for (kernel, _, r) in rows {
        for failure in &r.failures {
            println!("  {kernel} reads: {failure}");
        }
    }
    println!();
}

/// `ours / kernel` to 4 places, "-" without the kernel's figure.
fn kernel_ratio(ours: f64, kernel: Option<f64>) -> String {
    kernel
        .filter(|k| *k > 0.0)
        .map_or("-".into(), |k| format!("{:.4}", ours / k))
}

/// `part` as a percentage of `whole` to 1 place, "-" when there is no whole.
fn percent(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1}", part / whole * 100.0)
    } else {
        "-".into()
    }
}

pub(super) fn verdict(failures: &[String]) -> &'static str {
    if failures.is_empty() { "PASS" } else { "FAIL" }
}

pub(super) fn print_table(rows: &[MatrixRow], throttle_rows: &[ThrottleRow]) {
    println!();
    if !rows.is_empty() {
        println!(
            "{:<8}{:<8}{:<30}{:>12}{:>9}{:>10}{:>10}{:>9}{:>16}{:>15}  runq mode",
            "kernel",
            "result",
            "uname -r",
            "boot/total s",
            "windows",
            "busy",
            "quiet",
            "dropped",
            "quiet by busy %",
            "wait/run_delay"
        );
    }
    for row in rows {
        let r = row.report.clone().unwrap_or_default();
        println!(
            "{:<8}{:<8}{:<30}{:>12}{:>9}{:>10}{:>10}{:>9}{:>16}{:>15}  {}",
            row.kernel,
            verdict(&row.failures),
            row.uname,
            row.timing,
            r.windows,
            r.busy_count,
            r.quiet_count,
            r.dropped,
            if r.quiet_wait_us > 0.0 {
                format!("{:.1}", r.quiet_by_busy_us / r.quiet_wait_us * 100.0)
            } else {
                "-".into()
            },
            kernel_ratio(r.quiet_wait_us, r.quiet_run_delay_us),
            r.runq_mode.as_deref().unwrap_or("-")
        );
    }
    if !throttle_rows.is_empty() {
        if !rows.is_empty() {
            println!();
        }
        println!(
            "{:<9}{:<8}{:<30}{:>12}  {:<25}{:>8}{:>18}{:>22}{:>8}  {:<22}{:>6}{:>10}{:>7}{:>7}{:>16}{:>18}",
            "kernel",
            "result",
            "uname -r",
            "boot/total s",
            "throttle mode (hello)",
            "windows",
            "nr_thr ours/kern",
            "thr ms ours/kern",
            "ratio",
            "wait split",
            "thr %",
            "wait/kern",
            "own %",
            "anc %",
            "run_delay thr/anc",
            "max ep ms / stale"
        );
    }
    for row in throttle_rows {
        let r = row.report.clone().unwrap_or_default();
        let mode = format!(
            "{} ({})",
            row.mode.as_str(),
            r.mode.as_deref().unwrap_or("-")
        );
        let (nr, ms, ratio) = match r.kernel {
            Some(k) => (
                format!("{}/{}", r.ours_nr_throttled, k.nr_throttled),
                format!(
                    "{:.1}/{:.1}",
                    r.ours_throttled_us / 1e3,
                    k.throttled_usec as f64 / 1e3
                ),
                r.time_ratio().map_or("-".into(), |x| format!("{x:.4}")),
            ),
            None => (
                format!("{}/-", r.ours_nr_throttled),
                format!("{:.1}/-", r.ours_throttled_us / 1e3),
                "-".into(),
            ),
        };
        println!(
            "{:<9}{:<8}{:<30}{:>12}  {:<25}{:>8}{:>18}{:>22}{:>8}  {:<22}{:>6}{:>10}{:>7}{:>7}{:>16}{:>18}",
            row.kernel,
            verdict(&row.failures),
            row.uname,
            row.timing,
            mode,
            r.windows,
            nr,
            ms,
            ratio,
            r.wait_split.as_deref().unwrap_or("-"),
            r.throttled_share()
                .map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
            r.wait_ratio().map_or("-".into(), |x| format!("{x:.4}")),
            percent(r.blame_own_us, r.wait_sum_us),
            percent(r.anc_ancestor_us, r.anc_wait_us),
            format!(
                "{}/{}",
                kernel_ratio(r.wait_sum_us, r.run_delay_us),
                kernel_ratio(r.anc_wait_us, r.anc_run_delay_us)
            ),
            format!("{:.0} / {}", r.longest_episode_us / 1e3, r.stale)
        );
    }
    for row in rows.iter().filter(|r| !r.failures.is_empty()) {
        for failure in &row.failures {
            println!("  {}: {failure}", row.kernel);
        }
    }
    for row in throttle_rows.iter().filter(|r| !r.failures.is_empty()) {
        for failure in &row.failures {
            println!("  {} throttle/{}: {failure}", row.kernel, row.mode.as_str());
        }
    }
    println!();
}
