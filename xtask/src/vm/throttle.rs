//! The `throttle` scenario (`tests/vm/throttle.sh`, one boot per throttle attach mode):
//! cgtrace's `nr_throttled` and throttled time against the guest kernel's own `cpu.stat`.

use super::*;

/// The throttling counters of the kernel's `cpu.stat` the throttle scenario prints.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(super) struct Kstat {
    pub(super) nr_periods: u64,
    pub(super) nr_throttled: u64,
    pub(super) throttled_usec: u64,
}

impl Kstat {
    /// `self - earlier`, `None` if a counter went backwards.
    pub(super) fn delta(self, earlier: Kstat) -> Option<Kstat> {
        Some(Kstat {
            nr_periods: self.nr_periods.checked_sub(earlier.nr_periods)?,
            nr_throttled: self.nr_throttled.checked_sub(earlier.nr_throttled)?,
            throttled_usec: self.throttled_usec.checked_sub(earlier.throttled_usec)?,
        })
    }
}

/// What the throttle scenario showed: ours summed over the windows, the kernel's `cpu.stat`
/// delta over the load, and what was wrong.
#[derive(Clone, Default, Debug)]
pub(super) struct ThrottleReport {
    pub(super) windows: usize,
    /// `families.throttle.mode` of the hello line.
    pub(super) mode: Option<String>,
    /// Windows with a `throttle` object for the scenario's cgroup.
    pub(super) throttle_windows: usize,
    pub(super) ours_nr_periods: u64,
    pub(super) ours_nr_throttled: u64,
    pub(super) ours_throttled_us: f64,
    pub(super) ours_episodes: u64,
    /// CPUs with at least one episode (keys of `episodes_per_cpu`).
    pub(super) episode_cpus: std::collections::BTreeSet<u64>,
    /// after - before of the guest kernel's `cpu.stat`.
    pub(super) kernel: Option<Kstat>,
    /// `hello.wait_split.method`.
    pub(super) wait_split: Option<String>,
    /// The scenario cgroup's run-queue wait (µs) of kind `throttled`, and of every kind.
    pub(super) wait_throttled_us: f64,
    pub(super) wait_total_us: f64,
    /// Busy loops and CPUs of the guest, from the scenario's first line.
    pub(super) loops_cpus: Option<(u64, u64)>,
    /// The blame ledger: the scenario cgroup's wait charged to its own quota (µs); the wait of
    /// the loop in the child of the quota'd parent, and the part charged to that ancestor.
    pub(super) blame_own_us: f64,
    /// The scenario cgroup's `runq.sum_us` over the windows.
    pub(super) wait_sum_us: f64,
    pub(super) anc_wait_us: f64,
    pub(super) anc_ancestor_us: f64,
    /// The guest kernel's `run_delay` (µs) of the loops, and of the child's loop.
    pub(super) run_delay_us: Option<f64>,
    pub(super) anc_run_delay_us: Option<f64>,
    /// Cgroup windows whose `runq.blame` parts do not add up to their wait.
    pub(super) blame_mismatches: Vec<String>,
    /// The longest episode line (µs), and the episodes of the groups made after others were
    /// removed while throttled.
    pub(super) longest_episode_us: f64,
    pub(super) after_gone_episodes: u64,
    /// The windows' `throttle_stale` counter, summed.
    pub(super) stale: u64,
    pub(super) failures: Vec<String>,
}

impl ThrottleReport {
    /// The throttled wait of the loops over what the kernel's throttled time implies for them:
    /// each CPU's `cfs_rq` is throttled for about the same time, and every loop queued on it
    /// waits that long, so the loops' throttled waits sum to loops/CPUs times `throttled_usec`.
    pub(super) fn wait_ratio(&self) -> Option<f64> {
        let k = self.kernel?;
        let (loops, cpus) = self.loops_cpus?;
        (k.throttled_usec > 0 && loops >= cpus && cpus > 0).then(|| {
            self.wait_throttled_us / (k.throttled_usec as f64 * loops as f64 / cpus as f64)
        })
    }

    /// The share of the scenario cgroup's run-queue wait that was of kind `throttled`.
    pub(super) fn throttled_share(&self) -> Option<f64> {
        (self.wait_total_us > 0.0).then(|| self.wait_throttled_us / self.wait_total_us)
    }

    /// Our throttled time over the kernel's.
    pub(super) fn time_ratio(&self) -> Option<f64> {
        let k = self.kernel?;
        (k.throttled_usec > 0).then(|| self.ours_throttled_us / k.throttled_usec as f64)
    }
}

/// Checks a captured throttle-scenario log: the hello line, the throttle attach mode, and
/// cgtrace's `nr_throttled` (equal) and throttled time (within 2 %) for the scenario's cgroup,
/// summed over all windows, against the kernel's `cpu.stat` delta, which must show throttling.
pub(super) fn check_throttle(
    expected_kernel: &str,
    requested: ThrottleMode,
    lines: &[String],
) -> ThrottleReport {
    let mut report = ThrottleReport::default();
    let before = kstat_line(lines, KSTAT_BEFORE, &mut report.failures);
    let after = kstat_line(lines, KSTAT_AFTER, &mut report.failures);
    if let (Some(before), Some(after)) = (before, after) {
        report.kernel = after.delta(before);
        if report.kernel.is_none() {
            report
                .failures
                .push(format!("cpu.stat went backwards: {before:?} -> {after:?}"));
        }
    }
    report.loops_cpus = lines
        .iter()
        .find(|l| l.contains("throttle: mode"))
        .and_then(|l| loops_and_cpus(l));
    report.run_delay_us = run_delay_us(lines, "thr_ns", &mut report.failures);
    report.anc_run_delay_us = run_delay_us(lines, "anc_ns", &mut report.failures);
    let Some(objects) = stream_objects(lines, &mut report.failures) else {
        return report;
    };
    match objects.iter().find(|o| o["type"] == "hello") {
        Some(hello) => {
            check_hello(expected_kernel, hello, &mut report.failures);
            report.mode = hello_text(hello, "/families/throttle/mode");
            report.wait_split = hello_text(hello, "/wait_split/method");
            let want = expected_wait_split(expected_kernel);
            if report.wait_split.as_deref() != Some(want) {
                report.failures.push(format!(
                    "hello wait_split.method is {}, want {want}",
                    report.wait_split.as_deref().unwrap_or("<missing>")
                ));
            }
            let got = report.mode.as_deref().unwrap_or("<missing>");
            if requested != ThrottleMode::Auto && got != requested.as_str() {
                let detail = hello_text(hello, "/families/throttle/detail").unwrap_or_default();
                report.failures.push(format!(
                    "hello families.throttle.mode is {got}, want {} ({detail})",
                    requested.as_str()
                ));
            }
        }
        None => report.failures.push("no hello line".into()),
    }
    // The churn phase's groups (the removed ones have no path by then): the scenario's own
    // groups can have long episodes of an idle cfs_rq on wide guests, which the kernel counts
    // the same.
    let churn = |e: &Value| match e["path"].as_str() {
        None => true,
        Some(p) => p != THROTTLE_CGROUP && !p.starts_with(ANCESTOR),
    };
    for e in objects
        .iter()
        .filter(|o| o["type"] == "throttle")
        .filter(|e| churn(e))
    {
        let us = e["duration_us"].as_f64().unwrap_or(0.0);
        report.longest_episode_us = report.longest_episode_us.max(us);
        if e["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(AFTER_GONE_PREFIX))
        {
            report.after_gone_episodes += 1;
        }
        if us > MAX_EPISODE_US {
            report.failures.push(format!(
                "a throttle episode of {:.0} ms (at most {:.0} ms under 100 ms periods): a stale \
                 start, e.g. a removed group's entry given to a group reusing its cfs_rq: {e}",
                us / 1e3,
                MAX_EPISODE_US / 1e3
            ));
        }
    }
    for window in objects.iter().filter(|o| o["type"] == "window") {
        report.windows += 1;
        report.stale += window["events"]["counters"]["throttle_stale"]
            .as_u64()
            .unwrap_or(0);
        let Some(cgroups) = window["cgroups"].as_array() else {
            continue;
        };
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        for c in cgroups {
            report.blame_mismatches.extend(blame_mismatch(window, c));
            if c["path"] == THROTTLE_CGROUP {
                report.blame_own_us += f(&c["runq"]["blame"], "throttled_own_us");
                report.wait_sum_us += f(&c["runq"], "sum_us");
            } else if c["path"] == ANCESTOR_CHILD {
                report.anc_wait_us += f(&c["runq"], "sum_us");
                report.anc_ancestor_us += f(&c["runq"]["blame"], "throttled_ancestor_us");
            }
        }
        for kinds in cgroups
            .iter()
            .filter(|c| c["path"] == THROTTLE_CGROUP)
            .filter_map(|c| c.pointer("/runq/kinds").and_then(Value::as_object))
        {
            for (kind, h) in kinds {
                let us = h["sum_us"].as_f64().unwrap_or(0.0);
                report.wait_total_us += us;
                if kind == "throttled" {
                    report.wait_throttled_us += us;
                }
            }
        }
        for t in cgroups
            .iter()
            .filter(|c| c["path"] == THROTTLE_CGROUP)
            .filter_map(|c| c.get("throttle").filter(|t| t.is_object()))
        {
            let n = |k: &str| t[k].as_u64().unwrap_or(0);
            report.throttle_windows += 1;
            report.ours_nr_periods += n("nr_periods");
            report.ours_nr_throttled += n("nr_throttled");
            report.ours_episodes += n("episodes");
            if let Some(per_cpu) = t["episodes_per_cpu"].as_object() {
                report
                    .episode_cpus
                    .extend(per_cpu.keys().filter_map(|k| k.parse::<u64>().ok()));
            }
            report.ours_throttled_us += t["throttled_us"].as_f64().unwrap_or(0.0);
        }
    }
    let share = report.throttled_share();
    let wait_ratio = report.wait_ratio();
    check_quota_blame(&mut report, lines);
    let (wait_throttled_us, wait_total_us) = (report.wait_throttled_us, report.wait_total_us);
    let f = &mut report.failures;
    let churned = lines.iter().any(|l| l.starts_with(CHURN_LINE));
    if churned && report.after_gone_episodes == 0 {
        f.push(format!(
            "no throttle episode of {AFTER_GONE_PREFIX}*: the groups made after the removed ones \
             were not throttled"
        ));
    }
    if report.windows == 0 {
        f.push("no window lines".into());
    } else if report.throttle_windows == 0 {
        f.push(format!(
            "no window has a throttle object for {THROTTLE_CGROUP}"
        ));
    }
    if let Some(k) = report.kernel {
        if k.nr_throttled == 0 {
            f.push(format!(
                "kernel cpu.stat shows no throttling (nr_throttled delta 0, nr_periods delta {}): \
                 the workload was not throttled",
                k.nr_periods
            ));
        } else {
            if report.ours_nr_throttled != k.nr_throttled {
                f.push(format!(
                    "nr_throttled ours {} != kernel {} (nr_periods ours {}, kernel {})",
                    report.ours_nr_throttled, k.nr_throttled, report.ours_nr_periods, k.nr_periods
                ));
            }
            match share {
                Some(share) if share >= THROTTLED_SHARE_MIN => {}
                share => f.push(format!(
                    "{:.1} % of {THROTTLE_CGROUP}'s run-queue wait is of kind throttled \
                     ({:.0} of {:.0} ms), want at least {:.0} %: tasks queued when their group \
                     was throttled are counted as contention",
                    share.unwrap_or(0.0) * 100.0,
                    wait_throttled_us / 1e3,
                    wait_total_us / 1e3,
                    THROTTLED_SHARE_MIN * 100.0
                )),
            }
            if let Some(r) = wait_ratio
                && (r - 1.0).abs() > THROTTLED_WAIT_TOLERANCE
            {
                f.push(format!(
                    "the loops' throttled wait is {r:.4} of loops/CPUs x the kernel's throttled \
                     time (allowed ±{:.0} %)",
                    THROTTLED_WAIT_TOLERANCE * 100.0
                ));
            }
            let kernel_us = k.throttled_usec as f64;
            let diff = (report.ours_throttled_us - kernel_us).abs();
            if diff > THROTTLED_TIME_TOLERANCE * kernel_us {
                f.push(format!(
                    "throttled_us ours {:.0} vs kernel {} (ratio {:.4}, allowed ±{} %)",
                    report.ours_throttled_us,
                    k.throttled_usec,
                    report.ours_throttled_us / kernel_us,
                    THROTTLED_TIME_TOLERANCE * 100.0
                ));
            }
        }
    }
    report
}

/// The blame ledger on the quotas: the loops' wait charged to their own quota, the child's loop's
/// to its parent's (each at least [`BLAME_QUOTA_MIN`]); every cgroup's parts add up; each
/// cgroup's wait over the windows is its loops' `run_delay`.
fn check_quota_blame(report: &mut ThrottleReport, lines: &[String]) {
    let f = &mut report.failures;
    for (path, part, charged, wait) in [
        (
            THROTTLE_CGROUP,
            "throttled_own_us",
            report.blame_own_us,
            report.wait_sum_us,
        ),
        (
            ANCESTOR_CHILD,
            "throttled_ancestor_us",
            report.anc_ancestor_us,
            report.anc_wait_us,
        ),
    ] {
        if wait <= 0.0 || charged < BLAME_QUOTA_MIN * wait {
            f.push(format!(
                "{path}: {part} is {charged:.0} of its {wait:.0} µs of run-queue wait (want at \
                 least {:.0} %)",
                BLAME_QUOTA_MIN * 100.0
            ));
        }
    }
    if let Some(kernel) = report.run_delay_us {
        check_run_delay(THROTTLE_CGROUP, report.wait_sum_us, kernel, lines, f);
    }
    if let Some(kernel) = report.anc_run_delay_us {
        check_run_delay(ANCESTOR_CHILD, report.anc_wait_us, kernel, lines, f);
    }
    f.extend(report.blame_mismatches.iter().take(3).cloned());
}

/// `N` and `M` of the scenario's "throttle: mode …, Ss of load in N loops, …, M CPUs" line.
pub(super) fn loops_and_cpus(line: &str) -> Option<(u64, u64)> {
    let number_before = |word: &str| -> Option<u64> {
        let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        let i = words.iter().position(|w| *w == word)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    Some((number_before("loops")?, number_before("CPUs")?))
}

/// `hello.wait_split.method` each kernel of the matrix must report.
pub(super) fn expected_wait_split(kernel: &str) -> &'static str {
    // Debian's 5.10 has the PELT-clock rename (6.0) backported.
    match kernel {
        "5.10" | "6.1" => "throttled_clock_pelt",
        _ => "throttled_clock_self",
    }
}

/// The wide guest's extra checks: episodes on at least half of its `cpus` CPUs, every CPU number
/// below `cpus` (a CPU set kept as a 64-bit mask would wrap above 63).
pub(super) fn check_wide(report: &ThrottleReport, cpus: u32) -> Vec<String> {
    let mut f = Vec::new();
    let n = report.episode_cpus.len() as u32;
    if n < cpus / 2 {
        f.push(format!(
            "episodes on {n} CPUs of {cpus}: the load was not spread (want at least {})",
            cpus / 2
        ));
    }
    if let Some(&max) = report.episode_cpus.last()
        && max >= u64::from(cpus)
    {
        f.push(format!("an episode on CPU {max} of a {cpus}-CPU guest"));
    }
    f
}

/// The `key=value` counters after `marker` on its (first) line in the log.
pub(super) fn kstat_line(
    lines: &[String],
    marker: &str,
    failures: &mut Vec<String>,
) -> Option<Kstat> {
    let Some(rest) = lines
        .iter()
        .find_map(|l| l.split_once(marker).map(|(_, r)| r))
    else {
        failures.push(format!("no {marker} line"));
        return None;
    };
    let fields: BTreeMap<&str, &str> = rest
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let mut field = |key: &str| {
        let value = fields.get(key).and_then(|v| v.parse::<u64>().ok());
        if value.is_none() {
            failures.push(format!(
                "{marker}: no number for {key} in {:?}",
                rest.trim()
            ));
        }
        value
    };
    let (nr_periods, nr_throttled, throttled_usec) = (
        field("nr_periods"),
        field("nr_throttled"),
        field("throttled_usec"),
    );
    Some(Kstat {
        nr_periods: nr_periods?,
        nr_throttled: nr_throttled?,
        throttled_usec: throttled_usec?,
    })
}
