//! Where each part of the screen goes. The app uses the same function to know how many rows a
//! page holds, so scrolling and drawing always agree.

use ratatui::layout::Rect;

/// Header lines: three, and the culprits line when the blame ledger is on.
pub const fn header_rows(blame: bool) -> u16 {
    if blame { 4 } else { 3 }
}
pub const FOOTER_ROWS: u16 = 1;
/// Below this body height the detail pane leaves the table only a few rows around the selection.
const TALL_BODY: u16 = 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    /// The table, its column titles included.
    pub table: Rect,
    pub detail: Option<Rect>,
    pub footer: Rect,
}

pub fn split(area: Rect, detail: bool, header_rows: u16) -> Areas {
    let header_h = header_rows.min(area.height);
    let footer_h = FOOTER_ROWS.min(area.height - header_h);
    let body_h = area.height - header_h - footer_h;
    let body_y = area.y + header_h;
    let (table_h, detail_h) = if detail && body_h >= 6 {
        let t = if body_h >= TALL_BODY {
            body_h * 2 / 5
        } else {
            4
        };
        (t, body_h - t)
    } else {
        (body_h, 0)
    };
    Areas {
        header: Rect::new(area.x, area.y, area.width, header_h),
        table: Rect::new(area.x, body_y, area.width, table_h),
        detail: (detail_h > 0).then(|| Rect::new(area.x, body_y + table_h, area.width, detail_h)),
        footer: Rect::new(area.x, body_y + body_h, area.width, footer_h),
    }
}

/// Table rows (without the title row) on a `width`×`height` screen.
pub fn table_body_rows(width: u16, height: u16, detail: bool, header_rows: u16) -> u16 {
    split(Rect::new(0, 0, width, height), detail, header_rows)
        .table
        .height
        .saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_tile_the_screen() {
        for (w, h, d) in [
            (80, 24, false),
            (80, 24, true),
            (120, 40, true),
            (20, 5, true),
            (10, 1, false),
        ] {
            let a = split(Rect::new(0, 0, w, h), d, header_rows(false));
            let total = a.header.height
                + a.table.height
                + a.detail.map_or(0, |r| r.height)
                + a.footer.height;
            assert_eq!(total, h, "{w}x{h} {d}");
        }
        assert_eq!(table_body_rows(80, 24, false, 3), 19);
        assert_eq!(table_body_rows(80, 24, true, 3), 3);
        assert_eq!(table_body_rows(120, 40, true, 3), 13);
        assert_eq!(table_body_rows(80, 24, false, header_rows(true)), 18);
    }
}
