//! cgtrace at 10 000 cgroups, as a benchmark (`cargo xtask bench cgroups`): COUNT cgroups in the
//! hierarchy run-queue waits are keyed by, each holding one thread of this process that wakes
//! once a second, under `cgtrace stream --interval 1000` (or the cgtrace command given after
//! `--`) for SECONDS. Every 10 s it prints the daemon's RSS and CPU, and how many cgroups the last
//! window reported; at the end, its peak RSS after the first 10 s as the kernel kept it (`VmHWM`,
//! reset after start-up: a window's short-lived tables count, which 10 s samples miss). Threads
//! are placed with v1's `tasks` file, or on cgroup2 in a threaded subtree (`cgroup.type`,
//! `cgroup.threads`). Root; everything is removed at the end.
//!
//! `many_cgroups [--count N] [--seconds S] [-- CGTRACE_ARGS...]`
use std::{
    fs,
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        mpsc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use cgtrace_tests::{
    cgroup::{TestCgroup, runq_mount},
    node::{proc_usage, status_kib},
    stream::cgtrace_bin,
    workload::clock_ticks,
};

struct Args {
    count: usize,
    seconds: u64,
    cgtrace: Vec<String>,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        count: 10_000,
        seconds: 60,
        cgtrace: ["stream", "--interval", "1000"].map(String::from).to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--" {
            a.cgtrace = it.by_ref().collect();
            break;
        }
        let mut v = || it.next().with_context(|| format!("{k} needs a value"));
        match k.as_str() {
            "--count" => a.count = v()?.parse().context("--count")?,
            "--seconds" => a.seconds = v()?.parse().context("--seconds")?,
            other => {
                bail!("unknown argument {other}: see the top of tests/src/bin/many_cgroups.rs")
            }
        }
    }
    Ok(a)
}

/// This thread's id.
fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Makes `dir` and moves the calling thread into it.
fn enter(dir: &Path, v2: bool) -> Result<()> {
    fs::create_dir(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    if v2 {
        fs::write(dir.join("cgroup.type"), "threaded")
            .with_context(|| format!("{}/cgroup.type", dir.display()))?;
    }
    let file = if v2 { "cgroup.threads" } else { "tasks" };
    fs::write(dir.join(file), tid().to_string())
        .with_context(|| format!("{}/{file}", dir.display()))
}

fn main() -> Result<()> {
    let args = parse()?;
    let (_, hierarchy) = runq_mount();
    let v2 = hierarchy == "cgroup2";
    let mut root = TestCgroup::new("many")?;
    if v2 {
        // Threads move only within their process's threaded domain: the process goes first.
        fs::write(root.procs_file(), std::process::id().to_string())?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (ready, placed) = mpsc::channel::<Result<()>>();
    let mut threads = Vec::with_capacity(args.count);
    for i in 0..args.count {
        let (dir, stop, ready) = (root.dir.join(format!("c{i}")), stop.clone(), ready.clone());
        let t = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let r = enter(&dir, v2);
                let ok = r.is_ok();
                let _ = ready.send(r);
                // Spread over the second, then once a second.
                std::thread::sleep(Duration::from_millis((i % 1000) as u64));
                while ok && !stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
            .with_context(|| format!("thread {i}"))?;
        threads.push(t);
    }
    drop(ready);
    for r in placed.iter().take(args.count) {
        r?;
    }
    eprintln!(
        "many_cgroups: {} cgroups under {} ({hierarchy}), one thread each waking once a second",
        args.count,
        root.dir.display()
    );
    let result = measure(&args);
    stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    for i in 0..args.count {
        let _ = fs::remove_dir(root.dir.join(format!("c{i}")));
    }
    if v2 {
        // Out of the subtree, so it can go.
        let (mount, _) = runq_mount();
        let _ = fs::write(mount.join("cgroup.procs"), std::process::id().to_string());
    }
    root.remove()?;
    result
}

/// Runs cgtrace for the time asked and prints what it cost.
fn measure(args: &Args) -> Result<()> {
    let mut child = Command::new(cgtrace_bin())
        .args(&args.cgtrace)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting cgtrace")?;
    let pid = child.id();
    let stdout = child.stdout.take().context("stdout")?;
    // The window lines are megabytes at this scale: only how many cgroups each reported is kept.
    // The counters that moved are summed over the run (evictions and losses, by name).
    let (windows, last) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (w, l) = (windows.clone(), last.clone());
    let reader = std::thread::spawn(move || {
        let mut moved = std::collections::BTreeMap::<String, u64>::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["type"] == "window"
            {
                w.fetch_add(1, Relaxed);
                l.store(v["cgroups"].as_array().map_or(0, Vec::len) as u64, Relaxed);
                for (name, n) in v["events"]["counters"].as_object().into_iter().flatten() {
                    if let Some(n) = n.as_u64().filter(|&n| n > 0) {
                        *moved.entry(name.clone()).or_default() += n;
                    }
                }
                // Counted since start, not per window.
                if let Some(n) = v["cgroups_evicted"].as_u64().filter(|&n| n > 0) {
                    moved.insert("cgroups_evicted".into(), n);
                }
            }
        }
        moved
    });
    let ticks = clock_ticks() as f64;
    let start = Instant::now();
    let (mut t0, mut cpu0) = (start, proc_usage(pid).1);
    let (mut rss_max, mut samples, mut hwm_reset) = (0u64, Vec::new(), false);
    // RSS split as the kernel counts it: the heap and other private memory (anon), the binary
    // and files (file), and the BPF maps the daemon has mapped, histogram slots and ring buffers
    // (shmem), so a rise names which of them grew.
    println!(
        "second  RSS (KiB)  anon (KiB)  file (KiB)  shmem (KiB)  daemon CPU (% of a core)  cgroups in the last window"
    );
    while start.elapsed() < Duration::from_secs(args.seconds) {
        std::thread::sleep(
            Duration::from_secs(10)
                .min(Duration::from_secs(args.seconds).saturating_sub(start.elapsed())),
        );
        if child.try_wait()?.is_some() {
            bail!("cgtrace exited early");
        }
        let (rss, cpu) = proc_usage(pid);
        let pct = (cpu - cpu0) as f64 / ticks / t0.elapsed().as_secs_f64() * 100.0;
        (t0, cpu0) = (Instant::now(), cpu);
        if samples.is_empty() {
            // Start-up (the loader's BTF parse) is not the steady state: the kernel's
            // high-water mark starts again here.
            hwm_reset = fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
        } else {
            rss_max = rss_max.max(rss);
        }
        samples.push(pct);
        let part = |field| status_kib(pid, field).unwrap_or(0);
        println!(
            "{:>6}  {rss:>9}  {:>10}  {:>10}  {:>11}  {pct:>24.1}  {:>26}",
            start.elapsed().as_secs(),
            part("RssAnon"),
            part("RssFile"),
            part("RssShmem"),
            last.load(Relaxed)
        );
    }
    // The peak between samples too (a window's tables live for milliseconds), before stopping.
    let peak = match status_kib(pid, "VmHWM") {
        Some(hwm) if hwm_reset => hwm.max(rss_max),
        _ => rss_max,
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = child.wait()?;
    let moved = reader.join().unwrap_or_default();
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    println!(
        "{} windows; peak RSS {:.1} MiB (after the first 10 s{}); daemon CPU {mean:.1} % of a core on average; cgtrace {status}",
        windows.load(Relaxed),
        peak as f64 / 1024.0,
        if hwm_reset {
            ", the kernel's high-water mark"
        } else {
            ", sampled every 10 s"
        }
    );
    let moved: Vec<String> = moved.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "counters that moved (summed over windows): {}",
        if moved.is_empty() {
            "none".into()
        } else {
            moved.join(", ")
        }
    );
    Ok(())
}
