//! What a family of the view provides ([`Family`]: its [`View`] of columns, its detail-pane
//! sections, its flags) and what it is handed. A leaf: the families implement it, the registry
//! in `mod.rs` lists them.

use ratatui::text::Line;

use crate::{
    model::CgroupWindow,
    top::{
        columns::{Column, Ctx},
        render::theme::Theme,
    },
};

/// A diagnosis: a short code for the table, the finding and the suggested change for the detail
/// pane.
#[derive(Clone, Debug, PartialEq)]
pub struct Flag {
    /// At most 4 characters, e.g. `RQ`.
    pub code: String,
    pub family: &'static str,
    pub finding: String,
    /// The numbers it rests on (empty in recordings from before them).
    pub evidence: String,
    pub advice: String,
    /// The exact change and what it should do, on one line (empty without one).
    pub change: String,
}

/// What the view shows of a family besides its per-cgroup data.
#[derive(Debug)]
pub struct View {
    /// The family's key in `hello.families` and in the stream (`runq`).
    pub name: &'static str,
    /// Title of its section in the detail pane.
    pub title: &'static str,
    /// Its table columns, in display order.
    pub columns: &'static [Column],
    /// The default sort column, if this family provides the view's default.
    pub default_sort: Option<&'static str>,
}

/// Where a family writes its detail-pane section.
pub struct Detail<'a> {
    pub ctx: &'a Ctx,
    pub theme: &'a Theme,
    /// The pane's inner width.
    pub width: u16,
    pub out: &'a mut Vec<Line<'static>>,
}

/// One event family in the view.
pub trait Family: Sync {
    fn view(&self) -> &'static View;
    fn name(&self) -> &'static str {
        self.view().name
    }
    fn title(&self) -> &'static str {
        self.view().title
    }
    fn columns(&self) -> &'static [Column] {
        self.view().columns
    }
    fn default_sort(&self) -> Option<&'static str> {
        self.view().default_sort
    }
    /// Appends its detail-pane section for one cgroup.
    fn detail(&self, cg: &CgroupWindow, d: &mut Detail<'_>);
    /// Appends its diagnoses for one cgroup: the daemon's (`CgroupWindow::flags`) for this
    /// family.
    fn flags(&self, cg: &CgroupWindow, _ctx: &Ctx, out: &mut Vec<Flag>) {
        daemon_flags(cg, self.name(), out);
    }
}

/// The short code the table shows for a diagnosis (`Flag::code` in the stream).
pub fn short_code(code: &str) -> &'static str {
    match code {
        "runq_long_waits" => "RQ",
        "throttled_below_quota" => "TBQ",
        "many_threads_burn" => "TMT",
        "long_throttle_waits" => "TLW",
        "reads_rstat_flush" => "RFL",
        "reads_fuse" => "RFS",
        "reads_slow" => "RSL",
        _ => "?",
    }
}

/// The daemon's diagnoses of `family` for one cgroup, as the view shows them.
pub fn daemon_flags(cg: &CgroupWindow, family: &'static str, out: &mut Vec<Flag>) {
    out.extend(
        cg.flags
            .iter()
            .filter(|f| f.family == family)
            .map(|f| Flag {
                code: short_code(&f.code).into(),
                family,
                // They name cgroups and threads, which tenants name.
                finding: crate::safety::escape::terminal(&f.message).into_owned(),
                evidence: crate::safety::escape::terminal(&f.evidence).into_owned(),
                advice: crate::safety::escape::terminal(&f.suggestion).into_owned(),
                change: crate::safety::escape::terminal(&f.change_line()).into_owned(),
            }),
    );
}
