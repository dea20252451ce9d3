//! The reference tool: libbpf-tools `runqlat` (Debian package `libbpf-tools`, bcc's CO-RE port).
//!
//! What it does, from its BPF source (bcc `libbpf-tools/runqlat.bpf.c`, v0.26.0 as shipped):
//! - enqueue time is stamped at `sched_wakeup`/`sched_wakeup_new` (the wakee) and at
//!   `sched_switch` for a `prev` that is still `TASK_RUNNING` (preempted); the latency is recorded
//!   when that pid is switched in as `next`. `tp_btf` programs where available, else `raw_tp`.
//! - `-p PID` compares PID with the **tgid of the task being enqueued** (wakee / preempted prev),
//!   so it measures that process's threads only. A non-leader TID matches nothing.
//! - `-c CG` uses `bpf_current_task_under_cgroup`, i.e. the *current* task (the waker, or `prev`),
//!   not the wakee, and CG must be a cgroup2 directory.
//! - Values are `ns / 1000` (µs, default) or `ns / 1_000_000` (`-m`), then log2 slots:
//!   slot 0 is `0 -> 1`, slot k is `2^k -> 2^(k+1)-1`. An empty histogram prints nothing at all.
//!
//! It prints with `printf` and installs its SIGINT handler only *after* attaching and printing the
//! banner. With stdout on a pipe the banner sits in stdio's buffer until exit, so [`Runqlat`]
//! waits for the handler to show up in `/proc/PID/status` (`SigCgt`) instead: that is both
//! "attached" and "safe to SIGINT" (an earlier SIGINT kills it without output).
//!
//! `xtask` (`bench runq`) uses it too, through this crate's library.

use std::{
    fs,
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};

/// Where Debian installs it (`/usr/sbin`, often not on a non-root PATH).
const CANDIDATES: [&str; 2] = ["/usr/sbin/runqlat", "/usr/bin/runqlat"];
const SIGINT: i32 = 2;
/// Loading + attaching takes ~0.3 s here; this is only a bound for a hung tool.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// One log2 histogram as printed. Bucket bounds are in the printed unit (`unit_ns` ns each):
/// a bucket `(low, high, count)` holds values `v` with `low <= v / unit_ns <= high`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log2Hist {
    pub unit_ns: u64,
    pub buckets: Vec<(u64, u64, u64)>,
}

/// A histogram with the line that named it (`pid = 42 comm`, `tid = …`, `pidns = …`), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labeled {
    pub label: Option<String>,
    pub hist: Log2Hist,
}

impl Log2Hist {
    /// No samples (what runqlat means when it prints nothing).
    pub fn empty(unit_ns: u64) -> Self {
        Self {
            unit_ns,
            buckets: Vec::new(),
        }
    }

    pub fn total(&self) -> u64 {
        self.buckets.iter().map(|b| b.2).sum()
    }

    /// Index of the bucket holding the `p`-quantile (`p` in 0..=1, clamped); `None` when empty.
    pub fn percentile_bucket(&self, p: f64) -> Option<usize> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        // Rank of the quantile sample, 1-based: the smallest k with k >= p * total.
        let rank = ((p.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        self.buckets.iter().position(|b| {
            seen += b.2;
            seen >= rank
        })
    }

    pub fn median_bucket(&self) -> Option<usize> {
        self.percentile_bucket(0.5)
    }

    /// Bucket `i` in nanoseconds, both ends inclusive.
    pub fn bucket_ns(&self, i: usize) -> (u64, u64) {
        let (low, high, _) = self.buckets[i];
        (low * self.unit_ns, (high + 1) * self.unit_ns - 1)
    }
}

/// Every histogram in `text` (runqlat's stdout), in order.
pub fn parse_runqlat(text: &str) -> Result<Vec<Log2Hist>> {
    Ok(parse_runqlat_labeled(text)?
        .into_iter()
        .map(|l| l.hist)
        .collect())
}

/// Like [`parse_runqlat`], keeping the `-P`/`-L`/`--pidnss` label of each histogram.
pub fn parse_runqlat_labeled(text: &str) -> Result<Vec<Labeled>> {
    let mut out = Vec::new();
    let mut label = None;
    let mut current: Option<Labeled> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(unit_ns) = header_unit(line) {
            out.extend(current.take());
            let unit_ns = unit_ns.with_context(|| format!("line {}: {line:?}", n + 1))?;
            current = Some(Labeled {
                label: label.take(),
                hist: Log2Hist::empty(unit_ns),
            });
        } else if let Some(bucket) = bucket_line(line) {
            let bucket = bucket.with_context(|| format!("line {}: {line:?}", n + 1))?;
            let Some(cur) = current.as_mut() else {
                bail!("line {}: bucket before any `usecs : count` header", n + 1);
            };
            push_bucket(&mut cur.hist, bucket).with_context(|| format!("line {}", n + 1))?;
        } else {
            out.extend(current.take());
            if is_label(line) {
                label = Some(line.to_string());
            }
        }
    }
    out.extend(current);
    Ok(out)
}

/// `Some(unit)` for a `usecs : count distribution` header line.
fn header_unit(line: &str) -> Option<Result<u64>> {
    let (unit, rest) = line.split_once(':')?;
    if rest.split_whitespace().collect::<Vec<_>>() != ["count", "distribution"] {
        return None;
    }
    Some(match unit.trim() {
        "nsecs" => Ok(1),
        "usecs" => Ok(1_000),
        "msecs" => Ok(1_000_000),
        "secs" => Ok(1_000_000_000),
        other => Err(anyhow::anyhow!("unknown histogram unit {other:?}")),
    })
}

/// `Some(bucket)` for a `low -> high : count |***|` line.
fn bucket_line(line: &str) -> Option<Result<(u64, u64, u64)>> {
    let (range, rest) = line.split_once(':')?;
    let (low, high) = range.split_once("->")?;
    Some(parse_bucket(low, high, rest))
}

fn parse_bucket(low: &str, high: &str, rest: &str) -> Result<(u64, u64, u64)> {
    let low = low.trim().parse().context("bucket low")?;
    let high = high.trim().parse().context("bucket high")?;
    let count = rest
        .split_whitespace()
        .next()
        .context("bucket count missing")?;
    // runqlat prints its u32 counters with %d: above 2^31 they come out negative.
    let count: i64 = count.parse().context("bucket count")?;
    let count = if count < 0 { count + (1 << 32) } else { count };
    Ok((low, high, count as u64))
}

fn push_bucket(hist: &mut Log2Hist, bucket: (u64, u64, u64)) -> Result<()> {
    let expected_low = hist.buckets.last().map_or(0, |b| b.1 + 1);
    ensure!(
        bucket.0 == expected_low && bucket.1 >= bucket.0,
        "bucket {}..={} does not follow the previous one (expected low {expected_low})",
        bucket.0,
        bucket.1
    );
    hist.buckets.push(bucket);
    Ok(())
}

fn is_label(line: &str) -> bool {
    ["pid = ", "tid = ", "pidns = "]
        .iter()
        .any(|p| line.starts_with(p))
}

/// The runqlat binary: `/usr/sbin/runqlat`, `/usr/bin/runqlat`, or the first on `PATH`.
pub fn find_runqlat() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("runqlat"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    CANDIDATES
        .iter()
        .map(PathBuf::from)
        .chain(on_path)
        .find(|p| p.is_file())
        .context("runqlat not found: apt-get install libbpf-tools")
}

/// A running runqlat (no interval: one histogram, printed on SIGINT). Killed if dropped unstopped.
pub struct Runqlat {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl Runqlat {
    /// Latency of the threads of process `pid` (runqlat `-p`, matched on the wakee's tgid).
    pub fn start_for_pid(pid: u32) -> Result<Self> {
        Self::start(&["-p".to_string(), pid.to_string()])
    }

    /// Every task on the host.
    pub fn start_all() -> Result<Self> {
        Self::start(&[])
    }

    /// Spawns `runqlat ARGS` and returns once it has attached (its SIGINT handler is installed).
    pub fn start(args: &[String]) -> Result<Self> {
        let bin = find_runqlat()?;
        let mut child = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let stdout = child.stdout.take().map(read_all);
        let stderr = child.stderr.take().map(read_all);
        let mut me = Self {
            child,
            stdout,
            stderr,
        };
        me.wait_attached()?;
        Ok(me)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT, wait for exit, and the histogram it printed (empty if nothing was recorded).
    pub fn stop(self) -> Result<Log2Hist> {
        let text = self.stop_text()?;
        let hists = parse_runqlat(&text).context("parsing runqlat output")?;
        Ok(hists.into_iter().last().unwrap_or(Log2Hist::empty(1_000)))
    }

    /// SIGINT, wait for exit, and everything it printed on stdout.
    pub fn stop_text(mut self) -> Result<String> {
        crate::signal(self.pid(), SIGINT)?;
        let status = self.wait_exit(EXIT_TIMEOUT)?;
        let stdout = join(self.stdout.take());
        if !status.success() {
            bail!("runqlat failed ({status}): {}", self.stderr_text());
        }
        Ok(stdout)
    }

    fn wait_attached(&mut self) -> Result<()> {
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "runqlat exited before attaching ({status}): {}",
                    self.stderr_text()
                );
            }
            if catches_signal(self.pid(), SIGINT)? {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "runqlat did not attach within {ATTACH_TIMEOUT:?}: {}",
                    self.kill_and_stderr()
                );
            }
            thread::sleep(POLL);
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "runqlat ignored SIGINT for {timeout:?}: {}",
                    self.kill_and_stderr()
                );
            }
            thread::sleep(POLL);
        }
    }

    fn kill_and_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr_text()
    }

    /// Its stderr, once it has exited (the pipe is at EOF then).
    fn stderr_text(&mut self) -> String {
        let text = join(self.stderr.take());
        let text = text.trim();
        if text.is_empty() {
            "(no stderr)".to_string()
        } else {
            text.to_string()
        }
    }
}

impl Drop for Runqlat {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn join(handle: Option<JoinHandle<String>>) -> String {
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

/// Whether `pid` has a handler installed for `sig` (`SigCgt` in `/proc/PID/status`).
fn catches_signal(pid: u32, sig: i32) -> Result<bool> {
    let status = fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("status"))?;
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .context("no SigCgt in /proc/PID/status")?;
    let mask = u64::from_str_radix(mask.trim(), 16).context("SigCgt")?;
    Ok(mask & (1 << (sig - 1)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `runqlat 1 3` during `perf bench sched pipe` on the 6.18 dev VM (3 interval histograms).
    const INTERVALS: &str = include_str!("testdata/runqlat-intervals.txt");

    /// `runqlat -p <sched-pipe parent>`, stopped with SIGINT.
    const PID: &str = include_str!("testdata/runqlat-pid.txt");

    /// `runqlat -mT 1 2`: millisecond buckets, a timestamp line before each histogram.
    const MS_TIMESTAMPS: &str = include_str!("testdata/runqlat-ms-timestamps.txt");

    /// `runqlat -P`, first three of 32 per-process histograms.
    const PER_PID: &str = include_str!("testdata/runqlat-per-pid.txt");

    /// `runqlat --pidnss 1 1`.
    const PIDNS: &str = include_str!("testdata/runqlat-pidns.txt");

    /// `runqlat -p <sleeping pid>`: nothing recorded, so no histogram at all.
    const EMPTY: &str = "Tracing run queue latency... Hit Ctrl-C to end.\n\n";

    #[test]
    fn parses_interval_histograms() {
        let hists = parse_runqlat(INTERVALS).unwrap();
        assert_eq!(hists.len(), 3);
        assert!(hists.iter().all(|h| h.unit_ns == 1_000));
        assert_eq!(hists[0].buckets.len(), 17);
        assert_eq!(hists[0].buckets[0], (0, 1, 40205));
        assert_eq!(hists[0].buckets[16], (65536, 131071, 2));
        assert_eq!(hists[1].buckets[13], (8192, 16383, 0));
        assert_eq!(hists[2].total(), 220_269);
    }

    #[test]
    fn single_histogram_quantiles() {
        let h = &parse_runqlat(PID).unwrap()[0];
        assert_eq!(h.total(), 116_515);
        // 36547 < 58258 (rank of the median) <= 36547 + 78248.
        assert_eq!(h.median_bucket(), Some(1));
        assert_eq!(h.percentile_bucket(0.0), Some(0));
        assert_eq!(h.percentile_bucket(0.99), Some(2));
        assert_eq!(h.percentile_bucket(1.0), Some(6));
        assert_eq!(h.bucket_ns(1), (2_000, 3_999));
        assert_eq!(h.bucket_ns(0), (0, 1_999));
    }

    #[test]
    fn millisecond_unit_and_timestamps() {
        let hists = parse_runqlat(MS_TIMESTAMPS).unwrap();
        assert_eq!(hists.len(), 2);
        assert!(hists.iter().all(|h| h.unit_ns == 1_000_000));
        assert_eq!(hists[0].buckets[5], (32, 63, 1));
        assert_eq!(hists[1].bucket_ns(3), (8_000_000, 15_999_999));
    }

    #[test]
    fn per_process_labels() {
        let hists = parse_runqlat_labeled(PER_PID).unwrap();
        let labels: Vec<_> = hists.iter().map(|l| l.label.as_deref()).collect();
        assert_eq!(
            labels,
            [
                Some("pid = 22922 rustc"),
                Some("pid = 23 kworker/1:0"),
                Some("pid = 44 kworker/1:1H")
            ]
        );
        assert_eq!(hists[0].hist.total(), 7);
        assert_eq!(hists[0].hist.median_bucket(), Some(4));
        let pidns = parse_runqlat_labeled(PIDNS).unwrap();
        assert_eq!(
            pidns[0].label.as_deref(),
            Some("pidns = 4026531836 sched-pipe")
        );
    }

    #[test]
    fn empty_output_has_no_histogram() {
        assert!(parse_runqlat(EMPTY).unwrap().is_empty());
        assert_eq!(Log2Hist::empty(1_000).median_bucket(), None);
    }

    #[test]
    fn wrapped_u32_count_is_unwrapped() {
        let text = "     usecs : count distribution\n 0 -> 1 : -2 |*|\n";
        assert_eq!(
            parse_runqlat(text).unwrap()[0].buckets[0].2,
            u64::from(u32::MAX) - 1
        );
    }

    /// Real runqlat on a shell that waits for 20 `sleep` children (each wait is a wakeup).
    /// Skipped (with a note) when not root or libbpf-tools is missing.
    #[test]
    fn start_for_pid_sees_the_process() {
        if !is_root() || find_runqlat().is_err() {
            crate::skip("needs root and libbpf-tools");
            return;
        }
        let mut sh = Command::new("sh")
            .args(["-c", "read go; for i in $(seq 20); do sleep 0.01; done"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let rq = Runqlat::start_for_pid(sh.id()).unwrap();
        std::io::Write::write_all(sh.stdin.as_mut().unwrap(), b"go\n").unwrap();
        assert!(sh.wait().unwrap().success());
        let hist = rq.stop().unwrap();
        assert_eq!(hist.unit_ns, 1_000);
        assert!(
            hist.total() > 0,
            "no run-queue latency recorded for the shell: {hist:?}"
        );
    }

    fn is_root() -> bool {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
        uid.split_whitespace().nth(1) == Some("0")
    }

    #[test]
    fn rejects_garbled_output() {
        assert!(
            parse_runqlat("  0 -> 1 : 5 |*|\n").is_err(),
            "bucket without header"
        );
        let gap = "usecs : count distribution\n0 -> 1 : 5 |*|\n4 -> 7 : 1 ||\n";
        assert!(parse_runqlat(gap).is_err(), "missing bucket");
        assert!(parse_runqlat("furlongs : count distribution\n").is_err());
    }
}
