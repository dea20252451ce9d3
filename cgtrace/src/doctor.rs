//! `cgtrace doctor`: what this kernel and these privileges allow, and the attach mode each family
//! would use. Says the same things the stream's `hello` line says, for a human.

use crate::{
    bpf::btf::Btf,
    bpf::btf::layout,
    bpf::loader::{LoadError, TraceOptions, Tracer, privileged},
    cgroup::Cgroups,
};
use cgtrace_common::layout::Config;

fn line(what: &str, value: impl std::fmt::Display) {
    println!("{what:<22} {value}");
}

pub fn run() -> anyhow::Result<()> {
    line(
        "kernel",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
    );
    let cgroups = Cgroups::discover("/proc/self/mountinfo".as_ref(), "/proc/cgroups".as_ref());
    let mut cgroup_v1 = false;
    match &cgroups {
        Ok(c) => {
            line("cgroup layout", crate::live::session::layout_name(c.layout));
            for h in &c.hierarchies {
                line(
                    "  hierarchy",
                    format!(
                        "{:?} id={} [{}] at {}",
                        h.version,
                        h.id,
                        h.controllers.join(","),
                        h.mount.display()
                    ),
                );
            }
            match c.runq_hierarchy() {
                Some(h) => {
                    cgroup_v1 = matches!(h.version, crate::cgroup::Version::V1);
                    line(
                        "runq keyed by",
                        format!(
                            "{} ({})",
                            if cgroup_v1 { "cpu" } else { "cgroup2" },
                            h.mount.display()
                        ),
                    );
                }
                None => line(
                    "runq keyed by",
                    "nothing: no cpu controller and no cgroup2 mount",
                ),
            }
        }
        Err(e) => line("cgroup layout", format!("unreadable: {e}")),
    }
    let sched_ext = crate::family::throttle::sched_ext::probe(
        crate::family::throttle::sched_ext::SYSFS.as_ref(),
    );
    line(
        "sched_ext",
        sched_ext.as_ref().map_or(
            "not in this kernel (CONFIG_SCHED_CLASS_EXT off): the fair class runs every task",
            |s| s.note.as_str(),
        ),
    );
    let btf = Btf::from_sys_fs();
    match &btf {
        Ok(b) => {
            line("BTF", "yes (/sys/kernel/btf/vmlinux)");
            for tp in ["sched_switch", "sched_wakeup", "sched_wakeup_new"] {
                let args = b.tracepoint_args(tp);
                line(
                    &format!("  tp_btf {tp}"),
                    args.map_or("absent".to_string(), |n| format!("present ({n} args)")),
                );
            }
            match layout::resolve(b, cgroup_v1) {
                Ok(l) => line(
                    "  field offsets",
                    format!(
                        "resolved (task_struct.cgroups at {}, kernfs_node.id at {})",
                        l.task_cgroups, l.kn_id
                    ),
                ),
                Err(e) => line("  field offsets", e),
            }
        }
        Err(e) => line("BTF", format!("no: {e}")),
    }
    if !privileged() {
        line("privileges", LoadError::NotPrivileged);
        line("runq", "unavailable: not privileged");
        return Ok(());
    }
    line("privileges", "yes");
    line(
        "  after attach",
        format!(
            "keeps {} and drops every other capability",
            crate::safety::privilege::kept_names().join(", ")
        ),
    );
    let opts = TraceOptions {
        max_cgroups: 64,
        max_read_keys: 64,
        max_read_threads: None,
        bpf_stats: false,
        config: Config::DEFAULT,
        ringbuf_bytes: 64 * 1024,
        cgroup_v1,
        throttle_mode: crate::bpf::loader::ThrottleMode::Auto,
        reads_mode: crate::bpf::loader::ReadsMode::Auto,
    };
    match Tracer::start(&opts) {
        Ok(t) => {
            let c = &t.capabilities;
            let note = |k: &str| {
                c.notes
                    .get(k)
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            };
            line(
                "fentry/fexit",
                format!("{}{}", yes(c.fentry), note("fentry")),
            );
            line("kprobe", format!("{}{}", yes(c.kprobe), note("kprobe")));
            for (family, mode) in &t.families {
                line(
                    &format!("family {family}"),
                    format!("{}: {}", mode.mode, mode.detail),
                );
            }
            let caps = crate::family::runq::attach::blame_caps(&t.layout);
            line(
                "blame parts",
                format!(
                    "irq {}, steal {}, idle_elsewhere {}",
                    yes(caps.irq),
                    yes(caps.steal),
                    yes(caps.idle_elsewhere)
                ),
            );
            for why in caps.unknown() {
                line("  unknown", why);
            }
            let split = layout::wait_split(&t.layout);
            line(
                "wait split",
                format!(
                    "{} ({}): {}",
                    split.method,
                    if split.exact { "exact" } else { "approximate" },
                    split.detail
                ),
            );
        }
        Err(e) => line("runq", format!("unavailable: {e}")),
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
