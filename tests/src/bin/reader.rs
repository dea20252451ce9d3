//! A pseudo-file reader for the slow-reads tests:
//!
//! `reader --file PATH --count N [--interval-ms M] [--bytes B] [--cgroup DIR]... [--comm NAME]`
//!
//! Optionally renames itself (`prctl(PR_SET_NAME)`, so tests find it by comm) and moves itself into
//! each `--cgroup` directory (its pid to `DIR/cgroup.procs`, or `DIR/tasks` if that is missing),
//! then N times: opens PATH, read(2)s it to EOF with a B-byte buffer (default 64 KiB), closes it,
//! and sleeps M ms (default 0). Prints one JSON line per read
//! `{"i":0,"ns":123456,"bytes":4096,"reads":2}` (ns = open to close) and a closing
//! `{"summary":true,"pid":…,"count":…,"min_ns":…,"p50_ns":…,"p99_ns":…,"max_ns":…,"mean_ns":…}`.
//! `--quiet` prints only the summary.
use std::{
    ffi::CString,
    fs::File,
    io::{Read, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

struct Args {
    file: PathBuf,
    count: u64,
    interval: Duration,
    bytes: usize,
    cgroups: Vec<PathBuf>,
    comm: Option<String>,
    quiet: bool,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        file: PathBuf::new(),
        count: 1,
        interval: Duration::ZERO,
        bytes: 64 * 1024,
        cgroups: Vec::new(),
        comm: None,
        quiet: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--quiet" {
            a.quiet = true;
            continue;
        }
        let val = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--file" => a.file = val.into(),
            "--count" => a.count = val.parse().context("--count")?,
            "--interval-ms" => {
                a.interval = Duration::from_millis(val.parse().context("--interval-ms")?)
            }
            "--bytes" => a.bytes = val.parse().context("--bytes")?,
            "--cgroup" => a.cgroups.push(val.into()),
            "--comm" => a.comm = Some(val),
            _ => bail!("unknown flag {flag}"),
        }
    }
    if a.file.as_os_str().is_empty() {
        bail!(
            "usage: reader --file PATH --count N [--interval-ms M] [--bytes B] [--cgroup DIR]... [--comm NAME] [--quiet]"
        );
    }
    if a.bytes == 0 {
        bail!("--bytes must be > 0");
    }
    Ok(a)
}

fn main() -> Result<()> {
    let args = parse()?;
    let pid = std::process::id();
    if let Some(comm) = &args.comm {
        let c = CString::new(comm.as_str()).context("--comm has a NUL")?;
        // SAFETY: PR_SET_NAME reads a NUL-terminated string (the kernel truncates to 15 bytes).
        if unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error()).context("prctl(PR_SET_NAME)");
        }
    }
    for dir in &args.cgroups {
        let procs = dir.join("cgroup.procs");
        let target = if procs.exists() {
            procs
        } else {
            dir.join("tasks")
        };
        std::fs::write(&target, format!("{pid}\n"))
            .with_context(|| format!("moving into {}", target.display()))?;
    }
    let mut buf = vec![0u8; args.bytes];
    let mut lat = Vec::with_capacity(args.count as usize);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for i in 0..args.count {
        if i > 0 && !args.interval.is_zero() {
            std::thread::sleep(args.interval);
        }
        let start = Instant::now();
        let mut f =
            File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
        let (mut total, mut reads) = (0usize, 0u32);
        loop {
            let n = f
                .read(&mut buf)
                .with_context(|| format!("reading {}", args.file.display()))?;
            reads += 1;
            if n == 0 {
                break;
            }
            total += n;
        }
        drop(f);
        let ns = start.elapsed().as_nanos() as u64;
        lat.push(ns);
        if !args.quiet {
            writeln!(
                out,
                "{}",
                serde_json::json!({"i": i, "ns": ns, "bytes": total, "reads": reads})
            )?;
        }
    }
    let mut sorted = lat.clone();
    sorted.sort_unstable();
    let pct = |p: f64| -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[idx]
    };
    let mean = if lat.is_empty() {
        0
    } else {
        lat.iter().sum::<u64>() / lat.len() as u64
    };
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "summary": true,
            "pid": pid,
            "count": lat.len(),
            "min_ns": sorted.first().copied().unwrap_or(0),
            "p50_ns": pct(0.5),
            "p99_ns": pct(0.99),
            "max_ns": sorted.last().copied().unwrap_or(0),
            "mean_ns": mean,
        })
    )?;
    Ok(())
}
