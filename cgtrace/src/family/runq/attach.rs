//! What the loader attaches for `runq`: tp_btf programs on sched_wakeup, sched_wakeup_new and
//! sched_switch, reading kernel fields directly or, where the verifier refuses, through
//! `bpf_probe_read_kernel`.

use aya::{Btf as AyaBtf, Ebpf, maps::Queue, programs::ProgramError};
use cgtrace_common::layout::{ABSENT, Layout, THR_CLOCK_NONE};

use crate::{
    bpf::attach::{LoadError, attach_tp_btf, load_tp_btf},
    model::{AttachMode, FamilyMode},
};

/// Whether `release` (`/proc/sys/kernel/osrelease`) is at least `want` (major, minor).
pub(crate) fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((next(), next()), (Some(major), Some(minor)) if (major, minor) >= want)
}

/// Where the run-queue wait starts (`cgtrace_common::runq::RunqStart`) go: task-local storage
/// from 6.1 on, the oldest kernel the matrix proves it on (5.10 has none for tracing programs;
/// 5.11–5.19 have it, unproven here, so they keep the hash), unless `CGTRACE_RUNQ_START=hash`
/// (tests, and a way out).
///
/// Where the kernel's own stamps can be read ([`Self::KernelStamps`]) no start is kept at all: the
/// kernel stamps every wait (`sched_info.last_queued`, `run_delay`), and `sched_switch`, which
/// runs before `sched_info_switch` adds the ending wait, reads them; `sched_wakeup` is not
/// attached. That needs task storage (for the task's `run_delay` at its previous switch-in), the
/// `sched_info` fields, and task-based throttling (6.18+, or no CFS bandwidth): earlier kernels
/// split a wait at its throttled part by a clock read when it began, at the wakeup.
/// `CGTRACE_RUNQ_WAITS=own` keeps cgtrace's own stamps there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitStarts {
    KernelStamps,
    TaskStorage,
    HashOldKernel,
    HashForced,
}

impl WaitStarts {
    pub(crate) fn choose(layout: &Layout) -> Self {
        if std::env::var("CGTRACE_RUNQ_START").is_ok_and(|v| v == "hash") {
            return Self::HashForced;
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if !kernel_at_least(release.trim(), (6, 1)) {
            return Self::HashOldKernel;
        }
        let own = std::env::var("CGTRACE_RUNQ_WAITS").is_ok_and(|v| v == "own");
        let stamps = [
            layout.task_run_delay,
            layout.task_last_queued,
            layout.task_nivcsw,
            layout.rq_clock,
        ]
        .iter()
        .all(|&off| off != ABSENT);
        if !own
            && stamps
            && layout.thr_clock_kind == THR_CLOCK_NONE
            && layout.switch_has_prev_state == 1
        {
            Self::KernelStamps
        } else {
            Self::TaskStorage
        }
    }

    /// Whether the task-local storage (and so the histogram slots) is used.
    pub fn task_storage(self) -> bool {
        matches!(self, Self::KernelStamps | Self::TaskStorage)
    }

    /// How `hello.families.runq.detail` says it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::KernelStamps => {
                "waits read from the kernel's own stamps (sched_info.run_delay and last_queued, at sched_switch), histograms in per-cgroup array slots (the slot cached in task-local storage)"
            }
            Self::TaskStorage => {
                "wait starts in task-local storage, histograms in per-cgroup array slots (the slot cached with the start)"
            }
            Self::HashOldKernel => {
                "wait starts in a hash table, histograms in a hash (kernel before 6.1)"
            }
            Self::HashForced => {
                "wait starts in a hash table, histograms in a hash (forced by CGTRACE_RUNQ_START=hash)"
            }
        }
    }
}

/// Puts every `RUNQ_SLOTS` slot in the free queue, before the programs that take them attach.
fn fill_free_slots(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    const MAP: &str = "RUNQ_FREE_SLOTS";
    let map = ebpf.map_mut(MAP).ok_or(LoadError::MissingMap(MAP))?;
    let mut free: Queue<_, u32> =
        Queue::try_from(map).map_err(|source| LoadError::Map { map: MAP, source })?;
    for slot in 0..free.capacity() {
        free.push(&slot, 0)
            .map_err(|source| LoadError::Map { map: MAP, source })?;
    }
    Ok(())
}

/// Attaches the run-queue programs: tp_btf on sched_wakeup, sched_wakeup_new, sched_switch.
/// The variants that read kernel fields directly are tried first; if this kernel's verifier
/// refuses them, the `bpf_probe_read_kernel` variants.
pub(crate) fn attach(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    layout: &Layout,
    wait_starts: WaitStarts,
) -> Result<FamilyMode, LoadError> {
    if wait_starts.task_storage() {
        fill_free_slots(ebpf)?;
    }
    let stamps = wait_starts == WaitStarts::KernelStamps;
    let switch = if stamps {
        "sched_switch_stamps"
    } else if layout.switch_has_prev_state == 1 {
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
            if stamps {
                "sched_switch_stamps_probe"
            } else if layout.switch_has_prev_state == 1 {
                "sched_switch_probe"
            } else {
                "sched_switch_noprevstate_probe"
            },
            "sched_switch",
        ),
    ];
    // With the kernel's own stamps no wait starts at a wakeup: sched_switch alone.
    let skip = if stamps { 2 } else { 0 };
    let (direct, probe) = (&direct[skip..], &probe[skip..]);
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
            if skip == 0 {
                "sched_wakeup, sched_wakeup_new, sched_switch"
            } else {
                "sched_switch"
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

/// The clock cgtrace's own wait stamps are taken in, as `hello.families.runq.detail` ends.
pub fn wait_clock(layout: &Layout) -> &'static str {
    if layout.rq_clock == ABSENT || layout.rq_cpu == ABSENT {
        "; waits timed in bpf_ktime_get_ns (no rq.clock and rq.cpu through task_struct.se.cfs_rq in this kernel's BTF)"
    } else {
        "; waits timed in the run queue's clock (rq.clock, the clock of the kernel's run_delay; ktime for a wait that moved CPUs or lasted 2 s or more)"
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_at_least;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(kernel_at_least("6.18.44-fc-v595", (6, 1)));
        assert!(kernel_at_least("6.1.0-28-amd64", (6, 1)));
        assert!(!kernel_at_least("5.15.0-1052-aws", (6, 1)));
        assert!(!kernel_at_least("5.10.226", (6, 1)));
        assert!(kernel_at_least("10.0", (6, 1)));
        assert!(!kernel_at_least("6", (6, 1)));
        assert!(!kernel_at_least("", (6, 1)));
    }
}
