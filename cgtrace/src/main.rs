//! The `cgtrace` command: parses the command line ([`cli`]) and runs the subcommand.

mod cli;

use std::{process::ExitCode, time::Duration};

use clap::Parser;

use cli::{Cli, Command, ReplayArgs, ReportArgs, WhatifArgs, usage_error};

use cgtrace::{
    doctor,
    live::recorder::{self, RecordOptions},
    live::serve,
    live::stream,
    record::{reader::Recording, writer::OnFull},
    replay, report, top,
};

fn block_on(f: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(f))
}

/// Opens a recording, saying on stderr what could not be read.
fn open_recording(path: &std::path::Path) -> anyhow::Result<Recording> {
    let rec = Recording::open(path)?;
    if rec.windows.is_empty() && rec.events > 0 {
        // A part rotated at --max-size between two windows: its events were flushed by size, and
        // the window that closes them went into the part after it.
        anyhow::bail!(
            "{}: holds {} events but no window (a part cut at --max-size before its window ended: the window is in the newer part, FILE or FILE.N-1); replay or report that part",
            path.display(),
            rec.events
        );
    }
    if rec.windows.is_empty() {
        anyhow::bail!(
            "{}: no readable window in the recording (it ended or was damaged before the first window was written{})",
            path.display(),
            rec.stats
                .warning()
                .map_or(String::new(), |w| format!(": {w}"))
        );
    }
    if let Some(w) = rec.stats.warning() {
        eprintln!(
            "cgtrace: warning: {}: {w}; showing the {} readable windows",
            path.display(),
            rec.windows.len()
        );
    }
    Ok(rec)
}

fn run_replay(args: ReplayArgs) -> anyhow::Result<()> {
    if !(top::player::MIN_SPEED..=top::player::MAX_SPEED).contains(&args.speed) {
        anyhow::bail!(
            "--speed {}: must be between {} and {} (see `cgtrace --help`)",
            args.speed,
            top::player::MIN_SPEED,
            top::player::MAX_SPEED
        );
    }
    let events = args.events.selection()?;
    let rec = open_recording(&args.file)?;
    if args.stream {
        replay::run_stream(&rec, &events, !args.no_summary)
    } else {
        top::replay(std::sync::Arc::new(rec), args.speed, args.log)
    }
}

/// `report --compare BEFORE AFTER`: each file read and built as for `report`, then compared.
fn compare_report(args: &ReportArgs, files: &[std::path::PathBuf]) -> anyhow::Result<String> {
    let [before, after] = files else {
        anyhow::bail!("--compare takes two recordings: BEFORE and AFTER");
    };
    let build = |which: &str, path: &std::path::Path| {
        open_recording(path)
            .map(|rec| report::build(&rec))
            .map_err(|e| anyhow::anyhow!("{which} recording: {e:#}"))
    };
    let (b, a) = (build("BEFORE", before)?, build("AFTER", after)?);
    let c = report::compare::diff(
        &before.display().to_string(),
        &b,
        &after.display().to_string(),
        &a,
    );
    Ok(if args.json {
        report::compare::render_json(&c)
    } else if args.html {
        report::compare::render_html(&c)
    } else {
        report::compare::render_text(&c)
    })
}

/// The parts of one rotated recording (FILE.2 FILE.1 FILE, in any order) read as one: each
/// opened as `report` opens a file (a part without a window is left out, said on stderr), then
/// put in the order of their first windows.
fn open_parts(files: &[std::path::PathBuf]) -> anyhow::Result<Recording> {
    if let [file] = files {
        return open_recording(file);
    }
    let mut parts = Vec::new();
    for f in files {
        let rec = Recording::open(f)?;
        if rec.windows.is_empty() {
            eprintln!(
                "cgtrace: left out {}: no readable window in it ({} events)",
                f.display(),
                rec.events
            );
            continue;
        }
        if let Some(w) = rec.stats.warning() {
            eprintln!("cgtrace: warning: {}: {w}", f.display());
        }
        parts.push((f, rec));
    }
    parts.sort_by_key(|(_, r)| r.windows.first().map_or(0, |w| w.end_unix_ms));
    let mut parts = parts.into_iter();
    let (_, mut rec) = parts
        .next()
        .ok_or_else(|| anyhow::anyhow!("none of the {} parts holds a window", files.len()))?;
    for (f, part) in parts {
        rec.append(part)
            .map_err(|e| anyhow::anyhow!("{}: {e} (report fewer parts at once)", f.display()))?;
    }
    Ok(rec)
}

fn run_report(args: &ReportArgs) -> anyhow::Result<()> {
    let out = match (&args.compare, args.files.as_slice()) {
        (Some(files), _) => compare_report(args, files)?,
        (None, files @ [_, ..]) => {
            let rec = open_parts(files)?;
            let r = report::build(&rec);
            if args.json {
                report::render_json(&r)
            } else if args.html {
                report::html::render(&rec, &r)
            } else {
                report::render_text(&r)
            }
        }
        (None, []) => anyhow::bail!("report needs a recording, or --compare BEFORE AFTER"),
    };
    match &args.output {
        Some(path) => {
            use std::io::Write as _;
            let mut f = cgtrace::safety::files::create_new(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    anyhow::anyhow!(
                        "{} already exists: choose another name for the report",
                        path.display()
                    )
                } else {
                    anyhow::anyhow!("creating {}: {e}", path.display())
                }
            })?;
            f.write_all(out.as_bytes())?;
            eprintln!("cgtrace: report written to {}", path.display());
        }
        None => {
            use std::io::Write as _;
            let mut o = std::io::stdout().lock();
            match o.write_all(out.as_bytes()).and_then(|()| o.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                r => r?,
            }
        }
    }
    Ok(())
}

/// `whatif`: a recording's (or a live trace's) throttled cgroups replayed against other settings.
fn run_whatif(args: WhatifArgs) -> anyhow::Result<()> {
    if args.cpus.iter().any(|c| c.is_nan() || *c <= 0.0) {
        anyhow::bail!("--cpus: give a number of CPUs above 0 (e.g. --cpus 2)");
    }
    let ask = cgtrace::whatif::Ask {
        cgroup: args.cgroup.clone(),
        quota: args.quota.clone(),
        period_us: args.period.clone(),
        burst_us: args.burst.clone(),
        cpus: args.cpus.clone(),
    };
    let rec = match (&args.file, args.for_secs) {
        (Some(file), _) => open_recording(file)?,
        (None, Some(secs)) => {
            let dir = std::env::temp_dir().join(format!("cgtrace-whatif-{}", std::process::id()));
            std::fs::create_dir(&dir)
                .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
            let file = dir.join("live.cgtrace");
            eprintln!("cgtrace: tracing for {secs} s");
            let opts = RecordOptions {
                output: file.clone(),
                duration: Some(Duration::from_secs(secs)),
                max_size: None,
                on_full: OnFull::Stop,
                force: false,
                min_free: None,
                stream: None,
                metrics: Default::default(),
            };
            let done = block_on(recorder::run(args.trace.session(), opts))
                .and_then(|()| open_recording(&file));
            let _ = std::fs::remove_dir_all(&dir);
            done?
        }
        (None, None) => anyhow::bail!("whatif needs a recording, or --for SECS to trace live"),
    };
    let w = cgtrace::whatif::analyse(&rec, &ask);
    let out = if args.json {
        cgtrace::whatif::render_json(&w)
    } else {
        cgtrace::whatif::render_text(&w)
    };
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    match o.write_all(out.as_bytes()).and_then(|()| o.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(anyhow::Error::from),
    }
}

fn main() -> ExitCode {
    cgtrace::selfstat::map_large_allocations();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "cgtrace: error: {} (see `cgtrace --help`)",
                usage_error(&e.to_string())
            );
            return ExitCode::from(2);
        }
    };
    cgtrace::safety::privilege::require(match &cli.command {
        Command::Stream(a) => a.trace.require_drop,
        Command::Top(a) => a.trace.require_drop,
        Command::Record(a) => a.trace.require_drop,
        Command::Serve(a) => a.trace.require_drop,
        Command::Whatif(a) => a.for_secs.is_some() && a.trace.require_drop,
        Command::Replay(_) | Command::Report(_) | Command::Doctor => false,
    });
    let result = match cli.command {
        Command::Stream(args) => args
            .events
            .selection()
            .map_err(anyhow::Error::from)
            .and_then(|events| {
                block_on(stream::run(
                    args.trace.session(),
                    args.duration.map(Duration::from_secs),
                    !args.no_summary,
                    events,
                    args.prometheus.get(),
                ))
            }),
        Command::Top(args) => top::run(args.trace.session(), args.log),
        Command::Record(args) => args
            .events
            .selection()
            .map_err(anyhow::Error::from)
            .and_then(|events| {
                let opts = RecordOptions {
                    output: args.output,
                    duration: args.duration.map(Duration::from_secs),
                    max_size: Some(args.max_size),
                    on_full: if args.rotate {
                        OnFull::Rotate { keep: args.keep }
                    } else {
                        OnFull::Stop
                    },
                    force: args.force,
                    min_free: args.min_free,
                    stream: args.stream.then_some(events),
                    metrics: args.prometheus.get(),
                };
                block_on(recorder::run(args.trace.session(), opts))
            }),
        Command::Replay(args) => run_replay(args),
        Command::Report(args) => run_report(&args),
        Command::Whatif(args) => run_whatif(args),
        Command::Serve(args) => {
            let out = args.prometheus.get();
            if out.is_empty() {
                Err(anyhow::anyhow!(
                    "serve needs --prometheus ADDR (e.g. --prometheus 127.0.0.1:9464) or --otlp URL (see `cgtrace --help`)"
                ))
            } else {
                block_on(serve::run(
                    args.trace.session(),
                    out,
                    args.duration.map(Duration::from_secs),
                ))
            }
        }
        Command::Doctor => doctor::run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cgtrace: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
