//! The CFS throttling family (`throttle`): the cgroup's CPU quota, what it used, how often and how
//! long it was throttled (our episodes next to the kernel's `cpu.stat`), and which threads burned
//! the quota in the throttled periods.

use cgtrace_common::runq::WaitKind;
use ratatui::text::{Line, Span};

use crate::{
    family::throttle::ThrottleWindow,
    model::CgroupWindow,
    top::{
        columns::{Cell, Column, Source},
        format,
        render::bars,
    },
    units::{self, PeriodIn},
};

use super::interface::{Detail, Family, View};
use crate::top::columns::Ctx;

pub struct Throttle;

/// Throttled periods listed in the detail pane (the most recent), and threads per period.
const PERIODS_SHOWN: usize = 3;
const THREADS_SHOWN: usize = 4;

fn data(cg: &CgroupWindow) -> Option<&ThrottleWindow> {
    cg.throttle.as_deref()
}

fn usage(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(t) => t.usage_cores.map_or(Cell::Absent, Cell::Cores),
    }
}
fn quota(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(t) => t.quota_cores.map_or(Cell::Text("none".into()), Cell::Cores),
    }
}
fn share(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(t) if t.nr_periods == 0 => Cell::Idle,
        Some(t) => Cell::Percent(t.throttled_share * 100.0),
    }
}
fn episode_p99(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(t) if t.episode.count == 0 => Cell::Idle,
        Some(t) => Cell::Micros(t.episode.p99_us),
    }
}

static COLUMNS: [Column; 4] = [
    Column {
        id: "throttle.usage",
        title: "CPU",
        help: "CPUs used in the window (cgroups with a quota)",
        width: 5,
        priority: 75,
        needs: &[],
        source: Source::Data(usage),
        descending: true,
    },
    Column {
        id: "throttle.quota",
        title: "QUOTA",
        help: "CPU quota in CPUs (quota / period)",
        width: 6,
        priority: 60,
        needs: &[],
        source: Source::Data(quota),
        descending: true,
    },
    Column {
        id: "throttle.share",
        title: "THR%",
        help: "share of CFS periods in which it was throttled",
        width: 5,
        priority: 82,
        needs: &[],
        source: Source::Data(share),
        descending: true,
    },
    Column {
        id: "throttle.p99",
        title: "TP99",
        help: "99th percentile length of its throttle episodes",
        width: 6,
        priority: 55,
        needs: &[],
        source: Source::Data(episode_p99),
        descending: true,
    },
];

static VIEW: View = View {
    name: "throttle",
    title: "CPU throttling",
    columns: &COLUMNS,
    default_sort: None,
};

impl Family for Throttle {
    fn view(&self) -> &'static View {
        &VIEW
    }

    fn detail(&self, cg: &CgroupWindow, d: &mut Detail<'_>) {
        let (theme, width) = (d.theme, d.width);
        let out = &mut *d.out;
        let Some(t) = data(cg) else {
            out.push(Line::from(vec![
                Span::styled(self.title(), theme.title),
                Span::raw("  no CPU quota, or its period timer did not run in this window"),
            ]));
            return;
        };
        let quota = match (t.quota_us, t.quota_cores) {
            (Some(q), Some(c)) => format!(
                "quota {c:.2} CPUs ({} per {}{})",
                format::micros(q as f64),
                format::micros(t.period_us as f64),
                if t.burst_us > 0 {
                    format!(", burst {}", format::micros(t.burst_us as f64))
                } else {
                    String::new()
                }
            ),
            _ => "no quota".into(),
        };
        let used = t
            .usage_cores
            .map_or(String::new(), |u| format!(" · used {u:.2} CPUs"));
        out.push(Line::from(vec![
            Span::styled(self.title(), theme.title),
            Span::raw(format!("  {quota}{used}")),
        ]));
        out.push(Line::styled(
            format!(
                "  {:<9} {:>8} {:>9} {:>14}",
                "", "periods", "throttled", "throttled time"
            ),
            theme.dim,
        ));
        out.push(Line::raw(format!(
            "  {:<9} {:>8} {:>9} {:>14}   {} episodes on {} CPUs",
            "cgtrace",
            t.nr_periods,
            t.nr_throttled,
            format::micros(t.throttled_us),
            t.episodes,
            t.episodes_per_cpu.len()
        )));
        match &t.kernel {
            Some(k) => out.push(Line::raw(format!(
                "  {:<9} {:>8} {:>9} {:>14}   bursts {} ({})",
                "kernel",
                k.nr_periods,
                k.nr_throttled,
                format::micros(k.throttled_us),
                k.nr_bursts,
                format::micros(k.burst_us)
            ))),
            None => out.push(Line::styled(
                "  kernel    (first window: no earlier cpu.stat reading)",
                theme.dim,
            )),
        }
        if t.episode.count > 0 {
            out.push(Line::raw(format!(
                "  episodes p50 {} p99 {} max {} · runnable at throttle max {} mean {:.1} · tasks throttled {}",
                format::micros(t.episode.p50_us),
                format::micros(t.episode.p99_us),
                format::micros(t.episode.max_us),
                t.runnable_at_throttle_max,
                t.runnable_at_throttle_mean,
                t.tasks_throttled
            )));
        }
        if let Some(line) = timeline(t, usize::from(width).saturating_sub(14)) {
            out.push(Line::from(vec![
                Span::styled("  periods   ", theme.dim),
                Span::raw(line),
            ]));
        }
        if t.episode.count > 0 {
            out.push(Line::raw(""));
            out.push(Line::styled("  throttle episode lengths", theme.dim));
            bars::runqlat_lines(&[(WaitKind::Throttled, &t.episode)], theme, width, out);
        }
        if !t.periods.is_empty() {
            out.push(Line::raw(""));
            out.push(Line::styled(
                "  who burned the quota (latest throttled periods)",
                theme.dim,
            ));
            for p in t.periods.iter().rev().take(PERIODS_SHOWN) {
                out.push(Line::raw(format!(
                    "  period: {}",
                    units::period(p.burned_in_ms, p.threads, p.cpu_ms, PeriodIn::View)
                )));
                let top: Vec<String> = p
                    .top
                    .iter()
                    .take(THREADS_SHOWN)
                    .map(|th| {
                        units::period_thread(&th.comm, th.tid, th.cpu_ms, th.cpus, PeriodIn::View)
                    })
                    .collect();
                if !top.is_empty() {
                    out.push(Line::raw(format!("    {}", top.join(", "))));
                }
            }
        }
    }
}

/// One mark per CFS period of the window, `▮` where it was throttled, from the throttled periods'
/// end times; `None` without periods to place.
fn timeline(t: &ThrottleWindow, width: usize) -> Option<String> {
    let n = usize::try_from(t.nr_periods).ok()?;
    if n == 0 || t.periods.is_empty() || t.period_us == 0 || width < 8 {
        return None;
    }
    let n = n.min(width);
    let last = t.periods.iter().map(|p| p.end_ns).max()?;
    let period_ns = t.period_us * 1000;
    let mut marks = vec!['·'; n];
    for p in &t.periods {
        let back = usize::try_from((last - p.end_ns) / period_ns).ok()?;
        if back < n {
            marks[n - 1 - back] = '▮';
        }
    }
    let s: String = marks.into_iter().collect();
    Some(if usize::try_from(t.nr_periods).ok()? > n {
        format!("…{s}")
    } else {
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::throttle::burners::{PeriodThread, ThrottledPeriod};

    fn period(end_ms: u64) -> ThrottledPeriod {
        ThrottledPeriod {
            start_ns: None,
            end_ns: end_ms * 1_000_000,
            burned_in_ms: Some(12.5),
            threads: 3,
            cpu_ms: 50.0,
            top: vec![PeriodThread {
                tid: 7,
                tgid: 7,
                comm: "php-fpm".into(),
                cpu_ms: 30.0,
                cpus: 2,
            }],
        }
    }

    #[test]
    fn timeline_marks_the_throttled_periods() {
        let t = ThrottleWindow {
            period_us: 100_000,
            nr_periods: 10,
            nr_throttled: 3,
            periods: vec![period(300), period(500), period(1000)],
            ..ThrottleWindow::default()
        };
        assert_eq!(timeline(&t, 80).as_deref(), Some("··▮·▮····▮"));
        assert_eq!(timeline(&t, 4), None);
    }

    #[test]
    fn columns_show_absent_without_throttle_data() {
        let cg: CgroupWindow = serde_json::from_str(
            r#"{"id":1,"hierarchy":"cpu","path":"/a","name":null,"name_kind":null,
                "runq":{"count":0,"sum_us":0,"mean_us":0,"p50_us":0,"p90_us":0,"p99_us":0,
                        "max_us":0,"buckets":[],"kinds":{}}}"#,
        )
        .expect("json");
        let ctx = Ctx { duration_ms: 1000 };
        for c in &COLUMNS {
            let Source::Data(f) = c.source else {
                panic!("data column")
            };
            assert_eq!(f(&cg, &ctx), Cell::Absent, "{}", c.id);
        }
    }
}
