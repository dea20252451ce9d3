//! `cargo xtask bench render`: `cgtrace/benches/render.rs` (a snapshot of 10 000 cgroups plus a
//! frame, flat and tree) run interleaved with another build's bench binary, so that a change is
//! measured against what came before in one run (this VM's times move by a third between runs).
//!
//! Every run keeps a copy of the bench binary as `target/bench/render-<commit>`: the next
//! change passes it as `--baseline`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, ensure};
use clap::Args;

use super::median;
use crate::workspace;

#[derive(Args)]
pub(super) struct RenderArgs {
    /// Another build's render bench binary (e.g. `target/bench/render-<commit>` kept by an
    /// earlier run), run in turn with this one.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Runs of each binary (each one the median of 30 snapshots).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
}

/// One run's medians, in ms of thread CPU time.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Times {
    flat: f64,
    tree: f64,
}

pub(super) fn run(args: RenderArgs) -> Result<()> {
    let root = workspace::root();
    workspace::cargo(&[
        "bench", "--locked", "-p", "cgtrace", "--bench", "render", "--no-run",
    ])?;
    let current = newest_bench(&root.join("target/release/deps"))?;
    let kept = root.join(format!("target/bench/render-{}", workspace::commit(&root)));
    std::fs::create_dir_all(root.join("target/bench"))?;
    std::fs::copy(&current, &kept).with_context(|| format!("copying to {}", kept.display()))?;
    let mut bins = vec![("this build", current)];
    if let Some(b) = args.baseline {
        ensure!(b.is_file(), "--baseline {}: no such file", b.display());
        bins.push(("baseline", b));
    }
    let mut times: Vec<Vec<Times>> = vec![Vec::new(); bins.len()];
    for round in 1..=args.runs {
        for (i, (name, bin)) in bins.iter().enumerate() {
            let t = run_once(bin)?;
            eprintln!(
                "run {round}/{} {name:<10} flat {:.2} ms  tree {:.2} ms",
                args.runs, t.flat, t.tree
            );
            times[i].push(t);
        }
    }
    println!("| build | runs | flat: median (min) | tree: median (min) |\n|---|---|---|---|");
    for ((name, _), t) in bins.iter().zip(&times) {
        let flat: Vec<f64> = t.iter().map(|t| t.flat).collect();
        let tree: Vec<f64> = t.iter().map(|t| t.tree).collect();
        println!(
            "| {name} | {} | {:.2} ms ({:.2}) | {:.2} ms ({:.2}) |",
            t.len(),
            median(&flat).unwrap_or(f64::NAN),
            min(&flat),
            median(&tree).unwrap_or(f64::NAN),
            min(&tree)
        );
    }
    println!("this build's bench binary kept as {}", kept.display());
    Ok(())
}

fn newest_bench(deps: &Path) -> Result<PathBuf> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(deps)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("render-") && !n.contains('.'))
        })
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .context("no render bench binary under target/release/deps")
}

fn run_once(bin: &Path) -> Result<Times> {
    let out = Command::new(bin)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    ensure!(out.status.success(), "{} failed", bin.display());
    parse(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("{}: no snapshot + frame lines", bin.display()))
}

/// The thread CPU column (the last `ms` figure) of the two `snapshot + frame` lines.
fn parse(text: &str) -> Option<Times> {
    let cpu = |what: &str| {
        let line = text.lines().find(|l| l.contains(what))?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields
            .get(fields.len().checked_sub(2)?)?
            .parse::<f64>()
            .ok()
    };
    Some(Times {
        flat: cpu("snapshot + frame (flat)")?,
        tree: cpu("snapshot + frame (tree)")?,
    })
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_bench_output() {
        let text =
            "cgtrace top, 10000 cgroups, 200x60 terminal, median of 30 runs (wall / thread CPU):
  snapshot + frame (flat)                   5.50 ms /    5.40 ms
    snapshot only (table, flags, sort)      4.56 ms /    4.56 ms
  snapshot + frame (tree)                   6.40 ms /    6.30 ms
";
        assert_eq!(
            parse(text),
            Some(Times {
                flat: 5.4,
                tree: 6.3
            })
        );
        assert_eq!(parse("nothing"), None);
    }
}
