//! Styles. Everything that matters is also carried by text or by an attribute (bold, reverse), so
//! the view reads the same with `NO_COLOR` set (<https://no-color.org>) or on a monochrome
//! terminal; colour only adds emphasis.

use ratatui::style::{Color, Modifier, Style};

#[derive(Clone, Debug, PartialEq)]
pub struct Theme {
    pub colour: bool,
    /// The header's first line and the table's column titles.
    pub title: Style,
    /// The column the table is sorted by.
    pub sorted: Style,
    /// The selected row.
    pub selected: Style,
    /// Secondary text: paths, units, hints.
    pub dim: Style,
    /// Something worth a look (a flag, a latency over the flag threshold).
    pub warn: Style,
    /// Something wrong (dropped events, an error).
    pub bad: Style,
    /// Live / paused / ended badge.
    pub badge: Style,
    /// Bars of the wait kinds in the histogram: wakeup, preempt, throttled.
    pub kinds: [Style; 3],
    pub border: Style,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set to a non-empty value.
    pub fn from_env() -> Self {
        Self::for_no_color(std::env::var_os("NO_COLOR").as_deref())
    }

    /// The theme for a value of `NO_COLOR` (set and non-empty: no colour).
    pub fn for_no_color(no_color: Option<&std::ffi::OsStr>) -> Self {
        match no_color {
            Some(v) if !v.is_empty() => Self::plain(),
            _ => Self::colour(),
        }
    }

    pub fn colour() -> Self {
        Self {
            colour: true,
            title: Style::new().add_modifier(Modifier::BOLD),
            sorted: Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            selected: Style::new().add_modifier(Modifier::REVERSED),
            dim: Style::new().fg(Color::DarkGray),
            warn: Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            bad: Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            badge: Style::new().fg(Color::Black).bg(Color::Green),
            kinds: [
                Style::new().fg(Color::Green),
                Style::new().fg(Color::Yellow),
                Style::new().fg(Color::Red),
            ],
            border: Style::new().fg(Color::DarkGray),
        }
    }

    /// No colour at all: bold and reverse only.
    pub fn plain() -> Self {
        Self {
            colour: false,
            title: Style::new().add_modifier(Modifier::BOLD),
            sorted: Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            selected: Style::new().add_modifier(Modifier::REVERSED),
            dim: Style::new(),
            warn: Style::new().add_modifier(Modifier::BOLD),
            bad: Style::new().add_modifier(Modifier::BOLD),
            badge: Style::new().add_modifier(Modifier::REVERSED),
            kinds: [Style::new(); 3],
            border: Style::new(),
        }
    }
}
