//! What the loader attaches for `reads`: read timing by fentry on the pseudo-filesystems' read
//! functions or by raw syscall tracepoints (`--reads-mode`), then the rstat flush and cgroup
//! churn programs this kernel has.

use aya::{Btf as AyaBtf, Ebpf, programs::ProgramError};

use cgtrace_common::modes::ReadsMode;

use crate::{
    bpf::attach::{
        Attach, Hook, LoadError, attach_hooks, attach_tp_btf, chain, load_tp_btf, missing_layout,
    },
    bpf::btf::Btf,
    bpf::btf::layout,
    model::{AttachMode, Capabilities, FamilyMode},
};

/// Attaches the reads family: read timing in the wanted (or best) mode, then whatever flush and
/// churn programs this kernel has. Only the read timing is required.
pub(crate) fn attach(a: &mut Attach<'_>) -> Result<FamilyMode, LoadError> {
    match (a.reads_layout, a.reads_mode) {
        (_, ReadsMode::Off) => Ok(FamilyMode {
            mode: AttachMode::Off,
            detail: "turned off by --reads-mode off".into(),
        }),
        (Ok(support), mode) => {
            attach_mode(a.ebpf, a.btf, a.kernel_btf, support, a.capabilities, mode)
        }
        (Err(missing), mode) => {
            missing_layout("reads", mode.as_str(), mode == ReadsMode::Auto, missing)
        }
    }
}

fn attach_mode(
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
    // `auto` is fentry only: the syscall mode sends every syscall of every task through the
    // tracepoint slow path, a cost the default must not put on unrelated work.
    let order: Vec<ReadsMode> = match wanted {
        ReadsMode::Auto => caps
            .fentry
            .then_some(ReadsMode::Fentry)
            .into_iter()
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
        if wanted == ReadsMode::Auto && support.syscalls.is_some() {
            let why = caps
                .notes
                .get("fentry")
                .map(|n| {
                    n.split(". Verifier output:")
                        .next()
                        .unwrap_or(n)
                        .to_string()
                })
                .unwrap_or_else(|| failed.join("; "));
            return Ok(FamilyMode {
                mode: AttachMode::Off,
                detail: format!(
                    "off by default here: fentry is not available ({why}), and the syscall mode \
                     sends every syscall of every task through the tracepoint slow path \
                     (perf bench sched pipe: 1.72x of bare instead of 1.36x on the development \
                     VM); --reads-mode syscall turns it on"
                ),
            });
        }
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
