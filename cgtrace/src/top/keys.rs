//! Which key does what. [`BINDINGS`] is the only place keys are defined: the key handler looks
//! them up there and the `?` overlay lists them from there, so the help cannot drift.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::app::{Action, Command, Edit, Mode};

/// One key: a plain key code (Shift is ignored for characters: `G`, `?`, `<` arrive with it on
/// some terminals and without it on others) or Ctrl plus a letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Code(KeyCode),
    Ctrl(char),
}

pub struct Binding {
    pub keys: &'static [Key],
    /// How the help overlay names the keys (at most [`LABEL_WIDTH`] characters).
    pub label: &'static str,
    /// At most [`WHAT_WIDTH`] characters, so the help fits two columns in 80.
    pub what: &'static str,
    pub command: Command,
}

/// Widest binding label and description (the help overlay's two columns fit 80 characters).
pub const LABEL_WIDTH: usize = 12;
pub const WHAT_WIDTH: usize = 25;

use Key::{Code, Ctrl};
use KeyCode::Char;

pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: &[Code(KeyCode::Up), Code(Char('k'))],
        label: "↑ k",
        what: "previous row",
        command: Command::Up,
    },
    Binding {
        keys: &[Code(KeyCode::Down), Code(Char('j'))],
        label: "↓ j",
        what: "next row",
        command: Command::Down,
    },
    Binding {
        keys: &[Code(KeyCode::PageUp), Ctrl('b')],
        label: "PgUp Ctrl-B",
        what: "page up",
        command: Command::PageUp,
    },
    Binding {
        keys: &[Code(KeyCode::PageDown), Ctrl('f')],
        label: "PgDn Ctrl-F",
        what: "page down",
        command: Command::PageDown,
    },
    Binding {
        keys: &[Code(KeyCode::Home), Code(Char('g'))],
        label: "Home g",
        what: "first row",
        command: Command::Home,
    },
    Binding {
        keys: &[Code(KeyCode::End), Code(Char('G'))],
        label: "End G",
        what: "last row",
        command: Command::End,
    },
    Binding {
        keys: &[Code(KeyCode::Enter)],
        label: "Enter",
        what: "detail pane on/off",
        command: Command::Detail,
    },
    Binding {
        keys: &[Code(Char('K'))],
        label: "K",
        what: "scroll detail up",
        command: Command::DetailUp,
    },
    Binding {
        keys: &[Code(Char('J'))],
        label: "J",
        what: "scroll detail down",
        command: Command::DetailDown,
    },
    Binding {
        keys: &[Code(Char('<')), Code(Char(','))],
        label: "< ,",
        what: "sort: column to the left",
        command: Command::SortPrev,
    },
    Binding {
        keys: &[Code(Char('>')), Code(Char('.')), Code(KeyCode::F(6))],
        label: "> . F6",
        what: "sort: column to the right",
        command: Command::SortNext,
    },
    Binding {
        keys: &[Code(Char('r')), Code(Char('I'))],
        label: "r I",
        what: "reverse the sort order",
        command: Command::Reverse,
    },
    Binding {
        keys: &[Code(Char('/')), Code(KeyCode::F(4))],
        label: "/ F4",
        what: "filter names and paths",
        command: Command::Filter,
    },
    Binding {
        keys: &[Code(Char('t')), Code(KeyCode::F(5))],
        label: "t F5",
        what: "tree / flat list",
        command: Command::Tree,
    },
    Binding {
        keys: &[Code(KeyCode::Left), Code(Char('h'))],
        label: "← h",
        what: "fold, or go to parent",
        command: Command::Collapse,
    },
    Binding {
        keys: &[Code(KeyCode::Right), Code(Char('l'))],
        label: "→ l",
        what: "unfold (tree)",
        command: Command::Expand,
    },
    Binding {
        keys: &[Code(Char(' '))],
        label: "Space",
        what: "fold / unfold (tree)",
        command: Command::ToggleFold,
    },
    Binding {
        keys: &[Code(Char('i'))],
        label: "i",
        what: "hide / show idle cgroups",
        command: Command::HideIdle,
    },
    Binding {
        keys: &[Code(Char('p')), Code(Char('z'))],
        label: "p z",
        what: "freeze / resume display",
        command: Command::Freeze,
    },
    Binding {
        keys: &[Code(Char('+')), Code(Char('='))],
        label: "+",
        what: "longer interval",
        command: Command::Slower,
    },
    Binding {
        keys: &[Code(Char('-')), Code(Char('_'))],
        label: "-",
        what: "shorter interval",
        command: Command::Faster,
    },
    Binding {
        keys: &[Code(Char('?')), Code(KeyCode::F(1))],
        label: "? F1",
        what: "this help",
        command: Command::Help,
    },
    Binding {
        keys: &[Code(KeyCode::Esc)],
        label: "Esc",
        what: "close pane or help; quit",
        command: Command::Back,
    },
    Binding {
        keys: &[Code(Char('q')), Ctrl('c'), Code(KeyCode::F(10))],
        label: "q Ctrl-C F10",
        what: "quit",
        command: Command::Quit,
    },
];

/// Keys of `cgtrace replay` (listed in the help when replaying; `p` pauses the player there).
pub const REPLAY_BINDINGS: &[Binding] = &[
    Binding {
        keys: &[Code(Char('n'))],
        label: "n",
        what: "next window (pauses)",
        command: Command::StepForward,
    },
    Binding {
        keys: &[Code(Char('N')), Code(Char('b'))],
        label: "N b",
        what: "previous window (pauses)",
        command: Command::StepBack,
    },
    Binding {
        keys: &[Code(Char(']'))],
        label: "]",
        what: "play faster (×2)",
        command: Command::PlayFaster,
    },
    Binding {
        keys: &[Code(Char('['))],
        label: "[",
        what: "play slower (÷2)",
        command: Command::PlaySlower,
    },
    Binding {
        keys: &[Code(Char('T'))],
        label: "T",
        what: "next throttle episode",
        command: Command::NextThrottle,
    },
    Binding {
        keys: &[Code(Char('R'))],
        label: "R",
        what: "next slow read",
        command: Command::NextRead,
    },
    Binding {
        keys: &[Code(Char('E'))],
        label: "E",
        what: "next single event",
        command: Command::NextEvent,
    },
    Binding {
        keys: &[Code(Char(':'))],
        label: ":",
        what: "jump to a time",
        command: Command::Seek,
    },
];

/// Keys of the seek prompt, for the help overlay.
pub const SEEK_KEYS: &[(&str, &str)] = &[
    ("HH:MM[:SS]", "UTC"),
    ("+30s -2m", "relative"),
    ("90s", "from start"),
    ("start end", ""),
];

/// Keys of the filter prompt, for the help overlay (handled in [`action`]).
pub const PROMPT_KEYS: &[(&str, &str)] = &[
    ("Enter", "keep"),
    ("Esc", "previous"),
    ("Tab", "substring/regex"),
    ("Ctrl-U", "clear"),
];

fn matches(key: &Key, ev: &KeyEvent) -> bool {
    let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
    let alt = ev.modifiers.contains(KeyModifiers::ALT);
    match *key {
        Key::Ctrl(c) => ctrl && !alt && ev.code == KeyCode::Char(c),
        Key::Code(code) => !ctrl && !alt && ev.code == code,
    }
}

/// The command bound to a key.
pub fn command(ev: &KeyEvent) -> Option<Command> {
    BINDINGS
        .iter()
        .chain(REPLAY_BINDINGS)
        .find(|b| b.keys.iter().any(|k| matches(k, ev)))
        .map(|b| b.command)
}

/// What a key press does in the current mode.
pub fn action(mode: &Mode, ev: KeyEvent) -> Option<Action> {
    if ev.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && ev.code == KeyCode::Char('c') {
        return Some(Action::Command(Command::Quit));
    }
    if let Mode::Filter(_) | Mode::Seek(_) = mode {
        let edit = match ev.code {
            KeyCode::Enter => Edit::Apply,
            KeyCode::Esc => Edit::Cancel,
            KeyCode::Tab => Edit::ToggleKind,
            KeyCode::Backspace => Edit::Backspace,
            KeyCode::Char('u') if ctrl => Edit::Clear,
            KeyCode::Char(c) if !ctrl && !ev.modifiers.contains(KeyModifiers::ALT) => Edit::Char(c),
            _ => return None,
        };
        return Some(Action::Edit(edit));
    }
    match command(&ev) {
        Some(c) => Some(Action::Command(c)),
        // In the help, any key closes it.
        None if *mode == Mode::Help => Some(Action::Command(Command::Back)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn no_key_is_bound_twice_and_every_command_has_a_key() {
        let mut seen = HashSet::new();
        let all: Vec<&Binding> = BINDINGS.iter().chain(REPLAY_BINDINGS).collect();
        for b in &all {
            for k in b.keys {
                assert!(seen.insert(format!("{k:?}")), "{k:?} bound twice");
            }
        }
        let commands: HashSet<Command> = all.iter().map(|b| b.command).collect();
        assert_eq!(commands.len(), all.len(), "one binding per command");
        assert_eq!(
            commands.len(),
            32,
            "a new Command needs a binding and a help line"
        );
        for b in &all {
            assert!(b.label.chars().count() <= LABEL_WIDTH, "{}", b.label);
            assert!(b.what.chars().count() <= WHAT_WIDTH, "{}", b.what);
        }
    }

    #[test]
    fn keys_map_to_commands_in_each_mode() {
        let table = Mode::Table;
        assert!(matches!(
            action(&table, key(KeyCode::Char('j'))),
            Some(Action::Command(Command::Down))
        ));
        // Shift is ignored for characters.
        let g = KeyEvent::new(KeyCode::Char('G'), KeyModifiers::SHIFT);
        assert!(matches!(
            action(&table, g),
            Some(Action::Command(Command::End))
        ));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert!(matches!(
            action(&table, ctrl_c),
            Some(Action::Command(Command::Quit))
        ));
        // Plain `c` is not Ctrl-C.
        assert!(action(&table, key(KeyCode::Char('c'))).is_none());
        // In the help, any key closes it.
        assert!(matches!(
            action(&Mode::Help, key(KeyCode::Char('x'))),
            Some(Action::Command(Command::Back))
        ));
    }
}
