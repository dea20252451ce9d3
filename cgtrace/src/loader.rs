//! Loads cgtrace's eBPF object, probes what the kernel allows, and attaches each family in the
//! best mode available. Dropping the [`Tracer`] detaches everything.

use std::collections::BTreeMap;

use aya::{
    Btf as AyaBtf, Ebpf, EbpfLoader,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, ProgramError, RawTracePoint},
};
use cgtrace_common::layout::{Config, Layout};

use crate::{
    btf::{Btf, BtfError},
    layout::{self, MissingField},
    model::{AttachMode, Capabilities, FamilyMode},
};

/// The eBPF object built by `build.rs` (empty if it was built without the BPF toolchain).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cgtrace.bpf.o"));

/// Why tracing could not start. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "cgtrace needs root (or CAP_BPF + CAP_PERFMON + CAP_DAC_READ_SEARCH) to load eBPF programs: run it with sudo"
    )]
    NotPrivileged,
    #[error(
        "this cgtrace binary was built without its eBPF programs (no bpf-linker or BPF nightly at build time): run scripts/setup.sh and rebuild"
    )]
    NoObject,
    #[error(
        "kernel BTF is unavailable ({0}): cgtrace needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (5.10+ distribution kernels have it)"
    )]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Layout(#[from] MissingField),
    #[error("loading the eBPF object failed: {0}")]
    Object(#[source] Box<aya::EbpfError>),
    #[error("program {program} could not be loaded or attached: {source}")]
    Program {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    #[error("eBPF map {map}: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error(
        "--{family}-mode {mode} is not available on this kernel: {reason} (try --{family}-mode auto)"
    )]
    Mode {
        family: &'static str,
        mode: &'static str,
        reason: String,
    },
}

/// Sizes and thresholds chosen on the command line.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// Cgroups the kernel-side histograms can hold (times the number of wait kinds).
    pub max_cgroups: u32,
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
        let syms = crate::kallsyms::lookup("/proc/kallsyms".as_ref(), &layout::THROTTLE_SYMBOLS)
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
        let kinds = cgtrace_common::runq::NR_WAIT_KINDS as u32;
        let mut ebpf = EbpfLoader::new()
            .btf(&aya_btf)
            .override_global("LAYOUT", &layout, true)
            .override_global("CONFIG", &config, true)
            .map_max_entries(
                "RUNQ_HIST",
                opts.max_cgroups.saturating_mul(kinds).max(kinds),
            )
            .map_max_entries("EVENTS", opts.ringbuf_bytes)
            .load(OBJECT)
            .map_err(|e| LoadError::Object(Box::new(e)))?;
        let capabilities = probe_capabilities(&mut ebpf, &aya_btf, &btf);
        let mut families = BTreeMap::new();
        families.insert(
            crate::family::runq::INFO.name.to_string(),
            crate::family::runq::attach::attach(&mut ebpf, &aya_btf, &layout)?,
        );
        let throttle = match (throttle_ok, opts.throttle_mode) {
            (Ok(()), mode) => crate::family::throttle::attach::attach(
                &mut ebpf,
                &aya_btf,
                &layout,
                &capabilities,
                mode,
            )?,
            (Err(missing), ThrottleMode::Auto) => FamilyMode {
                mode: AttachMode::Unavailable,
                detail: missing.to_string(),
            },
            (Err(missing), m) => {
                return Err(LoadError::Mode {
                    family: "throttle",
                    mode: m.as_str(),
                    reason: missing.to_string(),
                });
            }
        };
        families.insert(crate::family::throttle::INFO.name.to_string(), throttle);
        let reads = match (reads_support, opts.reads_mode) {
            (_, ReadsMode::Off) => FamilyMode {
                mode: AttachMode::Off,
                detail: "turned off by --reads-mode off".into(),
            },
            (Ok(support), mode) => crate::family::reads::attach::attach(
                &mut ebpf,
                &aya_btf,
                &btf,
                &support,
                &capabilities,
                mode,
            )?,
            (Err(missing), ReadsMode::Auto) => FamilyMode {
                mode: AttachMode::Unavailable,
                detail: missing.to_string(),
            },
            (Err(missing), m) => {
                return Err(LoadError::Mode {
                    family: "reads",
                    mode: m.as_str(),
                    reason: missing.to_string(),
                });
            }
        };
        families.insert(crate::family::reads::INFO.name.to_string(), reads);
        let churn_traced = ebpf
            .program("reads_cgroup_mkdir")
            .is_some_and(|p| p.fd().is_ok());
        Ok(Self {
            ebpf,
            families,
            capabilities,
            layout,
            churn_traced,
        })
    }
}

/// How throttle episodes are detected (`--throttle-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ThrottleMode {
    /// The best this kernel allows: fentry, else kprobe, else tracepoint.
    Auto,
    /// fentry/fexit on throttle_cfs_rq and unthrottle_cfs_rq.
    Fentry,
    /// kprobe/kretprobe twins of the same.
    Kprobe,
    /// fentry (else kprobe) on tg_throttle_down/tg_unthrottle_up, for kernels where
    /// throttle_cfs_rq is inlined away (those two are called through pointers, never inlined).
    Tgwalk,
    /// Tracepoints only (sched_switch, hrtimer expiry, CSD exit).
    Tracepoint,
}

impl ThrottleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Tgwalk => "tgwalk",
            Self::Tracepoint => "tracepoint",
        }
    }
}

/// A tracing program on a kernel function: fentry, fexit, or a kprobe/kretprobe (aya's `KProbe`
/// covers both; the kind comes from the program's section).
#[derive(Clone, Copy)]
pub(crate) enum Hook {
    Fentry,
    Fexit,
    Kprobe,
}

/// Loads and attaches each `(program, kernel function, hook)`.
pub(crate) fn attach_hooks(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    set: &[(&'static str, &str, Hook)],
) -> Result<(), LoadError> {
    for &(program, function, hook) in set {
        let err = |source| LoadError::Program { program, source };
        let prog = ebpf
            .program_mut(program)
            .ok_or(err(ProgramError::NotLoaded))?;
        match hook {
            Hook::Fentry => {
                let p: &mut FEntry = prog.try_into().map_err(err)?;
                p.load(function, btf).map_err(err)?;
                p.attach().map_err(err)?;
            }
            Hook::Fexit => {
                let p: &mut FExit = prog.try_into().map_err(err)?;
                p.load(function, btf).map_err(err)?;
                p.attach().map_err(err)?;
            }
            Hook::Kprobe => {
                let p: &mut KProbe = prog.try_into().map_err(err)?;
                p.load().map_err(err)?;
                p.attach(function, 0).map_err(err)?;
            }
        }
    }
    Ok(())
}

/// How pseudo-file reads are timed (`--reads-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadsMode {
    /// fentry on the pseudo-filesystems' read functions where the kernel allows it, else the
    /// read syscalls' tracepoints.
    Auto,
    /// fentry/fexit on kernfs_fop_read_iter, seq_read_iter, proc_reg_read(_iter) and
    /// fuse_file_read_iter: only pseudo-file reads pay.
    Fentry,
    /// tp_btf on the raw sys_enter/sys_exit tracepoints, filtered by syscall number and then by
    /// the file's superblock.
    Syscall,
    /// Do not trace reads.
    Off,
}

impl ReadsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Fentry => "fentry",
            Self::Syscall => "syscall",
            Self::Off => "off",
        }
    }
}

/// Loads the direct-access set, else the probe-read set (or only that one when
/// `CGTRACE_FIELD_ACCESS=probe`), and returns the one that loaded.
pub(crate) fn load_with_fallback(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    direct: &[(&'static str, &'static str)],
    probe: &[(&'static str, &'static str)],
) -> Result<Vec<(&'static str, &'static str)>, LoadError> {
    let forced_probe = std::env::var("CGTRACE_FIELD_ACCESS").is_ok_and(|v| v == "probe");
    if !forced_probe && load_tp_btf(ebpf, btf, direct).is_ok() {
        return Ok(direct.to_vec());
    }
    load_tp_btf(ebpf, btf, probe)?;
    Ok(probe.to_vec())
}

pub(crate) fn attach_raw_tp(
    ebpf: &mut Ebpf,
    program: &'static str,
    tracepoint: &str,
) -> Result<(), LoadError> {
    let err = |source| LoadError::Program { program, source };
    let prog: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or(err(ProgramError::NotLoaded))?
        .try_into()
        .map_err(err)?;
    prog.load().map_err(err)?;
    prog.attach(tracepoint).map_err(err)?;
    Ok(())
}

/// Loads every (program, tracepoint) or none: on failure the ones loaded are unloaded again.
pub(crate) fn load_tp_btf(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    set: &[(&'static str, &str)],
) -> Result<(), LoadError> {
    for (i, &(program, tracepoint)) in set.iter().enumerate() {
        let err = |source| LoadError::Program { program, source };
        let loaded = tp_btf(ebpf, program).and_then(|p| p.load(tracepoint, btf).map_err(err));
        if let Err(e) = loaded {
            for &(done, _) in &set[..i] {
                if let Ok(p) = tp_btf(ebpf, done) {
                    let _ = p.unload();
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

pub(crate) fn attach_tp_btf(
    ebpf: &mut Ebpf,
    set: &[(&'static str, &str)],
) -> Result<(), LoadError> {
    for &(program, _) in set {
        tp_btf(ebpf, program)?
            .attach()
            .map_err(|source| LoadError::Program { program, source })?;
    }
    Ok(())
}

pub(crate) fn tp_btf<'a>(
    ebpf: &'a mut Ebpf,
    program: &'static str,
) -> Result<&'a mut BtfTracePoint, LoadError> {
    let err = |source| LoadError::Program { program, source };
    ebpf.program_mut(program)
        .ok_or(err(ProgramError::NotLoaded))?
        .try_into()
        .map_err(err)
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

/// An error and its sources on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = inner.to_string();
        // Many errors repeat their source in their own message.
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}
