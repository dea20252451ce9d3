//! The run-queue latency family (`runq`): how long each cgroup's runnable tasks waited for a CPU,
//! split by why they waited.

use cgtrace_common::runq::WaitKind;
use ratatui::text::{Line, Span};

use crate::{hist::HistSummary, model::CgroupWindow};

use super::interface::{Detail, Family, View};
use crate::top::columns::Ctx;
use crate::top::{
    columns::{Cell, Column, Source},
    format,
    render::bars,
};

pub struct Runq;

fn active(cg: &CgroupWindow) -> Option<&HistSummary> {
    (cg.runq.all.count > 0).then_some(&cg.runq.all)
}

fn wait_per_s(cg: &CgroupWindow, ctx: &Ctx) -> Cell {
    active(cg).map_or(Cell::Idle, |h| Cell::Micros(h.sum_us / ctx.seconds()))
}
fn count_per_s(cg: &CgroupWindow, ctx: &Ctx) -> Cell {
    active(cg).map_or(Cell::Idle, |h| Cell::PerSec(h.count as f64 / ctx.seconds()))
}
fn p50(cg: &CgroupWindow, _: &Ctx) -> Cell {
    active(cg).map_or(Cell::Idle, |h| Cell::Micros(h.p50_us))
}
fn p99(cg: &CgroupWindow, _: &Ctx) -> Cell {
    active(cg).map_or(Cell::Idle, |h| Cell::Micros(h.p99_us))
}
fn max(cg: &CgroupWindow, _: &Ctx) -> Cell {
    active(cg).map_or(Cell::Idle, |h| Cell::Micros(h.max_us))
}
fn throttled_share(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match active(cg) {
        Some(h) if h.sum_us > 0.0 => Cell::Percent(
            cg.runq.kinds.get("throttled").map_or(0.0, |t| t.sum_us) / h.sum_us * 100.0,
        ),
        _ => Cell::Idle,
    }
}

fn neighbours_share(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match (active(cg), &cg.runq.blame) {
        (Some(h), Some(b)) if h.sum_us > 0.0 => Cell::Percent(b.neighbours_us() / h.sum_us * 100.0),
        (Some(_), None) => Cell::Absent,
        _ => Cell::Idle,
    }
}
fn caused_per_s(cg: &CgroupWindow, ctx: &Ctx) -> Cell {
    cg.caused
        .as_ref()
        .filter(|c| c.wait_us > 0.0)
        .map_or(Cell::Idle, |c| Cell::Micros(c.wait_us / ctx.seconds()))
}

static COLUMNS: [Column; 8] = [
    Column {
        id: "runq.wait",
        title: "WAIT/s",
        help: "time its tasks spent waiting for a CPU, per second of window",
        width: 7,
        priority: 85,
        needs: &[],
        source: Source::Data(wait_per_s),
        descending: true,
    },
    Column {
        id: "runq.rate",
        title: "N/s",
        help: "run-queue waits per second",
        width: 5,
        priority: 50,
        needs: &[],
        source: Source::Data(count_per_s),
        descending: true,
    },
    Column {
        id: "runq.p50",
        title: "P50",
        help: "median run-queue wait in the window",
        width: 6,
        priority: 78,
        needs: &[],
        source: Source::Data(p50),
        descending: true,
    },
    Column {
        id: "runq.p99",
        title: "P99",
        help: "99th percentile run-queue wait in the window",
        width: 6,
        priority: 90,
        needs: &[],
        source: Source::Data(p99),
        descending: true,
    },
    Column {
        id: "runq.max",
        title: "MAX",
        help: "longest run-queue wait in the window (exact)",
        width: 6,
        priority: 65,
        needs: &[],
        source: Source::Data(max),
        descending: true,
    },
    Column {
        id: "runq.throttled",
        title: "WTHR%",
        help: "share of run-queue waiting that was CFS throttling (the rest: contention)",
        width: 6,
        priority: 70,
        needs: &["throttle"],
        source: Source::Data(throttled_share),
        descending: true,
    },
    Column {
        id: "runq.neighbours",
        title: "NBR%",
        help: "share of run-queue waiting charged to other cgroups that held the CPU (blame ledger)",
        width: 5,
        priority: 72,
        needs: &[crate::top::columns::BLAME],
        source: Source::Data(neighbours_share),
        descending: true,
    },
    Column {
        id: "runq.caused",
        title: "CAUSE/s",
        help: "run-queue wait its tasks caused other cgroups by holding their CPU, per second (blame ledger); sort by it to find the noisy neighbour",
        // Its title and the sort arrow.
        width: 8,
        priority: 80,
        needs: &[crate::top::columns::BLAME],
        source: Source::Data(caused_per_s),
        descending: true,
    },
];

static VIEW: View = View {
    name: "runq",
    title: "Run-queue latency",
    columns: &COLUMNS,
    default_sort: Some("runq.wait"),
};

impl Family for Runq {
    fn view(&self) -> &'static View {
        &VIEW
    }

    fn detail(&self, cg: &CgroupWindow, d: &mut Detail<'_>) {
        let (ctx, theme, width) = (d.ctx, d.theme, d.width);
        let out = &mut *d.out;
        let all = &cg.runq.all;
        out.push(Line::from(vec![
            Span::styled(self.title(), theme.title),
            Span::raw(format!(
                "  {} waits, {} waited in {}",
                all.count,
                format::micros(all.sum_us),
                format::interval(ctx.duration_ms)
            )),
        ]));
        if all.count == 0 {
            out.push(Line::raw("  no run-queue waits in this window"));
            caused_lines(cg, ctx, theme, width, out);
            return;
        }
        out.push(Line::styled(
            format!(
                "  {:<9} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}",
                "kind", "waits/s", "p50", "p90", "p99", "max", "mean", "wait/s"
            ),
            theme.dim,
        ));
        let row = |name: &str, h: &HistSummary| {
            format!(
                "  {:<9} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}",
                name,
                format::si(h.count as f64 / ctx.seconds()),
                format::micros(h.p50_us),
                format::micros(h.p90_us),
                format::micros(h.p99_us),
                format::micros(h.max_us),
                format::micros(h.mean_us),
                format::micros(h.sum_us / ctx.seconds()),
            )
        };
        out.push(Line::raw(row("all", all)));
        for kind in WaitKind::ALL {
            if let Some(h) = cg.runq.kinds.get(kind.name()) {
                out.push(Line::styled(
                    row(kind.name(), h),
                    theme.kinds[kind as usize],
                ));
            }
        }
        if all.stale_us > 0.0 {
            out.push(Line::styled(
                format!(
                    "  + {} waited that the kernel's run_delay misses (its clock not updated at the switch after a wakeup); in the percentiles, not in wait/s",
                    format::micros(all.stale_us)
                ),
                theme.dim,
            ));
        }
        if cg.runq.run_delay_asleep_us > 0.0 {
            out.push(Line::styled(
                format!(
                    "  + {} asleep that the kernel's run_delay counts as waiting (a sleeping task it still had queued, moved to another CPU)",
                    format::micros(cg.runq.run_delay_asleep_us)
                ),
                theme.dim,
            ));
        }
        blame_lines(cg, ctx, theme, width, out);
        caused_lines(cg, ctx, theme, width, out);
        out.push(Line::raw(""));
        let kinds: Vec<(WaitKind, &HistSummary)> = WaitKind::ALL
            .into_iter()
            .filter_map(|k| cg.runq.kinds.get(k.name()).map(|h| (k, h)))
            .collect();
        bars::runqlat_lines(&kinds, theme, width, out);
    }
}

/// A cgroup on the other side of a blame entry, as the view names it (escaped: tenants name
/// cgroups).
fn party_label(p: &crate::family::runq::blame::Party, width: usize) -> String {
    let raw = p
        .name
        .as_deref()
        .or(p.path.as_deref())
        .map_or_else(|| format!("id {}", p.id), str::to_string);
    format::ellipsize_middle(&crate::safety::escape::terminal(&raw), width)
}

/// A root-cgroup task in `kernel_tasks` as the view shows it: its name (escaped, fitted to
/// `width`), or its pid once it has exited.
fn kernel_task_label(t: &crate::family::runq::model::KernelTask, width: usize) -> String {
    let raw = t.comm.clone().unwrap_or_else(|| format!("pid {}", t.pid));
    format::ellipsize_middle(&crate::safety::escape::terminal(&raw), width)
}

/// "Who delayed it": the window's wait split into the parts the blame ledger charged, each as a
/// share of the wait and a wait per second.
fn blame_lines(
    cg: &CgroupWindow,
    ctx: &Ctx,
    theme: &crate::top::render::theme::Theme,
    width: u16,
    out: &mut Vec<Line<'static>>,
) {
    let Some(b) = &cg.runq.blame else {
        return;
    };
    let total = cg.runq.all.sum_us.max(1e-9);
    let name_width = usize::from(width).saturating_sub(20).max(10);
    out.push(Line::styled(
        "  who delayed it     share  wait/s",
        theme.dim,
    ));
    let part = |out: &mut Vec<Line<'static>>, label: String, us: f64| {
        if us > 0.0 {
            out.push(Line::raw(format!(
                "  {:<18} {:>4.0}% {:>7}",
                label,
                us / total * 100.0,
                format::micros(us / ctx.seconds())
            )));
        }
    };
    let mut unknown = Vec::new();
    for p in crate::family::runq::model::PARTS {
        match (p.of)(b) {
            Some(us) => part(out, p.label.into(), us),
            None => unknown.push(p.label),
        }
        if p.key == "throttled_ancestor_us" {
            // Whose quota: "ancestor quota: /kubepods/burstable/pod…".
            for a in &b.throttled_ancestors {
                out.push(Line::styled(
                    format!(
                        "    ancestor quota: {}{}",
                        party_label(a, name_width.saturating_sub(2)),
                        a.cpu_max
                            .as_ref()
                            .map(|m| format!(" (cpu.max {m})"))
                            .unwrap_or_default()
                    ),
                    theme.dim,
                ));
            }
        }
        if p.key == "kernel_us" {
            // Which kernel threads and host processes: "  ksoftirqd/1".
            for t in &b.kernel_tasks {
                part(out, format!("  {}", kernel_task_label(t, 16)), t.wait_us);
            }
        }
        if p.key == "siblings_us" {
            for n in &b.neighbours {
                part(out, party_label(n, name_width.min(18)), n.wait_us);
            }
            part(out, "other neighbours".into(), b.neighbours_other_us);
        }
    }
    if !unknown.is_empty() {
        out.push(Line::styled(
            format!("  n/a (kernel cannot tell): {}", unknown.join(", ")),
            theme.dim,
        ));
    }
}

/// The wait this cgroup caused others by holding their CPU, and whom it delayed most.
fn caused_lines(
    cg: &CgroupWindow,
    ctx: &Ctx,
    theme: &crate::top::render::theme::Theme,
    width: u16,
    out: &mut Vec<Line<'static>>,
) {
    let Some(c) = &cg.caused else {
        return;
    };
    out.push(Line::styled(
        format!(
            "  it delayed others by {}/s:",
            format::micros(c.wait_us / ctx.seconds())
        ),
        theme.dim,
    ));
    let name_width = usize::from(width).saturating_sub(14).max(10);
    for v in &c.victims {
        out.push(Line::raw(format!(
            "    {:>7}  {}",
            format::micros(v.wait_us / ctx.seconds()),
            party_label(v, name_width)
        )));
    }
}
