//! What the loader attaches for `runq`: tp_btf programs on sched_wakeup, sched_wakeup_new and
//! sched_switch, reading kernel fields directly or, where the verifier refuses, through
//! `bpf_probe_read_kernel`.

use aya::{Btf as AyaBtf, Ebpf, programs::ProgramError};
use cgtrace_common::layout::Layout;

use crate::{
    attach::{LoadError, attach_tp_btf, load_tp_btf},
    model::{AttachMode, FamilyMode},
};

/// Attaches the run-queue programs: tp_btf on sched_wakeup, sched_wakeup_new, sched_switch.
/// The variants that read kernel fields directly are tried first; if this kernel's verifier
/// refuses them, the `bpf_probe_read_kernel` variants.
pub(crate) fn attach(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    layout: &Layout,
    runq_start: crate::loader::RunqStart,
) -> Result<FamilyMode, LoadError> {
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
            "sched_wakeup, sched_wakeup_new, sched_switch ({}); {access}; wait starts in {}",
            if layout.switch_has_prev_state == 1 {
                "prev_state argument"
            } else {
                "prev state read from the task"
            },
            runq_start.describe()
        ),
    })
}
