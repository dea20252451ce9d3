//! What the kernel counts per BPF program in the program's fdinfo: runs and time in it (while
//! `kernel.bpf_stats_enabled` is 1) and `recursion_misses`, runs the kernel skipped because the
//! program was already running on that CPU (a nested event). Read per window as deltas.

use std::{
    os::fd::{AsFd, AsRawFd},
    path::PathBuf,
};

use aya::Ebpf;

/// One program's counters (cumulative, or a window's change).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgCounters {
    pub run_cnt: u64,
    pub run_time_ns: u64,
    pub recursion_misses: u64,
}

/// Parses the counters out of a program's `/proc/PID/fdinfo/FD` (absent lines read as 0: kernels
/// before 5.12 have no `recursion_misses`).
pub fn parse_fdinfo(text: &str) -> ProgCounters {
    let mut c = ProgCounters::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim().parse().unwrap_or(0);
        match k.trim() {
            "run_cnt" => c.run_cnt = v,
            "run_time_ns" => c.run_time_ns = v,
            "recursion_misses" => c.recursion_misses = v,
            _ => {}
        }
    }
    c
}

/// The loaded programs of a tracer and their counters at the last read.
pub struct ProgStats {
    progs: Vec<(String, PathBuf, ProgCounters)>,
}

impl ProgStats {
    /// Every loaded program (attached or not: the ones not attached stay at zero), counted from
    /// its load: the first window has every run since attach, as the programs' own counters do.
    pub fn new(ebpf: &Ebpf) -> Self {
        let mut progs = Vec::new();
        for (name, prog) in ebpf.programs() {
            let Ok(fd) = prog.fd() else { continue };
            let path = PathBuf::from(format!("/proc/self/fdinfo/{}", fd.as_fd().as_raw_fd()));
            progs.push((name.to_string(), path, ProgCounters::default()));
        }
        Self { progs }
    }

    /// Each program's change since the last call, in load order.
    pub fn read_window(&mut self) -> Vec<(&str, ProgCounters)> {
        let mut out = Vec::with_capacity(self.progs.len());
        for (name, path, prev) in &mut self.progs {
            let Ok(text) = std::fs::read_to_string(&*path) else {
                continue;
            };
            let now = parse_fdinfo(&text);
            let d = ProgCounters {
                run_cnt: now.run_cnt.saturating_sub(prev.run_cnt),
                run_time_ns: now.run_time_ns.saturating_sub(prev.run_time_ns),
                recursion_misses: now.recursion_misses.saturating_sub(prev.recursion_misses),
            };
            *prev = now;
            out.push((name.as_str(), d));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_counters_are_read_and_missing_ones_are_zero() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1081\nprog_type:\t26\n\
                    prog_jited:\t1\nprog_tag:\t2a0bc4b7ba2f1a5e\nmemlock:\t4096\nprog_id:\t97\n\
                    run_time_ns:\t123456\nrun_cnt:\t789\nrecursion_misses:\t3\nverified_insns:\t512\n";
        assert_eq!(
            parse_fdinfo(text),
            ProgCounters {
                run_cnt: 789,
                run_time_ns: 123456,
                recursion_misses: 3
            }
        );
        let old = "prog_type:\t26\nrun_time_ns:\t10\nrun_cnt:\t2\n";
        assert_eq!(parse_fdinfo(old).recursion_misses, 0);
        assert_eq!(parse_fdinfo(old).run_cnt, 2);
    }
}
