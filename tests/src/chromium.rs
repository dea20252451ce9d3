//! Debian's headless Chromium, for the HTML report's tests: the DOM it rendered, and a
//! screenshot.
use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, Result};

fn chromium() -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ]);
    c
}

/// The page's DOM after Chromium rendered it.
pub fn dom(html: &Path) -> Result<String> {
    // A new empty profile next to the page (removed with the scratch directory).
    let profile = html.with_extension("profile-dom");
    let out = chromium()
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", html.display()))
        .stderr(Stdio::null())
        .output()
        .context("running chromium (Debian's chromium package)")?;
    anyhow::ensure!(out.status.success(), "chromium failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A PNG of the page, 1100 px wide.
pub fn screenshot(html: &Path, png: &Path) -> Result<()> {
    let profile = png.with_extension("profile-shot");
    let status = chromium()
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--window-size=1100,2400")
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "chromium screenshot failed: {status}");
    Ok(())
}
