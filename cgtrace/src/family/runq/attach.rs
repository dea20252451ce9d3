//! What the loader attaches for `runq`: tp_btf programs on sched_wakeup, sched_wakeup_new and
//! sched_switch, reading kernel fields directly or, where the verifier refuses, through
//! `bpf_probe_read_kernel`.

use aya::{Btf as AyaBtf, Ebpf, maps::Stack, programs::ProgramError};
use cgtrace_common::layout::{ABSENT, Layout};

use super::{model::BlameCaps, starts::WaitStarts};
use crate::{
    bpf::attach::{Attach, LoadError, attach_tp_btf, load_tp_btf},
    model::{AttachMode, FamilyMode},
};

/// Puts every `RUNQ_SLOTS` slot on the free stack, slot 0 on top, before the programs that take
/// them attach: slots are taken from the bottom of the array up, and a freed one is taken again
/// before any never used, so the daemon's mapping of the array grows only to the most slots ever
/// in use at once.
fn fill_free_slots(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    const MAP: &str = "RUNQ_FREE_SLOTS";
    let map = ebpf.map_mut(MAP).ok_or(LoadError::MissingMap(MAP))?;
    let mut free: Stack<_, u32> =
        Stack::try_from(map).map_err(|source| LoadError::Map { map: MAP, source })?;
    for slot in (0..free.capacity()).rev() {
        free.push(&slot, 0)
            .map_err(|source| LoadError::Map { map: MAP, source })?;
    }
    Ok(())
}

/// Attaches the run-queue programs: tp_btf on sched_wakeup, sched_wakeup_new, sched_switch.
/// The variants that read kernel fields directly are tried first; if this kernel's verifier
/// refuses them, the `bpf_probe_read_kernel` variants.
pub(crate) fn attach(a: &mut Attach<'_>) -> Result<FamilyMode, LoadError> {
    match std::env::var("CGTRACE_BENCH_FLOOR").as_deref() {
        Ok("1") => attach_floor(a.ebpf, a.btf, a.wait_starts, Floor::Empty),
        Ok("clock") => attach_floor(a.ebpf, a.btf, a.wait_starts, Floor::Clock),
        _ => attach_programs(a.ebpf, a.btf, a.layout, a.wait_starts),
    }
}

/// What the programs of a benchmark floor do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// Nothing (`CGTRACE_BENCH_FLOOR=1`).
    Empty,
    /// Read the clock once and keep it (`CGTRACE_BENCH_FLOOR=clock`).
    Clock,
}

/// `CGTRACE_BENCH_FLOOR=1` or `=clock` (`cargo xtask bench runq`'s floor configurations):
/// programs that measure nothing on the hooks this path uses (sched_switch and sched_wakeup with
/// the kernel's stamps; also sched_wakeup_new with cgtrace's own), so the benchmark can show what
/// cgtrace costs above any program there. With the kernel's stamps only sched_switch reads the
/// clock (cgtrace's wakeup program does not). No wait is measured.
fn attach_floor(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    wait_starts: WaitStarts,
    floor: Floor,
) -> Result<FamilyMode, LoadError> {
    let stamps = wait_starts == WaitStarts::KernelStamps;
    // With the kernel's stamps cgtrace's wakeup program reads no clock: the clock floor's stays
    // empty there.
    let (switch, wakeup, wakeup_new) = match floor {
        Floor::Empty => (
            "floor_sched_switch",
            "floor_sched_wakeup",
            "floor_sched_wakeup_new",
        ),
        Floor::Clock if stamps => (
            "floor_clock_sched_switch",
            "floor_sched_wakeup",
            "floor_clock_sched_wakeup_new",
        ),
        Floor::Clock => (
            "floor_clock_sched_switch",
            "floor_clock_sched_wakeup",
            "floor_clock_sched_wakeup_new",
        ),
    };
    let all = [
        (switch, "sched_switch"),
        (wakeup, "sched_wakeup"),
        (wakeup_new, "sched_wakeup_new"),
    ];
    let set = if stamps { &all[..2] } else { &all[..] };
    load_tp_btf(ebpf, btf, set)?;
    attach_tp_btf(ebpf, set)?;
    let programs: Vec<&str> = set.iter().map(|(program, _)| *program).collect();
    Ok(FamilyMode {
        mode: AttachMode::TpBtf,
        detail: format!(
            "CGTRACE_BENCH_FLOOR={}: {} (the benchmark's floor for the {} path); no wait is measured",
            match floor {
                Floor::Empty => "1",
                Floor::Clock => "clock",
            },
            programs.join(", "),
            if stamps {
                "kernel-stamps"
            } else {
                "own-stamps"
            }
        ),
    })
}

/// A program and the tracepoint it attaches to.
type Program = (&'static str, &'static str);

fn attach_programs(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    layout: &Layout,
    wait_starts: WaitStarts,
) -> Result<FamilyMode, LoadError> {
    if wait_starts.task_storage() {
        fill_free_slots(ebpf)?;
    }
    let stamps = wait_starts == WaitStarts::KernelStamps;
    // With the kernel's own stamps no wait starts at a wakeup: its wakeup program only marks a
    // task whose stamp is older than its wakeup (a sleep the kernel counts as waiting).
    let (direct, probe): (&[Program], &[Program]) = if stamps {
        (
            &[
                ("sched_wakeup_stamps", "sched_wakeup"),
                ("sched_switch_stamps", "sched_switch"),
            ],
            &[
                ("sched_wakeup_stamps_probe", "sched_wakeup"),
                ("sched_switch_stamps_probe", "sched_switch"),
            ],
        )
    } else if layout.switch_has_prev_state == 1 {
        (
            &[
                ("sched_wakeup", "sched_wakeup"),
                ("sched_wakeup_new", "sched_wakeup_new"),
                ("sched_switch", "sched_switch"),
            ],
            &[
                ("sched_wakeup_probe", "sched_wakeup"),
                ("sched_wakeup_new_probe", "sched_wakeup_new"),
                ("sched_switch_probe", "sched_switch"),
            ],
        )
    } else {
        (
            &[
                ("sched_wakeup", "sched_wakeup"),
                ("sched_wakeup_new", "sched_wakeup_new"),
                ("sched_switch_noprevstate", "sched_switch"),
            ],
            &[
                ("sched_wakeup_probe", "sched_wakeup"),
                ("sched_wakeup_new_probe", "sched_wakeup_new"),
                ("sched_switch_noprevstate_probe", "sched_switch"),
            ],
        )
    };
    // CGTRACE_FIELD_ACCESS=probe forces the fallback (tests, and a way out should a kernel's
    // verifier accept the direct variants but misbehave).
    let forced_probe = std::env::var("CGTRACE_FIELD_ACCESS").is_ok_and(|v| v == "probe");
    let first = if forced_probe {
        Err(LoadError::Program {
            program: "(direct variants)",
            source: ProgramError::NotLoaded,
        })
    } else {
        load_tp_btf(ebpf, btf, direct)
    };
    let access = match first {
        Ok(()) => {
            attach_tp_btf(ebpf, direct)?;
            "direct BTF field access".to_string()
        }
        Err(direct_err) => {
            load_tp_btf(ebpf, btf, probe)?;
            attach_tp_btf(ebpf, probe)?;
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
            "{} ({}); {access}; {}{}",
            if stamps {
                "sched_wakeup (stamps older than the wakeup), sched_switch"
            } else {
                "sched_wakeup, sched_wakeup_new, sched_switch"
            },
            if layout.switch_has_prev_state == 1 {
                "prev_state argument"
            } else {
                "prev state read from the task"
            },
            wait_starts.describe(),
            if stamps { "" } else { wait_clock(layout) }
        ),
    })
}

/// Which of the blame ledger's kernel-dependent parts this kernel can tell (see
/// `resolve_blame_extras` in `bpf::btf::layout`): all three are kept only by the `sched_switch`
/// programs that walk in `bpf_loop` (those with `prev_state`, 5.18+).
pub fn blame_caps(layout: &Layout) -> BlameCaps {
    let looped = layout.switch_has_prev_state == 1;
    BlameCaps {
        irq: looped && layout.rq_prev_irq_time != ABSENT,
        steal: looped && layout.rq_prev_steal_time_rq != ABSENT,
        idle_elsewhere: layout.task_cpus_mask != ABSENT
            && layout.task_nr_cpus_allowed != ABSENT
            && layout.switch_has_prev_state == 1,
        before_5_18: !looped,
        root_cgroup: 0,
    }
}

/// The clock cgtrace's own wait stamps are taken in, as `hello.families.runq.detail` ends.
pub fn wait_clock(layout: &Layout) -> &'static str {
    if layout.rq_clock == ABSENT || layout.rq_cpu == ABSENT {
        "; waits timed in bpf_ktime_get_ns (no rq.clock and rq.cpu through task_struct.se.cfs_rq in this kernel's BTF)"
    } else {
        "; waits timed in the run queue's clock (rq.clock, the clock of the kernel's run_delay; ktime for a wait that moved CPUs or lasted 2 s or more)"
    }
}
