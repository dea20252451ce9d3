//! Drawing: pure functions from the [`App`] to a frame. Only the visible rows are formatted.

pub mod bars;
pub mod detail;
pub mod footer;
pub mod header;
pub mod help;
pub mod layout;
pub mod name;
pub mod table;
pub mod theme;

use ratatui::Frame;

use super::app::{App, Mode};

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, app: &App) {
    let areas = layout::split(
        frame.area(),
        app.detail,
        layout::header_rows(app.blame_on()),
    );
    header::render(frame, areas.header, app);
    table::render(frame, areas.table, app);
    if let Some(area) = areas.detail {
        detail::render(frame, area, app);
    }
    footer::render(frame, areas.footer, app);
    if app.mode == Mode::Help {
        help::render(frame, frame.area(), app);
    }
}
