//! `cgtrace report --compare BEFORE AFTER`: per cgroup, what changed between two recordings
//! (did an applied change work?). Each file is read into a [`Report`] by the ordinary
//! [`crate::report::build`]; [`diff`] matches their cgroups by path (ids differ when a cgroup is
//! re-created; by id when a cgroup has no path) and sets their figures side by side, per second
//! of each recording; `text.rs`, `json.rs` and `html.rs` write the result.

mod diff;
mod html;
mod json;
mod text;

pub use diff::{CgroupChange, Compare, Figures, METRICS, Side, TEXT_TOP, diff};
pub use html::render_html;
pub use json::render_json;
pub use text::render_text;
