//! [`render_text`]: the report as text a human pastes into an incident.

use std::fmt::Write as _;

use super::{
    medium::Medium::Text,
    model::{FlagSeen, Report, TOP},
};
use crate::{
    safety::escape::terminal as esc,
    units::{PeriodIn, clock_utc, duration_us as us, period, period_thread},
};

/// The text report: what a human pastes into an incident. Every string a tenant controls (cgroup
/// paths and names, comms, file names, the host name) is escaped for a terminal.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "cgtrace report: {} (Linux {}), {} to {}, {} windows, {} single events recorded, {} lost in the kernel",
        esc(&r.host),
        esc(&r.kernel),
        clock_utc(r.first_unix_ms),
        clock_utc(r.last_unix_ms),
        r.windows,
        r.events_recorded,
        r.events_dropped
    );
    for w in Text.warnings(r) {
        let _ = writeln!(o, "{w}");
    }
    if let Some(s) = &r.wait_split {
        let _ = writeln!(
            o,
            "wait split: {} ({}): {}",
            esc(&s.method),
            if s.exact { "exact" } else { "approximate" },
            esc(&s.detail)
        );
    }
    super::who_text::render(&mut o, &r.who_delayed_whom);
    for (f, fr) in &r.families {
        let _ = writeln!(o, "\n## {}: worst of {} cgroups", esc(f), fr.cgroups);
        if !fr.worst_p99.is_empty() {
            let _ = writeln!(o, "by p99 (cgroups with at least 100 waits):");
            for c in &fr.worst_p99 {
                let _ = writeln!(
                    o,
                    "  p99 {:>9}  max {:>9}  mean {:>9}  n {:>9}  {}",
                    us(c.p99_us),
                    us(c.max_us),
                    us(c.mean_us),
                    c.count,
                    Text.who(&c.path, &c.name, c.id)
                );
            }
        }
        let _ = writeln!(o, "by max:");
        for c in &fr.worst_max {
            let _ = writeln!(
                o,
                "  max {:>9} at {}  p99 {:>9}  n {:>9}  {}",
                us(c.max_us),
                clock_utc(c.max_at_unix_ms),
                us(c.p99_us),
                c.count,
                Text.who(&c.path, &c.name, c.id)
            );
        }
    }
    if !r.noisy_neighbours.is_empty() {
        let _ = writeln!(
            o,
            "\n## noisy neighbours: run-queue wait caused to other cgroups by holding their CPU"
        );
        for n in &r.noisy_neighbours {
            let _ = writeln!(
                o,
                "  caused {:>9} in {} windows  {}",
                us(n.caused_us),
                n.windows,
                Text.who(&n.path, &n.name, n.id)
            );
            for v in &n.victims {
                let _ = writeln!(
                    o,
                    "      {:>9} to {}",
                    us(v.wait_us),
                    Text.who(&v.path, &v.name, v.id)
                );
            }
        }
    }
    if !r.diagnoses.is_empty() {
        let _ = writeln!(o, "\n## diagnoses (run-queue waits, pseudo-file reads)");
        for d in &r.diagnoses {
            let _ = writeln!(
                o,
                "  {}: {} {} ({} windows): {}",
                Text.who(&d.path, &d.name, d.id),
                esc(&d.family),
                esc(&d.code),
                d.seen.windows,
                esc(&d.seen.message),
            );
            advice(&mut o, "    ", &d.seen);
        }
    }
    if !r.throttled.is_empty() {
        let _ = writeln!(
            o,
            "\n## throttled cgroups (ours vs the kernel's cpu.stat over the same windows)"
        );
        for t in r.throttled.iter().take(TOP) {
            let _ = writeln!(
                o,
                "  {}: quota {} CPUs, throttled {} of {} periods (worst window {:.0} %), {} throttled in {} episodes; kernel: nr_throttled {} vs ours {}, throttled time {} vs ours {}",
                Text.who(&t.path, &t.name, t.id),
                t.quota_cores.map_or("?".into(), |q| format!("{q:.2}")),
                t.nr_throttled,
                t.nr_periods,
                t.worst_window_share * 100.0,
                us(t.throttled_us),
                t.episodes,
                t.kernel_nr_throttled,
                t.ours_nr_throttled_matched,
                us(t.kernel_throttled_us),
                us(t.ours_throttled_us_matched),
            );
            for (code, f) in &t.flags {
                let _ = writeln!(
                    o,
                    "    flag {} ({} windows): {}",
                    esc(code),
                    f.windows,
                    esc(&f.message),
                );
                advice(&mut o, "      ", f);
            }
        }
    }
    if !r.longest_episodes.is_empty() {
        let _ = writeln!(o, "\n## longest throttle episodes");
        for e in r.longest_episodes.iter().take(TOP) {
            let _ = writeln!(
                o,
                "  {} at {} on CPU {} ({} runnable): {}",
                us(e.duration_us),
                clock_utc(e.at_unix_ms),
                e.cpu,
                e.runnable,
                Text.who(&e.path, &e.name, e.cgroup_id)
            );
            if let Some(p) = &e.period {
                let top: Vec<String> = p
                    .top
                    .iter()
                    .map(|t| period_thread(&t.comm, t.tid, t.cpu_ms, t.cpus, PeriodIn::Text))
                    .collect();
                let _ = writeln!(
                    o,
                    "    {}: {}",
                    period(p.burned_in_ms, p.threads, p.cpu_ms, PeriodIn::Text),
                    top.join(", ")
                );
            }
        }
    }
    if !r.slowest_waits.is_empty() {
        let _ = writeln!(o, "\n## slowest single run-queue waits");
        for w in r.slowest_waits.iter().take(TOP) {
            let _ = writeln!(
                o,
                "  {} at {} {} {} [{}]: {}",
                us(w.wait_us),
                clock_utc(w.at_unix_ms),
                esc(&w.wait_kind),
                esc(&w.comm),
                w.pid,
                Text.who(&w.path, &w.name, w.cgroup_id)
            );
        }
    }
    if !r.slowest_reads.is_empty() {
        let _ = writeln!(o, "\n## slowest pseudo-file reads (per reader and file)");
        for f in &r.slowest_reads {
            let flush = if f.total_us > 0.0 && f.flush_us > 0.0 {
                format!(", {:.0} % flushing", f.flush_us / f.total_us * 100.0)
            } else {
                String::new()
            };
            let dying = f
                .dying_memcgs
                .map_or(String::new(), |d| format!(", {d} dying memcgs below"));
            let _ = writeln!(
                o,
                "  max {} at {} {} in {}: {} ({} reads, {} in all{flush}{dying})",
                us(f.max_us),
                clock_utc(f.max_at_unix_ms),
                esc(&f.comm),
                Text.who(&f.path, &f.name, f.cgroup_id),
                esc(&f.file),
                f.count,
                us(f.total_us)
            );
        }
    }
    if !r.memcgs.is_empty() || r.dying_memcgs_max.is_some() {
        let _ = writeln!(
            o,
            "\n## memory cgroups read (dying memcgs on the host: up to {}; cgroups created {}, removed {})",
            r.dying_memcgs_max.map_or("-".into(), |d| d.to_string()),
            r.cgroups_created,
            r.cgroups_removed
        );
        for m in &r.memcgs {
            let _ = writeln!(
                o,
                "  {} {}: {} stat reads, {} in all, {} flushing, up to {} dying below; read by {}",
                esc(&m.hierarchy),
                esc(&m.path),
                m.stat_reads,
                us(m.read_us),
                us(m.flush_us),
                m.dying_memcgs_max,
                esc(&m.readers.join(", "))
            );
        }
    }
    let _ = writeln!(o, "\n## single events recorded by family");
    if r.events_by_family.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for (f, n) in &r.events_by_family {
        let _ = writeln!(o, "  {}: {n}", esc(f));
    }
    if r.undecoded_events > 0 {
        let _ = writeln!(
            o,
            "  {} events of kinds this cgtrace cannot decode (e.g. slow reads from a newer cgtrace): use a newer cgtrace for them",
            r.undecoded_events
        );
    }
    if let Some(c) = &r.own_cost {
        let _ = writeln!(o, "\n## cgtrace's own cost on the host");
        let _ = writeln!(
            o,
            "  daemon: {:.2} % of one CPU on average ({:.2} % at most), resident memory up to {} KiB, over {} windows",
            c.mean_daemon_cpu_pct, c.max_daemon_cpu_pct, c.max_rss_kib, c.windows
        );
        if c.timed_windows == 0 {
            let _ = writeln!(
                o,
                "  BPF programs: not timed (record with --bpf-stats to see each program's cost)"
            );
        } else {
            let _ = writeln!(
                o,
                "  BPF programs: {:.2} % of one CPU over the {} timed windows",
                c.mean_bpf_cpu_pct, c.timed_windows
            );
            for p in &c.programs {
                let _ = writeln!(
                    o,
                    "    {:<28} {:>12} runs  {:>8.0} ns/run",
                    esc(&p.name),
                    p.runs,
                    p.ns_per_run
                );
            }
        }
    }
    o
}

/// A flag's evidence, suggestion and exact change, each on its own line under it.
fn advice(o: &mut String, indent: &str, f: &FlagSeen) {
    if !f.evidence.is_empty() {
        let _ = writeln!(o, "{indent}why: {}", esc(&f.evidence));
    }
    let _ = writeln!(o, "{indent}→ {}", esc(&f.suggestion));
    let change = f.change_line();
    if !change.is_empty() {
        let _ = writeln!(o, "{indent}change: {}", esc(&change));
    }
}
