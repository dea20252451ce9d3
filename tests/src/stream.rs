//! Runs the real `cgtrace stream` and reads its NDJSON the way a pipeline would.
use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The release binary built by `scripts/setup.sh` (or `CGTRACE_BIN`).
pub fn cgtrace_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CGTRACE_BIN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for profile in ["release", "debug"] {
        let p = root.join("target").join(profile).join("cgtrace");
        if p.exists() {
            return p;
        }
    }
    root.join("target/release/cgtrace")
}

/// A running `cgtrace stream`, its lines arriving on a channel.
pub struct Stream {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<Value>,
}

/// The lines a child prints on stdout, read on a thread of their own.
pub fn line_channel(child: &mut Child) -> Result<mpsc::Receiver<String>> {
    let out = child.stdout.take().context("stdout")?;
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(lines)
}

impl Stream {
    /// Starts `cgtrace stream ARGS` and waits for the hello line.
    pub fn start(args: &[&str]) -> Result<Self> {
        Self::start_cmd(&[&["stream"], args].concat())
    }

    /// Starts `cgtrace stream ARGS` with `var=value` in its environment (a daemon switch such as
    /// `CGTRACE_RUNQ_WAITS=own`) and waits for the hello line.
    pub fn start_with_env(var: &str, value: &str, args: &[&str]) -> Result<Self> {
        Self::spawn(&[&["stream"], args].concat(), Some((var, value)))
    }

    /// Starts `cgtrace ARGS` (a command that prints the stream: `stream`, `record --stream`) and
    /// waits for the hello line.
    pub fn start_cmd(args: &[&str]) -> Result<Self> {
        Self::spawn(args, None)
    }

    fn spawn(args: &[&str], env: Option<(&str, &str)>) -> Result<Self> {
        let mut cmd = Command::new(cgtrace_bin());
        if let Some((var, value)) = env {
            cmd.env(var, value);
        }
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting cgtrace")?;
        let lines = line_channel(&mut child)?;
        let mut s = Self {
            child,
            lines,
            seen: Vec::new(),
        };
        let hello = s
            .next_line(Duration::from_secs(30))?
            .context("no hello line")?;
        if hello["type"] != "hello" {
            bail!("first line is not hello: {hello}");
        }
        Ok(s)
    }

    /// The next line within `timeout`, parsed, or why none came.
    fn recv(&mut self, timeout: Duration) -> Result<Result<Value, mpsc::RecvTimeoutError>> {
        let l = match self.lines.recv_timeout(timeout) {
            Ok(l) => l,
            Err(e) => return Ok(Err(e)),
        };
        let v: Value = serde_json::from_str(&l).with_context(|| format!("not JSON: {l}"))?;
        self.seen.push(v.clone());
        Ok(Ok(v))
    }

    /// The next parsed line, or None when the stream ended.
    pub fn next_line(&mut self, timeout: Duration) -> Result<Option<Value>> {
        match self.recv(timeout)? {
            Ok(v) => Ok(Some(v)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Ok(None),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("no line from cgtrace within {timeout:?}")
            }
        }
    }

    /// The next parsed line if one arrives within `timeout`: `Ok(None)` when none did, an error
    /// when the stream ended (for reading two streams in turn).
    pub fn poll_line(&mut self, timeout: Duration) -> Result<Option<Value>> {
        match self.recv(timeout)? {
            Ok(v) => Ok(Some(v)),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("cgtrace stopped"),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
        }
    }

    /// Waits for `n` more window lines.
    pub fn windows(&mut self, n: usize) -> Result<Vec<Value>> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30 + 5 * n as u64);
        while got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left)? {
                Some(v) if v["type"] == "window" => got.push(v),
                Some(_) => {}
                None => bail!("stream ended after {} windows", got.len()),
            }
        }
        Ok(got)
    }

    /// Sends a signal and collects the rest of the output; returns the exit status code.
    pub fn stop(mut self, signal: i32) -> Result<(i32, Vec<Value>)> {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        while self.next_line(Duration::from_secs(30))?.is_some() {}
        let status = self.child.wait()?;
        Ok((status.code().unwrap_or(-1), std::mem::take(&mut self.seen)))
    }

    /// Waits for `n` more window lines, stops the stream with SIGINT and checks that it exited 0;
    /// returns every line it printed.
    pub fn finish(mut self, n: usize) -> Result<Vec<Value>> {
        self.windows(n)?;
        let (code, lines) = self.stop(libc::SIGINT)?;
        assert_eq!(code, 0);
        Ok(lines)
    }

    pub fn hello(&self) -> &Value {
        &self.seen[0]
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cgroup's run-queue data merged over windows: (lower_ns, count) buckets per kind.
#[derive(Default, Debug, Clone)]
pub struct Merged {
    pub count: u64,
    pub buckets: std::collections::BTreeMap<u64, u64>,
    pub max_us: f64,
}

impl Merged {
    /// The value below which fraction `q` of the waits fall, as the lower bound of its bucket (ns).
    pub fn quantile_bucket_ns(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.values().sum();
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (&lo, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return lo;
            }
        }
        0
    }

    /// The waits summed at their buckets' lower bounds (ns).
    pub fn lower_bound_sum_ns(&self) -> f64 {
        self.lower_bound_sum_below_ns(u64::MAX)
    }

    /// The same, of the buckets whose lower bound is below `limit_ns`.
    pub fn lower_bound_sum_below_ns(&self, limit_ns: u64) -> f64 {
        self.buckets
            .range(..limit_ns)
            .map(|(lo, n)| *lo as f64 * *n as f64)
            .sum::<f64>()
    }

    /// Re-bucketed to runqlat's log2 µs slots (slot 0 = 0..1 µs, slot k = 2^k..2^(k+1)-1 µs):
    /// each cgtrace bucket goes to the slot of its midpoint (a cgtrace bucket is 25 % wide, so
    /// one that straddles a slot boundary is split by where most of it lies).
    pub fn log2_us_slots(&self) -> std::collections::BTreeMap<u32, u64> {
        let mut out = std::collections::BTreeMap::new();
        for (&lo_ns, &n) in &self.buckets {
            let width = if lo_ns < 4 {
                1
            } else {
                1u64 << (63 - lo_ns.leading_zeros() - 2)
            };
            let us = (lo_ns + width / 2) / 1000;
            let slot = if us < 2 { 0 } else { 63 - us.leading_zeros() };
            *out.entry(slot).or_insert(0) += n;
        }
        out
    }

    /// The log2 µs slot holding the `q`-quantile.
    pub fn quantile_slot(&self, q: f64) -> Option<u32> {
        let slots = self.log2_us_slots();
        let total: u64 = slots.values().sum();
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        slots.into_iter().find_map(|(slot, n)| {
            seen += n;
            (seen >= rank).then_some(slot)
        })
    }
}

/// Merges the `runq` (all kinds, or one `kind`) of the cgroup at `path` across windows.
pub fn merge(windows: &[Value], path: &str, kind: Option<&str>) -> Merged {
    let mut m = Merged::default();
    for w in windows.iter().filter(|w| w["type"] == "window") {
        for cg in w["cgroups"].as_array().into_iter().flatten() {
            if cg["path"] != path {
                continue;
            }
            let h = match kind {
                Some(k) => &cg["runq"]["kinds"][k],
                None => &cg["runq"],
            };
            if h.is_null() {
                continue;
            }
            m.count += h["count"].as_u64().unwrap_or(0);
            m.max_us = m.max_us.max(h["max_us"].as_f64().unwrap_or(0.0));
            for b in h["buckets"].as_array().into_iter().flatten() {
                let lo = b[0].as_u64().unwrap_or(0);
                *m.buckets.entry(lo).or_insert(0) += b[1].as_u64().unwrap_or(0);
            }
        }
    }
    m
}

/// Sum of a counter over windows.
pub fn sum_counter(windows: &[Value], name: &str) -> u64 {
    windows
        .iter()
        .filter(|w| w["type"] == "window")
        .map(|w| w["events"]["counters"][name].as_u64().unwrap_or(0))
        .sum()
}

/// One line per window for a failure message: its seq, length, `path`'s wait and blame, and
/// every counter that moved (a loss or a slow daemon shows here).
pub fn window_trace(windows: &[Value], path: &str) -> String {
    let mut out = String::new();
    for w in windows.iter().filter(|w| w["type"] == "window") {
        let c = w["cgroups"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["path"] == path);
        let moved: Vec<String> = w["events"]["counters"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!(
            "\n  window {} ({} ms, end {}): wait {} µs, blame {}; counters {}",
            w["seq"],
            w["duration_ms"],
            w["end_unix_ms"],
            c.map_or(Value::Null, |c| c["runq"]["sum_us"].clone()),
            c.map_or(Value::Null, |c| c["runq"]["blame"].clone()),
            moved.join(" ")
        ));
    }
    out
}

/// The sum of a `runq.blame` object's parts (µs): what must add up to the cgroup's wait. The
/// parts are the ledger's own table (`cgtrace::family::runq::model::PARTS`), so a new part is
/// counted here as soon as the daemon has it; a part this kernel cannot tell is `null` (none).
pub fn blame_parts_us(b: &Value) -> f64 {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let named: f64 = b["neighbours"]
        .as_array()
        .map_or(0.0, |n| n.iter().map(|p| f(p, "wait_us")).sum());
    cgtrace::family::runq::model::PARTS
        .iter()
        .map(|p| f(b, p.key))
        .sum::<f64>()
        + named
        + f(b, "neighbours_other_us")
}
