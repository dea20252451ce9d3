//! The slow-reads family (`reads`): pseudo-file reads (cgroupfs, sysfs, procfs, FUSE) by the
//! cgroup's tasks, per (comm, file), with the rstat flush time inside memcg stat reads and the
//! dying memcgs below the cgroup read.

use ratatui::text::{Line, Span};

use crate::{
    family::reads::FileReads,
    model::CgroupWindow,
    top::{
        columns::{Cell, Column, Source},
        format,
    },
};

use super::interface::{Detail, Family, View};
use crate::top::columns::Ctx;

pub struct Reads;

/// Files listed in the detail pane.
const FILES_SHOWN: usize = 8;

fn data(cg: &CgroupWindow) -> Option<&[FileReads]> {
    cg.reads.as_deref()
}

fn time_share(cg: &CgroupWindow, ctx: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(r) => {
            let us: f64 = r.iter().map(|f| f.total_us).sum();
            Cell::Percent(us / (ctx.seconds() * 1e6) * 100.0)
        }
    }
}

fn rate(cg: &CgroupWindow, ctx: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(r) => Cell::PerSec(r.iter().map(|f| f.count).sum::<u64>() as f64 / ctx.seconds()),
    }
}

fn slowest(cg: &CgroupWindow, _: &Ctx) -> Cell {
    match data(cg) {
        None => Cell::Absent,
        Some(r) => Cell::Micros(r.iter().map(|f| f.latency.max_us).fold(0.0, f64::max)),
    }
}

static COLUMNS: [Column; 3] = [
    Column {
        id: "reads.time",
        title: "RD%",
        help: "time its tasks spent in pseudo-file reads (cgroupfs, sysfs, procfs, FUSE), % of one CPU",
        width: 5,
        priority: 70,
        needs: &[],
        source: Source::Data(time_share),
        descending: true,
    },
    Column {
        id: "reads.rate",
        title: "RD/s",
        help: "pseudo-file read calls per second",
        width: 6,
        priority: 40,
        needs: &[],
        source: Source::Data(rate),
        descending: true,
    },
    Column {
        id: "reads.max",
        title: "RDMX",
        help: "slowest pseudo-file read in the window",
        width: 6,
        priority: 65,
        needs: &[],
        source: Source::Data(slowest),
        descending: true,
    },
];

static VIEW: View = View {
    name: "reads",
    title: "Pseudo-file reads",
    columns: &COLUMNS,
    default_sort: None,
};

impl Family for Reads {
    fn view(&self) -> &'static View {
        &VIEW
    }

    fn detail(&self, cg: &CgroupWindow, d: &mut Detail<'_>) {
        let (ctx, theme, width) = (d.ctx, d.theme, d.width);
        let out = &mut *d.out;
        let Some(files) = data(cg) else {
            out.push(Line::from(vec![
                Span::styled(self.title(), theme.title),
                Span::raw("  none by this cgroup's tasks in this window"),
            ]));
            return;
        };
        let total: f64 = files.iter().map(|f| f.total_us).sum();
        out.push(Line::from(vec![
            Span::styled(self.title(), theme.title),
            Span::raw(format!(
                "  {} files · {} in reads ({:.1} % of one CPU)",
                files.len(),
                format::micros(total),
                total / (ctx.seconds() * 1e6) * 100.0
            )),
        ]));
        out.push(Line::styled(
            format!(
                "  {:<15} {:>7} {:>9} {:>9} {:>9} {:>9} {:>6}  file",
                "comm", "reads", "total", "p99", "max", "flush", "dying"
            ),
            theme.dim,
        ));
        let file_width = usize::from(width).saturating_sub(76).max(16);
        for f in files.iter().take(FILES_SHOWN) {
            let dying = f.dying_memcgs.map_or("·".into(), |d| d.to_string());
            out.push(Line::raw(format!(
                "  {:<15} {:>7} {:>9} {:>9} {:>9} {:>9} {:>6}  {}",
                format::ellipsize_end(&f.comm, 15),
                f.count,
                format::micros(f.total_us),
                format::micros(f.latency.p99_us),
                format::micros(f.latency.max_us),
                if f.flushed_reads > 0 {
                    format::micros(f.flush_us + f.lock_wait_us)
                } else {
                    "·".into()
                },
                dying,
                format::ellipsize_start(&f.file, file_width)
            )));
        }
        if files.len() > FILES_SHOWN {
            out.push(Line::styled(
                format!("  … {} more", files.len() - FILES_SHOWN),
                theme.dim,
            ));
        }
    }
}
