//! The raw numbers, as JSON: the plan, every run and the summary, with the machine they ran on.

use std::{
    fs, thread,
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use serde::Serialize;

use super::{Run, plan::Plan, summary::Summary};

#[derive(Serialize)]
struct Report<'a> {
    unix_time: u64,
    kernel: String,
    cpus: usize,
    pinned: bool,
    plan: &'a Plan,
    runs: &'a [Run],
    summary: &'a [Summary],
}

pub(super) fn write_report(plan: &Plan, runs: &[Run], summary: &[Summary]) -> Result<()> {
    let report = Report {
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        cpus: thread::available_parallelism().map_or(0, |n| n.get()),
        pinned: false,
        plan,
        runs,
        summary,
    };
    if let Some(dir) = plan.out.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(&plan.out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", plan.out.display()))?;
    eprintln!("raw numbers: {}", plan.out.display());
    Ok(())
}
