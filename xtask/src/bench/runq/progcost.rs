//! Per-program cost of a tracer that is not cgtrace (runqlat), from the kernel's own BPF
//! run-time statistics: `BPF_ENABLE_STATS` held while it runs, and `run_cnt`/`run_time_ns` of each
//! program fd the tracer holds (`/proc/PID/fdinfo`), named by `bpftool prog show`.
//! [`ProgramRuns`], one program's runs and time, is what both tracers' per-program numbers are
//! kept in (cgtrace reports its own in its window lines), and [`sum_by_name`] adds them up.

use std::{
    collections::BTreeMap,
    fs,
    os::fd::{FromRawFd, OwnedFd},
    process::Command,
};

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use serde_json::Value;

/// `BPF_ENABLE_STATS` (bpf(2) command 32) with `BPF_STATS_RUN_TIME` (0).
const BPF_ENABLE_STATS: libc::c_long = 32;

/// Turns the kernel's BPF run-time statistics on until the returned fd is closed (5.8+,
/// CAP_SYS_ADMIN).
pub fn enable_stats() -> Result<OwnedFd> {
    // `union bpf_attr { struct { __u32 type; } enable_stats; … }`, the rest zero.
    let attr = [0u64; 8];
    // SAFETY: bpf(2) reads `size` bytes of `attr`, which outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_ENABLE_STATS,
            attr.as_ptr(),
            std::mem::size_of_val(&attr) as u32,
        )
    };
    ensure!(
        fd >= 0,
        "BPF_ENABLE_STATS: {} (needs root and 5.8+)",
        std::io::Error::last_os_error()
    );
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `run_cnt` and `run_time_ns` of every BPF program process `pid` holds an fd of, by program id.
pub fn read(pid: u32) -> Result<BTreeMap<u32, (u64, u64)>> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(text) = fs::read_to_string(entry?.path()) else {
            continue;
        };
        if let Some((id, runs, ns)) = parse_fdinfo(&text) {
            out.insert(id, (runs, ns));
        }
    }
    Ok(out)
}

/// `(prog_id, run_cnt, run_time_ns)` of a program fd's fdinfo; `None` for other fds (a link's
/// fdinfo names its program's id too, without the counters).
pub fn parse_fdinfo(text: &str) -> Option<(u32, u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let id = u32::try_from(field("prog_id")?).ok()?;
    Some((id, field("run_cnt")?, field("run_time_ns")?))
}

/// A program's name from `bpftool prog show id ID --json` ("prog ID" without bpftool).
pub fn name(id: u32) -> String {
    Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string(), "--json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .and_then(|v| v["name"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("prog {id}"))
}

/// One program's runs and time over a measured span.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProgramRuns {
    pub name: String,
    pub runs: u64,
    pub run_ns: u64,
}

/// Each program's runs and time summed over `runs`, by name, in name order.
pub fn sum_by_name<'a>(runs: impl IntoIterator<Item = &'a ProgramRuns>) -> Vec<ProgramRuns> {
    let mut sum: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for p in runs {
        let e = sum.entry(&p.name).or_default();
        e.0 += p.runs;
        e.1 += p.run_ns;
    }
    sum.into_iter()
        .map(|(name, (runs, run_ns))| ProgramRuns {
            name: name.to_string(),
            runs,
            run_ns,
        })
        .collect()
}

/// What changed between two [`read`]s, named; programs that did not run are left out.
pub fn delta(
    before: &BTreeMap<u32, (u64, u64)>,
    after: &BTreeMap<u32, (u64, u64)>,
) -> Vec<ProgramRuns> {
    after
        .iter()
        .filter_map(|(id, &(runs, ns))| {
            let (r0, n0) = before.get(id).copied().unwrap_or((0, 0));
            let runs = runs.saturating_sub(r0);
            (runs > 0).then(|| ProgramRuns {
                name: name(*id),
                runs,
                run_ns: ns.saturating_sub(n0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_fdinfo_is_parsed_and_other_fds_are_not() {
        let prog = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nprog_jited:\t1\n\
                    prog_tag:\t2a0bc4b7ba2f1a5e\nmemlock:\t4096\nprog_id:\t97\n\
                    run_time_ns:\t123456\nrun_cnt:\t789\nrecursion_misses:\t0\n";
        assert_eq!(parse_fdinfo(prog), Some((97, 789, 123456)));
        assert_eq!(parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t16\n"), None);
        let map = "map_type:\t2\nkey_size:\t4\nmap_id:\t12\n";
        assert_eq!(parse_fdinfo(map), None);
        let link = "pos:\t0\nflags:\t02000000\nlink_type:\traw_tracepoint\nlink_id:\t1922\n\
                    prog_tag:\tb205300bf137067c\nprog_id:\t97\ntp_name:\tsched_wakeup\n";
        assert_eq!(parse_fdinfo(link), None);
    }

    #[test]
    fn delta_keeps_programs_that_ran() {
        let before = BTreeMap::from([(1, (10, 1000)), (2, (5, 500))]);
        let after = BTreeMap::from([(1, (110, 31_000)), (2, (5, 500))]);
        let d = delta(&before, &after);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].runs, d[0].run_ns), (100, 30_000));
    }
}
