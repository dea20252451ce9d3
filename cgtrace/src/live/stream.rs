//! `cgtrace stream`: the headless NDJSON stream. One `hello` line, one `window` line per interval,
//! event lines (`--events`), and a closing `summary` line with since-start histograms. Stops on
//! `--duration`, SIGINT, SIGTERM or a closed stdout, and detaches everything.

use std::{
    io::{self, Write},
    time::Duration,
};

use crate::{
    family::EventLine,
    family::select::EventSelection,
    live::driver::{self, Flow, Sink, Turn},
    live::session::{Pump, SessionOptions},
    metrics::http::Exporter,
    model::ndjson::{emit_line, emit_streamed},
    model::{Hello, Window},
};

/// The NDJSON sink: hello, event lines, windows and the summary on a writer (stdout).
pub struct Ndjson<W: Write> {
    out: W,
    open: bool,
    summary: bool,
    /// A closed writer ends the run (`stream`), or only this sink (`record --stream`).
    stop_on_close: bool,
}

impl<W: Write> Ndjson<W> {
    pub fn new(out: W, summary: bool, stop_on_close: bool) -> Self {
        Self {
            out,
            open: true,
            summary,
            stop_on_close,
        }
    }

    /// Writes `line`, noting a closed writer.
    fn line(&mut self, line: &str) -> anyhow::Result<Flow> {
        if self.open && !emit_line(&mut self.out, line)? {
            self.open = false;
        }
        Ok(self.flow())
    }

    /// Writes a window straight onto the writer: no copy of its line (~1 KiB per cgroup).
    fn window(&mut self, w: &Window) -> anyhow::Result<Flow> {
        if self.open && !emit_streamed(&mut self.out, w)? {
            self.open = false;
        }
        Ok(self.flow())
    }

    fn lines(&mut self, lines: &[EventLine]) -> anyhow::Result<Flow> {
        for l in lines {
            if !self.open {
                break;
            }
            self.line(&serde_json::to_string(l)?)?;
        }
        Ok(self.flow())
    }

    fn flow(&self) -> Flow {
        if !self.open && self.stop_on_close {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl<W: Write> Sink for Ndjson<W> {
    fn start(&mut self, hello: &Hello) -> anyhow::Result<Flow> {
        self.line(&serde_json::to_string(hello)?)
    }

    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow> {
        if self.lines(t.lines)? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        match t.window {
            Some(w) => self.window(w),
            None => Ok(self.flow()),
        }
    }

    fn finish(&mut self, t: &mut Turn<'_>, summary: &str) -> anyhow::Result<()> {
        self.turn(t)?;
        if self.summary {
            self.line(summary)?;
        }
        let _ = self.out.flush();
        Ok(())
    }
}

/// The Prometheus sink: every window updates the served metrics.
impl Sink for Exporter {
    fn turn(&mut self, t: &mut Turn<'_>) -> anyhow::Result<Flow> {
        if let Some(w) = t.window {
            self.update(w);
        }
        Ok(Flow::Continue)
    }
}

/// Runs the stream until `duration` (if any), a signal, or a closed stdout. `events` chooses the
/// families whose single events are printed; `metrics` also serves or pushes the windows as
/// metrics.
pub async fn run(
    opts: SessionOptions,
    duration: Option<Duration>,
    summary: bool,
    events: EventSelection,
    metrics: crate::metrics::outputs::Outputs,
) -> anyhow::Result<()> {
    let (_stop, control) = driver::stop_on_signals(duration)?;
    let mut pump = Pump::start(&opts)?;
    pump.session.set_lines(&events);
    let mut metrics = metrics.start(&pump.session.hello.host)?;
    crate::safety::privilege::drop_after_attach("stream");
    let mut out = Ndjson::new(
        io::BufWriter::with_capacity(1 << 16, io::stdout().lock()),
        summary,
        true,
    );
    crate::live::outputs::run(pump, vec![&mut out], &mut metrics, control).await?;
    Ok(())
}
