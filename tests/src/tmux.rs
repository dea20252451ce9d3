//! A terminal for the view's tests: a private tmux server whose screen is read with
//! `capture-pane` and typed into with `send-keys`.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};

/// The shell prompt in the pane.
pub const PROMPT: &str = "cgtrace-test$ ";

/// A private tmux server (its own socket) with one session, killed on drop.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn version() -> Option<String> {
        let out = Command::new("tmux").arg("-V").output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A `width`×`height` pane running an interactive `sh` with a known prompt, no status line.
    pub fn start(width: u16, height: u16) -> Result<Self> {
        let t = Self {
            socket: format!("cgtrace-test-{}", std::process::id()),
        };
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &format!("env PS1='{PROMPT}' sh"),
        ])?;
        t.run(&["set-option", "-g", "status", "off"])?;
        t.wait_for("the shell prompt", Duration::from_secs(10), |s| {
            s.contains(PROMPT.trim_end())
        })?;
        Ok(t)
    }

    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("tmux")
            .arg("-u") // UTF-8 whatever the locale: the view draws µ, ▼, █
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .context("running tmux")?;
        ensure!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Types `text` literally.
    pub fn type_text(&self, text: &str) -> Result<()> {
        self.run(&["send-keys", "-t", "top", "-l", text]).map(drop)
    }

    /// Sends named keys (`Enter`, `Escape`, `C-u`).
    pub fn keys(&self, keys: &[&str]) -> Result<()> {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.run(&args).map(drop)
    }

    pub fn screen(&self) -> Result<String> {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// A pane format variable (`#{alternate_on}`, `#{cursor_flag}`).
    pub fn var(&self, name: &str) -> Result<String> {
        Ok(self
            .run(&[
                "display-message",
                "-p",
                "-t",
                "top",
                &format!("#{{{name}}}"),
            ])?
            .trim()
            .to_string())
    }

    /// Polls the screen until `ok` holds; the error shows the last screen.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen()?;
            if ok(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}
