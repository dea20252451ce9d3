//! The verdict tables `vm matrix` prints: runq, throttle and reads, one row per boot, then each
//! row's failures.

use std::fmt::Display;

use super::*;

/// The runq and the throttle table, then the failures of their failing rows.
pub(super) fn print_table(rows: &[MatrixRow], throttle_rows: &[ThrottleRow]) {
    println!();
    if !rows.is_empty() {
        println!("{}", header(RUNQ));
    }
    for row in rows {
        let r = row.report.clone().unwrap_or_default();
        println!(
            "{}",
            line(
                RUNQ,
                &[
                    &row.kernel,
                    &verdict(&row.failures),
                    &row.uname,
                    &row.timing,
                    &r.windows,
                    &r.busy_count,
                    &r.quiet_count,
                    &r.dropped,
                    &percent(r.quiet_by_busy_us, r.quiet_wait_us),
                    &kernel_ratio(r.quiet_wait_us, r.quiet_run_delay_us),
                    &r.runq_mode.as_deref().unwrap_or("-"),
                ]
            )
        );
    }
    if !throttle_rows.is_empty() {
        if !rows.is_empty() {
            println!();
        }
        println!("{}", header(THROTTLE));
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
            "{}",
            line(
                THROTTLE,
                &[
                    &row.kernel,
                    &verdict(&row.failures),
                    &row.uname,
                    &row.timing,
                    &mode,
                    &r.windows,
                    &nr,
                    &ms,
                    &ratio,
                    &r.wait_split.as_deref().unwrap_or("-"),
                    &r.throttled_share()
                        .map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
                    &r.wait_ratio().map_or("-".into(), |x| format!("{x:.4}")),
                    &percent(r.blame_own_us, r.wait_sum_us),
                    &percent(r.anc_ancestor_us, r.anc_wait_us),
                    &format!(
                        "{}/{}",
                        kernel_ratio(r.wait_sum_us, r.run_delay_us),
                        kernel_ratio(r.anc_wait_us, r.anc_run_delay_us)
                    ),
                    &format!("{:.0} / {}", r.longest_episode_us / 1e3, r.stale),
                ]
            )
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

/// The reads table (nothing without rows), then the failures of its failing rows.
pub(super) fn print_reads_table(rows: &[(&'static str, String, ReadsReport)]) {
    if rows.is_empty() {
        return;
    }
    println!("{}", header(READS));
    for (kernel, timing, r) in rows {
        println!(
            "{}",
            line(
                READS,
                &[
                    kernel,
                    &verdict(&r.failures),
                    timing,
                    &format!(
                        "{} ({})",
                        r.mode.as_deref().unwrap_or("-"),
                        reads::expected_mode(kernel)
                    ),
                    &r.windows,
                    &r.reads,
                    &format!("{:.2}", r.read_us / 1e3),
                    &format!("{:.2}", r.max_us / 1e3),
                    &format!("{:.2}", r.flush_us / 1e3),
                    &r.slow_reads,
                    &format!(
                        "{}/{}",
                        r.dying_ours.map_or("-".into(), |v| v.to_string()),
                        r.dying_kernel.map_or("-".into(), |v| v.to_string())
                    ),
                ]
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

pub(super) fn print_advice_table(rows: &[(&'static str, String, AdviceReport)]) {
    if rows.is_empty() {
        return;
    }
    println!("{}", header(ADVICE));
    for (kernel, timing, r) in rows {
        let rate = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        println!(
            "{}",
            line(
                ADVICE,
                &[
                    kernel,
                    &verdict(&r.failures),
                    timing,
                    &format!(
                        "{} = {}",
                        r.knob.as_deref().unwrap_or("-"),
                        r.value.as_deref().unwrap_or("-")
                    ),
                    &format!("{} -> {}", rate(r.before), rate(r.after)),
                    &r.cut().map_or("-".into(), |c| format!("{:.0}", c * 100.0)),
                    &r.whatif
                        .iter()
                        .map(|w| {
                            format!(
                                "{} {:.0}/{:.0} {:.0}(x{:.2})/{:.0}",
                                w.name,
                                w.predicted_periods,
                                w.kernel_periods,
                                w.predicted_ms,
                                w.ms_scale,
                                w.kernel_ms
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                ]
            )
        );
    }
    for (kernel, _, r) in rows {
        for failure in &r.failures {
            println!("  {kernel} advice: {failure}");
        }
    }
    println!();
}

fn verdict(failures: &[String]) -> &'static str {
    if failures.is_empty() { "PASS" } else { "FAIL" }
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

/// A column of a printed table: its header, and its cells left- or right-aligned in so many
/// characters; or the two spaces between groups of columns.
#[derive(Clone, Copy)]
enum Col {
    Left(&'static str, usize),
    Right(&'static str, usize),
    Gap,
}

use Col::{Gap, Left, Right};

/// One line of a table: `cells` laid out by `cols`, each padded to its column's width.
fn line(cols: &[Col], cells: &[&dyn Display]) -> String {
    let mut cells = cells.iter();
    let mut line = String::new();
    for col in cols {
        let mut cell = || cells.next().expect("a cell per column");
        match *col {
            Gap => line.push_str("  "),
            Left(_, width) => line += &format!("{:<width$}", cell()),
            Right(_, width) => line += &format!("{:>width$}", cell()),
        }
    }
    assert!(cells.next().is_none(), "more cells than columns");
    line
}

/// The header line of a table: each column's name laid out as its cells are.
fn header(cols: &[Col]) -> String {
    let names: Vec<&dyn Display> = cols
        .iter()
        .filter_map(|col| match col {
            Left(name, _) | Right(name, _) => Some(name as &dyn Display),
            Gap => None,
        })
        .collect();
    line(cols, &names)
}

/// The runq scenario's table.
const RUNQ: &[Col] = &[
    Left("kernel", 8),
    Left("result", 8),
    Left("uname -r", 30),
    Right("boot/total s", 12),
    Right("windows", 9),
    Right("busy", 10),
    Right("quiet", 10),
    Right("dropped", 9),
    Right("quiet by busy %", 16),
    Right("wait/run_delay", 15),
    Gap,
    Left("runq mode", 0),
];

/// The throttle scenario's table, each mode and the wide guest.
const THROTTLE: &[Col] = &[
    Left("kernel", 9),
    Left("result", 8),
    Left("uname -r", 30),
    Right("boot/total s", 12),
    Gap,
    Left("throttle mode (hello)", 25),
    Right("windows", 8),
    Right("nr_thr ours/kern", 18),
    Right("thr ms ours/kern", 22),
    Right("ratio", 8),
    Gap,
    Left("wait split", 22),
    Right("thr %", 6),
    Right("wait/kern", 10),
    Right("own %", 7),
    Right("anc %", 7),
    Right("run_delay thr/anc", 16),
    Right("max ep ms / stale", 18),
];

/// The advice scenario's table.
const ADVICE: &[Col] = &[
    Left("kernel", 8),
    Left("result", 8),
    Right("boot/total s", 12),
    Gap,
    Left("change written", 28),
    Right("throttled/s", 14),
    Right("cut %", 6),
    Gap,
    Left("whatif: throttled periods / ms, predicted vs kernel", 52),
];

/// The reads scenario's table.
const READS: &[Col] = &[
    Left("kernel", 8),
    Left("result", 8),
    Right("boot/total s", 12),
    Gap,
    Left("reads mode (want)", 20),
    Right("windows", 8),
    Right("reads", 7),
    Right("total ms", 11),
    Right("max ms", 11),
    Right("flush ms", 11),
    Right("slow", 6),
    Right("dying ours/kern", 18),
];
