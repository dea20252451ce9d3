//! A tracer process from outside: its CPU time from `/proc/PID/stat`.

use std::fs;

use anyhow::{Context, Result};

/// utime + stime of process `pid` (all its threads), in clock ticks.
pub(super) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (did the tracer die?)"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("parsing /proc/{pid}/stat"))
}

fn parse_cpu_ticks(stat: &str) -> Result<u64> {
    // The comm field may hold spaces and parentheses: fields restart after the last ')'.
    let rest = &stat[stat.rfind(')').context("no ')'")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After comm: state(3) … utime(14) stime(15), i.e. indices 11 and 12 here.
    let tick = |i: usize| -> Result<u64> {
        let f = fields.get(i).context("short stat line")?;
        f.parse().with_context(|| format!("field {f:?}"))
    };
    Ok(tick(11)? + tick(12)?)
}

pub(super) fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_with_odd_comm() {
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 123 \
                    1000 10 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat).unwrap(), 22);
    }
}
