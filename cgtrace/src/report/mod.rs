//! `cgtrace report FILE [--json | --html]`: an incident summary of a recording.
//!
//! Families are found in the windows by shape, not by a list: any object inside a cgroup element
//! that carries a histogram (`count`, `sum_us`, `max_us`, `buckets`) is a family whose worst
//! cgroups are ranked by p99 and max over the whole recording (merged buckets, so the p99 is of
//! every wait, not an average of windows); the `throttle` family adds periods, throttled time,
//! the kernel's own `cpu.stat` counters next to ours, and the flags. Single events give the
//! longest throttle episodes with the threads that burned the quota, and the slowest waits; event
//! kinds this cgtrace cannot decode are counted by family.
//!
//! Where things are: [`Report`] and its parts in `model.rs` (`--json` is their serde form, one
//! escaped line: `json.rs`); `build/` reads
//! a recording into one ([`build`]), a file per part it sums (latency, throttle, diagnoses, reads,
//! own cost, who delayed whom); `text.rs` writes it for a terminal ([`render_text`], opening
//! with `who_text.rs`'s victim × culprit table), [`html`] as one page with
//! pictures; `medium.rs` holds what those two write alike (a cgroup's name, the warnings).

mod build;
pub mod compare;
pub mod html;
mod json;
mod medium;
pub mod model;
mod text;
mod who_text;

pub use build::build;
pub use json::render_json;
pub use model::*;
pub use text::render_text;
