//! Resolves [`cgtrace_common::layout::Layout`] from the running kernel's BTF.

use cgtrace_common::layout::{ABSENT, CGROUP_MODE_V1, CGROUP_MODE_V2, Layout};

use crate::btf::Btf;

/// A field the programs need is missing from this kernel's BTF.
#[derive(Debug, thiserror::Error)]
#[error("kernel BTF has no {what}; this kernel is not supported for {family}")]
pub struct MissingField {
    pub what: String,
    pub family: &'static str,
}

fn off(btf: &Btf, s: &str, f: &str) -> Result<u32, MissingField> {
    btf.field(s, f)
        .map(|i| i.offset)
        .ok_or_else(|| MissingField {
            what: format!("{s}.{f}"),
            family: "runq",
        })
}

/// Offsets for the `runq` family. `cgroup_v1` selects the cpu controller's v1 cgroup as identity;
/// otherwise the task's own cgroup2 cgroup.
pub fn resolve(btf: &Btf, cgroup_v1: bool) -> Result<Layout, MissingField> {
    let (task_state, task_state_size) = match btf
        .field("task_struct", "__state")
        .or_else(|| btf.field("task_struct", "state"))
    {
        Some(f) => (f.offset, f.size),
        None => (ABSENT, 0),
    };
    let cpu_subsys_id = btf
        .enum_value("cgroup_subsys_id", "cpu_cgrp_id")
        .map(|v| v as u32)
        .unwrap_or(ABSENT);
    if cgroup_v1 && cpu_subsys_id == ABSENT {
        return Err(MissingField {
            what: "cgroup_subsys_id::cpu_cgrp_id (kernel without CONFIG_CGROUP_SCHED)".into(),
            family: "runq",
        });
    }
    let switch_args = btf
        .tracepoint_args("sched_switch")
        .ok_or_else(|| MissingField {
            what: "tracepoint sched_switch".into(),
            family: "runq",
        })?;
    let layout = Layout {
        task_pid: off(btf, "task_struct", "pid")?,
        task_tgid: off(btf, "task_struct", "tgid")?,
        task_comm: off(btf, "task_struct", "comm")?,
        task_cgroups: off(btf, "task_struct", "cgroups")?,
        task_state,
        task_state_size,
        css_set_subsys: off(btf, "css_set", "subsys")?,
        css_set_dfl_cgrp: off(btf, "css_set", "dfl_cgrp")?,
        css_cgroup: off(btf, "cgroup_subsys_state", "cgroup")?,
        cgroup_kn: off(btf, "cgroup", "kn")?,
        kn_id: off(btf, "kernfs_node", "id")?,
        cpu_subsys_id,
        cgroup_mode: if cgroup_v1 {
            CGROUP_MODE_V1
        } else {
            CGROUP_MODE_V2
        },
        switch_has_prev_state: u32::from(switch_args >= 4),
    };
    if layout.switch_has_prev_state == 0 && layout.task_state == ABSENT {
        return Err(MissingField {
            what: "task_struct.__state or task_struct.state".into(),
            family: "runq",
        });
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_layout_resolves_in_both_modes() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("skipping: no readable kernel BTF");
            return;
        };
        let v1 = resolve(&btf, true).expect("v1 layout");
        let v2 = resolve(&btf, false).expect("v2 layout");
        assert_eq!(v1.cgroup_mode, CGROUP_MODE_V1);
        assert_eq!(v2.cgroup_mode, CGROUP_MODE_V2);
        assert_ne!(v1.task_pid, ABSENT);
        assert!(v1.task_pid < v1.task_comm || v1.task_comm < v1.task_pid);
        assert!(v1.cpu_subsys_id < 16);
        assert!(v1.task_state_size == 4 || v1.task_state_size == 8);
    }
}
