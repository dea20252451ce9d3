//! Golden files: what `cgtrace replay FILE --stream --events`, `cgtrace report FILE --json` and
//! `cgtrace report FILE` print for the committed recordings in `tests/golden/*.cgtrace`, byte for
//! byte. They pin the offline outputs while the code behind them changes; a change that is meant
//! to alter them rewrites them with `CGTRACE_BLESS=1 cargo test --test golden` and says why in its
//! commit.

use std::{path::Path, process::Command};

fn run(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_cgtrace"))
        .args(args)
        .output()
        .expect("running cgtrace");
    assert!(
        out.status.success(),
        "cgtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn check(golden: &Path, got: &[u8]) {
    if std::env::var_os("CGTRACE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(golden, got).expect("writing the golden file");
        return;
    }
    let want = std::fs::read(golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (bless with CGTRACE_BLESS=1 cargo test --test golden)",
            golden.display()
        )
    });
    if want != got {
        // The first differing byte, with some context (report --json is one long line).
        let at = want
            .iter()
            .zip(got)
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(got.len()));
        let around = |b: &[u8]| {
            let (lo, hi) = (at.saturating_sub(120), (at + 120).min(b.len()));
            String::from_utf8_lossy(&b[lo.min(hi)..hi]).into_owned()
        };
        panic!(
            "{} differs at byte {at}:\nwant: …{}…\ngot:  …{}…",
            golden.display(),
            around(&want),
            around(got)
        );
    }
}

#[test]
fn offline_outputs_of_the_committed_recordings_are_unchanged() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut recordings: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/golden")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cgtrace"))
        .collect();
    recordings.sort();
    assert!(recordings.len() >= 3, "recordings in {}", dir.display());
    for rec in &recordings {
        let file = rec.to_str().expect("utf-8 path");
        let stem = rec.with_extension("");
        let golden = |suffix: &str| stem.with_extension(suffix);
        check(
            &golden("replay.jsonl"),
            &run(&["replay", file, "--stream", "--events"]),
        );
        check(&golden("report.json"), &run(&["report", file, "--json"]));
        check(&golden("report.txt"), &run(&["report", file]));
    }
}
