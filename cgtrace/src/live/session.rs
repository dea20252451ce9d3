//! A live tracing session: the tracer, the readers of its maps and ring buffer, and the
//! aggregator, turning the kernel's data into one [`Window`] per call. The stream (and later the
//! view and the recorder) drive it; none of them talks to BPF directly.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow};
use aya::maps::{MapData, PerCpuArray, RingBuf};
use cgtrace_common::layout::Config;
use tokio::time::{Instant as TokioInstant, Interval, MissedTickBehavior, interval, interval_at};

use crate::{
    bpf::counters::{CounterReader, event_counts},
    bpf::loader::{TraceOptions, Tracer},
    bpf::ring::Drain,
    cgroup::{Cgroups, Names, Resolver},
    decode::RawRecords,
    family::collect::{Collector, Start, WindowInput, take_map},
    family::live::LIVE,
    family::select::EventSelection,
    family::{EventLine, Records},
    live::aggregate::Aggregator,
    model::{CgroupLayoutInfo, Hello, HistSpec, SCHEMA, Window},
};

/// What the user chose.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub interval: Duration,
    pub max_cgroups: u32,
    /// Keys of the reads family's stats table (`--max-read-keys`).
    pub max_read_keys: u32,
    /// Entries of the reads family's per-thread table (`--max-read-threads`; `None`: from the
    /// number of CPUs).
    pub max_read_threads: Option<u32>,
    /// Hold `BPF_ENABLE_STATS` while tracing, so each window's `self` has program runs and
    /// times (`--bpf-stats`).
    pub bpf_stats: bool,
    /// Waits at least this long are charged to whoever held the CPU (`runq.blame`); `None`:
    /// the blame ledger is off (the default; `--blame` turns it on).
    pub blame_min: Option<Duration>,
    /// Waits at least this long are also delivered as individual events.
    pub event_min: Duration,
    pub ringbuf_bytes: u32,
    pub throttle_mode: crate::bpf::loader::ThrottleMode,
    pub flag_rules: crate::family::throttle::FlagRules,
    pub reads_mode: crate::bpf::loader::ReadsMode,
    /// Pseudo-file reads at least this long are also delivered as individual events.
    pub slow_read_min: Duration,
    /// containerd's state directory, for CRI names (`--containerd-state`).
    pub containerd_state: std::path::PathBuf,
}

pub struct Session {
    _tracer: Tracer,
    pub hello: Hello,
    /// One per attached family, in registry order.
    collectors: Vec<Box<dyn Collector>>,
    counters: CounterReader,
    /// The programs' own counters (runs, run time, `recursion_misses`).
    progs: crate::bpf::prog_stats::ProgStats,
    /// Whether the kernel counts program runs and run time (see `Tracer::bpf_stats`).
    bpf_stats_on: bool,
    /// The daemon's CPU and memory, for `self`.
    usage: crate::selfstat::SelfSampler,
    aggregator: Aggregator,
    window_start: Instant,
    /// What the ring buffer delivered since the last window.
    records: Records,
    /// When recording: every record exactly as it came out of the ring buffer.
    pub raw: Option<RawRecords>,
    drain_reported: u64,
    /// Records the drain thread's queue could not hold, since the last window.
    drain_full: u64,
    /// The drain thread's batch, swapped with its queue.
    batch: Vec<u8>,
}

/// The stream's name for a cgroup layout.
pub fn layout_name(layout: crate::cgroup::CgroupLayout) -> &'static str {
    match layout {
        crate::cgroup::CgroupLayout::V1 => "v1",
        crate::cgroup::CgroupLayout::V2 => "v2",
        crate::cgroup::CgroupLayout::Hybrid => "hybrid",
    }
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Session {
    /// Discovers cgroups, loads and attaches the programs, and starts each attached family's
    /// collector. Returns the session and the ring buffer, which the [`Pump`] polls.
    pub fn start(opts: &SessionOptions) -> anyhow::Result<(Self, RingBuf<MapData>)> {
        let cgroups = Cgroups::discover("/proc/self/mountinfo".as_ref(), "/proc/cgroups".as_ref())
            .context("discovering cgroup hierarchies")?;
        let hier = cgroups.runq_hierarchy().ok_or_else(|| {
            anyhow!("no cgroup hierarchy with the cpu controller and no cgroup2 mount found: mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) or the v1 cpu controller")
        })?;
        let cgroup_v1 = matches!(hier.version, crate::cgroup::Version::V1);
        let hier_name = if cgroup_v1 { "cpu" } else { "cgroup2" }.to_string();
        let mount = hier.mount.clone();
        // The root cgroup's id is its directory's inode number (its kernfs node id).
        let root_cgroup_id = std::fs::metadata(&mount).map_or(0, |m| {
            use std::os::unix::fs::MetadataExt;
            m.ino()
        });
        let trace = TraceOptions {
            max_cgroups: opts.max_cgroups,
            max_read_keys: opts.max_read_keys,
            max_read_threads: opts.max_read_threads,
            bpf_stats: opts.bpf_stats,
            config: Config {
                runq_event_min_ns: opts.event_min.as_nanos() as u64,
                ringbuf_wakeup_bytes: u64::from(opts.ringbuf_bytes / 4),
                read_event_min_ns: opts.slow_read_min.as_nanos() as u64,
                self_tgid: std::process::id(),
                blame_min_ns: opts
                    .blame_min
                    .map_or(u64::MAX, |d| (d.as_nanos() as u64).min(u64::MAX - 1)),
                root_cgroup_id,
                ..Config::DEFAULT
            },
            ringbuf_bytes: opts.ringbuf_bytes,
            cgroup_v1,
            throttle_mode: opts.throttle_mode,
            reads_mode: opts.reads_mode,
        };
        let mut tracer = Tracer::start(&trace)?;
        let mut collectors = Vec::new();
        for f in LIVE {
            let attached = tracer
                .families
                .get(f.info.name)
                .is_some_and(|m| m.mode.is_attached());
            if !attached {
                continue;
            }
            let mut ctx = Start {
                ebpf: &mut tracer.ebpf,
                cgroups: &cgroups,
                hierarchy: hier,
                max_cgroups: opts.max_cgroups as usize,
                runq: crate::family::runq::StartOptions {
                    blame: opts.blame_min.is_some(),
                    starts: tracer.runq_start,
                    caps: crate::family::runq::model::BlameCaps {
                        root_cgroup: root_cgroup_id,
                        ..crate::family::runq::attach::blame_caps(&tracer.layout)
                    },
                },
                throttle: opts.flag_rules,
                reads: crate::family::reads::StartOptions {
                    churn_traced: tracer.churn_traced,
                },
            };
            collectors.push((f.start)(&mut ctx)?);
        }
        crate::selfstat::release_startup_heap();
        let ebpf = &mut tracer.ebpf;
        let counters: PerCpuArray<MapData, cgtrace_common::counters::Counters> =
            take_map(ebpf, "COUNTERS")?.try_into()?;
        let ring: RingBuf<MapData> = take_map(ebpf, "EVENTS")?.try_into()?;
        let progs = crate::bpf::prog_stats::ProgStats::new(ebpf);
        let mut usage = crate::selfstat::SelfSampler::this_process();
        let _ = usage.sample();
        let sched_ext = crate::family::throttle::sched_ext::probe(
            crate::family::throttle::sched_ext::SYSFS.as_ref(),
        );
        let mut families = tracer.families.clone();
        if crate::family::throttle::sched_ext::replaces_the_fair_class(&sched_ext)
            && let (Some(t), Some(s)) = (families.get_mut("throttle"), &sched_ext)
        {
            t.detail = format!("{}; but {}", t.detail, s.note);
        }
        let hello = Hello {
            kind: "hello".into(),
            schema: SCHEMA,
            cgtrace: env!("CARGO_PKG_VERSION").into(),
            host: read_trimmed("/proc/sys/kernel/hostname"),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            // SAFETY: sysconf has no preconditions.
            cpus: unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32,
            start_unix_ms: now_unix_ms(),
            interval_ms: opts.interval.as_millis() as u64,
            cgroup: CgroupLayoutInfo {
                layout: layout_name(cgroups.layout).to_string(),
                runq_hierarchy: hier_name.clone(),
                runq_mount: mount.display().to_string(),
            },
            families,
            capabilities: tracer.capabilities.clone(),
            hist: HistSpec::this_build(),
            kept_capabilities: crate::safety::privilege::kept_names(),
            wait_split: Some(crate::bpf::btf::layout::wait_split(&tracer.layout)),
            blame_min_us: opts.blame_min.map(|d| d.as_micros() as u64),
            blame: opts.blame_min.map(|_| {
                crate::family::runq::model::HelloBlame::new(
                    crate::family::runq::attach::blame_caps(&tracer.layout),
                )
            }),
            sched_ext,
        };
        let aggregator = Aggregator::new(
            hier_name,
            Resolver::new(mount, opts.max_cgroups as usize * 2)?,
            {
                let mut names = Names::system();
                names.set_containerd_state(opts.containerd_state.clone());
                names
            },
            opts.max_cgroups as usize,
        );
        let session = Self {
            collectors,
            counters: CounterReader::new(counters),
            progs,
            bpf_stats_on: tracer.bpf_stats_on(),
            usage,
            aggregator,
            _tracer: tracer,
            hello,
            window_start: Instant::now(),
            records: Records::default(),
            raw: None,
            drain_reported: 0,
            drain_full: 0,
            batch: Vec::new(),
        };
        Ok((session, ring))
    }

    /// Takes every record the drain thread queued.
    pub fn drain(&mut self, drain: &Drain) {
        let mut batch = std::mem::take(&mut self.batch);
        self.drain_full += drain.take(&mut batch);
        let (raw, records) = (&mut self.raw, &mut self.records);
        crate::decode::for_each(&batch, |item| {
            if let Some(raw) = raw.as_mut() {
                raw.push(item);
            }
            records.consume(item);
        });
        batch.clear();
        self.batch = batch;
    }

    /// The end of the run: event lines still waiting for a later window go out (with the last
    /// window; take them with [`take_lines`](Self::take_lines)).
    pub fn finish_records(&mut self) {
        self.records.finish();
    }

    /// Chooses the families whose event lines are kept (`--events`).
    pub fn set_lines(&mut self, lines: &EventSelection) {
        self.records.set_lines(|f| lines.has(f));
    }

    /// The event lines drained since the last call, named.
    pub fn take_lines(&mut self) -> Vec<EventLine> {
        let mut out = Vec::new();
        let agg = &mut self.aggregator;
        self.records.take_lines(
            &mut |id| {
                let (path, name) = agg.describe(id);
                (path, name.map(|n| n.display))
            },
            &mut out,
        );
        let named = out.len();
        for c in &mut self.collectors {
            c.lines(&mut self.records, &mut out);
        }
        for line in &mut out[named..] {
            let head = line.head();
            let (path, name) = self.aggregator.describe(head.cgroup_id);
            (head.path, head.name) = (path, name.map(|n| n.display));
        }
        // Lines no collector took (its family is not attached) are not kept.
        drop(self.records.reads.take_slow_reads());
        out
    }

    /// Ends the current window and returns it.
    pub fn next_window(&mut self) -> anyhow::Result<Window> {
        let mut input = WindowInput::default();
        for c in &mut self.collectors {
            c.read_window(&mut self.records, &mut input)?;
        }
        // Records the collectors made go to the recording after the ring buffer's of this window.
        let made = std::mem::take(&mut self.records.made);
        if let Some(raw) = self.raw.as_mut() {
            crate::decode::for_each(&made, |r| raw.push(r));
        }
        let kernel = self.counters.read_window();
        let lost = self.records.undecodable + self.records.lines_dropped;
        let undecodable = lost - self.drain_reported;
        self.drain_reported = lost;
        input.events = event_counts(&kernel, undecodable, std::mem::take(&mut self.drain_full));
        // Runs the kernel skipped (a program nested in itself on a CPU): not lost data of a
        // family by themselves (period counts heal from the kernel's own counters), but shown.
        let progs: Vec<(String, crate::bpf::prog_stats::ProgCounters)> = self
            .progs
            .read_window()
            .into_iter()
            .map(|(name, c)| (name.to_string(), c))
            .collect();
        let misses = progs.iter().map(|(_, c)| c.recursion_misses).sum();
        input
            .events
            .counters
            .insert("recursion_misses".into(), misses);
        let now = Instant::now();
        let duration_ms = now.duration_since(self.window_start).as_millis() as u64;
        self.window_start = now;
        let self_cost = self_cost(progs, duration_ms, self.bpf_stats_on, self.usage.sample());
        let mut out =
            self.aggregator
                .window(input, &mut self.collectors, now_unix_ms(), duration_ms);
        out.window.self_cost = Some(self_cost);
        for c in &mut self.collectors {
            c.finish_window(&mut self.records, &mut out.window);
        }
        if !out.removed.is_empty() {
            let gone: std::collections::HashSet<u64> = out.removed.into_iter().collect();
            for c in &mut self.collectors {
                c.forget(&gone);
            }
        }
        Ok(out.window)
    }

    /// Path and name of a cgroup (as in the windows), resolved now if not tracked yet.
    pub fn describe(&mut self, id: u64) -> (Option<String>, Option<crate::cgroup::name::Name>) {
        self.aggregator.describe(id)
    }

    /// The name of the file a read key refers to (for the recorder's files table).
    pub fn read_file(
        &mut self,
        key: &cgtrace_common::reads::ReadKey,
    ) -> Option<crate::family::reads::ReadFile> {
        self.collectors.iter_mut().find_map(|c| c.read_file(key))
    }

    /// Since-start per-cgroup histograms.
    pub fn totals(&self) -> Vec<crate::model::CgroupWindow> {
        self.aggregator.totals()
    }
}

/// A window's `self` object from its programs' counters, its length and the daemon's usage.
pub fn self_cost(
    progs: Vec<(String, crate::bpf::prog_stats::ProgCounters)>,
    duration_ms: u64,
    bpf_stats: bool,
    usage: Option<crate::selfstat::SelfUsage>,
) -> crate::model::SelfCost {
    let mut programs: Vec<crate::model::ProgramCost> = progs
        .into_iter()
        .filter(|(_, c)| c.run_cnt > 0 || c.recursion_misses > 0)
        .map(|(name, c)| crate::model::ProgramCost {
            name,
            runs: c.run_cnt,
            run_us: c.run_time_ns as f64 / 1e3,
            ns_per_run: (bpf_stats && c.run_cnt > 0)
                .then(|| c.run_time_ns as f64 / c.run_cnt as f64),
            recursion_misses: c.recursion_misses,
        })
        .collect();
    programs.sort_by(|a, b| {
        b.run_us
            .total_cmp(&a.run_us)
            .then(b.runs.cmp(&a.runs))
            .then_with(|| a.name.cmp(&b.name))
    });
    let run_ns: f64 = programs.iter().map(|p| p.run_us * 1e3).sum();
    let window_ns = duration_ms.max(1) as f64 * 1e6;
    crate::model::SelfCost {
        bpf_stats,
        programs,
        bpf_cpu_pct: run_ns / window_ns * 100.0,
        daemon_cpu_pct: usage.map_or(0.0, |u| u.cpu_percent),
        rss_kib: usage.map_or(0, |u| u.rss_bytes / 1024),
    }
}

/// What one turn of the [`Pump`] produced.
pub enum Pumped {
    /// The ring buffer was drained (its records are in the session's drain state).
    Drained,
    /// A window ended.
    Window(Box<Window>),
}

/// The drain thread's queue holds this many ring buffers' worth of records.
pub const DRAIN_QUEUE_RINGS: usize = 8;

/// The one collection loop of a live session, shared by the stream and the view: drains the ring
/// buffer when it signals (or every 200 ms) and ends a window on every interval tick. Callers
/// `select!` on [`Pump::next`] next to their own events (signals, keys, a deadline); `next` is
/// cancel-safe, as it changes nothing until its only await has returned.
pub struct Pump {
    pub session: Session,
    drain: Drain,
    tick: Interval,
    drain_tick: Interval,
}

impl Pump {
    /// Starts tracing. Must run inside a tokio runtime (the ring buffer is registered with it).
    pub fn start(opts: &SessionOptions) -> anyhow::Result<Self> {
        let (session, ring) = Session::start(opts)?;
        let cap = (opts.ringbuf_bytes as usize).saturating_mul(DRAIN_QUEUE_RINGS);
        let drain =
            Drain::start(ring, cap).map_err(|e| anyhow!("starting the drain thread: {e}"))?;
        let mut pump = Self {
            session,
            drain,
            tick: interval(opts.interval),
            drain_tick: interval(Duration::from_millis(200)),
        };
        pump.set_interval(opts.interval);
        Ok(pump)
    }

    /// Windows end every `every` from now on.
    pub fn set_interval(&mut self, every: Duration) {
        self.tick = interval_at(TokioInstant::now() + every, every);
        self.tick
            .set_missed_tick_behavior(MissedTickBehavior::Delay);
    }

    /// Waits for the ring buffer or a tick, drains, and ends a window on an interval tick.
    pub async fn next(&mut self) -> anyhow::Result<Pumped> {
        let window = tokio::select! {
            () = self.drain.ready() => false,
            _ = self.drain_tick.tick() => false,
            _ = self.tick.tick() => true,
        };
        self.drain();
        if window {
            Ok(Pumped::Window(Box::new(self.session.next_window()?)))
        } else {
            Ok(Pumped::Drained)
        }
    }

    /// Drains what is pending now.
    pub fn drain(&mut self) {
        self.session.drain(&self.drain);
    }

    /// Drains, then ends the current (partial) window: the last one before stopping, so nothing
    /// traced goes unreported.
    pub fn last_window(&mut self) -> anyhow::Result<Window> {
        self.drain.finish();
        self.drain();
        self.session.next_window()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::prog_stats::ProgCounters;

    fn prog(name: &str, runs: u64, ns: u64) -> (String, ProgCounters) {
        let c = ProgCounters {
            run_cnt: runs,
            run_time_ns: ns,
            recursion_misses: 0,
        };
        (name.to_string(), c)
    }

    #[test]
    fn self_cost_orders_programs_by_time_and_leaves_out_idle_ones() {
        let progs = vec![
            prog("sched_wakeup", 1000, 250_000),
            prog("sched_switch", 2000, 700_000),
            prog("reads_sys_enter", 0, 0),
        ];
        let usage = crate::selfstat::SelfUsage {
            cpu_percent: 1.5,
            rss_bytes: 30 << 20,
        };
        let s = self_cost(progs.clone(), 1000, true, Some(usage));
        let names: Vec<&str> = s.programs.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["sched_switch", "sched_wakeup"]);
        assert_eq!(s.programs[0].ns_per_run, Some(350.0));
        // 0.95 ms of program time in a 1 s window.
        assert!((s.bpf_cpu_pct - 0.095).abs() < 1e-9);
        assert_eq!((s.daemon_cpu_pct, s.rss_kib), (1.5, 30 * 1024));
        // Without run-time statistics there are runs but no time per run.
        let s = self_cost(progs, 1000, false, None);
        assert_eq!(s.programs[0].ns_per_run, None);
        assert!(!s.bpf_stats);
    }
}
