//! Booting a guest under QEMU TCG and reading its serial console: markers, timeouts, the boot retry.

use super::*;

/// What one boot produced.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) lines: Vec<String>,
    /// Exit code of the guest script, from the `CGTRACE-VM-EXIT` line.
    pub(super) exit_code: Option<i32>,
    /// `uname -r` of the guest, from the `CGTRACE-VM-BOOTED` line.
    pub(super) uname: Option<String>,
    pub(super) booted_after: Option<Duration>,
    pub(super) elapsed: Duration,
    pub(super) timed_out: bool,
}

impl Outcome {
    pub(super) fn passed(&self) -> bool {
        self.exit_code == Some(0)
    }

    pub(super) fn summary(&self) -> String {
        let boot = self
            .booted_after
            .map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64()));
        let exit = self.exit_code.map_or("none".into(), |c| c.to_string());
        let timeout = if self.timed_out { ", TIMED OUT" } else { "" };
        format!(
            "init after {boot}, total {:.1}s, guest exit {exit}{timeout}",
            self.elapsed.as_secs_f64()
        )
    }
}

/// Builds the initramfs, boots `kernel` and streams its console to stdout and
/// `logs/<label>.log`.
pub(super) fn boot(
    cache: &Path,
    spec: &'static KernelSpec,
    label: &str,
    bins: &[GuestBin],
    scenario: &[u8],
    opts: &BootOpts,
) -> Result<Outcome> {
    let kernel = ensure_kernel(cache, spec)?;
    let runs = cache.join("runs");
    fs::create_dir_all(&runs)?;
    fs::create_dir_all(cache.join("logs"))?;
    let initrd = runs.join(format!("{label}-{}.cpio", std::process::id()));
    let log = cache.join("logs").join(format!("{label}.log"));
    build_initramfs(&initrd, bins, scenario)?;
    // Under TCG a guest kernel occasionally locks up (soft lockups, RCU stalls) before the
    // scenario gives a verdict, or dies while booting, or of an int3 oops in text patching (seen
    // on 6.12, twice in a row once: CI failed on 6.12 throttle/tgwalk); that says nothing about
    // cgtrace, so such a boot is tried up to `BOOT_ATTEMPTS` times, each earlier attempt's console
    // kept as `<label>.attempt<N>.log`. A guest that dies after /init started of anything else is
    // never retried: that could be cgtrace.
    let mut attempt = 1;
    let result = loop {
        let child = qemu_command(&kernel.vmlinuz, &initrd, opts)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting qemu-system-x86_64 (apt-get install qemu-system-x86)")?;
        let outcome = watch(child, &log, Duration::from_secs(opts.timeout));
        match outcome {
            Ok(o)
                if o.exit_code.is_none()
                    && (o.timed_out
                        || o.booted_after.is_none()
                        || tcg_text_patch_oops(&o.lines))
                    && attempt < BOOT_ATTEMPTS =>
            {
                let kept = cache
                    .join("logs")
                    .join(format!("{label}.attempt{attempt}.log"));
                let _ = fs::rename(&log, &kept);
                println!(
                    "xtask: {label}: the guest {} before a verdict (TCG); booting it again \
                     (attempt {} of {BOOT_ATTEMPTS}; console kept in {})",
                    if o.booted_after.is_none() {
                        "died while booting"
                    } else if o.timed_out {
                        "hung"
                    } else {
                        "oopsed on an int3 left by text patching"
                    },
                    attempt + 1,
                    kept.display()
                );
                attempt += 1;
            }
            other => break other,
        }
    };
    let _ = fs::remove_file(&initrd);
    println!("serial log: {}", log.display());
    result
}

/// How many times a guest that hung, died while booting or oopsed in text patching is booted.
const BOOT_ATTEMPTS: u32 = 3;

/// Whether the guest died of an `int3` oops: a vCPU ran a stale translation of a tracepoint or
/// static-key site that `text_poke_bp` was patching (seen under multi-threaded TCG on 6.12 as
/// cgtrace attached, in `__hrtimer_run_queues`). A BPF program cannot cause it, so such a boot is
/// retried like one that died while booting.
pub(super) fn tcg_text_patch_oops(lines: &[String]) -> bool {
    lines.iter().any(|l| l.contains("Oops: int3"))
}

pub(super) fn qemu_command(vmlinuz: &Path, initrd: &Path, opts: &BootOpts) -> Command {
    // `tsc=reliable`: TCG's TSC follows the host's and is the same on every vCPU, but the
    // clocksource watchdog marks it unstable (emulation jitter against the HPET). The guest then
    // keeps time on the HPET while the scheduler clock is the TSC filtered per tick, so the
    // kernel's run_delay (scheduler clock) and cgtrace's waits (CLOCK_MONOTONIC) disagree by up
    // to a tick per wait, in either direction, by how the boot calibrated the TSC (5.10 runq
    // sleeper wait/run_delay 0.962-2.29 measured without it, 0.998-1.001 with it). Real hosts
    // with a stable TSC use one clock for both.
    let mut cmdline = String::from("console=ttyS0 rdinit=/init panic=-1 quiet tsc=reliable");
    if !opts.append.is_empty() {
        cmdline = format!("{cmdline} {}", opts.append);
    }
    // Wide guests run single-threaded TCG: with one host thread per vCPU, a 64-vCPU 6.12 guest
    // could execute a stale translation of a tracepoint site that `text_poke_bp` had just
    // patched and oops on the leftover int3 (__hrtimer_run_queues, as cgtrace attached); one
    // thread invalidates translations for every vCPU at once. This host has 2 cores anyway.
    let accel = if opts.smp > 8 {
        "tcg,tb-size=256,thread=single"
    } else {
        "tcg,tb-size=256"
    };
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", accel, "-nographic", "-nic", "none", "-no-reboot"])
        .args(["-smp", &opts.smp.to_string(), "-m", &opts.mem.to_string()])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &cmdline]);
    cmd
}

/// Streams the console until QEMU exits or `timeout` passes (then QEMU is killed).
pub(super) fn watch(mut child: Child, log: &Path, timeout: Duration) -> Result<Outcome> {
    let start = Instant::now();
    let mut log = BufWriter::new(File::create(log)?);
    let lines_rx = spawn_line_reader(child.stdout.take().context("qemu stdout")?);
    let mut outcome = Outcome::default();
    loop {
        match lines_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => record_line(&mut outcome, &mut log, line, start)?,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !outcome.timed_out && start.elapsed() > timeout {
            println!("xtask: timeout after {}s, killing qemu", timeout.as_secs());
            outcome.timed_out = true;
            let _ = child.kill();
        }
    }
    child.wait()?;
    outcome.elapsed = start.elapsed();
    log.flush()?;
    Ok(outcome)
}

pub(super) fn spawn_line_reader(stdout: impl io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&buf)
                .trim_end_matches(['\r', '\n'])
                .to_string();
            if tx.send(line).is_err() {
                break;
            }
            buf.clear();
        }
    });
    rx
}

pub(super) fn record_line(
    outcome: &mut Outcome,
    log: &mut impl Write,
    line: String,
    start: Instant,
) -> Result<()> {
    let line = strip_escapes(&line);
    println!("{line}");
    writeln!(log, "{line}")?;
    if let Some(rest) = marker_value(&line, BOOTED_MARKER) {
        outcome.booted_after.get_or_insert(start.elapsed());
        outcome.uname = Some(rest.to_string());
    }
    if let Some(code) = marker_value(&line, EXIT_MARKER) {
        outcome.exit_code = exit_code(code);
    } else if outcome.exit_code.is_none()
        && outcome
            .lines
            .last()
            .is_some_and(|l| l.contains(EXIT_MARKER))
    {
        // A console message cut the line right after the marker (`CGTRACE-VM-EXIT [ 38.10]
        // sysrq: Power Off`, then `0`: failed a CI run on 6.12): the code starts this line.
        outcome.exit_code = exit_code(line.trim_start());
    }
    outcome.lines.push(line);
    Ok(())
}

/// `line` without carriage returns and terminal escape sequences (SeaBIOS resets and clears
/// the screen).
pub(super) fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\r' {
            continue;
        } else if c != '\x1b' {
            out.push(c);
        } else if chars.next() == Some('[') {
            // CSI: parameters up to a final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// The guest script's exit code from the word after the exit marker. The kernel's console
/// messages can land on the same line before the newline (`CGTRACE-VM-EXIT 0[   29.26] sysrq:
/// Power Off` failed a CI run on 6.1), so only the leading digits count.
pub(super) fn exit_code(word: &str) -> Option<i32> {
    let end = word
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(word.len());
    word[..end].parse().ok()
}

/// The word after `marker` in `line`, if the line contains it.
pub(super) fn marker_value<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(marker)?;
    rest.split_whitespace().next()
}
