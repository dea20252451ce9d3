//! The kernel matrix's `advice` scenario (`tests/vm/advice.sh`): on each kernel, bursts under half
//! a CPU of quota on cgroup v2 are flagged, the flag's cgroup-file change is written exactly as
//! given, and the same bursts run again. Checked here against the kernel's `cpu.stat`: the change
//! is `cpu.max.burst` where the kernel has a burst allowance (5.14+) and a higher `cpu.max` on
//! 5.10, and it takes away at least 80 % of the throttled periods per second.

pub const ADVICE_SCENARIO: &str = include_str!("../../../tests/vm/advice.sh");
const BEFORE: &str = "CGTRACE-ADVICE-BEFORE";
const CHANGE: &str = "CGTRACE-ADVICE-CHANGE";
const AFTER: &str = "CGTRACE-ADVICE-AFTER";

/// The file a kernel's burst advice names.
pub fn expected_knob(kernel: &str) -> &'static str {
    if kernel == "5.10" {
        "cpu.max"
    } else {
        "cpu.max.burst"
    }
}

#[derive(Clone, Debug, Default)]
pub struct AdviceReport {
    /// Throttled periods per second, before and after the change (the kernel's).
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub knob: Option<String>,
    pub value: Option<String>,
    pub failures: Vec<String>,
}

impl AdviceReport {
    pub fn cut(&self) -> Option<f64> {
        match (self.before, self.after) {
            (Some(b), Some(a)) if b > 0.0 => Some(1.0 - a / b),
            _ => None,
        }
    }
}

/// `key=value` words after `marker` on its first line.
fn fields<'a>(lines: &'a [String], marker: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let rest = lines
        .iter()
        .find_map(|l| l.split_once(marker).map(|(_, r)| r))?;
    Some(
        rest.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect(),
    )
}

/// Throttled periods per second from a BEFORE/AFTER line.
fn rate(lines: &[String], marker: &str, failures: &mut Vec<String>) -> Option<f64> {
    let f = fields(lines, marker);
    let get = |k: &str| -> Option<f64> {
        f.as_ref()?
            .iter()
            .find(|(key, _)| *key == k)
            .and_then(|(_, v)| v.parse().ok())
    };
    match (get("nr_throttled"), get("secs")) {
        (Some(n), Some(s)) if s > 0.0 => Some(n / s),
        _ => {
            failures.push(format!("no {marker} line with nr_throttled and secs"));
            None
        }
    }
}

/// Checks a captured advice-scenario log.
pub fn check_advice(kernel: &str, lines: &[String], mut failures: Vec<String>) -> AdviceReport {
    let mut r = AdviceReport {
        before: rate(lines, BEFORE, &mut failures),
        ..AdviceReport::default()
    };
    if let Some(f) = fields(lines, CHANGE) {
        for (k, v) in f {
            match k {
                "knob" => r.knob = Some(v.to_string()),
                "value" => r.value = Some(v.replace('_', " ")),
                _ => {}
            }
        }
    }
    let want = expected_knob(kernel);
    if r.knob.as_deref() != Some(want) {
        failures.push(format!(
            "the flag's change is {}, want {want} on {kernel}",
            r.knob.as_deref().unwrap_or("<missing>")
        ));
    }
    r.after = rate(lines, AFTER, &mut failures);
    if r.before.is_some_and(|b| b < 0.2) {
        failures.push(format!(
            "{:.2} throttled periods/s before: the bursts were not throttled",
            r.before.unwrap_or(0.0)
        ));
    }
    if let Some(cut) = r.cut()
        && cut < 0.8
    {
        failures.push(format!(
            "{} = {}: throttled periods/s {:.2} -> {:.2}, a {:.0} % cut (want at least 80 %)",
            r.knob.as_deref().unwrap_or("?"),
            r.value.as_deref().unwrap_or("?"),
            r.before.unwrap_or(0.0),
            r.after.unwrap_or(0.0),
            cut * 100.0
        ));
    }
    r.failures = failures;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(knob: &str, value: &str, after: u64) -> Vec<String> {
        vec![
            format!("{BEFORE} nr_throttled=7 secs=20"),
            format!("{CHANGE} knob={knob} value={value}"),
            format!("{AFTER} nr_throttled={after} secs=20"),
        ]
    }

    #[test]
    fn the_knob_of_the_kernel_and_an_80_percent_cut_pass() {
        let r = check_advice("6.12", &log("cpu.max.burst", "100000", 0), Vec::new());
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.cut(), Some(1.0));
        let r = check_advice("5.10", &log("cpu.max", "175000_100000", 1), Vec::new());
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.value.as_deref(), Some("175000 100000"));
        // The burst file on 5.10, or a small cut, fail.
        assert_eq!(
            check_advice("5.10", &log("cpu.max.burst", "1", 0), Vec::new())
                .failures
                .len(),
            1
        );
        assert_eq!(
            check_advice("6.1", &log("cpu.max.burst", "1", 3), Vec::new())
                .failures
                .len(),
            1
        );
    }
}
