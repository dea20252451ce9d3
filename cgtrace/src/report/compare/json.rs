//! `report --compare --json`: the comparison's serde form as one escaped JSON line.

use super::diff::Compare;
use crate::safety::escape::json_line;

pub fn render_json(c: &Compare) -> String {
    // Plain data: serialising it cannot fail.
    let line = serde_json::to_string(c).unwrap_or_default();
    json_line(&line).into_owned() + "\n"
}
