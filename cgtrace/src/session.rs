//! A live tracing session: the tracer, the readers of its maps and ring buffer, and the
//! aggregator, turning the kernel's data into one [`Window`] per call. The stream (and later the
//! view and the recorder) drive it; none of them talks to BPF directly.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow};
use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use cgtrace_common::{
    hist::{NR_BUCKETS, SUB_BITS},
    layout::Config,
};
use tokio::{
    io::unix::AsyncFd,
    time::{Instant as TokioInstant, Interval, MissedTickBehavior, interval, interval_at},
};

use crate::{
    aggregate::{Aggregator, CpuFiles, WindowInput},
    cgroup::{Cgroups, Names, Resolver},
    counters::{CounterReader, event_counts},
    events::EventSelection,
    family::{EventLine, Records, runq::RunqReader, throttle::ThrottleReader},
    loader::{TraceOptions, Tracer},
    model::{CgroupLayoutInfo, Hello, HistSpec, SCHEMA, Window},
};

/// What the user chose.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub interval: Duration,
    pub max_cgroups: u32,
    /// Waits at least this long are also delivered as individual events.
    pub event_min: Duration,
    pub ringbuf_bytes: u32,
    pub throttle_mode: crate::loader::ThrottleMode,
    pub flag_rules: crate::family::throttle::FlagRules,
    pub reads_mode: crate::loader::ReadsMode,
    /// Pseudo-file reads at least this long are also delivered as individual events.
    pub slow_read_min: Duration,
}

/// Ring-buffer records kept as bytes for `cgtrace record`, bounded: past `cap` bytes records are
/// counted in `lost` instead (the recorder takes them after every drain, so this only fills when
/// the disk stalls).
#[derive(Debug, Default)]
pub struct RawRecords {
    /// Each record as `len:u32` (native endian) then its bytes.
    pub buf: Vec<u8>,
    pub cap: usize,
    pub lost: u64,
}

impl RawRecords {
    pub fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            lost: 0,
        }
    }

    pub fn push(&mut self, rec: &[u8]) {
        if self.buf.len() + 4 + rec.len() > self.cap {
            self.lost += 1;
            return;
        }
        self.buf
            .extend_from_slice(&(rec.len() as u32).to_ne_bytes());
        self.buf.extend_from_slice(rec);
    }

    /// Calls `f` with each record kept, then forgets them.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) {
        let mut p = 0;
        while p + 4 <= self.buf.len() {
            let len = u32::from_ne_bytes([
                self.buf[p],
                self.buf[p + 1],
                self.buf[p + 2],
                self.buf[p + 3],
            ]) as usize;
            f(&self.buf[p + 4..p + 4 + len]);
            p += 4 + len;
        }
        self.buf.clear();
    }
}

pub struct Session {
    _tracer: Tracer,
    pub hello: Hello,
    runq: RunqReader,
    /// `None` when the throttle family is unavailable on this kernel.
    throttle: Option<ThrottleReader>,
    counters: CounterReader,
    /// `None` when the reads family is unavailable or off.
    reads: Option<ReadsState>,
    aggregator: Aggregator,
    window_start: Instant,
    /// What the ring buffer delivered since the last window.
    records: Records,
    /// When recording: every record exactly as it came out of the ring buffer.
    pub raw: Option<RawRecords>,
    drain_reported: u64,
}

/// The reads family's daemon side: its map reader and where dying memcgs are counted.
struct ReadsState {
    reader: crate::family::reads::ReadsReader,
    /// Counts dying memcgs (`None`: no memory controller).
    dying: Option<crate::family::reads::DyingCounter>,
    /// Cgroup churn is traced, so the v1 directory count can follow it between walks.
    churn_traced: bool,
    /// v1 controllers by hierarchy id, to name churn events' hierarchies.
    subsystems: Vec<(String, u32)>,
}

/// The stream's name for a cgroup layout.
pub fn layout_name(layout: crate::cgroup::CgroupLayout) -> &'static str {
    match layout {
        crate::cgroup::CgroupLayout::V1 => "v1",
        crate::cgroup::CgroupLayout::V2 => "v2",
        crate::cgroup::CgroupLayout::Hybrid => "hybrid",
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
    /// Discovers cgroups, loads and attaches the programs. Returns the session and the ring buffer,
    /// which the caller polls (see [`drain_ring`]).
    pub fn start(opts: &SessionOptions) -> anyhow::Result<(Self, RingBuf<MapData>)> {
        let cgroups = Cgroups::discover("/proc/self/mountinfo".as_ref(), "/proc/cgroups".as_ref())
            .context("discovering cgroup hierarchies")?;
        let hier = cgroups.runq_hierarchy().ok_or_else(|| {
            anyhow!("no cgroup hierarchy with the cpu controller and no cgroup2 mount found: mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) or the v1 cpu controller")
        })?;
        let cgroup_v1 = matches!(hier.version, crate::cgroup::Version::V1);
        let hier_name = if cgroup_v1 { "cpu" } else { "cgroup2" }.to_string();
        let mount = hier.mount.clone();
        let trace = TraceOptions {
            max_cgroups: opts.max_cgroups,
            config: Config {
                runq_event_min_ns: opts.event_min.as_nanos() as u64,
                ringbuf_wakeup_bytes: u64::from(opts.ringbuf_bytes / 4),
                read_event_min_ns: opts.slow_read_min.as_nanos() as u64,
                ..Config::DEFAULT
            },
            ringbuf_bytes: opts.ringbuf_bytes,
            cgroup_v1,
            throttle_mode: opts.throttle_mode,
            reads_mode: opts.reads_mode,
        };
        let mut tracer = Tracer::start(&trace)?;
        let throttle_on = tracer
            .families
            .get("throttle")
            .is_some_and(|m| m.mode != "unavailable");
        let reads_on = tracer
            .families
            .get("reads")
            .is_some_and(|m| m.mode != "unavailable" && m.mode != "off");
        let ebpf = &mut tracer.ebpf;
        let take = |ebpf: &mut aya::Ebpf, name: &'static str| {
            ebpf.take_map(name)
                .ok_or(crate::loader::LoadError::MissingMap(name))
        };
        let hist: HashMap<MapData, _, _> = take(ebpf, "RUNQ_HIST")?.try_into()?;
        let throttle = if throttle_on {
            let stats: HashMap<MapData, u64, _> = take(ebpf, "THROTTLE_STATS")?.try_into()?;
            Some(ThrottleReader::new(stats))
        } else {
            None
        };
        let reads = if reads_on {
            let stats: HashMap<MapData, _, _> = take(ebpf, "READ_STATS")?.try_into()?;
            let files: HashMap<MapData, _, _> = take(ebpf, "READ_FILES")?.try_into()?;
            let dying = match cgroups.for_controller("memory") {
                Some(h) => Some(crate::family::reads::DyingCounter::new(
                    h.mount.clone(),
                    matches!(h.version, crate::cgroup::Version::V2),
                )),
                None => cgroups
                    .v2()
                    .map(|h| crate::family::reads::DyingCounter::new(h.mount.clone(), true)),
            };
            Some(ReadsState {
                reader: crate::family::reads::ReadsReader::new(stats, files),
                dying,
                churn_traced: tracer.churn_traced,
                subsystems: cgroups
                    .subsystems
                    .iter()
                    .map(|s| (s.name.clone(), s.hierarchy))
                    .collect(),
            })
        } else {
            None
        };
        let epoch: Array<MapData, u64> = take(ebpf, "EPOCH")?.try_into()?;
        let counters: PerCpuArray<MapData, cgtrace_common::counters::Counters> =
            take(ebpf, "COUNTERS")?.try_into()?;
        let ring: RingBuf<MapData> = take(ebpf, "EVENTS")?.try_into()?;
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
            families: tracer.families.clone(),
            capabilities: tracer.capabilities.clone(),
            hist: HistSpec {
                unit: "ns".into(),
                sub_bits: SUB_BITS,
                buckets: NR_BUCKETS,
            },
        };
        let cpu_files = CpuFiles {
            mount: mount.clone(),
            version: hier.version,
            cpuacct_mount: match hier.version {
                crate::cgroup::Version::V1 => {
                    cgroups.for_controller("cpuacct").map(|h| h.mount.clone())
                }
                crate::cgroup::Version::V2 => None,
            },
        };
        let mut aggregator = Aggregator::new(
            hier_name,
            Resolver::new(mount, opts.max_cgroups as usize * 2)?,
            Names::system(),
            Some(cpu_files),
            opts.max_cgroups as usize,
        );
        aggregator.set_flag_rules(opts.flag_rules);
        if throttle.is_some() {
            aggregator.prime_quota_baselines();
        }
        let session = Self {
            runq: RunqReader::new(hist, epoch)?,
            throttle,
            counters: CounterReader::new(counters),
            reads,
            aggregator,
            _tracer: tracer,
            hello,
            window_start: Instant::now(),
            records: Records::default(),
            raw: None,
            drain_reported: 0,
        };
        Ok((session, ring))
    }

    /// Reads every pending record from the ring buffer.
    pub fn drain(&mut self, ring: &mut RingBuf<MapData>) {
        while let Some(item) = ring.next() {
            if let Some(raw) = self.raw.as_mut() {
                raw.push(&item);
            }
            self.records.consume(&item);
        }
    }

    /// Chooses the families whose event lines are kept (`--events`).
    pub fn set_lines(&mut self, lines: &EventSelection) {
        let r = Records::with_lines(lines);
        self.records.runq.keep_lines = r.runq.keep_lines;
        self.records.throttle.keep_lines = r.throttle.keep_lines;
        self.records.reads.keep_lines = r.reads.keep_lines;
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
        for ev in self.records.reads.take_slow_reads() {
            let Some(r) = self.reads.as_mut() else { break };
            let mut line = r.reader.slow_read(&ev);
            let (path, name) = self.aggregator.describe(ev.key.cgroup_id);
            line.path = path;
            line.name = name.map(|n| n.display);
            out.push(EventLine::SlowRead(line));
        }
        out
    }

    /// Ends the current window and returns it.
    pub fn next_window(&mut self) -> anyhow::Result<Window> {
        let runq = self.runq.read_window()?;
        let periods = self
            .throttle
            .as_mut()
            .map(ThrottleReader::read_window)
            .unwrap_or_default();
        let (episodes, burned) = self.records.throttle.take_window(monotonic_ns());
        let kernel = self.counters.read_window();
        let lost = self.records.undecodable + self.records.lines_dropped;
        let undecodable = lost - self.drain_reported;
        self.drain_reported = lost;
        let now = Instant::now();
        let duration_ms = now.duration_since(self.window_start).as_millis() as u64;
        self.window_start = now;
        let reads = self.reads.as_mut().map(|r| r.reader.read_window());
        let (by_cgroup, memcgs) = reads.map(|r| (r.by_cgroup, r.memcgs)).unwrap_or_default();
        let input = WindowInput {
            runq,
            periods,
            episodes,
            burned,
            events: event_counts(&kernel, undecodable),
            reads: by_cgroup,
        };
        let mut out = self.aggregator.window(input, now_unix_ms(), duration_ms);
        if let Some(r) = &mut self.reads {
            out.window.memcgs = memcgs;
            out.window.churn = self
                .records
                .reads
                .churn
                .take(|h| r.reader.hierarchy_name(h, &r.subsystems));
            // The memory hierarchy's churn keeps the v1 directory count current between walks.
            let churn = r.churn_traced.then(|| {
                out.window.churn.as_ref().map_or((0, 0), |c| {
                    c.by_hierarchy
                        .iter()
                        .filter(|(name, _)| name.split(',').any(|n| n == "memory"))
                        .fold((0, 0), |acc, (_, v)| (acc.0 + v[0], acc.1 + v[1]))
                })
            });
            out.window.dying_memcgs = r
                .dying
                .as_mut()
                .and_then(|d| d.read("/proc/cgroups".as_ref(), churn));
        }
        for id in out.removed {
            self.runq.forget(id);
            if let Some(t) = self.throttle.as_mut() {
                t.forget(id);
            }
        }
        Ok(out.window)
    }

    /// Path and name of a cgroup (as in the windows), resolved now if not tracked yet.
    pub fn describe(&mut self, id: u64) -> (Option<String>, Option<crate::cgroup::name::Name>) {
        self.aggregator.describe(id)
    }

    /// Since-start per-cgroup histograms.
    pub fn totals(&self) -> Vec<crate::model::CgroupWindow> {
        self.aggregator.totals()
    }
}

/// What one turn of the [`Pump`] produced.
pub enum Pumped {
    /// The ring buffer was drained (its records are in the session's drain state).
    Drained,
    /// A window ended.
    Window(Box<Window>),
}

/// The one collection loop of a live session, shared by the stream and the view: drains the ring
/// buffer when it signals (or every 200 ms) and ends a window on every interval tick. Callers
/// `select!` on [`Pump::next`] next to their own events (signals, keys, a deadline); `next` is
/// cancel-safe, as it changes nothing until its only await has returned.
pub struct Pump {
    pub session: Session,
    ring: AsyncFd<RingBuf<MapData>>,
    tick: Interval,
    drain_tick: Interval,
}

impl Pump {
    /// Starts tracing. Must run inside a tokio runtime (the ring buffer is registered with it).
    pub fn start(opts: &SessionOptions) -> anyhow::Result<Self> {
        let (session, ring) = Session::start(opts)?;
        // SAFETY: the ring buffer owns its map fd, which stays open and unchanged until `ring`
        // drops.
        let ring = unsafe { AsyncFd::register(ring) }
            .map_err(|e| anyhow!("polling the ring buffer: {e}"))?;
        let mut pump = Self {
            session,
            ring,
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
            r = self.ring.readable_mut() => {
                if let Ok(mut guard) = r {
                    guard.clear_ready();
                }
                false
            }
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
        self.session.drain(self.ring.get_mut());
    }

    /// Drains, then ends the current (partial) window: the last one before stopping, so nothing
    /// traced goes unreported.
    pub fn last_window(&mut self) -> anyhow::Result<Window> {
        self.drain();
        self.session.next_window()
    }
}
