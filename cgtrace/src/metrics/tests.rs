//! The exported state: series per cgroup, the cap and `other`, expiry, and the host series.

use super::*;
use crate::{
    hist::Hist,
    model::{EventCounts, RunqWindow},
};

fn window(seq: u64, end_ms: u64, cgroups: Vec<CgroupWindow>) -> Window {
    Window {
        kind: "window".into(),
        seq,
        end_unix_ms: end_ms,
        duration_ms: 1000,
        events: EventCounts {
            seen: 10,
            dropped: 1,
            counters: BTreeMap::new(),
        },
        cgroups_tracked: cgroups.len(),
        cgroups,
        ..Window::default()
    }
}

fn cgroup(id: u64, path: &str, waits_ns: &[u64]) -> CgroupWindow {
    let mut h = Hist::default();
    for &w in waits_ns {
        h.record(w);
    }
    let mut kinds = crate::model::kind_map::KindMap::default();
    kinds.insert("wakeup".to_string(), h.summary());
    CgroupWindow {
        id,
        hierarchy: "cpu".into(),
        path: Some(path.into()),
        name: Some("default/web-0/nginx".into()),
        name_kind: Some(crate::cgroup::name::NameKind::Container),
        namespace: Some("default".into()),
        pod: Some("web-0".into()),
        container: Some("nginx".into()),
        runq: RunqWindow {
            all: h.summary(),
            kinds,
            blame: None,
            run_delay_asleep_us: 0.0,
        },
        ..CgroupWindow::default()
    }
}

#[test]
fn quota_usage_reads_dying_memcgs_and_own_cost_are_series() {
    let mut c = cgroup(1, "/kubepods/pod-a/c1", &[5_000]);
    c.throttle = Some(Box::new(crate::family::throttle::model::ThrottleWindow {
        quota_cores: Some(0.5),
        usage_us: Some(400_000.0),
        nr_periods: 10,
        ..Default::default()
    }));
    let file = |fs: &str, us: f64| crate::family::reads::FileReads {
        comm: "kubelet".into(),
        pid: 1,
        file: "/sys/fs/cgroup/memory/memory.stat".into(),
        fs: fs.into(),
        target: None,
        count: 3,
        total_us: us,
        flush_us: us / 2.0,
        lock_wait_us: 0.0,
        flushed_reads: 3,
        flush_locks: 3,
        contended: 0,
        bytes: 100,
        dying_memcgs: None,
        latency: Default::default(),
    };
    c.reads = Some(vec![file("cgroup", 300.0), file("proc", 100.0)]);
    let mut w = window(1, 2000, vec![c.clone()]);
    w.dying_memcgs = Some(crate::family::reads::DyingMemcgs {
        total: 42,
        source: "proc_cgroups".into(),
    });
    let mut m = Metrics::new(MetricsOptions::default());
    m.update(&w);
    m.update(&window(2, 3000, vec![c]));
    let t = m.render();
    let l = r#"{cgroup="/kubepods/pod-a/c1",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx"}"#;
    for want in [
        format!("cgtrace_cpu_quota_cores{l} 0.5\n"),
        format!("cgtrace_cpu_usage_seconds_total{l} 0.8\n"),
        "cgtrace_read_seconds_total{cgroup=\"/kubepods/pod-a/c1\",name=\"default/web-0/nginx\",namespace=\"default\",pod=\"web-0\",container=\"nginx\",fs=\"cgroup\"} 0.0006\n".into(),
        "cgtrace_reads_total{cgroup=\"/kubepods/pod-a/c1\",name=\"default/web-0/nginx\",namespace=\"default\",pod=\"web-0\",container=\"nginx\",fs=\"proc\"} 6\n".into(),
        "cgtrace_dying_memcgs 42\n".into(),
        "cgtrace_process_cpu_seconds_total ".into(),
        "cgtrace_process_resident_memory_bytes ".into(),
    ] {
        assert!(t.contains(&want), "{want} not in\n{t}");
    }
}

#[test]
fn own_programs_are_counted_across_windows() {
    let mut m = Metrics::new(MetricsOptions::default());
    for seq in 1..=2 {
        let mut w = window(seq, seq * 1000, vec![]);
        w.self_cost = Some(crate::model::SelfCost {
            bpf_stats: true,
            programs: vec![crate::model::ProgramCost {
                name: "sched_switch".into(),
                runs: 1000,
                run_us: 350.0,
                ns_per_run: Some(350.0),
                recursion_misses: seq,
            }],
            bpf_cpu_pct: 0.035,
            daemon_cpu_pct: 1.0,
            rss_kib: 20_000,
        });
        m.update(&w);
    }
    let t = m.render();
    for want in [
        "cgtrace_bpf_runs_total{program=\"sched_switch\"} 2000\n",
        "cgtrace_bpf_run_seconds_total{program=\"sched_switch\"} 0.0007\n",
        "cgtrace_bpf_recursion_misses_total{program=\"sched_switch\"} 3\n",
    ] {
        assert!(t.contains(want), "{want} not in\n{t}");
    }
}

#[test]
fn histogram_is_cumulative_and_exact_at_powers_of_two() {
    let mut m = Metrics::new(MetricsOptions::default());
    // 500 ns and 1000 ns are below 1.024 µs; 1024 ns is in the next bound; 3 ms; 100 s overflow.
    m.update(&window(
        1,
        1000,
        vec![cgroup(
            7,
            "/a\"b",
            &[500, 1000, 1024, 3_000_000, 100_000_000_000],
        )],
    ));
    m.update(&window(2, 2000, vec![cgroup(7, "/a\"b", &[2000])]));
    let t = m.render();
    let l = r#"cgroup="/a\"b",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",kind="wakeup""#;
    for (le, n) in [
        ("0.000001024", 2),
        ("0.000002048", 4),
        ("0.000004096", 4),
        ("34.359738368", 5),
        ("+Inf", 6),
    ] {
        let want = format!("cgtrace_runq_wait_seconds_bucket{{le=\"{le}\",{l}}} {n}\n");
        assert!(t.contains(&want), "{want} not in\n{t}");
    }
    assert!(t.contains(&format!("cgtrace_runq_wait_seconds_count{{{l}}} 6\n")));
    assert!(t.contains("cgtrace_events_seen_total 20\n"));
    assert!(t.ends_with("# EOF\n"));
}

#[test]
fn run_delay_asleep_is_a_counter_only_once_it_happened() {
    let mut m = Metrics::new(MetricsOptions::default());
    m.update(&window(1, 1000, vec![cgroup(7, "/a", &[1000])]));
    assert!(
        !m.render()
            .contains("cgtrace_runq_run_delay_asleep_seconds_total{")
    );
    for seq in 2..4 {
        let mut c = cgroup(7, "/a", &[1000]);
        c.runq.run_delay_asleep_us = 300_000.0;
        m.update(&window(seq, seq * 1000, vec![c]));
    }
    let t = m.render();
    let want = r#"cgtrace_runq_run_delay_asleep_seconds_total{cgroup="/a",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx"} 0.6"#;
    assert!(t.contains(want), "{want} not in\n{t}");
}

#[test]
fn diagnoses_are_counted_per_window() {
    let mut m = Metrics::new(MetricsOptions::default());
    for seq in 1..=2 {
        let mut c = cgroup(7, "/slow", &[5000]);
        c.flags.push(crate::model::Flag {
            family: "runq".into(),
            code: "runq_long_waits".into(),
            message: String::new(),
            expected: Some(crate::model::flag::Expected {
                metric: "runq_wait_us".into(),
                change_percent: -40.0 * seq as f64,
                words: String::new(),
            }),
            ..Default::default()
        });
        m.update(&window(seq, seq * 1000, vec![c]));
    }
    let t = m.render();
    assert!(
        t.contains(r#"cgtrace_flagged_windows_total{cgroup="/slow",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",family="runq",code="runq_long_waits"} 2"#),
        "{t}"
    );
    // What the last window's change should do, by the metric it names.
    let gauge = r#"cgtrace_flag_expected_change_percent{cgroup="/slow",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",family="runq",code="runq_long_waits",metric="runq_wait_us"} -80"#;
    assert!(t.contains(gauge), "{t}");
    // A window without the flag takes it away.
    m.update(&window(3, 3000, vec![cgroup(7, "/slow", &[5000])]));
    assert!(!m.render().contains("cgtrace_flag_expected_change_percent{"));
}

#[test]
fn blame_parts_neighbours_and_caused_are_counters() {
    use crate::family::runq::model::{Blame, Caused, Party};
    let party = |id: u64, us: f64| Party {
        id,
        path: Some(format!("/n{id}")),
        name: None,
        wait_us: us,
        cpu_max: None,
    };
    let mut m = Metrics::new(MetricsOptions::default());
    // Two windows; in each the victim is delayed by 12 neighbours (5 named, 7 summed) and
    // its named neighbours differ, so that more than MAX_NEIGHBOUR_SERIES are seen.
    for seq in 1..=3u64 {
        let mut c = cgroup(7, "/slow", &[5000]);
        c.runq.blame = Some(Blame {
            throttled_own_us: 1e6,
            throttled_ancestor_us: 0.0,
            throttled_ancestors: Vec::new(),
            siblings_us: 5e5,
            neighbours: (0..5).map(|i| party(seq * 10 + i, 1e5)).collect(),
            neighbours_other_us: 2e5,
            kernel_us: 4e5,
            kernel_tasks: Vec::new(),
            idle_us: 3e5,
            // Told: steal and idle elsewhere; this kernel cannot tell interrupts.
            irq_us: None,
            steal_us: Some(2e5),
            idle_elsewhere_us: Some(0.0),
            older_others_us: 0.0,
            unattributed_us: 1e5,
            unattributed_history_us: 5e4,
        });
        let mut culprit = cgroup(8, "/noisy", &[]);
        culprit.caused = Some(Caused {
            wait_us: 2e6,
            victims: vec![party(7, 2e6)],
        });
        m.update(&window(seq, seq * 1000, vec![c, culprit]));
    }
    let t = m.render();
    // The value of the one series whose line starts with `prefix`.
    let value = |prefix: &str| -> f64 {
        let l: Vec<&str> = t.lines().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(l.len(), 1, "{prefix} in\n{t}");
        l[0].rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    let blame = r#"cgtrace_runq_wait_blame_seconds_total{cgroup="/slow",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",part="#;
    let near = |a: f64, b: f64| assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    near(value(&format!("{blame}\"throttled_own\"}}")), 3.0);
    near(value(&format!("{blame}\"siblings\"}}")), 1.5);
    // 5 named (0.1 s each) + 0.2 s summed, three times.
    near(value(&format!("{blame}\"neighbours\"}}")), 2.1);
    near(value(&format!("{blame}\"unattributed\"}}")), 0.3);
    near(value(&format!("{blame}\"kernel\"}}")), 1.2);
    near(value(&format!("{blame}\"idle\"}}")), 0.9);
    near(value(&format!("{blame}\"steal\"}}")), 0.6);
    near(value(&format!("{blame}\"idle_elsewhere\"}}")), 0.0);
    assert!(
        !t.contains("part=\"irq\""),
        "a part the kernel cannot tell has no series:\n{t}"
    );
    let by = r#"cgtrace_runq_wait_by_neighbour_seconds_total{cgroup="/slow",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",neighbour="#;
    near(value(&format!("{by}\"/n10\"}}")), 0.1);
    // 15 named neighbours seen: 10 get series, the other 5 and the summed ones are "other".
    let named = t
        .lines()
        .filter(|l| {
            l.starts_with("cgtrace_runq_wait_by_neighbour_seconds_total{")
                && l.contains("neighbour=\"/n")
        })
        .count();
    assert_eq!(named, crate::family::runq::metrics::MAX_NEIGHBOUR_SERIES);
    near(value(&format!("{by}\"other\"}}")), 1.1);
    near(
        value(r#"cgtrace_runq_delay_caused_seconds_total{cgroup="/noisy","#),
        6.0,
    );
}

/// A live cgroup's series naming a neighbour that was removed go after `--series-ttl`, as the
/// neighbour's own series do (found by record.rs's churn test: a removed churn cgroup named as
/// the root cgroup's neighbour stayed in every scrape).
#[test]
fn a_neighbour_not_charged_for_the_ttl_loses_its_series() {
    use crate::family::runq::model::{Blame, Party};
    let mut m = Metrics::new(MetricsOptions {
        ttl: Duration::from_secs(10),
        ..MetricsOptions::default()
    });
    let charged = |seq: u64, by: &[&str]| {
        let mut c = cgroup(7, "/slow", &[5000]);
        c.runq.blame = Some(Blame {
            neighbours: by
                .iter()
                .enumerate()
                .map(|(i, p)| Party {
                    id: 100 + i as u64,
                    path: Some((*p).into()),
                    name: None,
                    wait_us: 1e5,
                    cpu_max: None,
                })
                .collect(),
            ..Blame::default()
        });
        window(seq, seq * 1000, vec![c])
    };
    let series = |m: &Metrics, n: &str| {
        m.render().lines().any(|l| {
            l.starts_with("cgtrace_runq_wait_by_neighbour_seconds_total{")
                && l.contains(&format!("neighbour=\"{n}\""))
        })
    };
    m.update(&charged(1, &["/gone", "/stays"]));
    assert!(series(&m, "/gone") && series(&m, "/stays"));
    // /gone is removed; /stays goes on delaying /slow; 10 s later only /stays is named.
    for seq in 2..=10 {
        m.update(&charged(seq, &["/stays"]));
    }
    assert!(series(&m, "/gone"), "9 s after its last charge");
    m.update(&charged(11, &["/stays"]));
    assert!(!series(&m, "/gone"), "{}", m.render());
    assert!(series(&m, "/stays"));
    assert_eq!(m.cgroups(), 1);
}

#[test]
fn caps_series_folds_the_rest_and_expires_idle_cgroups() {
    let mut m = Metrics::new(MetricsOptions {
        max_series: 2,
        ttl: Duration::from_secs(10),
        ..MetricsOptions::default()
    });
    m.update(&window(
        1,
        1000,
        (1..=5)
            .map(|i| cgroup(i, &format!("/c{i}"), &[5000]))
            .collect(),
    ));
    assert_eq!(m.cgroups(), 2);
    let t = m.render();
    assert!(
        t.contains(r#"cgtrace_runq_wait_seconds_count{cgroup="other",name="other","#),
        "{t}"
    );
    assert!(
        t.contains(r#"cgroup="other",name="other",kind="wakeup"} 3"#),
        "{t}"
    );
    assert!(t.contains("cgtrace_series_folded_total 3\n"));
    // 20 s later only cgroup 9 is active: the others expire, 9 gets its own series.
    m.update(&window(2, 21_000, vec![cgroup(9, "/c9", &[5000])]));
    assert_eq!(m.cgroups(), 1);
    let t = m.render();
    assert!(
        t.contains(r#"cgroup="/c9""#) && !t.contains(r#"cgroup="/c1""#),
        "{t}"
    );
    assert!(t.contains("cgtrace_series_expired_total 2\n"));
    // /c9 removed and made again (another id): the same series goes on.
    m.update(&window(3, 22_000, vec![cgroup(10, "/c9", &[5000])]));
    let t = m.render();
    assert_eq!(
        t.matches(r#"cgtrace_runq_wait_seconds_count{cgroup="/c9""#)
            .count(),
        1
    );
    assert!(
        t.contains(
            r#"cgroup="/c9",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",kind="wakeup"} 2"#
        ),
        "{t}"
    );
}

/// The "who delays whom" pairs in the exposition: the top `max_pairs` named by victim labels and
/// culprit (a tenant's path escaped), the rest in `other`, all adding up to the neighbours part.
#[test]
fn delayed_by_pairs_are_bounded_escaped_and_add_up() {
    use crate::family::runq::model::{Blame, Party};
    const EVIL: &str = "/kubepods/a\"b\\c\nd";
    let mut m = Metrics::new(MetricsOptions {
        max_pairs: 2,
        ..MetricsOptions::default()
    });
    for seq in 1..=3u64 {
        let mut c = cgroup(7, "/slow", &[5000]);
        let mut b = Blame::default();
        for (i, path) in [EVIL, "/n1", "/n2", "/n3"].into_iter().enumerate() {
            b.neighbours.push(Party {
                id: 100 + i as u64,
                path: Some(path.to_string()),
                name: Some("evil\"name".to_string()),
                wait_us: 4e5 - i as f64 * 1e5,
                cpu_max: None,
            });
        }
        b.neighbours_other_us = 5e4;
        c.runq.blame = Some(b);
        m.update(&window(seq, seq * 1000, vec![c]));
    }
    let t = m.render();
    let lines: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("cgtrace_runq_wait_delayed_by_seconds_total{"))
        .collect();
    assert_eq!(lines.len(), 3, "2 pairs and other:\n{t}");
    let value = |l: &str| -> f64 { l.rsplit_once(' ').unwrap().1.parse().unwrap() };
    let evil = lines
        .iter()
        .find(|l| l.contains(r#"culprit="/kubepods/a\"b\\c\nd",culprit_name="evil\"name"}"#))
        .unwrap_or_else(|| panic!("the evil culprit escaped in\n{t}"));
    assert!(
        evil.starts_with(r#"cgtrace_runq_wait_delayed_by_seconds_total{cgroup="/slow",name="default/web-0/nginx",namespace="default",pod="web-0",container="nginx",culprit="#),
        "{evil}"
    );
    assert!((value(evil) - 1.2).abs() < 1e-9, "{evil}");
    let other = lines
        .iter()
        .find(|l| l.contains(r#"{cgroup="other",name="other",culprit="other"}"#))
        .unwrap_or_else(|| panic!("other in\n{t}"));
    // /n2 (0.2 s) and /n3 (0.1 s) and the unnamed 0.05 s, three times.
    assert!((value(other) - 1.05).abs() < 1e-9, "{other}");
    // The pairs add up to the ledger's neighbours part (1.05 s a window).
    let sum: f64 = lines.iter().map(|l| value(l)).sum();
    let part = t
        .lines()
        .find(|l| {
            l.starts_with("cgtrace_runq_wait_blame_seconds_total{cgroup=\"/slow\"")
                && l.contains("part=\"neighbours\"")
        })
        .map(value)
        .unwrap_or_else(|| panic!("the neighbours part in\n{t}"));
    assert!((part - 3.15).abs() < 1e-9, "{part}");
    assert!((sum - part).abs() < 1e-9, "{sum} vs {part}");
    // A pair's series counts from its first window (OTLP's start), not its victim's.
    let f = m.families();
    let pairs = f
        .iter()
        .find(|f| f.name == "cgtrace_runq_wait_delayed_by_seconds")
        .unwrap();
    assert_eq!(pairs.samples[0].start_unix_ms, Some(0));
}
