//! Unit tests of the matrix's parsing and checks, on captured serial logs.
use super::*;

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

/// `lines` with `from` replaced by `to` in each.
fn replaced(lines: &[String], from: &str, to: &str) -> Vec<String> {
    lines.iter().map(|l| l.replace(from, to)).collect()
}

/// Asserts that each of `want` is in one of `failures`; returns them all, one a line, for more
/// checks.
fn assert_failures(failures: &[String], want: &[&str]) -> String {
    let all = failures.join("\n");
    for want in want {
        assert!(all.contains(want), "{want}: {all}");
    }
    all
}

const HELLO: &str = r#"{"type":"hello","schema":1,"kernel":"6.1.0-56-cloud-amd64","cgroup":{"layout":"v2","runq_hierarchy":"cgroup2"},"families":{"runq":{"mode":"tp_btf","detail":"…; direct BTF field access; …; waits timed in the run queue's clock (rq.clock, …)"}}}"#;
const WINDOW_1: &str = r#"{"type":"window","seq":1,"events":{"seen":900,"dropped":2},"cgroups":[{"id":7,"hierarchy":"cgroup2","path":"/cgtrace-vm-busy","name":"cgtrace-vm-busy","runq":{"count":310,"p50_us":900.0,"p99_us":4000.0,"max_us":5000.0,"buckets":[[1024,3]],"kinds":{}}}]}"#;
const WINDOW_2: &str = r#"{"type":"window","seq":2,"events":{"seen":800,"dropped":1},"cgroups":[{"id":8,"hierarchy":"cgroup2","path":"/cgtrace-vm-quiet","name":"cgtrace-vm-quiet","runq":{"count":40,"sum_us":800.0,"p50_us":20.0,"p99_us":90.0,"max_us":100.0,"buckets":[],"kinds":{},"blame":{"throttled_own_us":0.0,"throttled_ancestor_us":0.0,"siblings_us":0.0,"neighbours":[{"id":7,"path":"/cgtrace-vm-busy","name":null,"wait_us":700.0}],"neighbours_other_us":0.0,"unattributed_us":100.0}}},{"id":1,"hierarchy":"cgroup2","path":"/","runq":{"count":5}}]}"#;

fn captured(hello: &str) -> Vec<String> {
    lines(&format!(
        "[    0.912345] random: crng init done\nCGTRACE-VM-BOOTED 6.1.0-56-cloud-amd64\n\
         cgtrace: attached runq (tp_btf)\n{RUNDELAY} quiet_ns=800400\n{STREAM_BEGIN}\n{hello}\r\n\
         [    7.000001] sched: RT throttling activated\n{WINDOW_1}\n{WINDOW_2}\n{STREAM_END}\n\
         CGTRACE-VM-EXIT 0\n[    9.1] reboot: Power down"
    ))
}

/// [`captured`] with `window` in place of [`WINDOW_2`].
fn captured_with_window_2(window: &str) -> Vec<String> {
    captured(HELLO)
        .into_iter()
        .map(|l| if l == WINDOW_2 { window.to_string() } else { l })
        .collect()
}

#[test]
fn check_accepts_good_stream_with_kernel_noise() {
    let report = check_stream("6.1", &captured(HELLO));
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!((report.windows, report.seen, report.dropped), (2, 1700, 3));
    assert_eq!((report.busy_count, report.quiet_count), (310, 40));
    assert_eq!(report.runq_mode.as_deref(), Some("tp_btf"));
}

#[test]
fn check_rejects_v1_layout_wrong_kernel_and_missing_cgroup() {
    let hello = HELLO.replace(r#""layout":"v2""#, r#""layout":"hybrid""#);
    let mut log = captured(&hello);
    log.retain(|l| !l.contains("cgtrace-vm-quiet"));
    let report = check_stream("6.12", &log);
    let all = assert_failures(
        &report.failures,
        &["layout is hybrid", "want 6.12.*", "/cgtrace-vm-quiet"],
    );
    assert!(!all.contains("/cgtrace-vm-busy"), "{all}");
}

#[test]
fn check_rejects_the_probe_read_fallback() {
    let hello = HELLO.replace(
        "direct BTF field access",
        "bpf_probe_read_kernel (direct access refused: BPF program is too large)",
    );
    let report = check_stream("6.1", &captured(&hello));
    assert_failures(&report.failures, &["the direct variants did not load"]);
}

#[test]
fn check_rejects_missing_markers_and_bad_json() {
    let report = check_stream("6.1", &lines("boot\nCGTRACE-VM-EXIT 1"));
    assert_eq!(report.failures, vec![format!("no {STREAM_BEGIN} line")]);
    let log = lines(&format!("{STREAM_BEGIN}\n{{\"type\":\"hel\n{STREAM_END}"));
    assert_failures(
        &check_stream("6.1", &log).failures,
        &["bad JSON line", "no hello line"],
    );
}

const THR_HELLO: &str = r#"{"type":"hello","schema":1,"kernel":"6.12.117+deb12-cloud-amd64","cgroup":{"layout":"v2","runq_hierarchy":"cgroup2"},"families":{"runq":{"mode":"tp_btf","detail":"…; direct BTF field access; …; waits timed in the run queue's clock (rq.clock, …)"},"throttle":{"mode":"fentry","detail":"fentry on tg_throttle_down"}},"wait_split":{"method":"throttled_clock_self","exact":true,"detail":"…"}}"#;

/// A throttle episode line of `path`.
fn thr_episode(path: &str, duration_us: f64) -> String {
    format!(
        r#"{{"type":"throttle","ts_ns":1,"cpu":0,"cgroup_id":40,"path":"{path}","start_ns":1,"duration_us":{duration_us},"tasks":1,"runnable":1,"closed_by":"timer"}}"#
    )
}

/// A window whose /cgtrace-vm-thr element has `nr_throttled` and `throttled_us`.
fn thr_window(seq: u32, nr_throttled: u64, throttled_us: f64) -> String {
    format!(
        r#"{{"type":"window","seq":{seq},"events":{{"seen":100,"dropped":0}},"cgroups":[{{"id":1,"hierarchy":"cgroup2","path":"/","runq":{{"count":5}}}},{{"id":23,"hierarchy":"cgroup2","path":"/cgtrace-vm-thr","runq":{{"count":40,"sum_us":{wait_us},"kinds":{{"preempt":{{"sum_us":{preempt_us}}},"throttled":{{"sum_us":{throttled_wait_us}}}}},"blame":{{"throttled_own_us":{throttled_wait_us},"throttled_ancestor_us":0.0,"siblings_us":{preempt_us},"neighbours":[],"neighbours_other_us":0.0,"unattributed_us":0.0}}}},"throttle":{{"quota_us":20000,"period_us":100000,"nr_periods":{nr_throttled},"nr_throttled":{nr_throttled},"throttled_us":{throttled_us},"episodes":{e},"kernel":null}}}},{{"id":24,"hierarchy":"cgroup2","path":"/cgtrace-vm-anc/child","runq":{{"count":10,"sum_us":{anc_us},"blame":{{"throttled_own_us":0.0,"throttled_ancestor_us":{anc_thr_us},"siblings_us":0.0,"neighbours":[{{"id":23,"path":"/cgtrace-vm-thr","name":null,"wait_us":{anc_nb_us}}}],"neighbours_other_us":0.0,"unattributed_us":0.0}}}}}}]}}"#,
        e = 2 * nr_throttled,
        // Nine tenths of the wait throttled, as the 6-loop 2-CPU scenario has it.
        throttled_wait_us = 3.0 * throttled_us,
        preempt_us = throttled_us / 3.0,
        wait_us = 3.0 * throttled_us + throttled_us / 3.0,
        // The child's loop: 98 % of its wait on its parent's quota.
        anc_us = throttled_us / 2.0,
        anc_thr_us = throttled_us / 2.0 * 0.98,
        anc_nb_us = throttled_us / 2.0 * 0.02,
    )
}

/// A throttle-scenario log: kernel delta 62 throttled periods, 10 674 582 µs; the loops'
/// run_delay is their wait in `windows` (ns, rounded down); one 95 ms episode of a group made
/// after the removed ones.
fn thr_captured(hello: &str, windows: &[String]) -> Vec<String> {
    let wait_ns = |path: &str| -> u64 {
        let us: f64 = windows
            .iter()
            .filter_map(|w| serde_json::from_str::<Value>(w).ok())
            .flat_map(|w| w["cgroups"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["path"] == path)
            .map(|c| c["runq"]["sum_us"].as_f64().unwrap_or(0.0))
            .sum();
        (us * 1e3) as u64
    };
    lines(&format!(
        "CGTRACE-VM-BOOTED 6.12.117+deb12-cloud-amd64\n\
         throttle: mode fentry, 6s of load in 6 loops, cpu.max 20000 100000, 2 CPUs\n\
         throttle: churn: groups removed while throttled, then new ones\n\
         [    9.100000] random: crng init done\nthrottle: cgtrace exit 0\n\
         {KSTAT_BEFORE} nr_periods=2 nr_throttled=0 throttled_usec=0\n\
         {KSTAT_AFTER} nr_periods=66 nr_throttled=62 throttled_usec=10674582\n\
         {RUNDELAY} thr_ns={} anc_ns={}\n\
         {STREAM_BEGIN}\n{hello}\n{}\n{}\n{STREAM_END}\nCGTRACE-VM-EXIT 0",
        wait_ns(THROTTLE_CGROUP),
        wait_ns(ANCESTOR_CHILD),
        windows.join("\n"),
        thr_episode("/cgtrace-vm-new1", 95_000.0)
    ))
}

fn good_thr_windows() -> Vec<String> {
    // 62 throttled periods, 10 700 000 µs (ratio 1.0024).
    vec![
        thr_window(1, 0, 0.0).replace(r#","throttle":{"#, r#","nothrottle":{"#),
        thr_window(2, 30, 5_200_000.0),
        thr_window(3, 32, 5_500_000.0),
    ]
}

#[test]
fn throttle_check_accepts_matching_counts() {
    let log = thr_captured(THR_HELLO, &good_thr_windows());
    let r = check_throttle("6.12", ThrottleMode::Fentry, &log);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!((r.windows, r.throttle_windows), (3, 2));
    assert_eq!((r.ours_nr_throttled, r.ours_episodes), (62, 124));
    assert_eq!(r.ours_throttled_us, 10_700_000.0);
    assert_eq!(
        r.kernel,
        Some(Kstat {
            nr_periods: 64,
            nr_throttled: 62,
            throttled_usec: 10_674_582
        })
    );
    assert_eq!(r.mode.as_deref(), Some("fentry"));
    assert!((r.time_ratio().unwrap() - 1.00238).abs() < 1e-4);
    assert_eq!(r.loops_cpus, Some((6, 2)));
    assert!((r.wait_ratio().unwrap() - 1.00238).abs() < 1e-4);
    // auto only records the mode.
    let r = check_throttle("6.12", ThrottleMode::Auto, &log);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.mode.as_deref(), Some("fentry"));
}

#[test]
fn throttle_check_rejects_wrong_mode_count_and_time() {
    // One throttled period missing, 2.5 % too much time.
    let windows = [
        thr_window(1, 30, 5_400_000.0),
        thr_window(2, 31, 5_542_000.0),
    ];
    let log = thr_captured(THR_HELLO, &windows);
    let r = check_throttle("6.12", ThrottleMode::Kprobe, &log);
    let all = assert_failures(
        &r.failures,
        &[
            "families.throttle.mode is fentry, want kprobe",
            "nr_throttled ours 61 != kernel 62",
            "throttled_us ours 10942000 vs kernel 10674582 (ratio 1.0251",
        ],
    );
    assert_eq!(r.failures.len(), 3, "{all}");
}

/// A removed group's stale entry given to a new group shows as an episode longer than any
/// 100 ms period allows; and the groups made after the removed ones must have been throttled.
#[test]
fn throttle_check_rejects_stale_episodes_and_an_unthrottled_churn_phase() {
    let log = thr_captured(THR_HELLO, &good_thr_windows());
    let stale = replaced(&log, r#""duration_us":95000"#, r#""duration_us":3200000"#);
    let r = check_throttle("6.12", ThrottleMode::Fentry, &stale);
    let all = assert_failures(&r.failures, &["a throttle episode of 3200 ms"]);
    assert_eq!(r.failures.len(), 1, "{all}");
    assert_eq!(r.longest_episode_us, 3_200_000.0);
    let none: Vec<String> = log
        .iter()
        .filter(|l| !l.contains(r#""type":"throttle""#))
        .cloned()
        .collect();
    assert_failures(
        &check_throttle("6.12", ThrottleMode::Fentry, &none).failures,
        &["no throttle episode of /cgtrace-vm-new*"],
    );
}

#[test]
fn throttle_check_rejects_unthrottled_workload_and_missing_data() {
    let log = thr_captured(THR_HELLO, &good_thr_windows());
    let unthrottled = replaced(
        &log,
        "nr_throttled=62 throttled_usec=10674582",
        "nr_throttled=0 throttled_usec=0",
    );
    assert_failures(
        &check_throttle("6.12", ThrottleMode::Fentry, &unthrottled).failures,
        &["the workload was not throttled"],
    );

    // No cpu.stat lines, no throttle objects, no mode in hello, and a wrong kernel.
    let hello = THR_HELLO.replace(r#""mode":"fentry","#, "");
    let windows = [thr_window(1, 5, 1.0).replace("/cgtrace-vm-thr", "/other")];
    let log: Vec<String> = thr_captured(&hello, &windows)
        .into_iter()
        .filter(|l| !l.starts_with("CGTRACE-KSTAT"))
        .collect();
    let r = check_throttle("6.1", ThrottleMode::Fentry, &log);
    assert_failures(
        &r.failures,
        &[
            "no CGTRACE-KSTAT-BEFORE line",
            "no CGTRACE-KSTAT-AFTER line",
            "mode is <missing>, want fentry",
            "want 6.1.*",
            "no window has a throttle object for /cgtrace-vm-thr",
        ],
    );
    assert!(r.kernel.is_none());

    // A cpu.stat read that failed (empty values) and a crashed cgtrace.
    let log = lines(&format!(
        "{KSTAT_BEFORE} nr_periods= nr_throttled= throttled_usec=\n\
         {KSTAT_AFTER} nr_periods=3 nr_throttled=1 throttled_usec=9\nCGTRACE-VM-EXIT 101"
    ));
    assert_failures(
        &check_throttle("6.1", ThrottleMode::Kprobe, &log).failures,
        &[
            "CGTRACE-KSTAT-BEFORE: no number for nr_periods",
            &format!("no {STREAM_BEGIN} line"),
        ],
    );
}

#[test]
fn strips_terminal_escapes() {
    assert_eq!(strip_escapes("\x1bc\x1b[?7l\x1b[2JSeaBIOS\r"), "SeaBIOS");
    assert_eq!(strip_escapes("plain [ 1.0] line"), "plain [ 1.0] line");
}

#[test]
fn parses_ldd_output() {
    let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
    let libs = parse_ldd(text).unwrap();
    assert_eq!(
        libs,
        [
            "/lib/x86_64-linux-gnu/libgcc_s.so.1",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2"
        ]
        .map(PathBuf::from)
    );
    assert!(
        parse_ldd("\tnot a dynamic executable\n")
            .unwrap()
            .is_empty()
    );
    assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
}

#[test]
fn finds_mirrors_in_both_source_formats() {
    let deb822 = "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                  Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                  Types: deb\nURIs: http://mirror.example/debian-security/\nSuites: bookworm-security\n\
                  Components: main\n\nEnabled: no\nTypes: deb\nURIs: http://off.example\nSuites: bookworm\n";
    let mut sources =
        apt::parse_one_line("deb [arch=amd64] http://other.example/x nodistro main\n");
    sources.extend(apt::parse_deb822(deb822));
    let m = apt::mirrors_for("bookworm", &sources).unwrap();
    assert_eq!(m.archive, "http://mirror.example/debian");
    assert_eq!(m.security, "http://mirror.example/debian-security");
    let list = apt::sources_list("bullseye", &m);
    let keyring = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
    assert!(list.contains(&format!(
        "{keyring} http://mirror.example/debian bullseye-updates"
    )));
    assert!(list.contains("http://mirror.example/debian-security bullseye-security main"));

    let one_line = apt::parse_one_line(
        "deb http://a.example/debian bookworm main # x\n#deb http://b bookworm main\n",
    );
    assert_eq!(one_line.len(), 1);
    assert!(
        apt::mirrors_for("bookworm", &one_line).is_err(),
        "no security source"
    );
}

#[test]
fn cpio_newc_layout() {
    let mut archive = cpio::Archive::default();
    archive.data("bin/hello", "hi!\n", 0o755);
    archive.symlink("bin/sh", "busybox");
    let mut out = Vec::new();
    archive.write_to(&mut out).unwrap();
    assert_eq!(out.len() % 4, 0);
    let text = String::from_utf8_lossy(&out);
    // The parent directory is created and comes first.
    assert!(text.find("bin\0").unwrap() < text.find("bin/hello\0").unwrap());
    assert_eq!(text.matches("070701").count(), 4);
    assert!(text.contains("hi!\n") && text.contains("busybox") && text.contains("TRAILER!!!"));
    // mode of bin/hello: regular file 0755.
    let h = text.find("bin/hello").unwrap() - 110;
    assert_eq!(&text[h + 14..h + 22], "000081ED");
}

#[test]
fn exit_code_ignores_kernel_messages_on_the_same_line() {
    let line = "CGTRACE-VM-EXIT 0[   29.260073] sysrq: Power Off";
    assert_eq!(marker_value(line, EXIT_MARKER).and_then(exit_code), Some(0));
    assert_eq!(exit_code("101"), Some(101));
    assert_eq!(exit_code("[  1.0]"), None);
}

#[test]
fn exit_code_after_a_kernel_message_that_cut_the_line() {
    let mut outcome = Outcome::default();
    let start = Instant::now();
    let mut log = Vec::new();
    for line in [
        "CGTRACE-STREAM-END",
        "CGTRACE-VM-EXIT [   38.106253] sysrq: Power Off",
        "0",
        "[   38.129677] reboot: Power down",
    ] {
        qemu::record_line(&mut outcome, &mut log, line.into(), start).unwrap();
    }
    assert_eq!(outcome.exit_code, Some(0));
    assert!(outcome.passed());
}

#[test]
fn throttle_check_rejects_queued_waits_counted_as_contention() {
    // The split before it was fixed on kernels before 6.18: a third of the wait throttled.
    let windows = replaced(
        &good_thr_windows(),
        r#""preempt":{"sum_us":"#,
        r#""preempt":{"sum_us":1"#,
    );
    let log = thr_captured(THR_HELLO, &windows);
    let r = check_throttle("6.12", ThrottleMode::Fentry, &log);
    let all = assert_failures(&r.failures, &["of kind throttled"]);
    assert_eq!(r.failures.len(), 1, "{all}");
    assert!(r.throttled_share().unwrap() < 0.75);
    // The wrong split method for the kernel is a failure too.
    let r = check_throttle(
        "6.1",
        ThrottleMode::Fentry,
        &thr_captured(THR_HELLO, &good_thr_windows()),
    );
    assert!(
        r.failures
            .iter()
            .any(|f| f.contains("want throttled_clock_pelt")),
        "{:?}",
        r.failures
    );
}

#[test]
fn throttle_check_rejects_throttled_wait_off_the_kernels_time() {
    // Half the throttled wait the kernel's throttled time implies for 6 loops on 2 CPUs.
    let windows = replaced(
        &good_thr_windows(),
        "\"preempt\":{\"sum_us\":",
        "\"wakeup\":{\"sum_us\":1},\"preempt\":{\"sum_us\":",
    );
    let log = replaced(&thr_captured(THR_HELLO, &windows), "6 loops", "12 loops");
    let r = check_throttle("6.12", ThrottleMode::Fentry, &log);
    let all = assert_failures(&r.failures, &["throttled wait is 0.5012"]);
    assert_eq!(r.failures.len(), 1, "{all}");
}

#[test]
fn an_int3_oops_is_recognised_as_tcg_text_patching() {
    let log = lines(
        "CGTRACE-VM-BOOTED 6.12.117+deb12-cloud-amd64\n[   20.281968] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI\n\
         [   20.282090] RIP: 0010:__hrtimer_run_queues+0x101/0x250",
    );
    assert!(tcg_text_patch_oops(&log));
    assert!(!tcg_text_patch_oops(&lines(
        "BUG: kernel NULL pointer dereference"
    )));
}

#[test]
fn check_rejects_blame_that_does_not_add_up_or_charges_nobody() {
    let bad = WINDOW_2.replace(r#""unattributed_us":100.0"#, r#""unattributed_us":50.0"#);
    let r = check_stream("6.1", &captured_with_window_2(&bad));
    assert_failures(
        &r.failures,
        &["blame parts add up to 750.0 µs, its wait is 800.0 µs"],
    );
    assert_eq!((r.quiet_wait_us, r.quiet_by_busy_us), (800.0, 700.0));
    let none = WINDOW_2.replace("/cgtrace-vm-busy", "/elsewhere");
    assert_failures(
        &check_stream("6.1", &captured_with_window_2(&none)).failures,
        &["charged 0 of /cgtrace-vm-quiet's 800 µs"],
    );
    // Less than 80 % to the neighbour that held the CPU; a wait off the kernel's run_delay.
    let some = WINDOW_2
        .replace(r#""wait_us":700.0"#, r#""wait_us":600.0"#)
        .replace(r#""unattributed_us":100.0"#, r#""unattributed_us":200.0"#);
    let log = replaced(
        &captured_with_window_2(&some),
        "quiet_ns=800400",
        "quiet_ns=900000",
    );
    let r = check_stream("6.1", &log);
    let all = assert_failures(
        &r.failures,
        &[
            "charged 600 of /cgtrace-vm-quiet's 800 µs",
            "/cgtrace-vm-quiet: run-queue wait 800 µs vs the kernel's run_delay 900 µs",
        ],
    );
    assert_eq!(r.failures.len(), 2, "{all}");
    assert_eq!(r.quiet_run_delay_us, Some(900.0));
    assert!(!all.contains("kept time on"), "{all}");
    // Off the TSC the failure says why the two clocks may differ.
    let hpet = replaced(&log, "quiet_ns=900000", "quiet_ns=900000 clocksource=hpet");
    assert_failures(
        &check_stream("6.1", &hpet).failures,
        &["the guest kept time on hpet, not the TSC"],
    );
}

#[test]
fn throttle_check_rejects_quota_blame_off_the_quota_and_run_delay() {
    // The loops' throttled wait charged as siblings; the child's run_delay 10 % above its wait.
    let windows: Vec<String> = good_thr_windows()
        .iter()
        .map(|w| {
            w.replace(r#""throttled_own_us":"#, r#""siblings_us":0,"x":"#)
                .replacen(r#""siblings_us":"#, r#""throttled_own_us":0,"y":"#, 2)
        })
        .collect();
    let log: Vec<String> = thr_captured(THR_HELLO, &windows)
        .into_iter()
        .map(|l| {
            if l.starts_with(RUNDELAY) {
                let anc: u64 = l.rsplit_once("anc_ns=").unwrap().1.parse().unwrap();
                format!(
                    "{} anc_ns={}",
                    l.rsplit_once(" anc_ns=").unwrap().0,
                    anc * 11 / 10
                )
            } else {
                l
            }
        })
        .collect();
    let r = check_throttle("6.12", ThrottleMode::Fentry, &log);
    let all = assert_failures(
        &r.failures,
        &[
            "/cgtrace-vm-thr: throttled_own_us is 0 of its",
            "/cgtrace-vm-anc/child: run-queue wait",
            "ratio 0.9091",
        ],
    );
    assert!(!all.contains("/cgtrace-vm-thr: run-queue wait"), "{all}");
}
