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

/// One line of [`BINDINGS`].
const fn bind(
    keys: &'static [Key],
    label: &'static str,
    what: &'static str,
    command: Command,
) -> Binding {
    Binding {
        keys,
        label,
        what,
        command,
    }
}

use Key::{Code, Ctrl};
use KeyCode::Char;

#[rustfmt::skip] // A table: one binding a line.
pub const BINDINGS: &[Binding] = &[
    bind(&[Code(KeyCode::Up), Code(Char('k'))], "↑ k", "previous row", Command::Up),
    bind(&[Code(KeyCode::Down), Code(Char('j'))], "↓ j", "next row", Command::Down),
    bind(&[Code(KeyCode::PageUp), Ctrl('b')], "PgUp Ctrl-B", "page up", Command::PageUp),
    bind(&[Code(KeyCode::PageDown), Ctrl('f')], "PgDn Ctrl-F", "page down", Command::PageDown),
    bind(&[Code(KeyCode::Home), Code(Char('g'))], "Home g", "first row", Command::Home),
    bind(&[Code(KeyCode::End), Code(Char('G'))], "End G", "last row", Command::End),
    bind(&[Code(KeyCode::Enter)], "Enter", "detail pane on/off", Command::Detail),
    bind(&[Code(Char('K'))], "K", "scroll detail up", Command::DetailUp),
    bind(&[Code(Char('J'))], "J", "scroll detail down", Command::DetailDown),
    bind(&[Code(Char('<')), Code(Char(','))], "< ,", "sort: column to the left", Command::SortPrev),
    bind(&[Code(Char('>')), Code(Char('.')), Code(KeyCode::F(6))], "> . F6", "sort: column to the right", Command::SortNext),
    bind(&[Code(Char('c'))], "c", "sort by CAUSE/s (blame)", Command::SortCaused),
    bind(&[Code(Char('r')), Code(Char('I'))], "r I", "reverse the sort order", Command::Reverse),
    bind(&[Code(Char('/')), Code(KeyCode::F(4))], "/ F4", "filter names and paths", Command::Filter),
    bind(&[Code(Char('t')), Code(KeyCode::F(5))], "t F5", "tree / flat list", Command::Tree),
    bind(&[Code(KeyCode::Left), Code(Char('h'))], "← h", "fold, or go to parent", Command::Collapse),
    bind(&[Code(KeyCode::Right), Code(Char('l'))], "→ l", "unfold (tree)", Command::Expand),
    bind(&[Code(Char(' '))], "Space", "fold / unfold (tree)", Command::ToggleFold),
    bind(&[Code(Char('i'))], "i", "hide / show idle cgroups", Command::HideIdle),
    bind(&[Code(Char('p')), Code(Char('z'))], "p z", "freeze / resume display", Command::Freeze),
    bind(&[Code(Char('+')), Code(Char('='))], "+", "longer interval", Command::Slower),
    bind(&[Code(Char('-')), Code(Char('_'))], "-", "shorter interval", Command::Faster),
    bind(&[Code(Char('?')), Code(KeyCode::F(1))], "? F1", "this help", Command::Help),
    bind(&[Code(KeyCode::Esc)], "Esc", "close pane or help; quit", Command::Back),
    bind(&[Code(Char('q')), Ctrl('c'), Code(KeyCode::F(10))], "q Ctrl-C F10", "quit", Command::Quit),
];

/// Keys of `cgtrace replay` (listed in the help when replaying; `p` pauses the player there).
#[rustfmt::skip] // A table: one binding a line.
pub const REPLAY_BINDINGS: &[Binding] = &[
    bind(&[Code(Char('n'))], "n", "next window (pauses)", Command::StepForward),
    bind(&[Code(Char('N')), Code(Char('b'))], "N b", "previous window (pauses)", Command::StepBack),
    bind(&[Code(Char(']'))], "]", "play faster (×2)", Command::PlayFaster),
    bind(&[Code(Char('['))], "[", "play slower (÷2)", Command::PlaySlower),
    bind(&[Code(Char('T'))], "T", "next throttle episode", Command::NextThrottle),
    bind(&[Code(Char('R'))], "R", "next slow read", Command::NextRead),
    bind(&[Code(Char('E'))], "E", "next single event", Command::NextEvent),
    bind(&[Code(Char(':'))], ":", "jump to a time", Command::Seek),
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
            33,
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
        // Plain `c` is not Ctrl-C: it sorts by the harm caused.
        assert!(matches!(
            action(&table, key(KeyCode::Char('c'))),
            Some(Action::Command(Command::SortCaused))
        ));
        // In the help, any key closes it.
        assert!(matches!(
            action(&Mode::Help, key(KeyCode::Char('x'))),
            Some(Action::Command(Command::Back))
        ));
    }
}
