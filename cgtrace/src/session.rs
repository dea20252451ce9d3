//! A live tracing session: the tracer, the readers of its maps and ring buffer, and the
//! aggregator, turning the kernel's data into one [`Window`] per call. The stream (and later the
//! view and the recorder) drive it; none of them talks to BPF directly.

use std::{
    collections::HashMap as StdHashMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, anyhow};
use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use cgtrace_common::{
    event::{
        EventHeader, KIND_CGROUP_CHURN, KIND_RUNQ_WAIT, KIND_SLOW_READ, KIND_THROTTLE,
        KIND_THROTTLE_PERIOD, KIND_THROTTLE_SLICE, read_pod,
    },
    hist::{NR_BUCKETS, SUB_BITS},
    layout::Config,
    reads::{CgroupChurnEvent, SlowReadEvent},
    runq::{RunqEvent, WaitKind},
    throttle::{
        CLOSE_CSD, CLOSE_LATE, CLOSE_TIMER, CLOSE_UNTHROTTLE, PeriodEvent, SliceEvent,
        ThrottleEvent,
    },
};
use tokio::{
    io::unix::AsyncFd,
    time::{Instant as TokioInstant, Interval, MissedTickBehavior, interval, interval_at},
};

use crate::{
    aggregate::{Aggregator, CpuFiles, WindowInput},
    burners::{Burners, ThrottledPeriod},
    cgroup::{Cgroups, Names, Resolver},
    counters::{CounterReader, event_counts},
    loader::{TraceOptions, Tracer},
    runq::{RunqReader, comm_str, decode_event},
    snapshot::{CgroupLayoutInfo, Hello, HistSpec, RunqWait, SCHEMA, ThrottleLine, Window},
    throttle::{self, Episodes, ThrottleReader},
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
    pub flag_rules: crate::throttle::FlagRules,
    pub reads_mode: crate::loader::ReadsMode,
    /// Pseudo-file reads at least this long are also delivered as individual events.
    pub slow_read_min: Duration,
}

/// What draining the ring buffer produced between windows: the daemon's own losses and counts,
/// and the throttle episodes the next window aggregates.
#[derive(Default, Debug)]
pub struct DrainStats {
    pub undecodable: u64,
    pub runq_events: u64,
    /// Episodes since the last window, by cgroup.
    pub episodes: StdHashMap<u64, Episodes>,
    /// Who burned each throttled period.
    pub burners: Burners,
    /// Also keep each episode, with its period's top threads, for event lines (`--events`).
    pub keep_throttle_lines: bool,
    pub throttle_lines: Vec<(ThrottleEvent, Option<ThrottledPeriod>)>,
    /// Also keep slow reads for event lines (`--events reads`), bounded.
    pub keep_slow_reads: bool,
    pub slow_reads: Vec<SlowReadEvent>,
    /// Cgroup creations and removals since the last window.
    pub churn: crate::reads::ChurnCounter,
    /// Event lines not kept because the caller did not drain them in time.
    pub lines_dropped: u64,
    /// When recording: every record exactly as it came out of the ring buffer.
    pub raw: Option<RawRecords>,
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

/// Event lines kept between two drains of the caller (beyond, they are counted as dropped).
const MAX_PENDING_LINES: usize = 100_000;

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
    drain: DrainStats,
    drain_reported: u64,
}

/// The reads family's daemon side: its map reader and where dying memcgs are counted.
struct ReadsState {
    reader: crate::reads::ReadsReader,
    /// Counts dying memcgs (`None`: no memory controller).
    dying: Option<crate::reads::DyingCounter>,
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
                Some(h) => Some(crate::reads::DyingCounter::new(
                    h.mount.clone(),
                    matches!(h.version, crate::cgroup::Version::V2),
                )),
                None => cgroups
                    .v2()
                    .map(|h| crate::reads::DyingCounter::new(h.mount.clone(), true)),
            };
            Some(ReadsState {
                reader: crate::reads::ReadsReader::new(stats, files),
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
            drain: DrainStats::default(),
            drain_reported: 0,
        };
        Ok((session, ring))
    }

    /// Daemon-side drain statistics, updated by [`drain_ring`].
    pub fn drain_stats(&mut self) -> &mut DrainStats {
        &mut self.drain
    }

    /// Ends the current window and returns it.
    pub fn next_window(&mut self) -> anyhow::Result<Window> {
        let runq = self.runq.read_window()?;
        let periods = self
            .throttle
            .as_mut()
            .map(ThrottleReader::read_window)
            .unwrap_or_default();
        let episodes = std::mem::take(&mut self.drain.episodes);
        let burned = self.drain.burners.take(monotonic_ns());
        let kernel = self.counters.read_window();
        let lost = self.drain.undecodable + self.drain.lines_dropped;
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
                .drain
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

    /// The event line of one throttle episode, with its period's top threads.
    pub fn throttle_line(
        &mut self,
        ev: &ThrottleEvent,
        period: Option<ThrottledPeriod>,
    ) -> ThrottleLine {
        let (path, name) = self.aggregator.describe(ev.cgroup_id);
        throttle_line(ev, period, path, name.map(|n| n.display))
    }

    /// The event line of one slow pseudo-file read.
    pub fn slow_read(&mut self, ev: &SlowReadEvent) -> Option<crate::reads::SlowRead> {
        let mut line = self.reads.as_mut()?.reader.slow_read(ev);
        let (path, name) = self.aggregator.describe(ev.key.cgroup_id);
        line.path = path;
        line.name = name.map(|n| n.display);
        Some(line)
    }

    /// The event line of one run-queue wait.
    pub fn runq_wait(&mut self, ev: &RunqEvent) -> RunqWait {
        let (path, name) = self.aggregator.describe(ev.cgroup_id);
        runq_wait(ev, path, name.map(|n| n.display))
    }

    /// Since-start per-cgroup histograms.
    pub fn totals(&self) -> Vec<crate::snapshot::CgroupWindow> {
        self.aggregator.totals()
    }
}

/// The event line of one throttle episode of the cgroup at `path` (live, and replayed from a
/// recording's names).
pub fn throttle_line(
    ev: &ThrottleEvent,
    period: Option<ThrottledPeriod>,
    path: Option<String>,
    name: Option<String>,
) -> ThrottleLine {
    {
        ThrottleLine {
            kind: "throttle".into(),
            ts_ns: ev.header.ts_ns,
            cpu: ev.header.cpu,
            cgroup_id: ev.cgroup_id,
            path,
            name,
            start_ns: ev.start_ns,
            duration_us: ev.duration_ns as f64 / 1e3,
            tasks: ev.tasks,
            runnable: ev.runnable,
            period,
            kernel_us: (ev.kernel_ns > 0).then(|| ev.kernel_ns as f64 / 1e3),
            closed_by: match ev.closed_by {
                CLOSE_TIMER => "timer",
                CLOSE_CSD => "csd",
                CLOSE_LATE => "late",
                CLOSE_UNTHROTTLE => "unthrottle",
                _ => "unknown",
            }
            .to_string(),
        }
    }
}

/// The event line of one run-queue wait of the cgroup at `path`.
pub fn runq_wait(ev: &RunqEvent, path: Option<String>, name: Option<String>) -> RunqWait {
    RunqWait {
        kind: "runq_wait".into(),
        ts_ns: ev.header.ts_ns,
        cpu: ev.header.cpu,
        cgroup_id: ev.cgroup_id,
        path,
        name,
        pid: ev.pid,
        tgid: ev.tgid,
        comm: comm_str(&ev.comm),
        wait_kind: WaitKind::try_from(ev.kind)
            .map_or("unknown", |k| k.name())
            .to_string(),
        wait_us: ev.wait_ns as f64 / 1e3,
    }
}

/// Reads every pending record from the ring buffer; run-queue waits are appended to `waits`
/// when it is given.
pub fn drain_ring(
    ring: &mut RingBuf<MapData>,
    stats: &mut DrainStats,
    mut waits: Option<&mut Vec<RunqEvent>>,
) {
    while let Some(item) = ring.next() {
        if let Some(raw) = stats.raw.as_mut() {
            raw.push(&item);
        }
        consume_record(&item, stats, waits.as_deref_mut());
    }
}

/// Decodes one ring-buffer record into `stats` (live, and again when a recording is replayed).
pub fn consume_record(item: &[u8], stats: &mut DrainStats, waits: Option<&mut Vec<RunqEvent>>) {
    {
        // SAFETY: EventHeader is #[repr(C)] integers.
        let Some(header) = (unsafe { read_pod::<EventHeader>(item) }) else {
            stats.undecodable += 1;
            return;
        };
        match header.kind {
            KIND_RUNQ_WAIT => match decode_event(item) {
                Ok(ev) => {
                    stats.runq_events += 1;
                    if let Some(w) = waits {
                        w.push(ev);
                    }
                }
                Err(_) => stats.undecodable += 1,
            },
            KIND_THROTTLE => match throttle::decode_event(item) {
                Ok(ev) => {
                    stats.episodes.entry(ev.cgroup_id).or_default().add(&ev);
                    let period = stats.burners.episode(&ev);
                    if stats.keep_throttle_lines {
                        stats.throttle_lines.push((ev, period));
                    }
                }
                Err(_) => stats.undecodable += 1,
            },
            KIND_THROTTLE_SLICE => match throttle::decode::<SliceEvent>(item) {
                Some(ev) => stats.burners.slice(&ev),
                None => stats.undecodable += 1,
            },
            KIND_THROTTLE_PERIOD => match throttle::decode::<PeriodEvent>(item) {
                Some(ev) => stats.burners.period(&ev),
                None => stats.undecodable += 1,
            },
            // SAFETY (both): #[repr(C)] integers and byte arrays, valid for any bytes.
            KIND_SLOW_READ => match unsafe { read_pod::<SlowReadEvent>(item) } {
                Some(ev) => {
                    if stats.keep_slow_reads {
                        if stats.slow_reads.len() < MAX_PENDING_LINES {
                            stats.slow_reads.push(ev);
                        } else {
                            stats.lines_dropped += 1;
                        }
                    }
                }
                None => stats.undecodable += 1,
            },
            KIND_CGROUP_CHURN => match unsafe { read_pod::<CgroupChurnEvent>(item) } {
                Some(ev) => stats.churn.add(&ev),
                None => stats.undecodable += 1,
            },
            _ => stats.undecodable += 1,
        }
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
    /// Run-queue waits go to `waits` when given (event lines).
    pub async fn next(&mut self, waits: Option<&mut Vec<RunqEvent>>) -> anyhow::Result<Pumped> {
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
        self.drain(waits);
        if window {
            Ok(Pumped::Window(Box::new(self.session.next_window()?)))
        } else {
            Ok(Pumped::Drained)
        }
    }

    /// Drains what is pending now.
    pub fn drain(&mut self, waits: Option<&mut Vec<RunqEvent>>) {
        drain_ring(self.ring.get_mut(), &mut self.session.drain, waits);
    }

    /// Drains, then ends the current (partial) window: the last one before stopping, so nothing
    /// traced goes unreported.
    pub fn last_window(&mut self, waits: Option<&mut Vec<RunqEvent>>) -> anyhow::Result<Window> {
        self.drain(waits);
        self.session.next_window()
    }
}
