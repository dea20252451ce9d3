//! Loads cgtrace's eBPF object, probes what the kernel allows, and attaches each family in the
//! best mode available. Dropping the [`Tracer`] detaches everything.

use std::collections::BTreeMap;

use aya::{
    Btf as AyaBtf, Ebpf, EbpfLoader,
    maps::{Array, MapData},
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
            "runq".to_string(),
            attach_runq(&mut ebpf, &aya_btf, &layout)?,
        );
        let throttle = match (throttle_ok, opts.throttle_mode) {
            (Ok(()), mode) => attach_throttle(&mut ebpf, &aya_btf, &layout, &capabilities, mode)?,
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
        families.insert("throttle".to_string(), throttle);
        let reads = match (reads_support, opts.reads_mode) {
            (_, ReadsMode::Off) => FamilyMode {
                mode: AttachMode::Off,
                detail: "turned off by --reads-mode off".into(),
            },
            (Ok(support), mode) => {
                attach_reads(&mut ebpf, &aya_btf, &btf, &support, &capabilities, mode)?
            }
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
        families.insert("reads".to_string(), reads);
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

/// Attaches the run-queue programs: tp_btf on sched_wakeup, sched_wakeup_new, sched_switch.
/// The variants that read kernel fields directly are tried first; if this kernel's verifier
/// refuses them, the `bpf_probe_read_kernel` variants.
fn attach_runq(ebpf: &mut Ebpf, btf: &AyaBtf, layout: &Layout) -> Result<FamilyMode, LoadError> {
    let switch = if layout.switch_has_prev_state == 1 {
        "sched_switch"
    } else {
        "sched_switch_noprevstate"
    };
    let direct = [
        ("sched_wakeup", "sched_wakeup"),
        ("sched_wakeup_new", "sched_wakeup_new"),
        (switch, "sched_switch"),
    ];
    let probe = [
        ("sched_wakeup_probe", "sched_wakeup"),
        ("sched_wakeup_new_probe", "sched_wakeup_new"),
        (
            if layout.switch_has_prev_state == 1 {
                "sched_switch_probe"
            } else {
                "sched_switch_noprevstate_probe"
            },
            "sched_switch",
        ),
    ];
    // CGTRACE_FIELD_ACCESS=probe forces the fallback (tests, and a way out should a kernel's
    // verifier accept the direct variants but misbehave).
    let forced_probe = std::env::var("CGTRACE_FIELD_ACCESS").is_ok_and(|v| v == "probe");
    let first = if forced_probe {
        Err(LoadError::Program {
            program: "(direct variants)",
            source: ProgramError::NotLoaded,
        })
    } else {
        load_tp_btf(ebpf, btf, &direct)
    };
    let access = match first {
        Ok(()) => {
            attach_tp_btf(ebpf, &direct)?;
            "direct BTF field access".to_string()
        }
        Err(direct_err) => {
            load_tp_btf(ebpf, btf, &probe)?;
            attach_tp_btf(ebpf, &probe)?;
            if forced_probe {
                "bpf_probe_read_kernel (forced by CGTRACE_FIELD_ACCESS=probe)".to_string()
            } else {
                format!("bpf_probe_read_kernel (direct access refused: {direct_err})")
            }
        }
    };
    Ok(FamilyMode {
        mode: AttachMode::TpBtf,
        detail: format!(
            "sched_wakeup, sched_wakeup_new, sched_switch ({}); {access}",
            if layout.switch_has_prev_state == 1 {
                "prev_state argument"
            } else {
                "prev state read from the task"
            }
        ),
    })
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

/// Attaches the throttle family in the wanted mode, or the best available for `Auto`. A forced
/// mode that cannot attach is an error; in `Auto` the family is reported unavailable with the
/// reasons instead, and tracing goes on without it.
fn attach_throttle(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    layout: &Layout,
    caps: &Capabilities,
    wanted: ThrottleMode,
) -> Result<FamilyMode, LoadError> {
    let unavailable = |detail: String| FamilyMode {
        mode: AttachMode::Unavailable,
        detail,
    };
    // Periods are counted by the same programs in every mode (the exit one also ends the
    // tracepoint mode's timer-unthrottled episodes).
    let periods = load_with_fallback(
        ebpf,
        btf,
        &[
            ("throttle_period", "hrtimer_expire_entry"),
            ("throttle_timer_exit", "hrtimer_expire_exit"),
        ],
        &[
            ("throttle_period_probe", "hrtimer_expire_entry"),
            ("throttle_timer_exit_probe", "hrtimer_expire_exit"),
        ],
    )
    .and_then(|set| attach_tp_btf(ebpf, &set));
    if let Err(e) = periods {
        let why = format!("the period program failed: {}", chain(&e));
        return match wanted {
            ThrottleMode::Auto => Ok(unavailable(why)),
            m => Err(LoadError::Mode {
                family: "throttle",
                mode: m.as_str(),
                reason: why,
            }),
        };
    }
    let order: Vec<ThrottleMode> = match wanted {
        ThrottleMode::Auto => [
            (caps.fentry, ThrottleMode::Fentry),
            (caps.kprobe, ThrottleMode::Kprobe),
            (caps.fentry || caps.kprobe, ThrottleMode::Tgwalk),
            (true, ThrottleMode::Tracepoint),
        ]
        .into_iter()
        .filter_map(|(ok, m)| ok.then_some(m))
        .collect(),
        m => vec![m],
    };
    let mut failed = Vec::new();
    for mode in order {
        let attempt = match mode {
            ThrottleMode::Fentry => attach_throttle_fentry(ebpf, btf),
            ThrottleMode::Kprobe => attach_throttle_kprobe(ebpf, btf),
            ThrottleMode::Tgwalk => attach_throttle_tgwalk(ebpf, btf),
            _ => attach_throttle_tracepoint(ebpf, layout),
        };
        match attempt.and_then(|detail| set_throttle_mode(ebpf, mode).map(|()| detail)) {
            Ok(detail) => {
                let tried = if failed.is_empty() {
                    String::new()
                } else {
                    format!(" (not available: {})", failed.join("; "))
                };
                return Ok(FamilyMode {
                    mode: AttachMode::from_name(mode.as_str()),
                    detail: format!("{detail}{tried}"),
                });
            }
            Err(e) => failed.push(format!("{}: {}", mode.as_str(), chain(&e))),
        }
    }
    match wanted {
        ThrottleMode::Auto => Ok(unavailable(failed.join("; "))),
        m => Err(LoadError::Mode {
            family: "throttle",
            mode: m.as_str(),
            reason: failed.join("; "),
        }),
    }
}

fn set_throttle_mode(ebpf: &mut Ebpf, mode: ThrottleMode) -> Result<(), LoadError> {
    let value = match mode {
        ThrottleMode::Fentry | ThrottleMode::Kprobe | ThrottleMode::Tgwalk => {
            cgtrace_common::throttle::MODE_HOOKS
        }
        _ => cgtrace_common::throttle::MODE_TRACEPOINT,
    };
    let map = ebpf
        .map_mut("THROTTLE_MODE")
        .ok_or(LoadError::MissingMap("THROTTLE_MODE"))?;
    let mut arr: Array<&mut MapData, u32> = Array::try_from(map).map_err(|e| LoadError::Map {
        map: "THROTTLE_MODE",
        source: e,
    })?;
    arr.set(0, &value, 0).map_err(|e| LoadError::Map {
        map: "THROTTLE_MODE",
        source: e,
    })
}

/// Tracepoint-only: episodes from the runq `sched_switch` program, closed at the period/slack
/// timer's exit and at the remote-unthrottle CSD's exit.
fn attach_throttle_tracepoint(ebpf: &mut Ebpf, layout: &Layout) -> Result<String, LoadError> {
    let mut closes = vec!["hrtimer_expire_exit"];
    if layout.csd_unthrottle_fn != 0 {
        attach_raw_tp(ebpf, "throttle_csd_exit", "csd_function_exit")?;
        closes.push("csd_function_exit (raw_tp)");
    }
    Ok(format!(
        "episodes open at sched_switch ({}), close at {}; periods at hrtimer_expire_entry/exit of sched_cfs_period_timer",
        if layout.task_throttled != cgtrace_common::layout::ABSENT {
            "task-based throttling: tasks entering the limbo list"
        } else {
            "the running task of a throttled hierarchy, via throttle_count"
        },
        closes.join(" and ")
    ))
}

/// A tracing program on a kernel function: fentry, fexit, or a kprobe/kretprobe (aya's `KProbe`
/// covers both; the kind comes from the program's section).
#[derive(Clone, Copy)]
enum Hook {
    Fentry,
    Fexit,
    Kprobe,
}

/// Loads and attaches each `(program, kernel function, hook)`.
fn attach_hooks(
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

fn attach_throttle_fentry(ebpf: &mut Ebpf, btf: &AyaBtf) -> Result<String, LoadError> {
    attach_hooks(
        ebpf,
        btf,
        &[
            ("throttle_cfs_rq_fexit", "throttle_cfs_rq", Hook::Fexit),
            (
                "unthrottle_cfs_rq_fentry",
                "unthrottle_cfs_rq",
                Hook::Fentry,
            ),
            ("unthrottle_cfs_rq_fexit", "unthrottle_cfs_rq", Hook::Fexit),
        ],
    )?;
    Ok("fexit throttle_cfs_rq (cfs_rq->throttled re-checked), fentry/fexit unthrottle_cfs_rq (with the kernel's throttled_time delta per episode); periods at hrtimer_expire_entry/exit".into())
}

fn attach_throttle_kprobe(ebpf: &mut Ebpf, btf: &AyaBtf) -> Result<String, LoadError> {
    attach_hooks(
        ebpf,
        btf,
        &[
            ("throttle_cfs_rq_kprobe", "throttle_cfs_rq", Hook::Kprobe),
            ("throttle_cfs_rq_kretprobe", "throttle_cfs_rq", Hook::Kprobe),
            (
                "unthrottle_cfs_rq_kprobe",
                "unthrottle_cfs_rq",
                Hook::Kprobe,
            ),
            (
                "unthrottle_cfs_rq_kretprobe",
                "unthrottle_cfs_rq",
                Hook::Kprobe,
            ),
        ],
    )?;
    Ok("kprobe/kretprobe throttle_cfs_rq and unthrottle_cfs_rq (with the kernel's throttled_time delta per episode); periods at hrtimer_expire_entry/exit".into())
}

/// tg-walk: the first group of `tg_throttle_down`'s pre-order walk whose parent is not throttled
/// on that CPU opens the episode; `tg_unthrottle_up` closes it. fentry, else kprobes.
fn attach_throttle_tgwalk(ebpf: &mut Ebpf, btf: &AyaBtf) -> Result<String, LoadError> {
    let fentry = attach_hooks(
        ebpf,
        btf,
        &[
            ("tg_throttle_down_fentry", "tg_throttle_down", Hook::Fentry),
            ("tg_unthrottle_up_fentry", "tg_unthrottle_up", Hook::Fentry),
        ],
    );
    if fentry.is_ok() {
        return Ok("fentry tg_throttle_down / tg_unthrottle_up (throttle_cfs_rq not hooked); periods at hrtimer_expire_entry/exit".into());
    }
    attach_hooks(
        ebpf,
        btf,
        &[
            ("tg_throttle_down_kprobe", "tg_throttle_down", Hook::Kprobe),
            ("tg_unthrottle_up_kprobe", "tg_unthrottle_up", Hook::Kprobe),
        ],
    )?;
    Ok("kprobe tg_throttle_down / tg_unthrottle_up (throttle_cfs_rq not hooked); periods at hrtimer_expire_entry/exit".into())
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

/// Attaches the reads family: read timing in the wanted (or best) mode, then whatever flush and
/// churn programs this kernel has. Only the read timing is required.
fn attach_reads(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    kbtf: &Btf,
    support: &layout::ReadsSupport,
    caps: &Capabilities,
    wanted: ReadsMode,
) -> Result<FamilyMode, LoadError> {
    if wanted == ReadsMode::Off {
        return Ok(FamilyMode {
            mode: AttachMode::Off,
            detail: "turned off by --reads-mode off".into(),
        });
    }
    let order: Vec<ReadsMode> = match wanted {
        ReadsMode::Auto => [
            (caps.fentry, ReadsMode::Fentry),
            (support.syscalls.is_some(), ReadsMode::Syscall),
        ]
        .into_iter()
        .filter_map(|(ok, m)| ok.then_some(m))
        .collect(),
        m => vec![m],
    };
    let mut failed = Vec::new();
    let mut chosen = None;
    for mode in order {
        let attempt = match mode {
            ReadsMode::Fentry => attach_reads_fentry(ebpf, btf, kbtf),
            _ => attach_reads_syscall(ebpf, btf, support),
        };
        match attempt {
            Ok(detail) => {
                chosen = Some((mode, detail));
                break;
            }
            Err(e) => failed.push(format!("{}: {}", mode.as_str(), chain(&e))),
        }
    }
    let Some((mode, mut detail)) = chosen else {
        if failed.is_empty() {
            failed.push("no read syscall numbers for this architecture and no fentry".into());
        }
        return match wanted {
            ReadsMode::Auto => Ok(FamilyMode {
                mode: AttachMode::Unavailable,
                detail: failed.join("; "),
            }),
            m => Err(LoadError::Mode {
                family: "reads",
                mode: m.as_str(),
                reason: failed.join("; "),
            }),
        };
    };
    // Flush work: the rstat lock tracepoints (6.10+), else the flush functions (fentry).
    let mut extras = Vec::new();
    if support.rstat_tracepoints {
        let set = [
            ("reads_rstat_contended", "cgroup_rstat_lock_contended"),
            ("reads_rstat_locked", "cgroup_rstat_locked"),
            ("reads_rstat_unlock", "cgroup_rstat_unlock"),
        ];
        match load_tp_btf(ebpf, btf, &set).and_then(|()| attach_tp_btf(ebpf, &set)) {
            Ok(()) => extras.push(
                "rstat flush time and lock waits from cgroup_rstat_* tracepoints".to_string(),
            ),
            Err(e) => extras.push(format!("no flush split ({})", chain(&e))),
        }
    } else if caps.fentry {
        let hooks: &[(&'static str, &'static str, &str)] = if kbtf.has_func("css_rstat_flush") {
            &[("reads_flush_enter", "reads_flush_exit", "css_rstat_flush")]
        } else {
            &[
                (
                    "reads_flush_old_enter",
                    "reads_flush_old_exit",
                    "cgroup_rstat_flush",
                ),
                (
                    "reads_flush_irqsafe_enter",
                    "reads_flush_irqsafe_exit",
                    "cgroup_rstat_flush_irqsafe",
                ),
            ]
        };
        let mut got = Vec::new();
        for &(enter, exit, function) in hooks {
            if !kbtf.has_func(function) {
                continue;
            }
            if attach_hooks(
                ebpf,
                btf,
                &[
                    (enter, function, Hook::Fentry),
                    (exit, function, Hook::Fexit),
                ],
            )
            .is_ok()
            {
                got.push(function);
            }
        }
        extras.push(if got.is_empty() {
            "no flush split (no rstat tracepoints, flush functions not hookable)".to_string()
        } else {
            format!(
                "flush time from fentry/fexit {} (lock waits included)",
                got.join(", ")
            )
        });
    } else {
        extras.push("no flush split (no rstat tracepoints and no fentry)".to_string());
    }
    if support.memcg_flush_tracepoint {
        let set = [("reads_memcg_flush", "memcg_flush_stats")];
        if load_tp_btf(ebpf, btf, &set)
            .and_then(|()| attach_tp_btf(ebpf, &set))
            .is_ok()
        {
            extras.push("flush need from memcg_flush_stats".into());
        }
    }
    if support.churn_tracepoints {
        let set = [
            ("reads_cgroup_mkdir", "cgroup_mkdir"),
            ("reads_cgroup_rmdir", "cgroup_rmdir"),
        ];
        match load_tp_btf(ebpf, btf, &set).and_then(|()| attach_tp_btf(ebpf, &set)) {
            Ok(()) => extras.push("cgroup churn from cgroup_mkdir/rmdir".into()),
            Err(e) => extras.push(format!("no cgroup churn ({})", chain(&e))),
        }
    }
    let tried = if failed.is_empty() {
        String::new()
    } else {
        format!(" (not available: {})", failed.join("; "))
    };
    detail.push_str("; ");
    detail.push_str(&extras.join("; "));
    detail.push_str(&tried);
    Ok(FamilyMode {
        mode: AttachMode::from_name(mode.as_str()),
        detail,
    })
}

fn attach_reads_syscall(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    support: &layout::ReadsSupport,
) -> Result<String, LoadError> {
    if support.syscalls.is_none() {
        return Err(LoadError::Program {
            program: "reads_sys_enter",
            source: ProgramError::NotLoaded,
        });
    }
    let set = [
        ("reads_sys_enter", "sys_enter"),
        ("reads_sys_exit", "sys_exit"),
    ];
    load_tp_btf(ebpf, btf, &set)?;
    attach_tp_btf(ebpf, &set)?;
    Ok("tp_btf sys_enter/sys_exit: read, pread64, readv, preadv, preadv2, sendfile of cgroupfs, sysfs, procfs and FUSE files".into())
}

/// fentry/fexit on each pseudo-filesystem read function this kernel has (FUSE only when built
/// in: a module's functions are not in vmlinux BTF). kernfs is required.
fn attach_reads_fentry(ebpf: &mut Ebpf, btf: &AyaBtf, kbtf: &Btf) -> Result<String, LoadError> {
    let hooks: [(&'static str, &'static str, &str); 5] = [
        (
            "reads_kernfs_enter",
            "reads_kernfs_exit",
            "kernfs_fop_read_iter",
        ),
        ("reads_seq_enter", "reads_seq_exit", "seq_read_iter"),
        (
            "reads_proc_iter_enter",
            "reads_proc_iter_exit",
            "proc_reg_read_iter",
        ),
        ("reads_proc_enter", "reads_proc_exit", "proc_reg_read"),
        ("reads_fuse_enter", "reads_fuse_exit", "fuse_file_read_iter"),
    ];
    let mut got = Vec::new();
    let mut missing = Vec::new();
    for (i, &(enter, exit, function)) in hooks.iter().enumerate() {
        if !kbtf.has_func(function) {
            missing.push(function);
            continue;
        }
        let r = attach_hooks(
            ebpf,
            btf,
            &[
                (exit, function, Hook::Fexit),
                (enter, function, Hook::Fentry),
            ],
        );
        match r {
            Ok(()) => got.push(function),
            Err(e) if i == 0 => return Err(e),
            Err(_) => missing.push(function),
        }
    }
    if got.is_empty() {
        return Err(LoadError::Program {
            program: "reads_kernfs_enter",
            source: ProgramError::NotLoaded,
        });
    }
    let mut detail = format!("fentry/fexit {}", got.join(", "));
    if !missing.is_empty() {
        detail.push_str(&format!(
            " (not hooked: {}; FUSE reads need fuse built in, not a module)",
            missing.join(", ")
        ));
    }
    Ok(detail)
}

/// Loads the direct-access set, else the probe-read set (or only that one when
/// `CGTRACE_FIELD_ACCESS=probe`), and returns the one that loaded.
fn load_with_fallback(
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

fn attach_raw_tp(
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
fn load_tp_btf(
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

fn attach_tp_btf(ebpf: &mut Ebpf, set: &[(&'static str, &str)]) -> Result<(), LoadError> {
    for &(program, _) in set {
        tp_btf(ebpf, program)?
            .attach()
            .map_err(|source| LoadError::Program { program, source })?;
    }
    Ok(())
}

fn tp_btf<'a>(
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
