//! `cargo xtask bench cgroups`: cgtrace's memory and CPU at 10 000 cgroups, each with a thread
//! waking once a second (`tests/src/bin/many_cgroups.rs`). With `--baseline BIN` (another
//! build's cgtrace) the two run in turn, baseline first, so a change is compared within one run.
//!
//! Every run keeps a copy of this build's cgtrace as `target/bench/cgtrace-<commit>`: the next
//! change passes it as `--baseline`.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, ensure};
use clap::Args;

use crate::workspace;

#[derive(Args)]
pub(super) struct CgroupsArgs {
    /// Cgroups, one thread each.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// How long cgtrace runs.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Another build's cgtrace (e.g. `target/bench/cgtrace-<commit>` kept by an earlier run),
    /// run in turn with this one.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Runs of each build.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// The cgtrace command measured (default: `stream --interval 1000`).
    #[arg(last = true)]
    cgtrace: Vec<String>,
}

/// What one run printed: its peak RSS and the daemon's CPU in each 10 s after the first.
#[derive(Clone, Debug, Default, PartialEq)]
struct Run {
    peak_rss_mib: f64,
    cpu: Vec<f64>,
    cgroups: Vec<u64>,
}

pub(super) fn run(args: CgroupsArgs) -> Result<()> {
    workspace::build_cgtrace_and_test_bins(&["many_cgroups"])?;
    let root = workspace::root();
    let current = root.join("target/release/cgtrace");
    let kept = root.join(format!("target/bench/cgtrace-{}", workspace::commit(&root)));
    std::fs::create_dir_all(root.join("target/bench"))?;
    std::fs::copy(&current, &kept).with_context(|| format!("copying to {}", kept.display()))?;
    let mut bins = Vec::new();
    if let Some(b) = &args.baseline {
        ensure!(b.is_file(), "--baseline {}: no such file", b.display());
        bins.push(("baseline", b.clone()));
    }
    bins.push(("this build", current));
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); bins.len()];
    for round in 1..=args.rounds {
        for (i, (name, bin)) in bins.iter().enumerate() {
            eprintln!(
                "== round {round}/{}: {name} ({})",
                args.rounds,
                bin.display()
            );
            runs[i].push(run_once(&root, bin, &args)?);
        }
    }
    println!(
        "| build | peak RSS after the first 10 s (MiB) | daemon CPU after the first 10 s (% of a core) | cgroups in a window |\n|---|---|---|---|"
    );
    for ((name, _), r) in bins.iter().zip(&runs) {
        let rss: Vec<String> = r.iter().map(|r| format!("{:.1}", r.peak_rss_mib)).collect();
        let cpu: Vec<String> = r
            .iter()
            .map(|r| range(&r.cpu, |v| format!("{v:.1}")))
            .collect();
        let cg: Vec<String> = r
            .iter()
            .map(|r| range(&r.cgroups, |v| v.to_string()))
            .collect();
        println!(
            "| {name} | {} | {} | {} |",
            rss.join(" / "),
            cpu.join(" / "),
            cg.join(" / ")
        );
    }
    println!("this build's cgtrace kept as {}", kept.display());
    Ok(())
}

/// One many_cgroups run under `bin`, its lines passed through as they come.
fn run_once(root: &Path, bin: &Path, args: &CgroupsArgs) -> Result<Run> {
    let mut cmd = Command::new(root.join("target/release/many_cgroups"));
    cmd.args(["--count", &args.count.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .env("CGTRACE_BIN", bin)
        .stdout(Stdio::piped());
    if !args.cgtrace.is_empty() {
        cmd.arg("--").args(&args.cgtrace);
    }
    let mut child = cmd.spawn().context("running many_cgroups")?;
    let mut text = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line?;
            println!("{line}");
            text.push_str(&line);
            text.push('\n');
        }
    }
    let status = child.wait()?;
    ensure!(status.success(), "many_cgroups failed: {status}");
    parse(&text).context("many_cgroups printed no peak RSS")
}

/// The figures of many_cgroups' output: the rows of each 10 s (`second RSS anon file shmem CPU
/// cgroups`; the first, start-up, left out of the CPU) and the closing line's peak RSS.
fn parse(text: &str) -> Option<Run> {
    let mut run = Run::default();
    let mut rows = 0;
    let mut peak = None;
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if let [second, _rss, _anon, _file, _shmem, cpu, cgroups] = cols[..]
            && second.parse::<u64>().is_ok()
            && let (Ok(cpu), Ok(cgroups)) = (cpu.parse::<f64>(), cgroups.parse::<u64>())
        {
            rows += 1;
            if rows > 1 {
                run.cpu.push(cpu);
            }
            run.cgroups.push(cgroups);
        }
        if let Some(rest) = line.split("peak RSS ").nth(1) {
            peak = rest.split_whitespace().next()?.parse().ok();
        }
    }
    run.peak_rss_mib = peak?;
    Some(run)
}

/// `min–max` of `v` (one value alone; `-` when empty).
fn range<T: Copy + PartialOrd>(v: &[T], show: impl Fn(T) -> String) -> String {
    let mut it = v.iter().copied();
    let Some(first) = it.next() else {
        return "-".into();
    };
    let (lo, hi) = it.fold((first, first), |(lo, hi), x| {
        (if x < lo { x } else { lo }, if x > hi { x } else { hi })
    });
    if lo == hi {
        show(lo)
    } else {
        format!("{}–{}", show(lo), show(hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_many_cgroups_output() {
        let text = "many_cgroups: 10000 cgroups under /sys/fs/cgroup/cpu/x (cpu), one thread each
second  RSS (KiB)  anon (KiB)  file (KiB)  shmem (KiB)  daemon CPU (% of a core)  cgroups in the last window
    10      84000       60000       14000        10000                      29.9                        9977
    20      84480       60480       14000        10000                       4.1                        9993
    30      85604       61604       14000        10000                       4.0                        9993
38 windows; peak RSS 83.6 MiB; daemon CPU 10.3 % of a core on average; cgtrace exit status: 0
counters that moved (summed over windows): runq_waits 415634
";
        let run = parse(text).unwrap();
        assert_eq!(run.peak_rss_mib, 83.6);
        assert_eq!(run.cpu, vec![4.1, 4.0]);
        assert_eq!(run.cgroups, vec![9977, 9993, 9993]);
        assert_eq!(range(&run.cpu, |v| format!("{v:.1}")), "4.0–4.1");
        assert_eq!(range(&run.cgroups[1..], |v| v.to_string()), "9993");
        assert!(parse("second  RSS (KiB)\n").is_none());
    }
}
