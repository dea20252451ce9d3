//! Runs `cgtrace record`, `replay`, `report` and scrapes `--prometheus` the way users do.
use std::{
    path::Path,
    process::{Command, Output, Stdio},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::stream::cgtrace_bin;

/// `cgtrace ARGS`, its exit code, stdout and stderr.
pub fn cgtrace(args: &[&str]) -> Result<(i32, String, String)> {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(cgtrace_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running cgtrace")?;
    Ok((
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    ))
}

/// Parses NDJSON.
pub fn lines(text: &str) -> Result<Vec<Value>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
        .collect()
}

/// `cgtrace replay FILE --stream ARGS`: (exit code, lines, stderr).
pub fn replay_stream(file: &Path, args: &[&str]) -> Result<(i32, Vec<Value>, String)> {
    let f = file.to_str().context("path")?;
    let mut a = vec!["replay", f, "--stream"];
    a.extend_from_slice(args);
    let (code, out, err) = cgtrace(&a)?;
    Ok((code, lines(&out)?, err))
}

/// The window lines by seq.
pub fn windows(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "window").collect()
}

/// The sum over `windows` (window lines) of the count at `pointer` (a JSON pointer:
/// `/runq/count`) in cgroup `path`'s entries; a missing count is 0.
pub fn cgroup_sum(windows: &[&Value], path: &str, pointer: &str) -> u64 {
    windows
        .iter()
        .flat_map(|w| w["cgroups"].as_array().into_iter().flatten())
        .filter(|c| c["path"] == path)
        .map(|c| c.pointer(pointer).and_then(Value::as_u64).unwrap_or(0))
        .sum()
}

/// `GET http://ADDR/metrics` with curl: (Content-Type, body).
pub fn scrape(addr: &str) -> Result<(String, String)> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-D", "-"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .context("running curl (apt-get install curl)")?;
    if !out.status.success() {
        bail!("curl: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("no HTTP header in curl's output")?;
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    Ok((ctype, body.to_string()))
}

/// A Python with the `prometheus_client` OpenMetrics parser (Debian's python3-prometheus-client
/// in /usr/bin/python3, or one from pip on PATH).
pub fn python_with_parser() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import prometheus_client.openmetrics.parser"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// [`python_with_parser`], which the suite needs: panics saying how to install it when missing.
pub fn python_parser() -> &'static str {
    let Some(python) = python_with_parser() else {
        panic!(
            "no prometheus_client parser: run scripts/setup.sh deps (python3-prometheus-client)"
        );
    };
    python
}

/// Parses an OpenMetrics exposition with `prometheus_client`'s parser (which raises on anything
/// that is not valid OpenMetrics) and returns every sample as
/// `[{"name", "labels": {…}, "value"}]`.
pub fn parse_openmetrics(python: &str, text: &str) -> Result<Vec<Value>> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    use std::io::Write as _;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "the OpenMetrics parser rejected the scrape: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub use cgtrace_common::clock::monotonic_ns;
