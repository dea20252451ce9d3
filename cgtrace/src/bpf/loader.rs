//! Loads cgtrace's eBPF object, probes what the kernel allows, and attaches each family in the
//! best mode available. Dropping the [`Tracer`] detaches everything.

use std::collections::BTreeMap;

use aya::{
    Btf as AyaBtf, Ebpf, EbpfLoader,
    programs::{FEntry, KProbe, ProgramError},
};
use cgtrace_common::layout::{Config, Layout};

pub use crate::bpf::attach::LoadError;
pub use cgtrace_common::modes::{ReadsMode, ThrottleMode};

use crate::{
    bpf::attach::{Attach, chain},
    bpf::btf::layout::{self, MissingField},
    bpf::btf::{Btf, BtfError},
    family::live::LIVE,
    family::runq::starts::WaitStarts,
    model::{Capabilities, FamilyMode},
};

/// The eBPF object built by `build.rs` (empty if it was built without the BPF toolchain).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cgtrace.bpf.o"));

/// The object this binary carries (empty in a stub build).
pub fn object() -> &'static [u8] {
    OBJECT
}

/// `each` entries per possible CPU, and never fewer than `floor`.
fn per_cpu(each: u32, floor: u32) -> u32 {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as u32;
    cpus.saturating_mul(each).max(floor)
}

/// What the verifier writes when a program is refused (aya loads without a log and, on a refusal,
/// loads again with one, growing it while it overflows). Its per-instruction trace
/// (`VerifierLogLevel::DEBUG`, aya's default) made each retry of a refused program cost three
/// times the refusal itself: ~20 s of kernel time at start on a host where a variant is refused
/// and another taken. The default is the refusal's reason and the verifier's statistics;
/// `CGTRACE_VERIFIER_LOG=debug` gives the whole trace to whoever debugs a refusal.
fn verifier_log_level() -> aya::VerifierLogLevel {
    if std::env::var("CGTRACE_VERIFIER_LOG").is_ok_and(|v| v == "debug") {
        aya::VerifierLogLevel::DEBUG | aya::VerifierLogLevel::STATS
    } else {
        aya::VerifierLogLevel::STATS
    }
}

/// Run-queue histograms for `max_cgroups` cgroups: one per wait kind. Fewer (two: few cgroups
/// are ever throttled) lost waits to `runq_hist_full` while cgroups churned past `max_cgroups`
/// (a window's new cgroups take slots before the daemon evicts the old ones), so the mapped
/// slots stay 616 bytes × 3 per cgroup of the daemon's RSS (29 MiB at 16 384 cgroups).
fn runq_histograms(max_cgroups: u32) -> u32 {
    max_cgroups
        .max(1)
        .saturating_mul(cgtrace_common::runq::NR_WAIT_KINDS as u32)
}

/// Sizes and thresholds chosen on the command line.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Cgroups the kernel-side histograms can hold (one histogram per wait kind each).
    pub max_cgroups: u32,
    /// Keys of `READ_STATS` (`READ_FILES` holds twice as many).
    pub max_read_keys: u32,
    /// Entries of `READ_INFLIGHT` (default: 256 per CPU, at least 16384).
    pub max_read_threads: Option<u32>,
    /// Turn on the kernel's BPF run-time statistics before the programs attach.
    pub bpf_stats: bool,
    pub config: Config,
    pub ringbuf_bytes: u32,
    /// Key waits by the v1 cpu hierarchy (else cgroup2).
    pub cgroup_v1: bool,
    pub throttle_mode: ThrottleMode,
    pub reads_mode: ReadsMode,
}

/// Programs loaded and attached, plus what was learnt about the kernel.
pub struct Tracer {
    pub ebpf: Ebpf,
    pub families: BTreeMap<String, FamilyMode>,
    pub capabilities: Capabilities,
    pub layout: Layout,
    /// Cgroup creations and removals are traced (`cgroup_mkdir`/`cgroup_rmdir` attached).
    pub churn_traced: bool,
    /// Where run-queue wait starts go, and so where its histograms are (task storage: the
    /// `RUNQ_SLOTS` array; else the `RUNQ_HIST` hash).
    pub runq_start: WaitStarts,
    /// Keeps the kernel's BPF run-time statistics (run counts and times of every program) on
    /// while it is open: taken before the programs attach, so their counts start with them;
    /// closed with the tracer, so the kernel stops timing programs when cgtrace goes.
    pub bpf_stats: Option<std::os::fd::OwnedFd>,
}

impl Tracer {
    /// Whether the kernel counts program runs and time: our `BPF_ENABLE_STATS`, or
    /// `kernel.bpf_stats_enabled` set by someone else.
    pub fn bpf_stats_on(&self) -> bool {
        self.bpf_stats.is_some()
            || std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
                .is_ok_and(|v| v.trim() == "1")
    }
}

/// Whether this process may load BPF programs: root, or the capabilities that replace it.
pub fn privileged() -> bool {
    // CapEff bits: CAP_SYS_ADMIN 21, CAP_PERFMON 38, CAP_BPF 39.
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |bit: u32| eff & (1u64 << bit) != 0;
    has(21) || (has(38) && has(39))
}

impl Tracer {
    /// Loads, probes and attaches. Nothing stays attached if this fails.
    pub fn start(opts: &TraceOptions) -> Result<Self, LoadError> {
        if !privileged() {
            return Err(LoadError::NotPrivileged);
        }
        if OBJECT.is_empty() {
            return Err(LoadError::NoObject);
        }
        let btf = Btf::from_sys_fs()?;
        let mut layout = layout::resolve(&btf, opts.cgroup_v1)?;
        // Needs CAP_SYS_ADMIN (held now, dropped after attach); 5.8+.
        let bpf_stats = if opts.bpf_stats {
            match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
                Ok(fd) => Some(fd),
                Err(e) => {
                    eprintln!(
                        "cgtrace: BPF run-time statistics unavailable ({e}): `self` shows no \
                         program runs or times"
                    );
                    None
                }
            }
        } else {
            None
        };
        let syms =
            crate::bpf::kallsyms::lookup("/proc/kallsyms".as_ref(), &layout::THROTTLE_SYMBOLS)
                .unwrap_or_default();
        let runq_only = layout;
        let throttle_ok = layout::resolve_throttle(&btf, &syms, &mut layout);
        if throttle_ok.is_err() {
            // Leave every throttle field absent: the runq programs then skip the throttle checks.
            layout = runq_only;
        }
        let with_throttle = layout;
        let reads_support = match opts.reads_mode {
            ReadsMode::Off => Err(MissingField {
                what: "nothing: turned off by --reads-mode off".into(),
                family: "reads",
            }),
            _ => layout::resolve_reads(&btf, &mut layout),
        };
        if reads_support.is_err() {
            layout = with_throttle;
        }
        let mut config = opts.config;
        if let Ok(support) = &reads_support
            && let Some(nrs) = support.syscalls
        {
            config.read_syscalls = nrs;
        }
        let aya_btf = AyaBtf::from_sys_fs().map_err(|e| {
            LoadError::Btf(BtfError::Read {
                path: "/sys/kernel/btf/vmlinux".into(),
                source: std::io::Error::other(e.to_string()),
            })
        })?;
        let wait_starts = WaitStarts::choose(&layout);
        let task_storage = wait_starts.task_storage();
        // `idle_elsewhere`: a charged wait looks at the other CPUs it may run on (at most
        // IDLE_SCAN_MAX_CPUS) where this kernel lets the ledger tell.
        let cpus = per_cpu(1, 1);
        if crate::family::runq::attach::blame_caps(&layout).idle_elsewhere
            && config.blame_min_ns != u64::MAX
        {
            config.idle_scan_cpus = cpus.min(cgtrace_common::runq::IDLE_SCAN_MAX_CPUS);
        }
        config.runq_start_task = u32::from(task_storage);
        // Without task storage its map definition becomes a one-entry hash (unused).
        let retyped;
        let object = if task_storage {
            OBJECT
        } else {
            retyped = crate::bpf::btf::patch::retype_map(
                OBJECT,
                crate::bpf::btf::patch::TASK_STORAGE_TAG,
                aya::maps::MapType::Hash as u32,
            )
            .map_err(LoadError::Retype)?;
            retyped.bytes()
        };
        let mut loader = EbpfLoader::new();
        // aya has no user-space type for task storage; only the programs use it.
        loader.allow_unsupported_maps();
        loader.verifier_log_level(verifier_log_level());
        // Histograms per (cgroup, wait kind): with task storage slots of an array, without it a
        // hash; the same number either way, and the other tables get one entry.
        let hists = runq_histograms(opts.max_cgroups);
        if task_storage {
            loader
                .map_max_entries("RUNQ_START", 1)
                .map_max_entries("RUNQ_HIST", 1)
                .map_max_entries("RUNQ_SLOTS", hists)
                .map_max_entries("RUNQ_SLOT_OF", hists)
                .map_max_entries("RUNQ_FREE_SLOTS", hists);
        } else {
            loader
                .map_max_entries("RUNQ_START", per_cpu(1024, 65_536))
                .map_max_entries("RUNQ_START_TASK", 1)
                .map_max_entries("RUNQ_HIST", hists)
                .map_max_entries("RUNQ_SLOTS", 1)
                .map_max_entries("RUNQ_SLOT_OF", 1)
                .map_max_entries("RUNQ_FREE_SLOTS", 1);
        }
        let mut ebpf = loader
            .btf(&aya_btf)
            .override_global("LAYOUT", &layout, true)
            .override_global("CONFIG", &config, true)
            .map_max_entries("EVENTS", opts.ringbuf_bytes)
            // One cache line per CPU: when it went idle.
            .map_max_entries("IDLE_SINCE", cpus)
            // (waiting cgroup, culprit) pairs: a cgroup rarely waits behind more than a few
            // neighbours in a window, and idle pairs are deleted by the daemon. At least 65 536
            // (about 5 MiB of kernel memory): 300 cgroups of short sleepers churning on 2 CPUs
            // under --max-cgroups 256 filled 16 384 in their first seconds.
            .map_max_entries("BLAME", opts.max_cgroups.saturating_mul(16).max(65_536))
            // Per cgroup: as many as the daemon tracks.
            .map_max_entries("THROTTLE_STATS", opts.max_cgroups)
            .map_max_entries("THROTTLE_WATCH", opts.max_cgroups)
            // (watched group, thread) sums: a throttled group runs a few threads per CPU it
            // spreads over, and a cgroup has threads; only groups throttled in the last second.
            .map_max_entries(
                "THROTTLE_SLICE_SUMS",
                per_cpu(256, 16_384).max(opts.max_cgroups.saturating_mul(4)),
            )
            // Per (throttled cgroup, CPU) and per thread: grow with the CPUs.
            .map_max_entries("THROTTLE_EPISODES", per_cpu(512, 16_384))
            .map_max_entries("THROTTLE_LAST_CLOSE", per_cpu(512, 16_384))
            .map_max_entries(
                "READ_INFLIGHT",
                opts.max_read_threads
                    .unwrap_or_else(|| per_cpu(256, 16_384)),
            )
            .map_max_entries("READ_STATS", opts.max_read_keys)
            .map_max_entries("READ_FILES", opts.max_read_keys.saturating_mul(2))
            .load(object)
            .map_err(|e| LoadError::Object(Box::new(e)))?;
        crate::family::runq::collect::first_epoch(&mut ebpf)?;
        let capabilities = probe_capabilities(&mut ebpf, &aya_btf, &btf);
        let mut families = BTreeMap::new();
        let mut attach = Attach {
            ebpf: &mut ebpf,
            btf: &aya_btf,
            kernel_btf: &btf,
            layout: &layout,
            capabilities: &capabilities,
            wait_starts,
            throttle_mode: opts.throttle_mode,
            reads_mode: opts.reads_mode,
            throttle_layout: &throttle_ok,
            reads_layout: &reads_support,
        };
        for f in LIVE {
            families.insert(f.info.name.to_string(), (f.attach)(&mut attach)?);
        }
        let churn_traced = ebpf
            .program("reads_cgroup_mkdir")
            .is_some_and(|p| p.fd().is_ok());
        Ok(Self {
            ebpf,
            families,
            capabilities,
            layout,
            churn_traced,
            runq_start: wait_starts,
            bpf_stats,
        })
    }
}

/// Tries the empty capability programs once: can fentry programs load, can kprobes attach?
fn probe_capabilities(ebpf: &mut Ebpf, aya_btf: &AyaBtf, btf: &Btf) -> Capabilities {
    let mut caps = Capabilities {
        btf: true,
        tp_btf: btf.tracepoint_args("sched_switch").is_some(),
        ..Capabilities::default()
    };
    match probe_fentry(ebpf, aya_btf) {
        Ok(()) => caps.fentry = true,
        Err(e) => {
            caps.notes.insert("fentry".into(), e);
        }
    }
    match probe_kprobe(ebpf) {
        Ok(()) => caps.kprobe = true,
        Err(e) => {
            caps.notes.insert("kprobe".into(), e);
        }
    }
    caps
}

fn probe_fentry(ebpf: &mut Ebpf, btf: &AyaBtf) -> Result<(), String> {
    let prog: &mut FEntry = ebpf
        .program_mut("capability_fentry")
        .ok_or("probe program missing")?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())?;
    prog.load("do_nanosleep", btf).map_err(|e| chain(&e))?;
    prog.unload().map_err(|e| e.to_string())
}

fn probe_kprobe(ebpf: &mut Ebpf) -> Result<(), String> {
    let prog: &mut KProbe = ebpf
        .program_mut("capability_kprobe")
        .ok_or("probe program missing")?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())?;
    prog.load().map_err(|e| chain(&e))?;
    let link = prog.attach("do_nanosleep", 0).map_err(|e| chain(&e))?;
    prog.detach(link).map_err(|e| e.to_string())?;
    prog.unload().map_err(|e| e.to_string())
}
