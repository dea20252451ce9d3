//! Loads cgtrace's eBPF object, probes what the kernel allows, and attaches each family in the
//! best mode available. Dropping the [`Tracer`] detaches everything.

use std::collections::BTreeMap;

use aya::{
    Btf as AyaBtf, Ebpf, EbpfLoader,
    programs::{BtfTracePoint, FEntry, KProbe, ProgramError, RawTracePoint},
};
use cgtrace_common::layout::{Config, Layout};

use crate::{
    btf::{Btf, BtfError},
    layout::{self, MissingField},
    snapshot::{Capabilities, FamilyMode},
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
}

/// Programs loaded and attached, plus what was learnt about the kernel.
pub struct Tracer {
    pub ebpf: Ebpf,
    pub families: BTreeMap<String, FamilyMode>,
    pub capabilities: Capabilities,
    pub layout: Layout,
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
        let throttle_ok = layout::resolve_throttle(&btf, &syms, &mut layout);
        if throttle_ok.is_err() {
            // Leave every throttle field absent: the runq programs then skip the throttle checks.
            layout = layout::resolve(&btf, opts.cgroup_v1)?;
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
            .override_global("CONFIG", &opts.config, true)
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
        let throttle = match throttle_ok {
            Ok(()) => attach_throttle(&mut ebpf, &aya_btf, &layout),
            Err(missing) => FamilyMode {
                mode: "unavailable".into(),
                detail: missing.to_string(),
            },
        };
        families.insert("throttle".to_string(), throttle);
        Ok(Self {
            ebpf,
            families,
            capabilities,
            layout,
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
        mode: "tp_btf".into(),
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

/// Attaches the tracepoint-only throttle programs (hrtimer expiry, CSD exit); the episode starts
/// are seen by the runq `sched_switch` program. Never fails the whole tracer: a family that cannot
/// attach is reported unavailable with the reason.
fn attach_throttle(ebpf: &mut Ebpf, btf: &AyaBtf, layout: &Layout) -> FamilyMode {
    let direct = vec![
        ("throttle_period", "hrtimer_expire_entry"),
        ("throttle_timer_exit", "hrtimer_expire_exit"),
    ];
    let probe = vec![
        ("throttle_period_probe", "hrtimer_expire_entry"),
        ("throttle_timer_exit_probe", "hrtimer_expire_exit"),
    ];

    let forced_probe = std::env::var("CGTRACE_FIELD_ACCESS").is_ok_and(|v| v == "probe");
    let loaded = if forced_probe {
        load_tp_btf(ebpf, btf, &probe).map(|()| probe)
    } else {
        load_tp_btf(ebpf, btf, &direct)
            .map(|()| direct)
            .or_else(|_| load_tp_btf(ebpf, btf, &probe).map(|()| probe))
    };
    let attached = loaded
        .and_then(|set| attach_tp_btf(ebpf, &set).map(|()| set))
        .and_then(|mut set| {
            if layout.csd_unthrottle_fn != 0 {
                attach_raw_tp(ebpf, "throttle_csd_exit", "csd_function_exit")?;
                set.push(("throttle_csd_exit", "csd_function_exit (raw_tp)"));
            }
            Ok(set)
        });
    match attached {
        Ok(set) => FamilyMode {
            mode: "tracepoint".into(),
            detail: format!(
                                "episodes open at sched_switch ({}), close at {}; periods at hrtimer_expire_entry of sched_cfs_period_timer",
                if layout.task_throttled != cgtrace_common::layout::ABSENT {
                    "task-based throttling: tasks entering the limbo list; checked against cpu.stat on 6.18"
                } else {
                    "the running task of a throttled hierarchy, via throttle_count; not yet checked against cpu.stat on this kernel generation"
                },
                set.iter()
                    .skip(1)
                    .map(|(_, tp)| *tp)
                    .collect::<Vec<_>>()
                    .join(" and "),
            ),
        },
        Err(e) => FamilyMode {
            mode: "unavailable".into(),
            detail: format!("tracepoint mode failed to attach: {}", chain(&e)),
        },
    }
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
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
