//! `cgtrace record` and `replay` costs, with synthetic ring-buffer records shaped like the
//! kernel's (run-queue waits from a few hundred threads in a few dozen cgroups, with a throttle
//! family share), written through the real [`Writer`] and read back through the real reader.
//!
//! - bytes per event on disk (zstd chunks, framing, one window per second included);
//! - recorder CPU at a given event rate (default 100 k/s): the writer's thread CPU time
//!   (`RUSAGE_THREAD`) while records arrive in drains of 200 ms, chunks are written every 600 ms
//!   and every window, each followed by `fdatasync`, as `cgtrace record` does;
//! - replay speed: events/s through `Recording::open` (checksums, decompression, the index the
//!   player seeks with) and through the `replay --stream` decoding of every record.
//!
//! `cargo xtask bench record` runs it (or `cargo bench -p cgtrace --bench record -- [RATE] [SECS]
//! [REPLAY_EVENTS]`). Raw numbers go to `target/bench/record.json`.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use cgtrace::{
    decode::RawRecords,
    family::select::EventSelection,
    record::{
        NameEntry,
        reader::{Item, Recording},
        writer::{OnFull, Writer},
    },
    replay,
};

const HELLO: &str = r#"{"type":"hello","schema":1,"cgtrace":"bench","host":"bench","kernel":"6.18","cpus":2,"start_unix_ms":0,"interval_ms":1000,"cgroup":{"layout":"v1","runq_hierarchy":"cpu","runq_mount":"/sys/fs/cgroup/cpu"},"families":{},"capabilities":{"btf":true,"tp_btf":true,"fentry":false,"kprobe":false,"notes":{}},"hist":{"unit":"ns","sub_bits":2,"buckets":140}}"#;

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const COMMS: [&[u8]; 6] = [
    b"java",
    b"GC Thread#0",
    b"nginx",
    b"postgres",
    b"kworker/0:1",
    b"node",
];

/// The next record as the kernel writes it: mostly 64-byte run-queue waits, some throttle
/// slices (56 bytes).
fn record(rng: &mut Rng, ts: u64, out: &mut Vec<u8>) {
    out.clear();
    let r = rng.next();
    let tid = 1000 + (r % 400) as u32;
    let cgroup = 4000 + u64::from(tid % 40);
    let comm = COMMS[(tid % 6) as usize];
    let mut c = [0u8; 16];
    c[..comm.len()].copy_from_slice(comm);
    // The header and the cgroup id, then the kind's payload.
    let kind: u32 = if r.is_multiple_of(10) { 0x201 } else { 0x100 };
    for part in [
        &kind.to_ne_bytes()[..],
        &((r >> 8) as u32 % 2).to_ne_bytes(),
        &ts.to_ne_bytes(),
        &cgroup.to_ne_bytes(),
    ] {
        out.extend_from_slice(part);
    }
    let parent = tid - tid % 8;
    if kind == 0x201 {
        // SliceEvent: runtime, pid, tgid, comm.
        out.extend_from_slice(&(50_000 + (r >> 20) % 3_000_000).to_ne_bytes());
        out.extend_from_slice(&tid.to_ne_bytes());
        out.extend_from_slice(&parent.to_ne_bytes());
    } else {
        // RunqEvent: wait, pid, tgid, kind, pad, comm.
        out.extend_from_slice(&(1_000_000 + (r >> 20) % 20_000_000).to_ne_bytes());
        out.extend_from_slice(&tid.to_ne_bytes());
        out.extend_from_slice(&parent.to_ne_bytes());
        out.extend_from_slice(&((r >> 40) as u32 % 2).to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
    }
    out.extend_from_slice(&c);
}

/// A window line of 40 cgroups, about the size the stream prints for them.
fn window_json(seq: u64) -> String {
    let cgroups: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"id":{},"hierarchy":"cpu","path":"/kubepods/burstable/pod{i:04}/c{i}","name":"default/app-{i}/main","name_kind":"container","runq":{{"count":{},"sum_us":1234.5,"mean_us":11.2,"p50_us":6.1,"p90_us":21.0,"p99_us":180.4,"max_us":2210.9,"buckets":[[6144,{}],[7168,880],[8192,77],[65536,3]],"kinds":{{"wakeup":{{"count":100,"sum_us":1.0,"mean_us":1.0,"p50_us":1.0,"p90_us":1.0,"p99_us":1.0,"max_us":1.0,"buckets":[[1024,100]]}}}}}}}}"#,
                4000 + i,
                3000 + seq % 97,
                1200 + seq % 13
            )
        })
        .collect();
    format!(
        r#"{{"type":"window","seq":{seq},"end_unix_ms":{},"duration_ms":1000,"events":{{"seen":100000,"dropped":0,"counters":{{}}}},"cgroups_tracked":40,"cgroups_evicted":0,"cgroups":[{}]}}"#,
        seq * 1000,
        cgroups.join(",")
    )
}

fn thread_cpu() -> Duration {
    // SAFETY: rusage is plain integers, valid all zero.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into `ru`.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Writes at `rate` events/s for `secs` s as the recorder does; returns (events, bytes, writer
/// CPU).
fn record_at_rate(path: &std::path::Path, rate: u64, secs: u64) -> (u64, u64, Duration) {
    let mut w = Writer::create(path, HELLO.as_bytes(), None, OnFull::Stop, true).unwrap();
    for i in 0..40 {
        w.name(NameEntry {
            id: 4000 + i,
            path: Some(format!("/kubepods/burstable/pod{i:04}/c{i}")),
            name: Some(format!("default/app-{i}/main")),
            name_kind: Some(cgtrace::cgroup::name::NameKind::Container),
        });
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut raw = RawRecords::new(64 << 20);
    let mut rec = Vec::with_capacity(64);
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let mut generated = Duration::ZERO;
    let (mut events, mut seq) = (0u64, 0u64);
    let drain = Duration::from_millis(200);
    let mut next_window = Duration::from_secs(1);
    let mut turn = 0u32;
    while start.elapsed() < Duration::from_secs(secs) {
        turn += 1;
        // The kernel's side: a drain's worth of records (its cost is not the recorder's).
        let g0 = thread_cpu();
        let due = (rate as f64 * drain.as_secs_f64()) as u64;
        for _ in 0..due {
            record(&mut rng, events * 10_000, &mut rec);
            raw.push(&rec);
            events += 1;
        }
        generated += thread_cpu() - g0;
        // The recorder's side, as in `record::run`.
        raw.drain(|r| w.event(r));
        let at = start.elapsed();
        let window = at >= next_window;
        if window {
            seq += 1;
            next_window += Duration::from_secs(1);
            w.window(seq, seq * 1000, window_json(seq).as_bytes());
        }
        let (_, since) = w.pending();
        if window || since.is_some_and(|t| t.elapsed() >= cgtrace::live::recorder::FLUSH_EVERY) {
            w.flush(false).unwrap();
        }
        let next = drain * turn;
        if let Some(sleep) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(sleep);
        }
    }
    w.flush(true).unwrap();
    let cpu = thread_cpu() - cpu0 - generated;
    (events, w.stats.bytes, cpu)
}

/// A file of `n` events and a window every 100 k of them, written as fast as possible.
fn big_file(path: &std::path::Path, n: u64) -> u64 {
    let mut w = Writer::create(path, HELLO.as_bytes(), None, OnFull::Stop, true).unwrap();
    w.set_sync(false);
    let mut rng = Rng(42);
    let mut rec = Vec::with_capacity(64);
    for i in 0..n {
        record(&mut rng, i * 10_000, &mut rec);
        w.event(&rec);
        if (i + 1).is_multiple_of(100_000) {
            let seq = (i + 1) / 100_000;
            w.window(seq, seq * 1000, window_json(seq).as_bytes());
            w.flush(false).unwrap();
        } else if w.pending().0 >= cgtrace::record::writer::CHUNK_BYTES {
            w.flush(false).unwrap();
        }
    }
    w.flush(true).unwrap();
    w.stats.bytes
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rate = args.first().copied().unwrap_or(100_000);
    let secs = args.get(1).copied().unwrap_or(10);
    let n = args.get(2).copied().unwrap_or(5_000_000);
    let dir = tempfile::tempdir().unwrap();

    let live = dir.path().join("live.cgtr");
    let (events, bytes, cpu) = record_at_rate(&live, rate, secs);
    let wall = secs as f64;
    let cpu_pct = cpu.as_secs_f64() / wall * 100.0;
    let bpe = bytes as f64 / events as f64;
    println!(
        "record at {rate} events/s for {secs} s: {events} events, {bytes} bytes, {bpe:.1} bytes/event on disk (raw records: ~62), writer CPU {cpu_pct:.1} % of one core (fdatasync per chunk)"
    );

    let big = dir.path().join("big.cgtr");
    let big_bytes = big_file(&big, n);
    let t0 = Instant::now();
    let rec = Recording::open(&big).unwrap();
    let open = t0.elapsed();
    assert_eq!(rec.events, n);
    let t0 = Instant::now();
    let mut count = 0u64;
    let mut kinds = 0u64;
    rec.for_each(|item| {
        if let Item::Event(raw) = item {
            count += 1;
            kinds = kinds.wrapping_add(u64::from(raw[0]));
        }
    });
    black_box(kinds);
    let pass = t0.elapsed();
    assert_eq!(count, n);
    let t0 = Instant::now();
    let r = replay::stream(&rec, &mut std::io::sink(), &EventSelection::none(), true).unwrap();
    let decode = t0.elapsed();
    assert_eq!(r.events, n);
    let t0 = Instant::now();
    let r = replay::stream(&rec, &mut std::io::sink(), &EventSelection::all(), true).unwrap();
    let lines = t0.elapsed();
    let per_s = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "replay of {n} events ({big_bytes} bytes, {:.1} bytes/event): open+index {:.2} M events/s, \
         record pass {:.2} M/s, decode every record (replay --stream) {:.2} M/s, \
         with {} JSON event lines {:.2} M/s",
        big_bytes as f64 / n as f64,
        per_s(open) / 1e6,
        per_s(pass) / 1e6,
        per_s(decode) / 1e6,
        r.event_lines,
        per_s(lines) / 1e6
    );
    let out = serde_json::json!({
        "record": {"rate": rate, "secs": secs, "events": events, "bytes": bytes,
                   "bytes_per_event": bpe, "writer_cpu_percent": cpu_pct},
        "replay": {"events": n, "bytes": big_bytes,
                   "open_index_events_per_s": per_s(open), "record_pass_events_per_s": per_s(pass),
                   "decode_events_per_s": per_s(decode), "event_lines_events_per_s": per_s(lines)},
    });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = std::fs::create_dir_all(&root);
    let _ = std::fs::write(
        root.join("record.json"),
        serde_json::to_string_pretty(&out).unwrap(),
    );
}
