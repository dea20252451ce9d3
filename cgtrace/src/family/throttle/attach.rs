//! What the loader attaches for `throttle`, in the best mode the kernel allows (`--throttle-mode`):
//! fentry/fexit or kprobes on the throttle functions, the hierarchy walk (`tgwalk`), or
//! tracepoints only; plus the period timer and CSD programs every mode needs.

use aya::{
    Btf as AyaBtf, Ebpf,
    maps::{Array, MapData},
};
use cgtrace_common::layout::Layout;

use cgtrace_common::modes::ThrottleMode;

use crate::{
    bpf::attach::{
        Attach, Hook, LoadError, attach_hooks, attach_raw_tp, attach_tp_btf, chain,
        load_with_fallback, missing_layout,
    },
    model::{AttachMode, Capabilities, FamilyMode},
};

/// Attaches the throttle family in the wanted mode, or the best available for `Auto`. A forced
/// mode that cannot attach is an error; in `Auto` the family is reported unavailable with the
/// reasons instead, and tracing goes on without it.
pub(crate) fn attach(a: &mut Attach<'_>) -> Result<FamilyMode, LoadError> {
    match a.throttle_layout {
        Ok(()) => attach_mode(a.ebpf, a.btf, a.layout, a.capabilities, a.throttle_mode),
        Err(missing) => missing_layout(
            "throttle",
            a.throttle_mode.as_str(),
            a.throttle_mode == ThrottleMode::Auto,
            missing,
        ),
    }
}

fn attach_mode(
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
