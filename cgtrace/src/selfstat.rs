//! cgtrace's own cost: CPU share and resident memory from `/proc/self` (the view's header and each
//! window's `self` object).

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

/// Gives the allocator's free pages back to the kernel once loading is done. Loading parses the
/// kernel's BTF (tens of MB of types, about 50 MB of heap at its peak on 6.18) and frees it
/// before the first window; glibc keeps a freed region resident unless it is at the top of the
/// heap, so without this an idle daemon's RSS stays near the loader's peak (68.6 MiB against
/// 43.3 with it, on 6.18; at 10 000 cgroups a window's own peak reuses most of that region
/// anyway). Once, not per window: trimming every window cost 2 points of a core at 10 000
/// cgroups.
pub fn release_startup_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Makes glibc serve every allocation of 128 KiB or more from a mapping of its own, unmapped when
/// freed. By default the threshold rises to the largest block freed so far (up to 32 MiB): after
/// the first window, a window's big tables (its cgroups, 6 MB at 10 000; hash tables of a few MB)
/// come from the heap, and the heap keeps their pages resident between windows. At 10 000 cgroups
/// this took the daemon from 56.6–65.6 MiB to 43.4–51.8 MiB over the first 130 s
/// (`cargo xtask bench cgroups`), for one `mmap`/`munmap` pair per big table a window.
pub fn map_large_allocations() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of the allocator, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Gives the heap's free pages back to the kernel (glibc's `malloc_trim`), once a window's
/// tables are gone. Long-lived entries (since-start histograms, names, blame pairs) are made
/// between a window's short-lived ones, so freed space sits in the middle of the heap where
/// glibc's own trimming (the top of the heap only) never reaches it, and stays resident.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only madvises free chunks; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// CPU (percent of one CPU since the previous sample) and resident set size.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SelfUsage {
    pub cpu_percent: f64,
    pub rss_bytes: u64,
}

/// Samples `<proc>/self/stat` and `<proc>/self/statm`.
pub struct SelfSampler {
    proc_root: PathBuf,
    ticks_per_s: f64,
    page_size: u64,
    /// CPU time from `getrusage(RUSAGE_SELF)` (µs resolution) instead of `stat`'s clock ticks
    /// (10 ms, too coarse for a daemon using 1 % of a CPU in 1 s windows).
    rusage: bool,
    /// When, and the CPU time (ns) then.
    prev: Option<(Instant, u64)>,
}

impl SelfSampler {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        // SAFETY: sysconf has no preconditions.
        let (hz, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        Self {
            proc_root: proc_root.into(),
            ticks_per_s: hz.max(1) as f64,
            page_size: page.max(1) as u64,
            rusage: false,
            prev: None,
        }
    }

    /// This process, its CPU time from `getrusage`.
    pub fn this_process() -> Self {
        Self {
            rusage: true,
            ..Self::new("/proc")
        }
    }

    /// A sample; the CPU share is 0 on the first call (nothing to compare with yet). `None` if
    /// `/proc` is unreadable.
    pub fn sample(&mut self) -> Option<SelfUsage> {
        let rss_bytes = rss_bytes(&self.proc_root, self.page_size)?;
        let cpu_ns = if self.rusage {
            rusage_cpu_ns()?
        } else {
            let stat = std::fs::read_to_string(self.proc_root.join("self/stat")).ok()?;
            (cpu_ticks(&stat)? as f64 / self.ticks_per_s * 1e9) as u64
        };
        let now = Instant::now();
        let cpu_percent = match self.prev {
            Some((t, prev)) => {
                let secs = now.duration_since(t).as_secs_f64();
                if secs > 0.0 {
                    cpu_ns.saturating_sub(prev) as f64 / 1e9 / secs * 100.0
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
        self.prev = Some((now, cpu_ns));
        Some(SelfUsage {
            cpu_percent,
            rss_bytes,
        })
    }

    pub fn proc_root(&self) -> &Path {
        &self.proc_root
    }
}

/// The resident set (bytes) of `<proc_root>/self`, from `statm`.
fn rss_bytes(proc_root: &Path, page_size: u64) -> Option<u64> {
    let statm = std::fs::read_to_string(proc_root.join("self/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size)
}

/// This process's CPU time since it started (seconds, every thread, from `getrusage`) and its
/// resident set now (bytes): the totals Prometheus exports.
pub fn process_totals() -> Option<(f64, u64)> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let rss = rss_bytes(Path::new("/proc"), page)?;
    Some((rusage_cpu_ns()? as f64 / 1e9, rss))
}

/// User + system CPU time of every thread of this process, in ns.
fn rusage_cpu_ns() -> Option<u64> {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return None;
        }
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some((us(ru.ru_utime) + us(ru.ru_stime)) * 1000)
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line; the command name in parentheses
/// may itself hold spaces and parentheses, so fields are counted after the last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ticks_and_rss_from_a_fixture_proc() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(tmp.path().join("self")).expect("mkdir");
        let stat = "4242 (cg (trace) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 \
                    1000 10000000 300 18446744073709551615";
        std::fs::write(tmp.path().join("self/stat"), stat).expect("write");
        std::fs::write(tmp.path().join("self/statm"), "5000 300 100 10 0 200 0").expect("write");
        assert_eq!(cpu_ticks(stat), Some(200));
        let mut s = SelfSampler::new(tmp.path());
        let u = s.sample().expect("sample");
        assert_eq!(u.cpu_percent, 0.0);
        assert_eq!(u.rss_bytes, 300 * s.page_size);
        assert_eq!(s.proc_root(), tmp.path());
    }

    #[test]
    fn the_real_proc_self_is_readable() {
        let mut s = SelfSampler::new("/proc");
        assert!(s.sample().is_some_and(|u| u.rss_bytes > 0));
    }

    #[test]
    fn rusage_sees_a_busy_20_ms() {
        let mut s = SelfSampler::this_process();
        assert!(s.sample().is_some());
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let u = s.sample().expect("sample");
        assert!(u.cpu_percent > 10.0, "{u:?}");
    }
}
