//! The slow-reads fixtures themselves, on the real kernel: dying memcgs, the slowfs FUSE mount,
//! a private lxcfs, the `reader` binary and the strace cross-check.
//!
//! Run as root, one test at a time (`--test-threads=1`).
use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    cgroup::TestCgroup,
    fuse::SlowFs,
    lxcfs::{Lxcfs, mem_total_bytes, read_in_cgroups},
    memcg::{DEFAULT_BYTES_EACH, dying_memcgs, make_dying, memory_mount, time_read},
    strace::{reads_of, strace_reads},
    workload::bin,
};
use serde_json::Value;

fn memory_cgroup(name: &str) -> Result<TestCgroup> {
    let (mount, _) = memory_mount();
    TestCgroup::at(
        &mount,
        &format!("/cgtrace-test-{name}-{}", std::process::id()),
    )
}

/// 500 memcgs that each leave 16 KiB of page cache and are removed stay dying: the kernel's count
/// rises by at least 450 (the host frees some of its own meanwhile), and falls back once the
/// page cache is gone.
#[test]
fn make_dying_leaves_dying_memcgs() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let parent = memory_cgroup("dying")?;
    let before = dying_memcgs()?;
    let report = make_dying(&parent.dir, 500, DEFAULT_BYTES_EACH)?;
    let after = dying_memcgs()?;
    eprintln!(
        "make_dying 500: {:?}, dying {before} -> {after} (report {} -> {})",
        report.elapsed, report.dying_before, report.dying_after
    );
    assert_eq!(report.created, 500);
    assert!(
        after as i64 - before as i64 >= 450,
        "dying memcgs {before} -> {after}"
    );
    // The stats of 500 dying memcgs: a read of the root memory.stat right after touching their
    // page cache (a flush) vs one right after it (nothing left to flush).
    report.touch_cache()?;
    let root_stat = memory_mount().0.join("memory.stat");
    let (flush, _) = time_read(&root_stat)?;
    let (warm, _) = time_read(&root_stat)?;
    eprintln!("root memory.stat after touch_cache: {flush:?}, again: {warm:?}");
    drop(report);
    Ok(())
}

/// Every read(2) of `slow` takes at least the delay, `fast` none; measured here, by the `reader`
/// binary, and by strace.
#[test]
fn slowfs_reads_take_the_delay() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let delay = Duration::from_millis(60);
    let fs = SlowFs::mount(delay)?;
    let (slow, n) = time_read(&fs.path("slow"))?;
    let (fast, m) = time_read(&fs.path("fast"))?;
    eprintln!("slowfs: slow {slow:?} ({n} B), fast {fast:?} ({m} B)");
    assert_eq!((n, m), (4096, 4096));
    // Reading to EOF is two read(2)s, each one FUSE request.
    assert!(slow >= 2 * delay, "slow read took {slow:?}");
    assert!(fast < delay, "fast read took {fast:?}");

    let slow_path = fs.path("slow");
    let out = Command::new(bin("reader"))
        .args(["--file", slow_path.to_str().unwrap(), "--count", "3"])
        .output()
        .context("running reader")?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 4);
    let summary = &lines[3];
    eprintln!("reader on slow: {summary}");
    assert!(summary["min_ns"].as_u64().unwrap() >= 2 * delay.as_nanos() as u64);

    let reads = strace_reads(&[
        "cat",
        slow_path.to_str().unwrap(),
        fs.path("fast").to_str().unwrap(),
    ])?;
    let slow_reads = reads_of(&reads, &slow_path);
    let fast_reads = reads_of(&reads, &fs.path("fast"));
    eprintln!(
        "strace: slow {:?}, fast {:?}",
        slow_reads.iter().map(|r| r.duration).collect::<Vec<_>>(),
        fast_reads.iter().map(|r| r.duration).collect::<Vec<_>>()
    );
    assert!(slow_reads.len() >= 2);
    assert!(
        slow_reads
            .iter()
            .all(|r| r.duration >= delay - Duration::from_millis(1))
    );
    assert!(fast_reads.iter().all(|r| r.duration < delay));
    Ok(())
}

/// lxcfs virtualises /proc/meminfo for a reader in a memcg with a limit: MemTotal is the limit.
#[test]
fn lxcfs_meminfo_shows_the_memcg_limit() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let (_, v1) = memory_mount();
    let cg = memory_cgroup("lxcfs")?;
    let limit: u64 = 256 << 20;
    let file = if v1 {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    };
    std::fs::write(cg.dir.join(file), limit.to_string())
        .with_context(|| format!("writing {file}"))?;
    let started = Instant::now();
    let lx = Lxcfs::start()?;
    eprintln!("lxcfs pid {} up in {:?}", lx.pid(), started.elapsed());
    let meminfo = read_in_cgroups(&[&cg.procs_file()], &lx.path("proc/meminfo"))?;
    assert_eq!(mem_total_bytes(&meminfo), Some(limit), "{meminfo}");
    let host = std::fs::read_to_string("/proc/meminfo")?;
    assert_ne!(mem_total_bytes(&host), Some(limit));
    let (t, _) = time_read(&lx.path("proc/meminfo"))?;
    eprintln!("lxcfs proc/meminfo read (root cgroup): {t:?}");
    Ok(())
}

/// `reader --comm --cgroup` renames itself and joins the cgroup before its first read.
#[test]
fn reader_joins_cgroup_and_sets_comm() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let cg = memory_cgroup("reader")?;
    let mut child = Command::new(bin("reader"))
        .args(["--file", "/proc/self/status", "--count", "5"])
        .args(["--interval-ms", "100", "--comm", "cgt-reader"])
        .arg("--cgroup")
        .arg(&cg.dir)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first)?;
    let v: Value = serde_json::from_str(&first)?;
    assert_eq!(v["i"], 0);
    let pid = child.id();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))?;
    let procs = std::fs::read_to_string(cg.procs_file())?;
    let rest: Vec<String> = out.lines().collect::<Result<_, _>>()?;
    assert!(child.wait()?.success());
    assert_eq!(comm.trim(), "cgt-reader");
    assert!(
        procs.lines().any(|l| l.trim() == pid.to_string()),
        "{procs}"
    );
    let summary: Value = serde_json::from_str(rest.last().unwrap())?;
    assert_eq!(summary["count"], 5);
    assert_eq!(summary["pid"], pid);
    Ok(())
}

/// Sanity for the strace cross-check on a real cgroup file.
#[test]
fn strace_times_memory_stat_reads() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let stat = memory_mount().0.join("memory.stat");
    let reads = strace_reads(&["cat", stat.to_str().unwrap()])?;
    let mine = reads_of(&reads, Path::new(&stat));
    eprintln!("strace cat memory.stat: {mine:?}");
    assert!(mine.len() >= 2 && mine[0].ret > 0);
    Ok(())
}

/// The reproduction of the field problem: 2000 dying memcgs whose page cache was just touched
/// make the next root `memory.stat` read flush them all; the read right after has nothing left to
/// flush. Best of 3 tries (the kernel's 2 s flush worker may beat the read to it).
#[test]
fn dying_memcgs_make_memory_stat_flush_slow() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let parent = memory_cgroup("dying2k")?;
    let report = make_dying(&parent.dir, 2000, DEFAULT_BYTES_EACH)?;
    eprintln!(
        "make_dying 2000: {:?}, dying {} -> {} (+{})",
        report.elapsed,
        report.dying_before,
        report.dying_after,
        report.rise()
    );
    assert!(report.rise() >= 1800, "dying rose by {}", report.rise());
    let root_stat = memory_mount().0.join("memory.stat");
    let (mut flush, mut warm) = (Duration::ZERO, Duration::MAX);
    for _ in 0..3 {
        let t = Instant::now();
        report.touch_cache()?;
        let touch = t.elapsed();
        let (f, _) = time_read(&root_stat)?;
        let (w, _) = time_read(&root_stat)?;
        eprintln!("touch_cache {touch:?}; memory.stat read {f:?}, again {w:?}");
        flush = flush.max(f);
        warm = warm.min(w);
    }
    assert!(
        flush >= 4 * warm,
        "flushing read {flush:?} vs warm read {warm:?}"
    );
    Ok(())
}
