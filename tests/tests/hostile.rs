//! Hostile recordings: valid-looking files made to exhaust `cgtrace report`'s memory or time
//! (compression bombs, a file of overlapping chunk headers), each read by the real binary within
//! 256 MiB and 60 s, to a report or a one-line error; `whatif` on each the same. Needs no
//! privilege.
use std::{process::Command, time::Duration};

use anyhow::Result;
use cgtrace_tests::{
    hostile::{Bomb, Measured, compression_bomb, many_cgroups, measure, overlapping_headers},
    scratch::{Scratch, path_str as s},
    stream::cgtrace_bin,
};

const LIMIT: Duration = Duration::from_secs(60);
const MAX_RSS_KIB: u64 = 256 * 1024;

/// `cgtrace report FILE`, measured; checks the bounds and the shape of what it printed, and
/// returns it. `cgtrace whatif FILE` on the same file is held to the same bounds.
fn report(file: &std::path::Path) -> Result<Measured> {
    whatif(file)?;
    let m = measure(Command::new(cgtrace_bin()).args(["report", s(file)]), LIMIT)?;
    eprintln!(
        "{}: {}, peak RSS {} MiB, {:.1} s: {}",
        file.display(),
        m.status,
        m.max_rss_kib / 1024,
        m.elapsed.as_secs_f64(),
        m.stderr.trim_end()
    );
    assert!(
        m.max_rss_kib <= MAX_RSS_KIB,
        "peak RSS {} KiB",
        m.max_rss_kib
    );
    if m.status.success() {
        let out = String::from_utf8(m.stdout.clone())?;
        assert!(out.starts_with("cgtrace report: "), "{out}");
    } else {
        assert_eq!(m.status.code(), Some(1), "{}", m.status);
        assert!(m.stderr.starts_with("cgtrace: error: "), "{}", m.stderr);
        assert!(m.stderr.ends_with('\n'), "{:?}", m.stderr);
        assert_eq!(m.stderr.lines().count(), 1, "{}", m.stderr);
    }
    Ok(m)
}

/// `cgtrace whatif FILE`, measured: within the bounds, an answer or a one-line error.
fn whatif(file: &std::path::Path) -> Result<()> {
    let m = measure(Command::new(cgtrace_bin()).args(["whatif", s(file)]), LIMIT)?;
    eprintln!(
        "whatif {}: {}, peak RSS {} MiB, {:.1} s",
        file.display(),
        m.status,
        m.max_rss_kib / 1024,
        m.elapsed.as_secs_f64()
    );
    assert!(
        m.max_rss_kib <= MAX_RSS_KIB,
        "whatif: peak RSS {} KiB",
        m.max_rss_kib
    );
    if m.status.success() {
        let out = String::from_utf8(m.stdout)?;
        assert!(out.ends_with('\n'), "{out}");
    } else {
        assert_eq!(m.status.code(), Some(1), "{}", m.status);
        assert!(m.stderr.starts_with("cgtrace: error: "), "{}", m.stderr);
        assert_eq!(m.stderr.lines().count(), 1, "{}", m.stderr);
    }
    Ok(())
}

#[test]
fn compression_bombs_are_reported_or_refused_within_256_mib_and_60_s() -> Result<()> {
    let scratch = Scratch::new("bombs")?;
    for (bomb, chunks, says) in [
        // 3.7 M empty windows a chunk pair: past the windows one file may index.
        (Bomb::EmptyWindows, 40, Some("window records")),
        // 200 M four-byte events: past what the file may expand to.
        (Bomb::Events, 40, Some("expand to more than")),
        (Bomb::Windows, 40, Some("expand to more than")),
        // 650 k whole windows, just under what the file may expand to: a report.
        (Bomb::Windows, 8, None),
    ] {
        let f = scratch.file(&format!("{bomb:?}-{chunks}.cgtr"));
        let size = compression_bomb(&f, bomb, chunks)?;
        eprintln!("{bomb:?} x {chunks}: {size} bytes");
        let m = report(&f)?;
        match says {
            Some(says) => {
                assert!(!m.status.success());
                assert!(
                    m.stderr.contains(says) && m.stderr.contains("check where it came from"),
                    "{}",
                    m.stderr
                );
            }
            None => {
                assert!(m.status.success(), "{}", m.stderr);
                let out = String::from_utf8(m.stdout)?;
                let windows = out
                    .split(", ")
                    .find(|p| p.ends_with(" windows"))
                    .and_then(|p| p.trim_end_matches(" windows").parse::<u64>().ok());
                assert!(windows.is_some_and(|n| n > 500_000), "{out}");
            }
        }
    }
    Ok(())
}

#[test]
fn a_file_of_overlapping_chunk_headers_is_read_once_not_once_per_header() -> Result<()> {
    let scratch = Scratch::new("overlap")?;
    let f = scratch.file("overlap.cgtr");
    overlapping_headers(&f, 64 << 20)?;
    let m = report(&f)?;
    // Whether the whole chunk at its end is found or skipped, the 2 M headers before it are
    // counted as damaged chunks, in the report's warning or in the error.
    assert!(m.stderr.contains("damaged chunks"), "{}", m.stderr);
    Ok(())
}

#[test]
fn a_file_naming_a_new_cgroup_in_every_entry_is_reported_within_256_mib() -> Result<()> {
    let scratch = Scratch::new("cgroups")?;
    // 36 000 cgroups, each with 17 histograms and 8 victims: 0.8 GB of tallies if every one
    // were kept (the report before it had a bound: peak RSS over 1 GB).
    let f = scratch.file("cgroups.cgtr");
    let size = many_cgroups(&f, 60, 600, 16)?;
    eprintln!("{size} bytes");
    let m = report(&f)?;
    assert!(m.status.success(), "{}", m.stderr);
    let out = String::from_utf8(m.stdout)?;
    assert!(
        out.contains("note: the report's per-cgroup tallies reached their bound (96 MiB): "),
        "{out}"
    );
    assert!(out.contains(" 60 windows"), "{out}");
    Ok(())
}
