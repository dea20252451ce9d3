//! The terminal in raw mode on the alternate screen, always given back: when the guard drops (quit,
//! error) and from the panic hook (a panic anywhere, before its message is printed).

use std::{
    io::{self, Stdout},
    sync::Once,
};

use ratatui::{
    Terminal,
    backend::CrosstermBackend,
    crossterm::{
        cursor::Show,
        execute,
        terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
    },
};

pub type Tui = Terminal<CrosstermBackend<Stdout>>;

/// Owns the terminal while the view runs.
pub struct TerminalGuard {
    terminal: Tui,
}

impl TerminalGuard {
    /// Raw mode, alternate screen, hidden cursor; installs the panic hook first.
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        let setup = || -> io::Result<Tui> {
            enable_raw_mode()?;
            execute!(io::stdout(), EnterAlternateScreen)?;
            let mut terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
            terminal.hide_cursor()?;
            terminal.clear()?;
            Ok(terminal)
        };
        match setup() {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    pub fn terminal(&mut self) -> &mut Tui {
        &mut self.terminal
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves the alternate screen, shows the cursor and leaves raw mode. Safe to call more than once
/// and when the terminal was never set up.
pub fn restore() {
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
    let _ = disable_raw_mode();
}

/// Restores the terminal and stderr, then lets the previous hook print the panic.
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            log::error!("panic: {info}");
            super::logfile::restore_stderr();
            previous(info);
        }));
    });
}
