//! Where `runq` keeps the start of each wait ([`WaitStarts`]), chosen from the kernel before the
//! object is loaded: it decides the maps' sizes and which `sched_switch` program attaches.

use cgtrace_common::layout::{ABSENT, Layout, THR_CLOCK_NONE};

use crate::family::info::kernel_at_least;

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

#[cfg(test)]
mod tests {
    use crate::family::info::kernel_at_least;

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
