//! Real workloads started inside a test cgroup, optionally pinned to one CPU, killed on drop.
use std::{
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, Stdio},
};

use anyhow::{Context, Result};

/// A test binary of this crate (`spin`, `sleeper`, `pipe_pair`, `podproc`), built next to the
/// running test (`target/<profile>/deps/<test>-hash`) or binary (`target/<profile>/<bin>`).
pub fn bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("target dir");
    let dir = if dir.ends_with("deps") {
        dir.parent().expect("target dir")
    } else {
        dir
    };
    dir.join(name)
}

pub struct Task {
    pub child: Child,
}

impl Task {
    /// Starts `cmd` with its pid written to `procs` (a `cgroup.procs` file) before exec, then
    /// pinned to `cpu` if given, and with its own session if `setsid`.
    pub fn spawn(
        mut cmd: Command,
        procs: Option<&Path>,
        cpu: Option<usize>,
        setsid: bool,
    ) -> Result<Self> {
        let procs = procs.map(|p| p.to_path_buf());
        // SAFETY: the closure only makes async-signal-safe calls (open/write/close,
        // sched_setaffinity, setsid) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if setsid {
                    libc::setsid();
                }
                // The cgroup first: the move to `cpu` can wait behind what runs there, and
                // that wait belongs to the cgroup (tests compare a cgroup's waits with its
                // tasks' whole `run_delay`).
                if let Some(p) = &procs {
                    std::fs::write(p, b"0\n")?;
                }
                if let Some(cpu) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .context("spawning workload")?;
        Ok(Self { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the task (SIGSTOP) and waits until it is stopped: off every run queue, so a
    /// tracer started now sees every wait of its after [`Task::resume`] from its start. Waits
    /// begun before a tracer attaches are ones it cannot know the start of (and on a crowded
    /// CPU a weight-1 task's wait can last seconds).
    pub fn pause(&self) -> Result<()> {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGSTOP) };
        let stat = format!("/proc/{}/stat", self.pid());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let s = std::fs::read_to_string(&stat).context("reading the task's stat")?;
            // The state follows the command name's closing parenthesis.
            if s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
            {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "task {} did not stop within 30 s",
                self.pid()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Continues a task stopped by [`Task::pause`] (SIGCONT).
    pub fn resume(&self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGCONT) };
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `perf bench sched ARGS`, quiet (perf is part of the suite: a panic where it is missing).
pub fn perf_bench(args: &[&str]) -> Command {
    let perf = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("perf"))
        .find(|p| p.exists())
        .expect("perf is part of the suite: apt-get install linux-perf");
    let mut cmd = Command::new(perf);
    cmd.args(["bench", "sched"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// `spin N` in a cgroup on a CPU.
pub fn spin(threads: usize, procs: &Path, cpu: Option<usize>) -> Result<Task> {
    let mut cmd = Command::new(bin("spin"));
    cmd.arg(threads.to_string());
    Task::spawn(cmd, Some(procs), cpu, false)
}

/// `sleeper USEC` in a cgroup on a CPU.
pub fn sleeper(usec: u64, procs: Option<&Path>, cpu: Option<usize>, setsid: bool) -> Result<Task> {
    let mut cmd = Command::new(bin("sleeper"));
    cmd.arg(usec.to_string());
    Task::spawn(cmd, procs, cpu, setsid)
}

/// Argument `i` of this process as a number, `default` when missing or not a number (for the
/// fixture binaries).
pub fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `threads` threads that call `spin(until)` for `burst_ms` together every `every_ms`
/// (counted from one start), until the process is killed (the `burst` and `podproc` fixtures).
pub fn bursts(threads: u64, burst_ms: u64, every_ms: u64, spin: fn(std::time::Instant)) {
    use std::time::{Duration, Instant};
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                // Runs until killed: a burst every `every_ms` ms.
                let mut k = 0u64;
                loop {
                    let cycle = start + Duration::from_millis(every_ms * k);
                    let now = Instant::now();
                    if cycle > now {
                        std::thread::sleep(cycle - now);
                    }
                    spin(cycle + Duration::from_millis(burst_ms));
                    k += 1;
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

/// A test cgroup kept busy by spinners (see [`busy`]); derefs to the cgroup.
pub struct Busy {
    /// The spinners. Dropped first: they leave before the cgroup is removed.
    pub task: Task,
    pub cg: crate::cgroup::TestCgroup,
}

impl std::ops::Deref for Busy {
    type Target = crate::cgroup::TestCgroup;

    fn deref(&self) -> &Self::Target {
        &self.cg
    }
}

/// A new test cgroup `name` with `threads` spinners in it ([`spin`], on any CPU).
pub fn busy(name: &str, threads: usize) -> Result<Busy> {
    let cg = crate::cgroup::TestCgroup::new(name)?;
    let task = spin(threads, &cg.procs_file(), None)?;
    Ok(Busy { task, cg })
}

/// Number of online CPUs.
pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Idle + iowait ticks of one CPU from `/proc/stat`.
pub fn cpu_idle_ticks(cpu: usize) -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let tag = format!("cpu{cpu} ");
    stat.lines()
        .find(|l| l.starts_with(&tag))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0)
        })
        .unwrap_or(0)
}

/// `USER_HZ`, the unit of `/proc/stat`.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// The crowded-versus-quiet scene: three spinners in `busy` on CPU 1, a 1 ms sleeper at the lowest
/// CPU weight next to them (`crowded`, CPU 1), and the same sleeper alone on CPU 0 (`quiet`). The
/// crowded one waits milliseconds for a CPU, the quiet one microseconds.
pub struct CrowdedScene {
    /// The busy spinners, the crowded sleeper, the quiet sleeper. Dropped first: the tasks leave
    /// before their cgroups are removed.
    pub tasks: Vec<Task>,
    pub busy: crate::cgroup::TestCgroup,
    pub crowded: crate::cgroup::TestCgroup,
    pub quiet: crate::cgroup::TestCgroup,
}

/// Sets up the [`CrowdedScene`] in cgroups named `<prefix>busy`, `<prefix>crowded`,
/// `<prefix>quiet`.
pub fn crowded_scene(prefix: &str) -> Result<CrowdedScene> {
    use crate::cgroup::TestCgroup;
    let busy = TestCgroup::new(&format!("{prefix}busy"))?;
    let crowded = TestCgroup::new(&format!("{prefix}crowded"))?;
    let quiet = TestCgroup::new(&format!("{prefix}quiet"))?;
    crowded.set_lowest_weight()?;
    quiet.set_lowest_weight()?;
    let tasks = vec![
        spin(3, &busy.procs_file(), Some(1))?,
        sleeper(1000, Some(&crowded.procs_file()), Some(1), false)?,
        sleeper(1000, Some(&quiet.procs_file()), Some(0), false)?,
    ];
    Ok(CrowdedScene {
        tasks,
        busy,
        crowded,
        quiet,
    })
}

/// `tests/java/GcBurn.java` compiled (javac, part of the suite's set-up) into a fresh directory,
/// removed when the value is dropped; run it with `java -cp <dir> GcBurn THREADS SECONDS`.
pub struct GcBurn {
    pub classes: std::path::PathBuf,
}

impl GcBurn {
    pub fn compile(tag: &str) -> Result<Self> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("java/GcBurn.java");
        let classes =
            std::env::temp_dir().join(format!("cgtrace-gcburn-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&classes)?;
        let javac = Command::new("javac")
            .arg("-d")
            .arg(&classes)
            .arg(&src)
            .status();
        anyhow::ensure!(
            javac.is_ok_and(|s| s.success()),
            "javac (openjdk-17-jdk-headless) is part of the suite"
        );
        Ok(Self { classes })
    }

    /// The JVM sized for the host (`-XX:-UseContainerSupport`, as JVMs before container support
    /// are in the field) with `jvm_args`, running `threads` allocating app threads for
    /// `seconds`.
    pub fn command(&self, jvm_args: &[&str], threads: usize, seconds: u64) -> Command {
        let mut java = Command::new("java");
        java.args(["-XX:-UseContainerSupport", "-Xmx256m"])
            .args(jvm_args)
            .arg("-cp")
            .arg(&self.classes)
            .arg("GcBurn")
            .args([threads.to_string(), seconds.to_string()])
            .stdout(Stdio::null());
        java
    }
}

impl Drop for GcBurn {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.classes);
    }
}
