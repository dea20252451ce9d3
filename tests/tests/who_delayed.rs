//! `report` opens with "who delayed whom", closed on the real kernel: a sleeper in one cgroup shares one CPU with a busy loop in another cgroup while `record --blame` runs; the
//! report's matrix (`--json`, text, and the `--html` page rendered by headless Chromium) must name
//! the busy loop's cgroup as the sleeper's top culprit, with at least 90 % of its wait, and the
//! sleeper's row must add up to its wait.
use std::fs;

use anyhow::{Context, Result};
use cgtrace_tests::{
    can_trace,
    cgroup::TestCgroup,
    chromium,
    memcg::allowed_cpus,
    record::cgtrace,
    scratch::{Scratch, path_str as s},
    workload,
};
use serde_json::Value;

#[test]
fn report_names_the_hog_that_delayed_the_sleeper() -> Result<()> {
    if !can_trace() {
        return Ok(());
    }
    let scratch = Scratch::new("who-delayed")?;
    let file = scratch.file("who.cgtr");
    let hog = TestCgroup::new("who-hog")?;
    let victim = TestCgroup::new("who-victim")?;
    // The hog at the highest weight, so that on a shared host the CPU's other load (processes in
    // the root cgroup) delays the sleeper far less than it does; the sleeper at a tenth of it,
    // so it waits several of the hog's slices at a time.
    let weigh = |cg: &TestCgroup, v2: u32| -> Result<()> {
        let (knob, value) = if cg.dir.join("cpu.shares").exists() {
            ("cpu.shares", v2 * 1024 / 100)
        } else {
            ("cpu.weight", v2)
        };
        fs::write(cg.dir.join(knob), value.to_string()).with_context(|| format!("writing {knob}"))
    };
    weigh(&hog, 10_000)?;
    weigh(&victim, 1_000)?;
    // One CPU this process may use: two spinning threads and the sleeper share it. The first:
    // other scenes pin their load to the last CPU or CPU 1.
    let cpu = *allowed_cpus().first().context("an allowed CPU")?;
    let _hog = workload::spin(2, &hog.procs_file(), Some(cpu))?;
    let _sleeper = workload::sleeper(1000, Some(&victim.procs_file()), Some(cpu), false)?;
    let (code, stream, err) = cgtrace(&[
        "record",
        "-o",
        s(&file),
        "--duration",
        "4",
        "--interval",
        "1000",
        "--blame",
        "--stream",
    ])?;
    anyhow::ensure!(code == 0, "record failed: {err}");
    // The part of the sleeper's unattributed wait that is history (a wait already open when
    // cgtrace attached: the CPU's slices begin then), from the same windows as the stream shows
    // them; the report folds it into `unattributed_us`.
    let lines: Vec<Value> = stream
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let history: f64 = lines
        .iter()
        .filter(|w| w["type"] == "window")
        .flat_map(|w| w["cgroups"].as_array().into_iter().flatten())
        .filter(|c| c["path"] == victim.rel.as_str())
        .map(|c| {
            c["runq"]["blame"]["unattributed_history_us"]
                .as_f64()
                .unwrap_or(0.0)
        })
        .sum();

    let (code, out, err) = cgtrace(&["report", s(&file), "--json"])?;
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out)?;
    let m = &r["who_delayed_whom"];
    assert_eq!(m["ledger"], true, "recorded with --blame: {m}");
    let index_of = |list: &str, rel: &str| {
        m[list]
            .as_array()
            .and_then(|a| a.iter().position(|c| c["path"].as_str() == Some(rel)))
    };
    let v = index_of("victims", &victim.rel)
        .with_context(|| format!("{} among the victims: {m}", victim.rel))?;
    let h = index_of("culprits", &hog.rel)
        .with_context(|| format!("{} among the culprits: {m}", hog.rel))?;
    let row = &m["victims"][v];
    let f = |x: &Value| x.as_f64().unwrap_or(0.0);
    let wait = f(&row["wait_us"]);
    let cells: Vec<&Value> = m["cells"]
        .as_array()
        .context("cells")?
        .iter()
        .filter(|c| c["victim"] == v)
        .collect();
    let top = cells
        .iter()
        .max_by(|a, b| f(&a["wait_us"]).total_cmp(&f(&b["wait_us"])))
        .context("a cell in the sleeper's row")?;
    let parts: f64 = row["parts"]
        .as_object()
        .context("parts")?
        .values()
        .map(f)
        .sum();
    let row_sum = cells.iter().map(|c| f(&c["wait_us"])).sum::<f64>()
        + f(&row["other_neighbours_us"])
        + parts;
    eprintln!(
        "sleeper waited {wait:.0} µs over {} s, top culprit #{} with {:.0} µs ({:.1} %); the cells are {:.1} % of the node's {:.0} µs; the sleeper's other cells {:?}, other neighbours {:.0} µs, parts {}",
        m["seconds"],
        top["culprit"],
        f(&top["wait_us"]),
        f(&top["wait_us"]) / wait * 100.0,
        f(&m["explained_share"]) * 100.0,
        f(&m["node_wait_us"]),
        cells
            .iter()
            .filter(|c| c["culprit"] != top["culprit"])
            .map(|c| (
                m["culprits"][c["culprit"].as_u64().unwrap_or(0) as usize]["path"].clone(),
                f(&c["wait_us"]).round()
            ))
            .collect::<Vec<_>>(),
        f(&row["other_neighbours_us"]),
        row["parts"]
    );
    assert!(wait > 10_000.0, "the sleeper waited: {wait} µs");
    assert_eq!(
        top["culprit"], h,
        "the hog is the sleeper's top culprit: {m}"
    );
    // #25: at most 2 % unattributed in a pinned scene. The sleeper wakes 1 000 times a second
    // and its short waits (a few µs when it preempts at once) are charged to the slice they
    // waited behind (5.18+). Read 0-0.3 % in 3 runs (it was 2-18 % while short waits went
    // uncharged and the first window's were lost), 0 in 6 more; CI on bb438ae read 2.2 % once
    // (3.4 ms of 154 ms): a wait already open when cgtrace attached has its part before the
    // attach as history, which depends on where the sleeper was at that instant. The bound is
    // on the rest.
    let unattributed = f(&row["parts"]["unattributed_us"]);
    eprintln!("unattributed {unattributed:.0} µs, of it history {history:.0} µs");
    assert!(
        unattributed - history <= 0.02 * wait,
        "unattributed {unattributed} of the sleeper's {wait} µs ({history} µs of it history)"
    );
    assert!(
        f(&top["wait_us"]) >= 0.9 * (wait - unattributed),
        "the hog cost the sleeper {} of its {wait} µs ({unattributed} µs unattributed)",
        top["wait_us"]
    );
    assert!(
        (row_sum - wait).abs() <= wait * 1e-9 + 1.0,
        "the row adds up: {row_sum} vs {wait} µs"
    );
    let seconds = f(&m["seconds"]);
    assert!(
        (f(&top["wait_us_per_s"]) * seconds - f(&top["wait_us"])).abs() <= 1.0,
        "per second of the {seconds} s recorded: {top}"
    );

    // The text report opens with the table, within 100 columns, the hog named in its legend.
    let (code, text, err) = cgtrace(&["report", s(&file)])?;
    assert_eq!(code, 0, "{err}");
    let section = text.split("\n## ").nth(1).context("a first section")?;
    assert!(
        section.starts_with("who delayed whom: seconds of run-queue wait"),
        "{text}"
    );
    assert!(
        section.lines().all(|l| l.chars().count() <= 100),
        "{section}"
    );
    let legend = format!("  C{:<3}{}: caused ", h + 1, hog.rel);
    assert!(section.contains(&legend), "{legend:?} in {section}");
    assert!(section.contains(&format!("  V{:<3}{}: waited ", v + 1, victim.rel)));

    // The page: the heatmap table near the top, both cgroups named, as Chromium renders it.
    let html = scratch.file("who.html");
    let (code, _, err) = cgtrace(&["report", s(&file), "--html", "-o", s(&html)])?;
    assert_eq!(code, 0, "{err}");
    let dom = chromium::dom(&html)?;
    let at = dom
        .find("<table class=\"who\">")
        .context("the matrix on the page")?;
    let table = &dom[at..at + dom[at..].find("</table>").context("its end")?];
    assert!(
        table.contains(&hog.rel) && table.contains(&victim.rel),
        "{table}"
    );
    assert!(
        table.contains("background:rgba(179,38,30,"),
        "a shaded cell: {table}"
    );
    assert!(
        dom.find("Who delayed whom") < dom.find("Diagnoses"),
        "the matrix comes before the diagnoses"
    );
    drop(fs::remove_file(&html));
    Ok(())
}
