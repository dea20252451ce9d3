//! `cgtrace top` on a big host: time to take one snapshot of 10 000 cgroups into the view (table
//! update, flags, filter, sort) and to draw one frame of it, without a terminal. The data the
//! snapshot replaces is freed outside the timed region, as `run_loop` frees it on a thread of its
//! own.
//!
//! `cargo bench -p cgtrace --bench render` (target: a snapshot plus a frame under 5 ms).

use std::{
    collections::BTreeMap,
    hint::black_box,
    time::{Duration, Instant},
};

use cgtrace::{
    family::runq::KindHists,
    live::aggregate::runq_window,
    model::{Capabilities, CgroupLayoutInfo, CgroupWindow, FamilyMode, Hello, HistSpec, Window},
    top::{Action, App, Command, Theme, render::draw},
};
use cgtrace_common::runq::WaitKind;
use ratatui::{Terminal, backend::TestBackend};

const CGROUPS: usize = 10_000;
const RUNS: usize = 30;

fn hello() -> Hello {
    Hello {
        kind: "hello".into(),
        schema: 1,
        cgtrace: "bench".into(),
        host: "big-host".into(),
        kernel: "6.18.0".into(),
        cpus: 192,
        start_unix_ms: 0,
        interval_ms: 1000,
        cgroup: CgroupLayoutInfo {
            layout: "v2".into(),
            runq_hierarchy: "cgroup2".into(),
            runq_mount: "/sys/fs/cgroup".into(),
        },
        families: BTreeMap::from([(
            "runq".to_string(),
            FamilyMode {
                mode: cgtrace::model::AttachMode::TpBtf,
                detail: String::new(),
            },
        )]),
        capabilities: Capabilities::default(),
        hist: HistSpec::this_build(),
        kept_capabilities: Vec::new(),
        wait_split: None,
        blame_min_us: None,
        blame: None,
        sched_ext: None,
    }
}

/// 10 000 containers in 2 500 pods, each with a few hundred waits spread over ~20 buckets, like a
/// busy Kubernetes node.
fn window(seq: u64) -> Window {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ seq;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let cgroups = (0..CGROUPS)
        .map(|i| {
            let mut k = KindHists::default();
            let n = 50 + rnd() % 400;
            let scale = 1 + rnd() % 2000;
            for _ in 0..n {
                let v = 500 + (rnd() % 20_000) * scale / 10;
                let kind = if rnd() % 2 == 0 { WaitKind::Wakeup } else { WaitKind::Preempt };
                k.record(kind, v);
            }
            let pod = i / 4;
            CgroupWindow {
                id: 100_000 + i as u64,
                hierarchy: "cgroup2".into(),
                path: Some(format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod:08x}.slice/cri-containerd-{i:064x}.scope"
                )),
                name: Some(format!("ns{}/app-{pod}-7d9f8/c{}", pod % 40, i % 4)),
                name_kind: Some(cgtrace::cgroup::name::NameKind::Container),
                runq: runq_window(&k),
                ..CgroupWindow::default()
            }
        })
        .collect();
    Window {
        kind: "window".into(),
        seq,
        end_unix_ms: seq * 1000,
        duration_ms: 1000,
        cgroups_tracked: CGROUPS,
        cgroups,
        ..Window::default()
    }
}

/// This thread's CPU time: unlike the wall clock, it does not count time spent waiting for a
/// CPU, so it holds on a loaded machine.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A stopwatch over both clocks.
#[derive(Clone, Copy)]
struct Watch(Instant, Duration);

impl Watch {
    fn start() -> Self {
        Self(Instant::now(), cpu_time())
    }
    fn stop(self) -> (Duration, Duration) {
        (self.0.elapsed(), cpu_time() - self.1)
    }
}

/// (wall, CPU) per run.
struct Stats(Vec<(Duration, Duration)>);

impl Stats {
    fn median(&self) -> (Duration, Duration) {
        let mut wall: Vec<Duration> = self.0.iter().map(|t| t.0).collect();
        let mut cpu: Vec<Duration> = self.0.iter().map(|t| t.1).collect();
        wall.sort();
        cpu.sort();
        (wall[wall.len() / 2], cpu[cpu.len() / 2])
    }
}

fn time<F: FnMut() -> (Duration, Duration)>(mut f: F) -> Stats {
    for _ in 0..3 {
        f();
    }
    Stats((0..RUNS).map(|_| f()).collect())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let (w, h) = (200u16, 60u16);
    let mut terminal = match Terminal::new(TestBackend::new(w, h)) {
        Ok(t) => t,
        Err(e) => match e {},
    };
    let windows: Vec<Window> = (1..=4).map(window).collect();
    let mut app = App::new(hello(), Theme::colour());
    app.apply(Action::Resize(w, h));
    app.apply(Action::Window(Box::new(windows[0].clone())));
    let mut seq = 1usize;

    // The next window applied (and drawn, with a terminal), timed; what `run_loop` hands to its
    // freeing thread is dropped outside the timing.
    let mut step = |app: &mut App, terminal: Option<&mut Terminal<TestBackend>>| {
        seq += 1;
        let next = Box::new(windows[seq % windows.len()].clone());
        let t0 = Watch::start();
        app.apply(Action::Window(next));
        if let Some(t) = terminal {
            let _ = t.draw(|f| draw(f, app));
        }
        let took = t0.stop();
        drop(app.take_garbage());
        took
    };
    let snapshot_and_frame = time(|| step(&mut app, Some(&mut terminal)));
    let snapshot = time(|| step(&mut app, None));
    let frame = time(|| {
        let t0 = Watch::start();
        let _ = terminal.draw(|f| draw(f, &app));
        t0.stop()
    });
    let resort = time(|| {
        let t0 = Watch::start();
        app.apply(Action::Command(Command::SortNext));
        t0.stop()
    });
    let mut copies: Vec<Window> = (0..RUNS + 3)
        .map(|i| windows[i % windows.len()].clone())
        .collect();
    let diagnose = time(|| {
        let mut w = copies.pop().expect("a copy per run");
        let t0 = Watch::start();
        cgtrace::family::diagnose(&mut w);
        let took = t0.stop();
        drop(w);
        took
    });
    app.apply(Action::Command(Command::Detail));
    let detail_frame = time(|| {
        let t0 = Watch::start();
        let _ = terminal.draw(|f| draw(f, &app));
        t0.stop()
    });
    app.apply(Action::Command(Command::Detail));
    app.apply(Action::Command(Command::Tree));
    let tree_snapshot_and_frame = time(|| step(&mut app, Some(&mut terminal)));
    black_box(&app);
    println!(
        "cgtrace top, {CGROUPS} cgroups, {w}x{h} terminal, median of {RUNS} runs (wall / thread CPU):"
    );
    for (what, s) in [
        ("snapshot + frame (flat)", &snapshot_and_frame),
        ("  snapshot only (table, flags, sort)", &snapshot),
        ("  frame only", &frame),
        ("re-sort (key press)", &resort),
        ("  of a snapshot: diagnoses", &diagnose),
        ("frame with the detail pane", &detail_frame),
        ("snapshot + frame (tree)", &tree_snapshot_and_frame),
    ] {
        let (wall, cpu) = s.median();
        println!("  {what:<38} {:>10} / {:>10}", ms(wall), ms(cpu));
    }
    let (wall, cpu) = snapshot_and_frame.median();
    let met = |d: Duration| {
        if d < Duration::from_millis(5) {
            "met"
        } else {
            "NOT met"
        }
    };
    println!(
        "target < 5 ms for a snapshot plus a frame: {} (wall), {} (CPU)",
        met(wall),
        met(cpu)
    );
}
