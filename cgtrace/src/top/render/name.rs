//! The name column's cell: a row's label with its depth, cut to the column keeping its end.

use crate::top::{
    format,
    rows::{Row, TreeMark},
};

/// Widest indentation of a tree row, as a share of the name column.
const MAX_INDENT_SHARE: u16 = 3;

/// The name with its depth: dots before a name in the flat list (a path shows its own depth),
/// indentation and a fold marker in the tree. A long label is cut in the middle, keeping its end
/// (the container, the unit) and every escape whole.
pub fn name_cell(row: &Row, label: &str, w: usize) -> String {
    let (lead, suffix) = name_decoration(row, label, w);
    let room = w
        .saturating_sub(lead.chars().count())
        .saturating_sub(suffix.chars().count());
    format!("{lead}{}{suffix}", format::ellipsize_middle(label, room))
}

/// Display columns a row's name cell needs to show its label whole, measured on the decoration
/// [`name_cell`] draws. The view takes the same figure from [`crate::top::rows::name_width`] without building
/// the strings; a test holds the two equal.
pub fn name_cell_width(row: &Row, label: &str) -> usize {
    let (lead, suffix) = name_decoration(row, label, usize::MAX);
    lead.chars().count() + format::width(label) + suffix.chars().count()
}

/// What goes around a label in its cell `w` columns wide: the depth dots, or the tree's indent
/// and fold marker before it; the folded count after it.
fn name_decoration(row: &Row, label: &str, w: usize) -> (String, String) {
    match row.tree {
        None if label.starts_with('/') => (String::new(), String::new()),
        None => (
            "·".repeat(usize::from(row.depth.saturating_sub(1).min(4))),
            String::new(),
        ),
        Some(mark) => {
            let max_indent = w / usize::from(MAX_INDENT_SHARE);
            let indent = " ".repeat((usize::from(row.depth) * 2).min(max_indent));
            let (marker, suffix) = match mark {
                TreeMark::Leaf => ("  ", String::new()),
                TreeMark::Open => ("▾ ", String::new()),
                TreeMark::Folded(n) => ("▸ ", format!(" (+{n})")),
            };
            (indent + marker, suffix)
        }
    }
}
