//! A flag's advice, taken as a user would: the flag of a run (the median of its windows'), its
//! cgroup-file changes written exactly as given, and the `cgtrace whatif` options that try them.
use serde_json::Value;

use crate::cgroup::TestCgroup;

/// The flags with `code` that the stream `lines` raised for the cgroup at `path`, every window's.
pub fn flags(lines: &[Value], path: &str, code: &str) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["type"] == "window")
        .flat_map(|w| w["cgroups"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["path"] == path)
        .flat_map(|c| c["flags"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["code"] == code)
        .collect()
}

/// Makes a flag's `cgroup_file` changes in `cg`, in order, each exactly as given; the kernel
/// must accept every one (a value it refuses is a wrong suggestion). Returns what was written.
pub fn apply(cg: &TestCgroup, flag: &Value) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    for c in flag["change"].as_array().into_iter().flatten() {
        if c["kind"] != "cgroup_file" {
            continue;
        }
        let (knob, value) = (
            c["knob"].as_str().unwrap_or(""),
            c["value"].as_str().unwrap_or(""),
        );
        assert!(
            !knob.contains('/') && value.bytes().all(|b| b.is_ascii_digit() || b == b' '),
            "a file of this cgroup and a number: {c}"
        );
        std::fs::write(cg.dir.join(knob), value).map_err(|e| {
            anyhow::anyhow!("the kernel refused the suggested {knob} = {value}: {e}")
        })?;
        done.push(format!("{knob} = {value}"));
    }
    assert!(!done.is_empty(), "the flag names a cgroup file: {flag}");
    Ok(done)
}

/// The flag whose `change` value (at `i`) is the median over the run: the advice of the run,
/// not of its luckiest window.
pub fn median_flag(flags: &[Value], i: usize) -> Value {
    let value = |f: &Value| -> u64 {
        f["change"][i]["value"]
            .as_str()
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let mut sorted = flags.to_vec();
    sorted.sort_by_key(value);
    sorted[sorted.len() / 2].clone()
}

/// The `cgtrace whatif` options that try a flag's cgroup-file change.
pub fn whatif_args(flag: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in flag["change"].as_array().into_iter().flatten() {
        if c["kind"] != "cgroup_file" {
            continue;
        }
        let v: Vec<&str> = c["value"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let mut add = |opt: &str, us: &str| out.extend([opt.to_string(), format!("{us}us")]);
        match (c["knob"].as_str().unwrap_or(""), v.as_slice()) {
            ("cpu.cfs_burst_us" | "cpu.max.burst", [b]) => add("--burst", b),
            ("cpu.cfs_quota_us", [q]) => add("--quota", q),
            ("cpu.cfs_period_us", [p]) => add("--period", p),
            ("cpu.max", [q, p]) => {
                add("--quota", q);
                add("--period", p);
            }
            _ => {}
        }
    }
    out
}
