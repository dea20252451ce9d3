//! [`render_json`]: `report --json`, the report's serde form as one JSON line.

use super::model::Report;
use crate::safety::escape::json_line;

/// The report as one JSON line (and its newline), escaped as the stream's lines are
/// ([`json_line`]): no character a terminal acts on reaches it raw.
pub fn render_json(r: &Report) -> String {
    // A report is plain data: serialising it cannot fail.
    let line = serde_json::to_string(r).unwrap_or_default();
    json_line(&line).into_owned() + "\n"
}
