//! `cargo xtask bench reads`: what the reads family adds to one read syscall.
//!
//! Two tight loops of 1-byte reads, each pinned to CPU 0 while cgtrace (if running) sits on
//! CPU 1: `dd bs=1` over a regular file (the reads cgtrace must filter out cheaply) and the
//! test crate's `reader --bytes 1` over a cgroup file (`memory.stat`, reads cgtrace times). Rounds
//! interleave bare and traced runs; per workload: median ns per read syscall bare and traced, the
//! difference, and the ratio.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use clap::Args;

#[derive(Args)]
pub struct ReadsArgs {
    /// The cgtrace binary.
    #[arg(long, default_value = "target/release/cgtrace")]
    bin: PathBuf,
    /// The test crate's reader binary (`cargo build --release -p cgtrace-tests --bins`).
    #[arg(long, default_value = "target/release/reader")]
    reader: PathBuf,
    /// Interleaved rounds (bare, traced).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// 1-byte reads per `dd` run.
    #[arg(long, default_value_t = 2_000_000)]
    reads: u64,
    /// Passes over the cgroup file per reader run (each is one read per byte, plus EOF).
    #[arg(long, default_value_t = 1500)]
    passes: u64,
    /// The cgroup file read by the second workload.
    #[arg(long, default_value = "/sys/fs/cgroup/memory/memory.stat")]
    cgroup_file: PathBuf,
}

struct Tracer(std::process::Child);

impl Tracer {
    fn start(bin: &Path) -> Result<Self> {
        let mut child = Command::new("taskset")
            .args(["-c", "1"])
            .arg(bin)
            // Forced: `auto` is fentry only and leaves the family off where fentry cannot load
            // (this VM), which would time nothing.
            .args([
                "stream",
                "--interval",
                "1000",
                "--no-summary",
                "--reads-mode",
                "syscall",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting cgtrace")?;
        let out = child.stdout.take().context("cgtrace stdout")?;
        let mut lines = BufReader::new(out).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = lines
                .next()
                .context("cgtrace ended before its first window")??;
            if line.starts_with("{\"type\":\"window\"") {
                break;
            }
            ensure!(Instant::now() < deadline, "no window from cgtrace");
        }
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Self(child))
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

/// Wall time of `cmd` pinned to CPU 0.
fn timed(cmd: &[String]) -> Result<Duration> {
    let t0 = Instant::now();
    let status = Command::new("taskset")
        .args(["-c", "0"])
        .args(cmd)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {}", cmd[0]))?;
    let took = t0.elapsed();
    ensure!(status.success(), "{} failed: {status}", cmd.join(" "));
    Ok(took)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: ReadsArgs) -> Result<()> {
    if !args.bin.exists() || !args.reader.exists() {
        bail!(
            "{} or {} missing: cargo build --release -p cgtrace -p cgtrace-tests --bins",
            args.bin.display(),
            args.reader.display()
        );
    }
    let file = std::env::temp_dir().join("cgtrace-bench-reads.dat");
    std::fs::write(&file, vec![b'x'; args.reads as usize]).context("writing the regular file")?;
    let size = std::fs::read(&args.cgroup_file)
        .with_context(|| format!("reading {}", args.cgroup_file.display()))?
        .len() as u64;
    let workloads: [(&str, Vec<String>, u64); 2] = [
        (
            "regular file, dd bs=1",
            vec![
                "dd".into(),
                format!("if={}", file.display()),
                "of=/dev/null".into(),
                "bs=1".into(),
                "status=none".into(),
            ],
            args.reads + 1,
        ),
        (
            "cgroup file, 1-byte reads",
            vec![
                args.reader.display().to_string(),
                "--file".into(),
                args.cgroup_file.display().to_string(),
                "--count".into(),
                args.passes.to_string(),
                "--bytes".into(),
                "1".into(),
                "--quiet".into(),
            ],
            args.passes * (size + 1),
        ),
    ];
    println!(
        "{} rounds; {} ({} bytes) read {} times",
        args.rounds,
        args.cgroup_file.display(),
        size,
        args.passes
    );
    let mut results = vec![(Vec::new(), Vec::new()); workloads.len()];
    for round in 0..args.rounds {
        for (i, (name, cmd, reads)) in workloads.iter().enumerate() {
            let bare = timed(cmd)?.as_secs_f64() * 1e9 / *reads as f64;
            let tracer = Tracer::start(&args.bin)?;
            let traced = timed(cmd)?.as_secs_f64() * 1e9 / *reads as f64;
            drop(tracer);
            println!("round {round} {name}: bare {bare:.0} ns/read, traced {traced:.0} ns/read");
            results[i].0.push(bare);
            results[i].1.push(traced);
        }
    }
    let _ = std::fs::remove_file(&file);
    println!();
    println!(
        "{:<28}{:>14}{:>16}{:>14}{:>8}",
        "workload", "bare ns/read", "traced ns/read", "added ns", "ratio"
    );
    for ((name, _, _), (bare, traced)) in workloads.iter().zip(results.iter_mut()) {
        let (b, t) = (median(bare), median(traced));
        println!("{name:<28}{b:>14.0}{t:>16.0}{:>14.0}{:>8.2}", t - b, t / b);
    }
    Ok(())
}
