//! The node simulator as a benchmark (`cargo xtask sim node`): runs a simulated Kubernetes node
//! ([`cgtrace_tests::node`]) under `cgtrace record` (the Helm chart's flight recorder) for a
//! while, and prints once a minute and at the end what a platform team asks of a node agent:
//! the daemon's RSS and CPU, events absorbed per second, drops, and how full each kernel map
//! got (from `bpftool`, when installed).
//!
//! `node_sim [--minutes N] [--pods N] [--containers N] [--replace-per-min F] [--driver
//! cgroupfs|systemd] [-- CGTRACE_ARGS...]`
use std::{
    collections::BTreeMap,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use cgtrace_tests::{
    node::{self, Node, Spec},
    stream::Stream,
    workload::clock_ticks,
};

struct Args {
    minutes: f64,
    spec: Spec,
    extra: Vec<String>,
}

fn parse() -> Result<Args> {
    let mut a = Args {
        minutes: 60.0,
        spec: Spec::default(),
        extra: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--" {
            a.extra.extend(it.by_ref());
            break;
        }
        let mut v = || it.next().with_context(|| format!("{k} needs a value"));
        match k.as_str() {
            "--minutes" => a.minutes = v()?.parse().context("--minutes")?,
            "--pods" => a.spec.pods = v()?.parse().context("--pods")?,
            "--containers" => a.spec.containers = v()?.parse().context("--containers")?,
            "--replace-per-min" => {
                a.spec.replace_per_min = v()?.parse().context("--replace-per-min")?
            }
            "--driver" => a.spec.driver = v()?.parse().map_err(anyhow::Error::msg)?,
            other => bail!("unknown argument {other}: see the top of tests/src/bin/node_sim.rs"),
        }
    }
    Ok(a)
}

/// (name, max_entries, entries) of every hash-type map the process holds, via bpftool.
fn map_fill(pid: u32) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return out;
    };
    let mut ids: Vec<u64> = fds
        .flatten()
        .filter_map(|f| std::fs::read_to_string(f.path()).ok())
        .filter_map(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("map_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        let Ok(show) = Command::new("bpftool")
            .args(["-j", "map", "show", "id", &id.to_string()])
            .output()
        else {
            return out; // no bpftool
        };
        let Ok(info) = serde_json::from_slice::<serde_json::Value>(&show.stdout) else {
            continue;
        };
        let kind = info["type"].as_str().unwrap_or("");
        if !kind.contains("hash") {
            continue;
        }
        let name = info["name"].as_str().unwrap_or("?").to_string();
        let max = info["max_entries"].as_u64().unwrap_or(0);
        let dump = Command::new("bpftool")
            .args(["-j", "map", "dump", "id", &id.to_string()])
            .output();
        let n = dump
            .ok()
            .and_then(|d| serde_json::from_slice::<serde_json::Value>(&d.stdout).ok())
            .and_then(|v| v.as_array().map(|a| a.len() as u64))
            .unwrap_or(0);
        out.push((name, max, n));
    }
    out
}

fn main() -> Result<()> {
    let args = parse()?;
    let run = Duration::from_secs_f64(args.minutes * 60.0);
    eprintln!("node_sim: {:?} for {:.0} min", args.spec, args.minutes);
    let mut node = Node::start(args.spec.clone())?;
    let dir = std::env::temp_dir().join(format!("cgtrace-node-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("node.cgtr");
    let mut cmd: Vec<String> = [
        "record",
        "-o",
        &file.display().to_string(),
        "--max-size",
        "256M",
        "--rotate",
        "--stream",
        "--reads-mode",
        "syscall",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    cmd.extend(args.extra.iter().cloned());
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let mut s = Stream::start_cmd(&refs)?;
    let daemon = s.child.id();
    let started = Instant::now();
    let ticks = clock_ticks() as f64;
    let (mut last_cpu, mut last_at) = (node::proc_usage(daemon).1, Instant::now());
    let mut next_report = Duration::from_secs(60);
    let (mut seen, mut dropped, mut windows) = (0u64, 0u64, 0u64);
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut peak: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut rss_at = BTreeMap::new();
    let (mut minute_seen, mut cpu_pct) = (0u64, Vec::new());
    println!(
        "| minute | RSS (MiB) | daemon CPU (% of a core) | events/s | drops | pods made/removed |"
    );
    println!("|---|---|---|---|---|---|");
    while started.elapsed() < run {
        let Some(v) = s.next_line(Duration::from_secs(30))? else {
            bail!("cgtrace stopped");
        };
        s.seen.clear();
        if v["type"] != "window" {
            continue;
        }
        windows += 1;
        let ev = &v["events"];
        seen += ev["seen"].as_u64().unwrap_or(0);
        minute_seen += ev["seen"].as_u64().unwrap_or(0);
        dropped += ev["dropped"].as_u64().unwrap_or(0);
        for (k, n) in ev["counters"].as_object().into_iter().flatten() {
            *counters.entry(k.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
        if started.elapsed() >= next_report {
            let minute = (next_report.as_secs() / 60) as u32;
            next_report += Duration::from_secs(60);
            let (rss, cpu) = node::proc_usage(daemon);
            let pct = (cpu - last_cpu) as f64 / ticks / last_at.elapsed().as_secs_f64() * 100.0;
            (last_cpu, last_at) = (cpu, Instant::now());
            cpu_pct.push(pct);
            rss_at.insert(minute, rss);
            for (name, max, n) in map_fill(daemon) {
                let e = peak.entry(name).or_insert((max, 0));
                e.1 = e.1.max(n);
            }
            println!(
                "| {minute} | {:.1} | {pct:.1} | {:.0} | {dropped} | {}/{} |",
                rss as f64 / 1024.0,
                minute_seen as f64 / 60.0,
                node.made.load(std::sync::atomic::Ordering::Relaxed),
                node.removed.load(std::sync::atomic::Ordering::Relaxed),
            );
            minute_seen = 0;
        }
    }
    node.stop_churn();
    let secs = started.elapsed().as_secs_f64();
    println!();
    println!(
        "{windows} windows, {:.0} scheduler events/s absorbed, {dropped} dropped, daemon CPU mean {:.1} % of a core",
        seen as f64 / secs,
        cpu_pct.iter().sum::<f64>() / cpu_pct.len().max(1) as f64
    );
    let loss: Vec<String> = counters
        .iter()
        .filter(|(k, n)| {
            (k.ends_with("_full") || k.ends_with("_lost") || *k == "undecodable") && **n > 0
        })
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!(
        "losses: {}",
        if loss.is_empty() {
            "none".to_string()
        } else {
            loss.join(", ")
        }
    );
    println!("RSS by minute (KiB): {rss_at:?}");
    if peak.is_empty() {
        println!("map fill: bpftool not found (apt-get install bpftool)");
    } else {
        println!("| map | max entries | peak entries | peak fill |");
        println!("|---|---|---|---|");
        for (name, (max, n)) in &peak {
            println!(
                "| {name} | {max} | {n} | {:.1} % |",
                *n as f64 * 100.0 / (*max).max(1) as f64
            );
        }
    }
    let errors = node.errors();
    if !errors.is_empty() {
        println!(
            "simulator errors ({}): {:?}",
            errors.len(),
            &errors[..errors.len().min(5)]
        );
    }
    drop(s);
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
