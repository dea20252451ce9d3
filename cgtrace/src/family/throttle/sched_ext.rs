//! Whether a sched_ext (BPF) scheduler runs the host's tasks instead of the fair class. Tasks it
//! schedules are never throttled by CFS bandwidth control: `cpu.max` (`cpu.cfs_quota_us`) limits
//! only the fair class, so the throttling hooks never fire for them and `throttle` has nothing to
//! see (run-queue waits are still the scheduler core's, and `runq` applies). Read from
//! `/sys/kernel/sched_ext` (`state`, `switch_all`, `root/ops`: `Documentation/scheduler/
//! sched-ext.rst`), absent on kernels built without `CONFIG_SCHED_CLASS_EXT`.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// `hello.sched_ext`: what the host's sched_ext reported at start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SchedExt {
    /// The kernel's `state`: `enabled`, `enabling`, `disabling` or `disabled`.
    pub state: String,
    /// The BPF scheduler's name (`root/ops`), when one is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<String>,
    /// Whether it took every fair-class task (`switch_all`), or only tasks that asked for
    /// `SCHED_EXT`.
    pub switch_all: bool,
    /// What applies to cgtrace's families, in a sentence.
    pub note: String,
}

/// Where the kernel shows it.
pub const SYSFS: &str = "/sys/kernel/sched_ext";

/// sched_ext as `dir` shows it (the kernel's: [`SYSFS`]); `None` when the kernel has no
/// sched_ext.
pub fn probe(dir: &Path) -> Option<SchedExt> {
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let state = read("state")?;
    let ops = read("root/ops").filter(|o| !o.is_empty());
    let switch_all = read("switch_all").is_some_and(|s| s == "1");
    let running = state == "enabled" || state == "enabling";
    let who = ops.as_deref().unwrap_or("a BPF scheduler");
    let note = match (running, switch_all) {
        (false, _) => {
            "available, no BPF scheduler loaded: the fair class runs every task".to_string()
        }
        (true, true) => format!(
            "{who} (sched_ext) runs every fair-class task: cpu.max does not limit them and throttle sees no throttling (the BPF scheduler's own limits are not CFS bandwidth); runq waits still apply"
        ),
        (true, false) => format!(
            "{who} (sched_ext) runs only tasks that chose SCHED_EXT: those are never throttled by cpu.max; every other task is fair-class as usual"
        ),
    };
    Some(SchedExt {
        state,
        ops,
        switch_all,
        note,
    })
}

/// Whether it keeps CFS bandwidth control from throttling every task.
pub fn replaces_the_fair_class(s: &Option<SchedExt>) -> bool {
    s.as_ref()
        .is_some_and(|s| s.switch_all && (s.state == "enabled" || s.state == "enabling"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysfs(state: &str, switch_all: &str, ops: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("state"), format!("{state}\n")).unwrap();
        std::fs::write(d.path().join("switch_all"), format!("{switch_all}\n")).unwrap();
        if let Some(o) = ops {
            std::fs::create_dir(d.path().join("root")).unwrap();
            std::fs::write(d.path().join("root/ops"), format!("{o}\n")).unwrap();
        }
        d
    }

    #[test]
    fn what_applies_follows_the_kernels_state() {
        let absent = tempfile::tempdir().unwrap();
        assert_eq!(probe(&absent.path().join("sched_ext")), None);

        let off = probe(sysfs("disabled", "0", None).path()).unwrap();
        assert!(
            off.note.starts_with("available, no BPF scheduler"),
            "{off:?}"
        );
        assert!(!replaces_the_fair_class(&Some(off)));

        let all = probe(sysfs("enabled", "1", Some("rusty_1.0.4")).path()).unwrap();
        assert_eq!(all.ops.as_deref(), Some("rusty_1.0.4"));
        assert!(all.note.contains("cpu.max does not limit them"), "{all:?}");
        assert!(replaces_the_fair_class(&Some(all)));

        let partial = probe(sysfs("enabled", "0", Some("simple")).path()).unwrap();
        assert!(partial.note.contains("only tasks that chose SCHED_EXT"));
        assert!(!replaces_the_fair_class(&Some(partial)));
    }
}
