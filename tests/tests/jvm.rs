//! A real JVM in a cgroup with one CPU of quota: cgtrace shows its throttling, names the GC
//! threads among those that burned the quota in throttled periods, and the run-queue split shows
//! the app waiting on its own quota more than on other tasks.
//!
//! The JVM runs with `-XX:-UseContainerSupport`: sized for the host (2 CPUs here: G1 with two
//! parallel GC threads), as JVMs before container support, or with `ActiveProcessorCount` set to
//! the host, are in the field. Java 17's own container support would see one CPU and pick the
//! serial collector.
use std::collections::BTreeMap;

use cgtrace_tests::{
    can_trace,
    cgroup::TestCgroup,
    stream::{Stream, merge},
    workload::{GcBurn, Task},
};

#[test]
fn jvm_gc_threads_burn_the_quota() -> anyhow::Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let gcburn = GcBurn::compile("jvm")?;
    let cg = TestCgroup::new("jvm")?;
    cg.set_quota(100_000, 100_000)?;
    let mut s = Stream::start(&["--interval", "1000"])?;
    s.windows(1)?;
    let java = gcburn.command(&[], 2, 6);
    let mut task = Task::spawn(java, Some(&cg.procs_file()), None, false)?;
    let status = task.child.wait()?;
    assert!(status.success(), "the JVM ran to completion: {status}");
    s.windows(1)?;
    let (_, lines) = s.stop(2)?;

    let mut throttled = 0;
    let mut burn: BTreeMap<String, f64> = BTreeMap::new();
    for w in lines.iter().filter(|l| l["type"] == "window") {
        for c in w["cgroups"].as_array().into_iter().flatten() {
            if c["path"] != cg.rel.as_str() || c["throttle"].is_null() {
                continue;
            }
            throttled += c["throttle"]["nr_throttled"].as_u64().unwrap_or(0);
            for p in c["throttle"]["periods"].as_array().into_iter().flatten() {
                for t in p["top"].as_array().into_iter().flatten() {
                    let comm = t["comm"].as_str().unwrap_or_default().to_string();
                    *burn.entry(comm).or_insert(0.0) += t["cpu_ms"].as_f64().unwrap_or(0.0);
                }
            }
        }
    }
    eprintln!("throttled periods: {throttled}; CPU ms in throttled periods by thread: {burn:?}");
    assert!(throttled > 5, "the JVM was throttled");
    let gc: f64 = burn
        .iter()
        .filter(|(c, _)| c.starts_with("GC Thread") || c.starts_with("G1 Conc"))
        .map(|(_, ms)| ms)
        .sum();
    let app: f64 = burn
        .iter()
        .filter(|(c, _)| c.starts_with("app-"))
        .map(|(_, ms)| ms)
        .sum();
    assert!(
        gc > 0.0 && app > 0.0,
        "GC and app threads among the burners: {burn:?}"
    );
    let share = gc / burn.values().sum::<f64>();
    eprintln!(
        "GC threads burned {:.0} % of the CPU of throttled periods",
        share * 100.0
    );
    assert!(
        share > 0.10,
        "GC threads are a real part of the burn: {share:.2}"
    );
    let (thr, pre, wak) = (
        merge(&lines, &cg.rel, Some("throttled")).lower_bound_sum_ns(),
        merge(&lines, &cg.rel, Some("preempt")).lower_bound_sum_ns(),
        merge(&lines, &cg.rel, Some("wakeup")).lower_bound_sum_ns(),
    );
    eprintln!("wait ns: throttled {thr:.0}, preempt {pre:.0}, wakeup {wak:.0}");
    assert!(
        thr > pre + wak,
        "throttled waits dominate the run-queue wait"
    );
    Ok(())
}
