//! What every family's attach code shares: why loading failed ([`LoadError`]), and loading and
//! attaching tp_btf, raw tracepoint, fentry/fexit and kprobe programs.

use aya::{
    Btf as AyaBtf, Ebpf,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, ProgramError, RawTracePoint},
};

use cgtrace_common::{
    layout::Layout,
    modes::{ReadsMode, ThrottleMode},
};

use crate::{
    bpf::btf::{
        Btf, BtfError,
        layout::{MissingField, ReadsSupport},
    },
    family::runq::starts::WaitStarts,
    model::{AttachMode, Capabilities, FamilyMode},
};

/// What every family's attach (`family::live::LiveFamily::attach`) is handed by the loader: the
/// loaded object, the kernel as probed, and the modes asked for on the command line.
pub struct Attach<'a> {
    pub ebpf: &'a mut Ebpf,
    pub btf: &'a AyaBtf,
    /// The kernel's BTF as cgtrace reads it (function signatures, struct layouts).
    pub kernel_btf: &'a Btf,
    /// The kernel struct offsets the programs were loaded with.
    pub layout: &'a Layout,
    pub capabilities: &'a Capabilities,
    /// Where `runq` keeps its wait starts (chosen before loading: it sized the maps).
    pub wait_starts: WaitStarts,
    pub throttle_mode: ThrottleMode,
    pub reads_mode: ReadsMode,
    /// Whether the throttle fields resolved in this kernel's BTF, or which one is missing.
    pub throttle_layout: &'a Result<(), MissingField>,
    /// What the reads programs can use in this kernel, or which field is missing.
    pub reads_layout: &'a Result<ReadsSupport, MissingField>,
}

/// A family whose kernel fields are missing: unavailable in `auto` mode, an error when the user
/// forced a mode.
pub fn missing_layout(
    family: &'static str,
    mode: &'static str,
    auto: bool,
    missing: &MissingField,
) -> Result<FamilyMode, LoadError> {
    if auto {
        return Ok(FamilyMode {
            mode: AttachMode::Unavailable,
            detail: missing.to_string(),
        });
    }
    Err(LoadError::Mode {
        family,
        mode,
        reason: missing.to_string(),
    })
}

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
    #[error("{0}: rebuild cgtrace with scripts/setup.sh")]
    Retype(#[source] crate::bpf::btf::patch::PatchError),
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
