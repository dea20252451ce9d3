//! `perf bench sched pipe`, the workload: one run and its output.

use std::{
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail, ensure};

use super::plan::Plan;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Perf {
    pub(super) total_s: f64,
    pub(super) usecs_per_op: f64,
    pub(super) wall_s: f64,
}

pub(super) fn run_perf(plan: &Plan) -> Result<Perf> {
    let start = Instant::now();
    let mut cmd = Command::new(&plan.perf);
    cmd.args(["bench", "sched", "pipe", "-l", &plan.loops.to_string()])
        .stdin(Stdio::null());
    if let Some(cpu) = plan.pin {
        use std::os::unix::process::CommandExt;
        // SAFETY: only sched_setaffinity between fork and exec; perf's children inherit it.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = cmd.output().context("running perf bench")?;
    let wall_s = start.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "perf bench sched pipe failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let (total_s, usecs_per_op) = parse_perf(&String::from_utf8_lossy(&out.stdout))?;
    Ok(Perf {
        total_s,
        usecs_per_op,
        wall_s,
    })
}

/// `(Total time in s, usecs/op)` from `perf bench sched pipe` output.
fn parse_perf(text: &str) -> Result<(f64, f64)> {
    let mut total = None;
    let mut per_op = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Total time:") {
            total = rest.split_whitespace().next().and_then(|v| v.parse().ok());
        } else if line.ends_with("usecs/op") {
            per_op = line.split_whitespace().next().and_then(|v| v.parse().ok());
        }
    }
    match (total, per_op) {
        (Some(t), Some(p)) => Ok((t, p)),
        _ => bail!("perf bench output has no \"Total time\"/\"usecs/op\" lines:\n{text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `perf bench sched pipe -l 100000` on the dev VM.
    const PERF_OUT: &str = "# Running 'sched/pipe' benchmark:
# Executed 100000 pipe operations between two processes

     Total time: 1.522 [sec]

      15.224810 usecs/op
          65682 ops/sec
";

    #[test]
    fn parses_perf_output() {
        assert_eq!(parse_perf(PERF_OUT).unwrap(), (1.522, 15.224810));
        assert!(parse_perf("# Running 'sched/pipe' benchmark:\n").is_err());
    }
}
