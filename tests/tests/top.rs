//! `cgtrace top` in a real terminal: tmux runs it on this host next to a crowded and a quiet
//! cgroup; the test reads the screen with `capture-pane`, types keys (sort, filter, detail, help,
//! quit) and checks that the terminal is handed back clean and the process exited 0.
//!
//! Run as root, one test at a time (`--test-threads=1`): it shares CPUs with the other tests.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail, ensure};
use cgtrace_tests::{
    can_trace,
    stream::cgtrace_bin,
    tmux::{PROMPT, Tmux},
    workload::{self, cpus},
};

const WIDTH: u16 = 120;
const HEIGHT: u16 = 40;

/// A table cell under the column titled `title` (titles are right-aligned over their cells; a
/// cell spans from the end of the previous title to the end of its own).
fn cell(screen: &str, row_contains: &str, title: &str) -> Option<String> {
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let header = lines
        .iter()
        .find(|l| l.starts_with(&['N', 'A', 'M', 'E']))?;
    let row = lines
        .iter()
        .find(|l| l.iter().collect::<String>().contains(row_contains))?;
    // Title tokens with their end positions.
    let mut tokens = Vec::new();
    let mut start = None;
    for (i, c) in header.iter().chain(std::iter::once(&' ')).enumerate() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                tokens.push((header[s..i].iter().collect::<String>(), i));
                start = None;
            }
            _ => {}
        }
    }
    let k = tokens
        .iter()
        .position(|(t, _)| t.trim_end_matches(['▲', '▼']) == title)?;
    let from = if k == 0 { 0 } else { tokens[k - 1].1 };
    let to = tokens[k].1.min(row.len());
    // Values hold no spaces: the cell is the last word before the column's end (the first data
    // column follows the left-aligned name).
    let text: String = row.get(from..to)?.iter().collect();
    Some(text.split_whitespace().last()?.to_string())
}

/// The P50 column of every row with a value, top to bottom.
fn p50_column(screen: &str) -> Vec<f64> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with("NAME"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .filter_map(|r| cell(screen, r, "P50").and_then(|c| duration_ns(&c)))
        .collect()
}

/// `6.1µs`, `2.21ms`, `1.50s` in ns; `0` and `<1µs` (anything under a microsecond) as 0.
fn duration_ns(text: &str) -> Option<f64> {
    if text == "0" || text == "<1µs" {
        return Some(0.0);
    }
    for (unit, scale) in [("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)] {
        if let Some(v) = text.strip_suffix(unit) {
            return v.parse::<f64>().ok().map(|v| v * scale);
        }
    }
    None
}

fn header_window(screen: &str) -> Option<String> {
    let line = screen.lines().nth(2)?;
    let i = line.find("window #")?;
    Some(line[i..].split_whitespace().nth(1)?.to_string())
}

#[test]
fn top_in_tmux_shows_the_crowded_cgroup_and_leaves_the_terminal_clean() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let Some(version) = Tmux::version() else {
        cgtrace_tests::skip("tmux is not installed (apt-get install tmux)");
        return Ok(());
    };
    if cpus() < 2 {
        cgtrace_tests::skip("needs 2 CPUs");
        return Ok(());
    }
    eprintln!("{version}");
    // The setup of `crowded_sleeper_waits_longer_than_quiet_sleeper`: a sleeper at the lowest
    // weight next to three spinners on CPU 1 waits milliseconds; the same sleeper alone on CPU 0
    // waits microseconds.
    let scene = workload::crowded_scene("top-")?;
    let (crowded, quiet) = (&scene.crowded, &scene.quiet);

    let log = std::env::temp_dir().join(format!("cgtrace-top-test-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let tmux = Tmux::start(WIDTH, HEIGHT)?;
    tmux.type_text(&format!(
        "{} top --interval 1000 --log {}; echo cgtrace-exit=$?",
        cgtrace_bin().display(),
        log.display()
    ))?;
    tmux.keys(&["Enter"])?;

    // Live, on the alternate screen, both rows with numbers.
    let mut screen = tmux.wait_for("both test cgroups", Duration::from_secs(30), |s| {
        [&crowded.rel, &quiet.rel]
            .iter()
            .all(|r| cell(s, r, "P50").and_then(|c| duration_ns(&c)).is_some())
    })?;
    ensure!(
        tmux.var("alternate_on")? == "1",
        "not on the alternate screen"
    );
    ensure!(screen.contains("LIVE"), "header shows LIVE:\n{screen}");

    // The crowded cgroup's row shows the higher run-queue latency, window after window.
    // Three windows (of at most eight: a burst of load on the quiet CPU can spoil one) where
    // the crowded cgroup's median wait is above the quiet one's.
    let mut seen = Vec::new();
    let idle0 = workload::cpu_idle_ticks(0);
    let t0 = Instant::now();
    let mut good = 0;
    while good < 3 {
        let w = header_window(&screen);
        let p50 = |rel: &str| cell(&screen, rel, "P50").and_then(|c| duration_ns(&c));
        let p99 = |rel: &str| cell(&screen, rel, "P99").and_then(|c| duration_ns(&c));
        let (c50, q50) = (p50(&crowded.rel), p50(&quiet.rel));
        let (c99, q99) = (p99(&crowded.rel), p99(&quiet.rel));
        eprintln!(
            "window {w:?}: crowded p50 {c50:?} p99 {c99:?} ns, quiet p50 {q50:?} p99 {q99:?} ns"
        );
        if let (Some(c50), Some(q50)) = (c50, q50)
            && c50 > q50
        {
            good += 1;
        }
        seen.push(w.clone());
        if seen.len() >= 8 && good < 3 {
            let idle = workload::cpu_idle_ticks(0).saturating_sub(idle0) as f64
                / (t0.elapsed().as_secs_f64() * workload::clock_ticks() as f64);
            bail!(
                "crowded p50 above quiet p50 in only {good} of {} windows (CPU 0 was idle {:.0} % \
                 of the time: something else ran on the quiet CPU?); last screen:\n{screen}",
                seen.len(),
                idle * 100.0
            );
        }
        screen = tmux.wait_for("the next window", Duration::from_secs(10), |s| {
            header_window(s) != w
        })?;
    }

    // Sort: two columns right is P50, largest first; reversed, smallest first; then back.
    let sorted = |s: &str, descending: bool| {
        let v = p50_column(s);
        v.len() >= 2
            && v.windows(2).all(|w| {
                if descending {
                    w[0] >= w[1]
                } else {
                    w[0] <= w[1]
                }
            })
    };
    tmux.type_text(">>")?;
    tmux.wait_for("rows by P50, descending", Duration::from_secs(5), |s| {
        s.contains("sort P50▼") && sorted(s, true)
    })?;
    tmux.type_text("r")?;
    tmux.wait_for("rows by P50, ascending", Duration::from_secs(5), |s| {
        s.contains("sort P50▲") && sorted(s, false)
    })?;
    tmux.type_text("<<")?;
    tmux.wait_for("sort by WAIT/s", Duration::from_secs(5), |s| {
        s.contains("sort WAIT/s▼")
    })?;

    // Filter: only the quiet cgroup, then only the crowded one.
    tmux.type_text("/top-quiet")?;
    tmux.keys(&["Enter"])?;
    tmux.wait_for("the quiet cgroup alone", Duration::from_secs(5), |s| {
        s.contains(&quiet.rel) && !s.contains(&crowded.rel) && s.contains("substring \"top-quiet\"")
    })?;
    tmux.type_text("/")?;
    tmux.keys(&["C-u"])?;
    tmux.type_text("top-crowded")?;
    tmux.keys(&["Enter"])?;
    tmux.wait_for("the crowded cgroup alone", Duration::from_secs(5), |s| {
        s.contains(&crowded.rel) && !s.contains(&quiet.rel)
    })?;

    // Detail pane of the crowded cgroup: its diagnosis (with the change it asks for), its waits
    // by kind, and below them (scrolled into view with J where the pane is short) the histogram.
    tmux.keys(&["Enter"])?;
    let s = tmux.wait_for("the detail pane", Duration::from_secs(5), |s| {
        s.contains("Run-queue latency") && s.contains("wakeup")
    })?;
    ensure!(
        s.matches(crowded.rel.as_str()).count() >= 2,
        "detail pane names the cgroup:\n{s}"
    );
    let (mut s, mut down) = (s, 0);
    while !s.contains("usecs") && down < 30 {
        tmux.keys(&["J"])?;
        down += 1;
        std::thread::sleep(Duration::from_millis(100));
        s = tmux.screen()?;
    }
    ensure!(s.contains("usecs"), "the histogram, scrolled to:\n{s}");
    for _ in 0..down {
        tmux.keys(&["K"])?;
    }
    tmux.wait_for("the pane scrolled back", Duration::from_secs(5), |s| {
        s.contains("Run-queue latency")
    })?;

    // Help overlay, closed by Esc (which then closes the detail pane, and quits only after).
    tmux.type_text("?")?;
    tmux.wait_for("the help overlay", Duration::from_secs(5), |s| {
        s.contains("any key closes") && s.contains("q Ctrl-C F10")
    })?;
    tmux.keys(&["Escape"])?;
    tmux.wait_for("the help to close", Duration::from_secs(5), |s| {
        !s.contains("any key closes") && s.contains("Run-queue latency")
    })?;

    // Quit: the shell is back, on the normal screen, with a visible cursor and a sane tty.
    tmux.type_text("q")?;
    // The typed command itself contains `cgtrace-exit=$?`: wait for the echoed number.
    let s = tmux.wait_for("cgtrace to exit", Duration::from_secs(20), |s| {
        s.match_indices("cgtrace-exit=")
            .any(|(i, m)| s[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })?;
    ensure!(s.contains("cgtrace-exit=0"), "exit status:\n{s}");
    ensure!(tmux.var("alternate_on")? == "0", "alternate screen left on");
    ensure!(tmux.var("cursor_flag")? == "1", "cursor left hidden");
    for leftover in ["NAME", "WAIT/s", "LIVE", "Run-queue latency"] {
        ensure!(
            !s.contains(leftover),
            "{leftover:?} left on the screen:\n{s}"
        );
    }
    tmux.type_text("stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '; echo stty-done")?;
    tmux.keys(&["Enter"])?;
    let s = tmux.wait_for("stty", Duration::from_secs(5), |s| {
        s.lines()
            .any(|l| l.ends_with("stty-done") && !l.contains("grep"))
    })?;
    let modes = s
        .lines()
        .find(|l| l.ends_with("stty-done") && !l.contains("grep"))
        .unwrap_or_default();
    ensure!(
        modes.split_whitespace().any(|m| m == "icanon")
            && modes.split_whitespace().any(|m| m == "echo"),
        "terminal left in raw mode: {modes:?}"
    );
    ensure!(
        s.lines()
            .rfind(|l| !l.trim().is_empty())
            .is_some_and(|l| l.starts_with(PROMPT.trim_end())),
        "no shell prompt at the end:\n{s}"
    );

    // Logs went to the file, not the screen.
    let logged = std::fs::read_to_string(&log).context("reading the log file")?;
    ensure!(
        logged.contains("tracing started") && logged.contains("cgtrace top stopped"),
        "log file: {logged}"
    );
    let _ = std::fs::remove_file(&log);
    eprintln!("windows seen: {seen:?}");
    Ok(())
}

#[test]
fn top_refuses_without_a_terminal() -> Result<()> {
    let out = Command::new(cgtrace_bin())
        .arg("top")
        .stdin(std::process::Stdio::null())
        .output()
        .context("running cgtrace top")?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "exit status {:?}", out.status);
    ensure!(
        err.contains("needs a terminal") && err.lines().count() == 1,
        "stderr: {err}"
    );
    ensure!(out.stdout.is_empty(), "nothing on stdout");
    Ok(())
}

#[test]
fn cell_reads_right_aligned_columns() {
    let screen = "\
 LIVE  host
x
sort WAIT/s▼ · flat · interval 1s · window #7 12:00:00Z (1s)
NAME                 WAIT/s▼   N/s    P50    P99
/a                     1.2ms   900 2.21ms  9.9ms
··/b/c                  <1µs     3  6.1µs   70µs
";
    assert_eq!(cell(screen, "/a", "P50").as_deref(), Some("2.21ms"));
    assert_eq!(cell(screen, "/b/c", "P99").as_deref(), Some("70µs"));
    assert_eq!(cell(screen, "/b/c", "WAIT/s").as_deref(), Some("<1µs"));
    assert_eq!(duration_ns("<1µs"), Some(0.0));
    assert_eq!(duration_ns("6.1µs"), Some(6100.0));
    assert_eq!(duration_ns("1.50s"), Some(1.5e9));
    assert_eq!(header_window(screen).as_deref(), Some("#7"));
    assert_eq!(p50_column(screen), [2_210_000.0, 6100.0]);
}

/// A terminal that goes away (the tmux server killed: SIGHUP, then a dead tty) ends the view:
/// it used to stop drawing but spin at full CPU in the input thread, never exiting.
#[test]
fn top_exits_when_its_terminal_goes_away() -> Result<()> {
    if !cgtrace_tests::can_trace() {
        return Ok(());
    }
    if Tmux::version().is_none() {
        cgtrace_tests::skip("tmux is not installed (apt-get install tmux)");
        return Ok(());
    }
    let log = std::env::temp_dir().join(format!("cgtrace-top-hup-{}.log", std::process::id()));
    let tmux = Tmux::start(WIDTH, HEIGHT)?;
    tmux.type_text(&format!(
        "{} top --interval 500 --log {}",
        cgtrace_tests::stream::cgtrace_bin().display(),
        log.display()
    ))?;
    tmux.keys(&["Enter"])?;
    tmux.wait_for("the view", Duration::from_secs(30), |s| {
        s.contains("cgtrace")
    })?;
    let pids = String::from_utf8(
        Command::new("pgrep")
            .args(["-f", &format!("top --interval 500 --log {}", log.display())])
            .output()?
            .stdout,
    )?;
    let pid: i32 = pids
        .lines()
        .next()
        .context("cgtrace top's pid")?
        .trim()
        .parse()?;
    // Least privilege: once attached (the view shows a window), no thread of it holds
    // CAP_SYS_ADMIN (the tracing thread and the view thread dropped theirs; later threads
    // inherited the reduced sets).
    tmux.wait_for("a window in the view", Duration::from_secs(30), |s| {
        s.contains("window #")
    })?;
    let mut kept = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let t = t?.path();
        let status = std::fs::read_to_string(t.join("status"))?;
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .context("CapEff")?;
        let eff = u64::from_str_radix(eff.trim(), 16)?;
        if eff & (1 << 21) != 0 {
            kept.push(std::fs::read_to_string(t.join("comm"))?.trim().to_string());
        }
    }
    ensure!(
        kept.is_empty(),
        "threads of cgtrace top kept CAP_SYS_ADMIN: {kept:?}"
    );
    drop(tmux); // kill-server: the pane's processes get SIGHUP and lose their tty
    let deadline = Instant::now() + Duration::from_secs(5);
    // SAFETY: signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        ensure!(
            Instant::now() < deadline,
            "cgtrace top (pid {pid}) still running 5 s after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_file(&log);
    Ok(())
}
