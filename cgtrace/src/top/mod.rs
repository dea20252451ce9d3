//! `cgtrace top`: the live per-cgroup view.
//!
//! One pipeline, as for the stream: a [`source`] (a live [`Session`](crate::live::session::Session) on
//! its own thread, or recorded windows) sends [`Window`](crate::model::Window)s; the UI loop
//! waits on one [`Event`] channel (keys, resizes, windows, signals), turns each event into an
//! [`Action`], lets [`App::apply`] change the state, and redraws only when something changed. The
//! row order is recomputed in `apply`, never while drawing; drawing ([`render::draw`]) is a pure
//! function of the [`App`] that formats only the visible rows.
//!
//! Families plug in through [`family::Family`] (columns, detail sections, flags).

pub mod app;
pub mod columns;
pub mod culprits;
pub mod event;
pub mod family;
pub mod filter;
pub mod format;
pub mod keys;
pub mod live;
pub mod logfile;
pub mod player;
pub mod render;
pub mod rows;
pub mod source;
pub mod terminal;

use std::{
    io::IsTerminal as _,
    path::PathBuf,
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use ratatui::{Terminal, backend::Backend};

pub use app::{Action, App, Command, Effect};
pub use event::Event;
pub use render::theme::Theme;

use crate::live::session::SessionOptions;
use crate::selfstat::SelfSampler;
use source::{Control, SourceHandle};

/// How often the header's own-CPU/RSS figures are refreshed.
const USAGE_EVERY: Duration = Duration::from_secs(1);
/// Frames slower than this are logged.
const SLOW_FRAME: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error(
        "cgtrace top needs a terminal on stdin and stdout; for pipes and files use `cgtrace stream`"
    )]
    NotATerminal,
    #[error("setting up the terminal: {0}")]
    Terminal(#[source] std::io::Error),
    #[error("drawing the view: {0}")]
    Draw(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the tracing session failed: {0}")]
    Source(String),
}

/// Runs `cgtrace top` on the live system until the user quits or a signal arrives.
pub fn run(opts: SessionOptions, log: Option<PathBuf>) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(TopError::NotATerminal.into());
    }
    let log_path = log.unwrap_or_else(logfile::default_path);
    let log_file = logfile::open(&log_path)?;
    logfile::install(log_file.try_clone()?);
    log::info!("cgtrace top starting, log {}", log_path.display());
    let (tx, rx) = mpsc::channel();
    // Tracing starts before the terminal is touched: a missing privilege or kernel feature is
    // one line on a normal terminal.
    let (hello, source) = live::spawn_live(opts, tx.clone())?;
    // The tracing thread dropped its capabilities once attached; this one now, before the input
    // and helper threads start (they inherit the reduced sets).
    crate::safety::privilege::drop_after_attach("top (view thread)");
    let result = {
        let _stderr = logfile::StderrRedirect::to(&log_file)?;
        let mut guard = terminal::TerminalGuard::enter().map_err(TopError::Terminal)?;
        let _input = event::Input::spawn(tx).map_err(TopError::Terminal)?;
        let mut app = App::new(hello, Theme::from_env());
        let mut sampler = SelfSampler::this_process();
        run_loop(guard.terminal(), &mut app, &rx, &source, Some(&mut sampler))
        // Input thread stopped, terminal restored, stderr back, in that order.
    };
    drop(source); // stops tracing and detaches the programs
    match &result {
        Ok(()) => log::info!("cgtrace top stopped"),
        Err(e) => log::error!("cgtrace top failed: {e:#}"),
    }
    result
}

/// Runs the view over a recording: the same loop and view, with the player as the source.
pub fn replay(
    rec: std::sync::Arc<crate::record::reader::Recording>,
    speed: f64,
    log: Option<PathBuf>,
) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(anyhow::anyhow!(
            "cgtrace replay needs a terminal on stdin and stdout; for pipes and files use `cgtrace replay --stream FILE`"
        ));
    }
    let log_path = log.unwrap_or_else(logfile::default_path);
    let log_file = logfile::open(&log_path)?;
    logfile::install(log_file.try_clone()?);
    let (tx, rx) = mpsc::channel();
    let hello = rec.hello();
    let source =
        crate::top::player::spawn(rec, speed, false, tx.clone()).map_err(TopError::Terminal)?;
    let result = {
        let _stderr = logfile::StderrRedirect::to(&log_file)?;
        let mut guard = terminal::TerminalGuard::enter().map_err(TopError::Terminal)?;
        let _input = event::Input::spawn(tx).map_err(TopError::Terminal)?;
        let mut app = App::new(hello, Theme::from_env());
        app.start_replay();
        run_loop(guard.terminal(), &mut app, &rx, &source, None)
    };
    drop(source);
    result
}

/// The UI loop: draws when something changed, waits for the next event or the usage tick, and
/// applies everything already queued before drawing again (a burst of keys or windows costs one
/// frame). Returns when the user quits, a signal arrives, or the source fails.
pub fn run_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    events: &Receiver<Event>,
    source: &SourceHandle,
    mut sampler: Option<&mut SelfSampler>,
) -> anyhow::Result<()>
where
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let size = terminal.size().map_err(|e| TopError::Draw(e.into()))?;
    app.apply(Action::Resize(size.width, size.height));
    // Frees the cgroup data each snapshot replaces, so the UI thread never waits on free().
    let (garbage, bin) = mpsc::channel::<rows::Garbage>();
    std::thread::Builder::new()
        .name("cgtrace-free".into())
        .spawn(move || bin.into_iter().for_each(drop))
        .map_err(TopError::Terminal)?;
    let mut next_usage = Instant::now();
    let mut dirty = true;
    loop {
        if Instant::now() >= next_usage {
            next_usage = Instant::now() + USAGE_EVERY;
            if let Some(u) = sampler.as_deref_mut().and_then(SelfSampler::sample) {
                app.apply(Action::Usage(u));
                dirty = true;
            }
        }
        if dirty {
            let t0 = Instant::now();
            terminal
                .draw(|f| render::draw(f, app))
                .map_err(|e| TopError::Draw(e.into()))?;
            let took = t0.elapsed();
            let _ = garbage.send(app.take_garbage());
            if took > SLOW_FRAME {
                log::warn!("slow frame: {took:?} for {} rows", app.rows.len());
            }
            dirty = false;
        }
        let wait = if sampler.is_some() {
            next_usage.saturating_duration_since(Instant::now())
        } else {
            USAGE_EVERY
        };
        let first = match events.recv_timeout(wait) {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        for ev in std::iter::once(first).chain(events.try_iter()) {
            let action = match ev {
                Event::Key(k) => match keys::action(&app.mode, k) {
                    Some(a) => a,
                    None => continue,
                },
                Event::Resize(w, h) => Action::Resize(w, h),
                Event::Window(w) => Action::Window(w),
                Event::Player(p) => Action::Player(p),
                Event::SourceEnded(Some(e)) => return Err(TopError::Source(e).into()),
                Event::SourceEnded(None) => Action::SourceEnded(None),
                Event::Signal(name) => {
                    log::info!("{name}: quitting");
                    return Ok(());
                }
            };
            dirty = true;
            match app.apply(action) {
                Some(Effect::Quit) => return Ok(()),
                Some(Effect::SetInterval(d)) => source.send(Control::SetInterval(d)),
                Some(Effect::Player(c)) => source.send(Control::Player(c)),
                None => {}
            }
        }
    }
}
