//! A running `cgtrace stream`: attached once its `hello` and first `window` lines are in, stopped
//! with SIGINT; its stdout lines stamped on arrival, its window lines kept.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};

use cgtrace_tests::signal;

use super::windows::{Msg, Window, classify};

/// Bounds for a hung daemon only; nothing is asserted on time.
const CGTRACE_ATTACH_TIMEOUT: Duration = Duration::from_secs(60);
const CGTRACE_EXIT_TIMEOUT: Duration = Duration::from_secs(15);

/// A stdout line of `cgtrace stream`, stamped when it arrived.
struct Line {
    at: Instant,
    msg: Msg,
}

/// A running `cgtrace stream`. Killed if dropped before [`Cgtrace::stop`] ends it.
pub(super) struct Cgtrace {
    child: Child,
    lines: Receiver<Line>,
    stderr: Option<JoinHandle<String>>,
    windows: Vec<Window>,
}

impl Cgtrace {
    /// Spawns it and returns once the `hello` and the first `window` line have arrived.
    pub(super) fn start(
        bin: &Path,
        interval_ms: u64,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let mut child = Command::new(bin)
            .args(["stream", "--interval", &interval_ms.to_string()])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let lines = spawn_line_reader(child.stdout.take().context("cgtrace stdout")?);
        let stderr = child.stderr.take().map(read_all);
        let mut me = Cgtrace {
            child,
            lines,
            stderr,
            windows: Vec::new(),
        };
        me.wait_attached()?;
        Ok(me)
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_attached(&mut self) -> Result<()> {
        let deadline = Instant::now() + CGTRACE_ATTACH_TIMEOUT;
        let first = self.next_line(deadline, "its hello line")?;
        ensure!(
            first.msg == Msg::Hello,
            "cgtrace's first line is not a hello line: {:?}",
            first.msg
        );
        while self.windows.is_empty() {
            let line = self.next_line(deadline, "its first window line")?;
            self.record(line)?;
        }
        Ok(())
    }

    /// SIGINT, then every line up to EOF; the windows it printed (incl. the partial last one).
    pub(super) fn stop(mut self) -> Result<Vec<Window>> {
        signal(self.pid(), libc::SIGINT)?;
        let deadline = Instant::now() + CGTRACE_EXIT_TIMEOUT;
        loop {
            match self.lines.recv_timeout(remaining(deadline)) {
                Ok(line) => self.record(line)?,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    bail!(
                        "cgtrace did not exit within {CGTRACE_EXIT_TIMEOUT:?} of SIGINT: {}",
                        self.kill_and_stderr()
                    )
                }
            }
        }
        let status = self.child.wait()?;
        ensure!(
            status.success(),
            "cgtrace failed ({status}): {}",
            self.stderr_text()
        );
        Ok(std::mem::take(&mut self.windows))
    }

    fn next_line(&mut self, deadline: Instant, what: &str) -> Result<Line> {
        match self.lines.recv_timeout(remaining(deadline)) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait()?;
                bail!(
                    "cgtrace exited before {what} ({status}): {}",
                    self.stderr_text()
                )
            }
            Err(RecvTimeoutError::Timeout) => bail!(
                "cgtrace printed no {what} within {CGTRACE_ATTACH_TIMEOUT:?}: {}",
                self.kill_and_stderr()
            ),
        }
    }

    fn record(&mut self, line: Line) -> Result<()> {
        match line.msg {
            Msg::Window {
                seen,
                dropped,
                programs,
            } => self.windows.push(Window {
                at: line.at,
                seen,
                dropped,
                programs,
            }),
            Msg::Other => {}
            Msg::Hello => bail!("cgtrace printed a second hello line"),
            Msg::Bad(why) => bail!("cgtrace stdout: {why}"),
        }
        Ok(())
    }

    fn kill_and_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr_text()
    }

    fn stderr_text(&mut self) -> String {
        let text = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let tail: Vec<&str> = text.trim().lines().rev().take(5).collect();
        if tail.is_empty() {
            "(no stderr)".to_string()
        } else {
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        }
    }
}

impl Drop for Cgtrace {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn spawn_line_reader(stdout: impl Read + Send + 'static) -> Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let at = Instant::now();
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim();
            if !text.is_empty()
                && tx
                    .send(Line {
                        at,
                        msg: classify(text),
                    })
                    .is_err()
            {
                break;
            }
            buf.clear();
        }
    });
    rx
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}
