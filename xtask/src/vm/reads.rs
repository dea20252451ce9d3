//! The kernel matrix's `reads` scenario (`tests/vm/reads.sh`): on each kernel, cgtrace traces a
//! reader of a cgroup2 `memory.stat` before and after dying memcgs are made below it. Checked
//! here: the reads family attached in the mode forced for this kernel (`fentry` on 6.1 and 6.12,
//! `syscall` on 5.10, so both modes run on a kernel other than the host's), the reader's reads of
//! that file are counted and timed, and the `dying_memcgs` cgtrace reports for the parent equals
//! the kernel's `nr_dying_descendants`.
use std::collections::BTreeMap;

use serde_json::Value;

pub const READS_SCENARIO: &str = include_str!("../../../tests/vm/reads.sh");
const PARENT: &str = "/cgtrace-vm-reads";
const READER: &str = "/cgtrace-vm-reader";
const KSTAT_AFTER: &str = "CGTRACE-KSTAT-AFTER";

/// The `--reads-mode` a matrix kernel runs the scenario with.
pub fn expected_mode(kernel: &str) -> &'static str {
    if kernel == "5.10" {
        "syscall"
    } else {
        "fentry"
    }
}

#[derive(Clone, Debug, Default)]
pub struct ReadsReport {
    pub mode: Option<String>,
    pub windows: u64,
    /// The reader's reads of the parent's memory.stat: count, total and largest (µs).
    pub reads: u64,
    pub read_us: f64,
    pub max_us: f64,
    pub flush_us: f64,
    pub slow_reads: u64,
    pub dying_ours: Option<u64>,
    pub dying_kernel: Option<u64>,
    pub made: Option<u64>,
    pub failures: Vec<String>,
}

/// `key=value` numbers after `marker` on its first line.
fn marker_fields(lines: &[String], marker: &str) -> Option<BTreeMap<String, u64>> {
    let rest = lines
        .iter()
        .find_map(|l| l.split_once(marker).map(|(_, r)| r.to_string()))?;
    Some(
        rest.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect(),
    )
}

/// Checks a captured reads-scenario log.
pub fn check_reads(
    expected_kernel: &str,
    objects: Option<Vec<Value>>,
    lines: &[String],
    mut failures: Vec<String>,
) -> ReadsReport {
    let mut r = ReadsReport::default();
    match marker_fields(lines, KSTAT_AFTER) {
        Some(k) => {
            r.dying_kernel = k.get("nr_dying_descendants").copied();
            r.made = k.get("made").copied();
        }
        None => failures.push(format!("no {KSTAT_AFTER} line")),
    }
    let Some(objects) = objects else {
        r.failures = failures;
        return r;
    };
    match objects.iter().find(|o| o["type"] == "hello") {
        Some(hello) => {
            r.mode = hello
                .pointer("/families/reads/mode")
                .and_then(Value::as_str)
                .map(str::to_string);
            let want = expected_mode(expected_kernel);
            if r.mode.as_deref() != Some(want) {
                let detail = hello
                    .pointer("/families/reads/detail")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                failures.push(format!(
                    "hello families.reads.mode is {}, want {want} ({detail})",
                    r.mode.as_deref().unwrap_or("<missing>")
                ));
            }
        }
        None => failures.push("no hello line".into()),
    }
    let file_suffix = format!("{PARENT}/memory.stat");
    for o in &objects {
        match o["type"].as_str() {
            Some("window") => {
                r.windows += 1;
                for c in o["cgroups"].as_array().into_iter().flatten() {
                    if c["path"] != READER {
                        continue;
                    }
                    for line in c["reads"].as_array().into_iter().flatten() {
                        let file = line["file"].as_str().unwrap_or("");
                        if line["comm"] != "cat" || !file.ends_with(&file_suffix) {
                            continue;
                        }
                        let f = |k: &str| line[k].as_f64().unwrap_or(0.0);
                        r.reads += line["count"].as_u64().unwrap_or(0);
                        r.read_us += f("total_us");
                        r.flush_us += f("flush_us");
                        r.max_us = r.max_us.max(
                            line.pointer("/latency/max_us")
                                .and_then(Value::as_f64)
                                .unwrap_or(0.0),
                        );
                    }
                }
                for m in o["memcgs"].as_array().into_iter().flatten() {
                    if m["path"] == PARENT
                        && let Some(d) = m["dying_memcgs"].as_u64()
                    {
                        r.dying_ours = Some(r.dying_ours.unwrap_or(0).max(d));
                    }
                }
            }
            Some("slow_read")
                if o["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with(&file_suffix)) =>
            {
                r.slow_reads += 1;
            }
            _ => {}
        }
    }
    if r.windows == 0 {
        failures.push("no window lines".into());
    }
    if r.reads < 10 {
        failures.push(format!(
            "{} reads of {PARENT}/memory.stat by cat in {READER}, want at least 10 (10 cat runs)",
            r.reads
        ));
    }
    match (r.dying_kernel, r.made) {
        (Some(k), Some(made)) if made > 0 && k * 10 < made * 9 => failures.push(format!(
            "the kernel shows {k} dying descendants after {made} were made: the scenario did not leave them dying"
        )),
        _ => {}
    }
    match (r.dying_ours, r.dying_kernel) {
        (Some(ours), Some(k)) => {
            let allowed = (k / 50).max(2);
            if ours.abs_diff(k) > allowed {
                failures.push(format!(
                    "dying_memcgs of {PARENT}: ours {ours}, kernel nr_dying_descendants {k} (allowed ±{allowed})"
                ));
            }
        }
        (None, _) => failures.push(format!("no memcgs entry for {PARENT} with dying_memcgs")),
        _ => {}
    }
    r.failures = failures;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(mode: &str, dying_ours: u64, dying_kernel: u64) -> (Vec<String>, Vec<Value>) {
        let hello = serde_json::json!({"type": "hello", "families": {"reads": {"mode": mode, "detail": ""}}});
        let window = serde_json::json!({"type": "window", "cgroups": [{"path": READER, "reads": [
            {"comm": "cat", "file": "/sys/fs/cgroup/cgtrace-vm-reads/memory.stat", "count": 20,
             "total_us": 900.0, "flush_us": 700.0, "latency": {"max_us": 300.0}}]}],
            "memcgs": [{"path": PARENT, "dying_memcgs": dying_ours}]});
        let lines = vec![format!(
            "{KSTAT_AFTER} nr_dying_descendants={dying_kernel} made=300"
        )];
        (lines, vec![hello, window])
    }

    #[test]
    fn a_good_run_passes_and_a_wrong_count_or_mode_fails() {
        let (lines, objs) = log("fentry", 300, 300);
        let r = check_reads("6.1", Some(objs), &lines, Vec::new());
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!((r.reads, r.dying_ours), (20, Some(300)));
        let (lines, objs) = log("syscall", 250, 300);
        let r = check_reads("6.12", Some(objs), &lines, Vec::new());
        assert_eq!(r.failures.len(), 2, "{:?}", r.failures);
        let (lines, objs) = log("syscall", 300, 300);
        assert!(
            check_reads("5.10", Some(objs), &lines, Vec::new())
                .failures
                .is_empty()
        );
    }
}
