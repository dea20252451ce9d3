//! The writer and reader together, and every kind of damage a recording can come back with.

use std::io::Write as _;

use super::{
    NameEntry,
    format::{self, FormatError, SYNC, Tag},
    reader::{Item, Recording},
    writer::{Flushed, OnFull, WriteError, Writer},
};

pub(crate) const HELLO: &str = r#"{"type":"hello","schema":1,"cgtrace":"0.1.0","host":"h","kernel":"6.18","cpus":2,"start_unix_ms":1000,"interval_ms":1000,"cgroup":{"layout":"v1","runq_hierarchy":"cpu","runq_mount":"/sys/fs/cgroup/cpu"},"families":{},"capabilities":{"btf":true,"tp_btf":true,"fentry":false,"kprobe":false,"notes":{}},"hist":{"unit":"ns","sub_bits":2,"buckets":140}}"#;

/// A run-queue event record as the kernel writes it (64 bytes).
pub(crate) fn runq_record(ts: u64, cgroup: u64, wait_ns: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&0x100u32.to_ne_bytes());
    b.extend_from_slice(&1u32.to_ne_bytes());
    b.extend_from_slice(&ts.to_ne_bytes());
    b.extend_from_slice(&cgroup.to_ne_bytes());
    b.extend_from_slice(&wait_ns.to_ne_bytes());
    b.extend_from_slice(&42u32.to_ne_bytes());
    b.extend_from_slice(&42u32.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(b"worker\0\0\0\0\0\0\0\0\0\0");
    b
}

pub(crate) fn window_json(seq: u64) -> String {
    format!(
        r#"{{"type":"window","seq":{seq},"end_unix_ms":{},"duration_ms":1000,"events":{{"seen":5,"dropped":0,"counters":{{}}}},"cgroups_tracked":1,"cgroups_evicted":0,"cgroups":[{{"id":7,"hierarchy":"cpu","path":"/a","name":null,"name_kind":null,"runq":{{"count":1,"sum_us":5.0,"mean_us":5.0,"p50_us":5.0,"p90_us":5.0,"p99_us":5.0,"max_us":5.0,"buckets":[[4096,1]],"kinds":{{}}}},"future_family":{{"x":1}}}}]}}"#,
        1000 + seq * 1000
    )
}

/// A writer of a new recording at `path` (no size limit, no fsync).
pub(crate) fn writer(path: &std::path::Path) -> Writer {
    let mut w = Writer::create(path, HELLO.as_bytes(), None, OnFull::Stop, false).unwrap();
    w.set_sync(false);
    w
}

/// Writes `windows` windows, each after `per` events and in a chunk of its own.
pub(crate) fn write(path: &std::path::Path, windows: u64, per: u64) -> Vec<u8> {
    let mut w = writer(path);
    for s in 1..=windows {
        w.name(NameEntry {
            id: 7,
            path: Some("/a".into()),
            name: None,
            name_kind: None,
        });
        for i in 0..per {
            w.event(&runq_record(s * 1_000_000_000 + i, 7, 20_000_000 + i));
        }
        w.window(
            s * 1_000_000_000,
            1000 + s * 1000,
            window_json(s).as_bytes(),
        );
        assert_eq!(w.flush(false).unwrap(), Flushed::Ok);
    }
    w.record(
        Tag::Summary,
        br#"{"type":"summary","windows":3,"cgroups":[]}"#,
    );
    w.record(Tag::End, br#"{"reason":"stopped"}"#);
    w.flush(true).unwrap();
    std::fs::read(path).unwrap()
}

fn windows_of(rec: &Recording) -> Vec<u64> {
    let mut out = Vec::new();
    rec.for_each(|i| {
        if let Item::Window { json, .. } = i {
            let v: serde_json::Value = serde_json::from_slice(json).unwrap();
            out.push(v["seq"].as_u64().unwrap());
        }
    });
    out
}

#[test]
fn round_trip_keeps_windows_verbatim_events_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.cgtr");
    let bytes = write(&p, 3, 100);
    let mode = std::fs::metadata(&p).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let rec = Recording::from_bytes(bytes).unwrap();
    assert_eq!(rec.stats.warning(), None);
    assert!(rec.stats.clean_end);
    assert_eq!(rec.windows.len(), 3);
    assert_eq!(rec.events, 300);
    assert_eq!(rec.hello().host, "h");
    // Windows come back byte for byte, unknown fields included.
    let mut buf = Vec::new();
    let mut cached = None;
    assert_eq!(
        rec.window_json(1, &mut buf, &mut cached).unwrap(),
        window_json(2).as_bytes()
    );
    assert!(
        rec.windows
            .iter()
            .all(|w| w.events == 100 && w.marks.has(super::reader::Marks::RUNQ))
    );
    assert_eq!(rec.names()[&7].path.as_deref(), Some("/a"));
    let mut events = 0;
    rec.for_each(|i| {
        if let Item::Event(raw) = i {
            assert_eq!(raw.len(), 64);
            events += 1;
        }
    });
    assert_eq!(events, 300);
}

#[test]
fn refuses_what_is_not_a_recording_in_one_line() {
    let cases: [(&[u8], FormatError); 4] = [
        (b"", FormatError::Empty),
        (b"{\"type\":\"hello\",\"schema\":1}\n", FormatError::Stream),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", FormatError::NotOurs),
        (&format::MAGIC[..6], FormatError::TruncatedHeader { len: 6 }),
    ];
    for (bytes, want) in cases {
        let e = Recording::from_bytes(bytes.to_vec()).err().unwrap();
        assert_eq!(e, want);
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
}

#[test]
fn refuses_a_newer_major_version_and_reads_a_newer_minor() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = write(&dir.path().join("r"), 2, 1);
    bytes[10..12].copy_from_slice(&9u16.to_le_bytes());
    let rec = Recording::from_bytes(bytes.clone()).unwrap();
    assert_eq!((rec.minor, rec.windows.len()), (9, 2));
    bytes[8..10].copy_from_slice(&2u16.to_le_bytes());
    let e = Recording::from_bytes(bytes).err().unwrap();
    assert_eq!(e, FormatError::NewerMajor { major: 2, minor: 9 });
    assert_eq!(
        e.to_string(),
        "recorded with format version 2.9, newer than this cgtrace reads (1.x): replay it with a newer cgtrace"
    );
}

#[test]
fn skips_a_corrupted_chunk_and_reads_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = write(&dir.path().join("r"), 3, 50);
    // Flip a byte in the middle of the second chunk's payload.
    let starts: Vec<usize> = bytes
        .windows(SYNC.len())
        .enumerate()
        .filter(|(_, w)| *w == SYNC)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        starts.len(),
        5,
        "the names chunk, 3 window chunks and the closing one"
    );
    let mid = (starts[2] + starts[3]) / 2;
    bytes[mid] ^= 0x55;
    let rec = Recording::from_bytes(bytes).unwrap();
    assert_eq!(windows_of(&rec), vec![1, 3]);
    assert_eq!(rec.stats.bad_chunks, 1);
    assert_eq!(rec.stats.skipped_bytes, (starts[3] - starts[2]) as u64);
    let w = rec.stats.warning().unwrap();
    assert!(w.contains("skipped 1 damaged chunk"), "{w}");
    assert!(rec.stats.clean_end);
}

#[test]
fn a_damaged_chunk_header_or_garbage_between_chunks_resyncs() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = write(&dir.path().join("r"), 3, 5);
    let names = bytes.windows(8).position(|w| w == SYNC).unwrap();
    // The first window's chunk follows the names' chunk.
    let first = names
        + 8
        + bytes[names + 8..]
            .windows(8)
            .position(|w| w == SYNC)
            .unwrap();
    // Garbage inserted before the first chunk, and the first chunk's length field broken.
    let mut b = bytes.clone();
    b[first + 8] = 0xff;
    b[first + 11] = 0x7f;
    let rec = Recording::from_bytes(b).unwrap();
    assert_eq!(windows_of(&rec), vec![2, 3]);
    let mut b = bytes[..first].to_vec();
    b.extend_from_slice(b"garbage here\xfe\xfe");
    b.extend_from_slice(&bytes[first..]);
    let rec = Recording::from_bytes(b).unwrap();
    assert_eq!(windows_of(&rec), vec![1, 2, 3]);
    assert_eq!(rec.stats.skipped_bytes, 14);
    assert_eq!(rec.stats.bad_chunks, 0);
}

#[test]
fn a_truncated_file_replays_every_whole_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = write(&dir.path().join("r"), 3, 50);
    let last = bytes.windows(8).rposition(|w| w == SYNC).unwrap();
    let third = bytes[..last].windows(8).rposition(|w| w == SYNC).unwrap();
    // Cut at every length inside the third window's chunk: windows 1 and 2 always remain.
    for cut in [third + 1, third + 7, third + 20, third + 40, last - 1] {
        let rec = Recording::from_bytes(bytes[..cut].to_vec()).unwrap();
        assert_eq!(windows_of(&rec), vec![1, 2], "cut at {cut}");
        assert!(rec.stats.truncated, "cut at {cut}");
        assert!(!rec.stats.clean_end);
        assert!(rec.stats.warning().unwrap().contains("ends inside a chunk"));
    }
    // Cut right after the header: no window, but not an error.
    let header = format::HEADER_LEN + HELLO.len();
    let rec = Recording::from_bytes(bytes[..header].to_vec()).unwrap();
    assert!(rec.windows.is_empty());
    assert_eq!(rec.stats.warning(), None);
    // Inside the hello: refused, with what to do.
    let e = Recording::from_bytes(bytes[..header - 3].to_vec())
        .err()
        .unwrap();
    assert!(matches!(e, FormatError::TruncatedHeader { .. }), "{e}");
}

#[test]
fn a_damaged_hello_still_replays_with_a_stand_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = write(&dir.path().join("r"), 2, 1);
    bytes[format::HEADER_LEN + 10] ^= 1;
    let rec = Recording::from_bytes(bytes).unwrap();
    assert!(rec.stats.bad_hello);
    assert_eq!(rec.windows.len(), 2);
    assert_eq!(rec.hello().host, "(header damaged)");
    assert!(rec.stats.warning().unwrap().contains("header"));
}

/// A chunk of `records` as the writer frames it (stored, not compressed).
fn chunk(records: &[u8], seq: u32) -> Vec<u8> {
    format::ChunkHeader {
        payload_len: records.len() as u32,
        raw_len: records.len() as u32,
        records: 0,
        seq,
        codec: format::CODEC_STORED,
        crc: 0,
    }
    .frame(records)
}

#[test]
fn unknown_record_tags_are_skipped_and_counted() {
    let mut recs = Vec::new();
    format::put_record(&mut recs, Tag::Event, &runq_record(1, 7, 5));
    // A tag from a future minor version, with the same framing.
    recs.push(0x42);
    format::put_uleb(&mut recs, 3);
    recs.extend_from_slice(b"new");
    let mut body = vec![0u8; 16];
    body.extend_from_slice(window_json(1).as_bytes());
    format::put_record(&mut recs, Tag::Window, &body);
    let mut file = format::header(HELLO.as_bytes());
    file.extend(chunk(&recs, 0));
    let rec = Recording::from_bytes(file).unwrap();
    assert_eq!(rec.windows.len(), 1);
    assert_eq!(rec.events, 1);
    assert_eq!(rec.stats.unknown_records, 1);
    assert_eq!(rec.stats.warning(), None);
}

#[test]
fn a_chunk_with_a_good_checksum_but_bad_records_is_skipped() {
    // Records that overrun the chunk: written by something else, or a bug; never trusted.
    let mut recs = Vec::new();
    recs.push(Tag::Event as u8);
    format::put_uleb(&mut recs, 1000);
    recs.extend_from_slice(b"short");
    let mut good = Vec::new();
    let mut body = vec![0u8; 16];
    body.extend_from_slice(window_json(2).as_bytes());
    format::put_record(&mut good, Tag::Window, &body);
    let mut file = format::header(HELLO.as_bytes());
    file.extend(chunk(&recs, 0));
    file.extend(chunk(&good, 1));
    let rec = Recording::from_bytes(file).unwrap();
    assert_eq!(windows_of(&rec), vec![2]);
    assert_eq!(rec.stats.bad_chunks, 1);
}

#[test]
fn refuses_to_overwrite_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    std::fs::write(&p, b"precious").unwrap();
    let e = Writer::create(&p, HELLO.as_bytes(), None, OnFull::Stop, false)
        .err()
        .unwrap();
    assert!(matches!(e, WriteError::Exists { .. }));
    assert!(e.to_string().contains("--force"), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), b"precious");
    let e = Writer::create(
        &dir.path().join("no/such/dir/r"),
        HELLO.as_bytes(),
        None,
        OnFull::Stop,
        false,
    )
    .err()
    .unwrap();
    let e = format!("{:#}", anyhow::Error::from(e));
    assert!(e.contains("creating") && e.contains("No such file"), "{e}");
}

#[test]
fn stops_at_max_size_with_a_readable_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let max = 300 << 10;
    let mut w = Writer::create(&p, HELLO.as_bytes(), Some(max), OnFull::Stop, false).unwrap();
    w.set_sync(false);
    let mut full_at = None;
    // Incompressible events so the limit comes quickly.
    let mut x = 1u64;
    for s in 1..=1000u64 {
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w.event(&runq_record(x, x >> 7, x >> 3));
        }
        w.window(s, 1000 + s, window_json(s).as_bytes());
        if w.flush(false).unwrap() == Flushed::Full {
            full_at = Some(s);
            break;
        }
    }
    let s = full_at.expect("reached --max-size");
    // Nothing more but the closing records, in the room kept for them.
    w.window(s + 1, 5000, window_json(s + 1).as_bytes());
    assert_eq!(w.flush(false).unwrap(), Flushed::Full);
    w.record(
        Tag::Summary,
        br#"{"type":"summary","windows":0,"cgroups":[]}"#,
    );
    w.record(Tag::End, br#"{"reason":"max-size"}"#);
    assert_eq!(w.flush(true).unwrap(), Flushed::Ok);
    assert!(std::fs::metadata(&p).unwrap().len() <= max);
    let rec = Recording::open(&p).unwrap();
    assert_eq!(rec.windows.len() as u64, s - 1);
    assert_eq!(rec.stats.warning(), None);
    assert!(rec.stats.clean_end);
}

#[test]
fn rotates_at_max_size_and_each_file_stands_alone() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let max = 64 << 10;
    let mut w = Writer::create(
        &p,
        HELLO.as_bytes(),
        Some(max),
        OnFull::Rotate { keep: 2 },
        false,
    )
    .unwrap();
    w.set_sync(false);
    let mut x = 1u64;
    for s in 1..=100u64 {
        w.name(NameEntry {
            id: s,
            path: Some(format!("/c{s}")),
            name: None,
            name_kind: None,
        });
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w.event(&runq_record(x, s, x >> 3));
        }
        w.window(s, 1000 + s, window_json(s).as_bytes());
        w.flush(false).unwrap();
    }
    assert!(w.stats.rotations >= 3, "{:?}", w.stats);
    drop(w);
    let mut total = 0;
    for name in ["r", "r.1", "r.2"] {
        let f = dir.path().join(name);
        assert!(std::fs::metadata(&f).unwrap().len() <= max, "{name}");
        let rec = Recording::open(&f).unwrap();
        assert_eq!(rec.stats.warning(), None, "{name}");
        assert_eq!(rec.hello().host, "h");
        // Every file names every cgroup seen before it started.
        let first_seq = windows_of(&rec)[0];
        assert!(rec.names().len() as u64 >= first_seq, "{name}");
        total += rec.windows.len();
    }
    assert!(
        !dir.path().join("r.3").exists(),
        "only --keep files are kept"
    );
    assert!(total < 100);
}

#[test]
fn a_failed_write_drops_and_counts_the_chunk_keeps_the_file_whole_and_resumes() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let mut w = Writer::create(&p, HELLO.as_bytes(), None, OnFull::Stop, false).unwrap();
    w.window(1, 2000, window_json(1).as_bytes());
    w.flush(false).unwrap();
    let good = std::fs::read(&p).unwrap();
    // Make the next write fail: replace the file descriptor's target with a read-only one.
    let rw = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    w.swap_file_for_test(std::fs::File::open(&p).unwrap());
    w.window(2, 3000, window_json(2).as_bytes());
    assert_eq!(
        w.flush(false).unwrap(),
        Flushed::Ok,
        "a failed write ends nothing"
    );
    assert!(!w.is_stopped());
    let why = w
        .down()
        .expect("the writer says why it is not writing")
        .to_string();
    assert!(why.contains("writing") && why.contains("r:"), "{why}");
    let d = w.disk().clone();
    assert_eq!(d.dropped_chunks.load(Relaxed), 1);
    assert!(d.dropped_bytes.load(Relaxed) > 0);
    assert_eq!(d.write_errors.load(Relaxed), 1);
    assert_eq!(std::fs::read(&p).unwrap(), good);
    // Within the backoff nothing is tried; the disk is writable again but not yet used.
    w.swap_file_for_test(rw);
    w.window(3, 4000, window_json(3).as_bytes());
    w.flush(false).unwrap();
    assert_eq!(d.dropped_chunks.load(Relaxed), 2);
    assert_eq!(
        d.write_errors.load(Relaxed),
        1,
        "no write tried during the backoff"
    );
    std::thread::sleep(super::part::BACKOFF_MIN + std::time::Duration::from_millis(50));
    w.window(4, 5000, window_json(4).as_bytes());
    w.flush(false).unwrap();
    assert_eq!(w.down(), None, "resumed");
    assert_eq!(d.dropped_chunks.load(Relaxed), 2);
    let rec = Recording::open(&p).unwrap();
    assert_eq!(windows_of(&rec), vec![1, 4]);
    assert_eq!(rec.stats.warning(), None);
    // The file says what it misses, in a loss record after the chunk that resumed it.
    let r = crate::report::build(&rec);
    assert_eq!(r.recorder_dropped_chunks, 2);
    assert_eq!(r.recorder_dropped_bytes, d.dropped_bytes.load(Relaxed));
    let _ = std::io::stdout().flush();
}

#[test]
fn a_header_that_could_not_be_written_goes_in_before_the_first_chunk_that_can() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    std::fs::write(&p, b"").unwrap();
    // The header's write fails (a read-only descriptor stands in for a full disk).
    let mut w = Writer::with_file(
        std::fs::File::open(&p).unwrap(),
        &p,
        HELLO.as_bytes(),
        None,
        OnFull::Stop,
    )
    .unwrap();
    assert!(w.down().is_some_and(|why| why.contains("header")));
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
    w.swap_file_for_test(std::fs::OpenOptions::new().write(true).open(&p).unwrap());
    std::thread::sleep(super::part::BACKOFF_MIN + std::time::Duration::from_millis(50));
    w.window(1, 2000, window_json(1).as_bytes());
    w.flush(false).unwrap();
    let rec = Recording::open(&p).unwrap();
    assert_eq!(windows_of(&rec), vec![1]);
    assert!(rec.hello_json.is_some());
}

/// A throttle-episode record (`KIND_THROTTLE`, 64 bytes).
pub(crate) fn throttle_record(ts: u64, cgroup: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&0x200u32.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&ts.to_ne_bytes());
    b.extend_from_slice(&cgroup.to_ne_bytes());
    b.extend_from_slice(&(ts - 50_000_000).to_ne_bytes());
    b.extend_from_slice(&50_000_000u64.to_ne_bytes());
    b.extend_from_slice(&[0u8; 24]);
    b
}

#[test]
fn the_report_ranks_a_family_it_does_not_know_by_shape() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let mut w = writer(&p);
    for s in 1..=3u64 {
        // A window whose cgroups carry a `blkio` family (histogram-shaped) this build has no
        // type for, and single events of kind 0x901 (no family this build knows).
        let json = format!(
            r#"{{"type":"window","seq":{s},"end_unix_ms":{},"duration_ms":1000,"events":{{"seen":1,"dropped":2,"counters":{{}}}},"cgroups_tracked":2,"cgroups_evicted":0,"cgroups":[{{"id":8,"hierarchy":"cpu","path":"/slow","name":null,"name_kind":null,"runq":{{"count":0,"sum_us":0,"mean_us":0,"p50_us":0,"p90_us":0,"p99_us":0,"max_us":0,"buckets":[],"kinds":{{}}}},"blkio":{{"count":200,"sum_us":900000.0,"mean_us":4500.0,"p50_us":4000.0,"p90_us":8000.0,"p99_us":9000.0,"max_us":{}.0,"buckets":[[4194304,150],[8388608,50]],"slowest":[{{"file":"/proc/x"}}]}}}}]}}"#,
            1000 + s * 1000,
            9000 + s
        );
        let mut ev = runq_record(s, 8, 1);
        ev[..4].copy_from_slice(&0x901u32.to_ne_bytes());
        w.event(&ev);
        w.window(s, 1000 + s * 1000, json.as_bytes());
        w.flush(false).unwrap();
    }
    w.record(
        Tag::Loss,
        br#"{"events_lost":5,"reason":"recorder buffer full"}"#,
    );
    // Cumulative, as the recorder writes them: the later one counts.
    for (chunks, bytes) in [(2, 900), (3, 1200)] {
        let loss = format!(
            r#"{{"recorder_dropped_chunks":{chunks},"recorder_dropped_bytes":{bytes},"reason":"recorder could not write"}}"#
        );
        w.record(Tag::Loss, loss.as_bytes());
    }
    w.flush(true).unwrap();
    drop(w);
    let rec = Recording::open(&p).unwrap();
    let r = crate::report::build(&rec);
    assert_eq!(
        (r.recorder_dropped_chunks, r.recorder_dropped_bytes),
        (3, 1200)
    );
    let reads = &r.families["blkio"];
    assert_eq!(reads.worst_p99[0].path.as_deref(), Some("/slow"));
    assert_eq!(reads.worst_p99[0].count, 600);
    assert_eq!(reads.worst_max[0].max_us, 9003.0);
    assert_eq!(reads.worst_max[0].max_at_unix_ms, 4000);
    assert_eq!(r.events_by_family["unknown"], 3);
    assert_eq!(r.undecoded_events, 3);
    assert_eq!((r.events_dropped, r.recorder_lost), (6, 5));
    let text = crate::report::render_text(&r);
    assert!(text.contains("## blkio: worst of 1 cgroups"), "{text}");
    assert!(text.contains("could not keep 5 single events"), "{text}");
    assert!(
        text.contains("note: the recorder could not write 3 chunks (1200 bytes) of windows"),
        "{text}"
    );
    assert!(
        text.contains("3 events of kinds this cgtrace cannot decode"),
        "{text}"
    );
    // And `replay --stream --events` replays the windows as they were (the unknown family's part
    // included) without failing; events of no family are no event line.
    let mut out = Vec::new();
    let got = crate::replay::stream(
        &rec,
        &mut out,
        &crate::family::select::EventSelection::all(),
        true,
    )
    .unwrap();
    assert_eq!((got.windows, got.events, got.event_lines), (3, 3, 0));
    assert!(String::from_utf8_lossy(&out).contains(r#""blkio":{"count":200"#));
}

#[test]
fn max_size_parses_units_and_refuses_nonsense() {
    use super::parse_size;
    assert_eq!(parse_size("1G"), Ok(1 << 30));
    assert_eq!(parse_size("64K"), Ok(64 << 10));
    assert_eq!(parse_size("1.5MiB"), Ok(3 << 19));
    assert_eq!(parse_size("100000"), Ok(100_000));
    assert!(parse_size("1K").unwrap_err().contains("at least 64K"));
    assert!(parse_size("ten").is_err());
    assert!(parse_size("5X").is_err());
}

/// Writes windows of incompressible events into a rotating writer at `p` until it has rotated
/// or stopped; returns the writer.
fn fill_until_rotation(p: &std::path::Path, max: u64) -> Writer {
    let mut w = Writer::create(
        p,
        HELLO.as_bytes(),
        Some(max),
        OnFull::Rotate { keep: 2 },
        false,
    )
    .unwrap();
    w.set_sync(false);
    let mut x = 1u64;
    for s in 1..=100u64 {
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w.event(&runq_record(x, s, x >> 3));
        }
        w.window(s, 1000 + s, window_json(s).as_bytes());
        let r = w.flush(false).unwrap();
        if r != Flushed::Ok {
            break;
        }
    }
    w
}

#[test]
fn a_link_planted_where_the_next_part_goes_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let target = dir.path().join("precious");
    std::fs::write(&target, b"precious").unwrap();
    std::os::unix::fs::symlink(&target, Writer::next_path(&p)).unwrap();
    let mut w = fill_until_rotation(&p, 64 << 10);
    // The rotation failed: the writer goes on in the old part, nothing lost.
    assert!(!w.is_stopped());
    assert_eq!(w.stats.windows, 100);
    assert_eq!(
        w.disk()
            .dropped_chunks
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(
        std::fs::symlink_metadata(Writer::next_path(&p))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!dir.path().join("r.1").exists(), "nothing was rotated");
    // What was gathered went into the current part, which stays whole; the closing records too.
    w.record(Tag::End, br#"{"reason":"stopped"}"#);
    w.flush(true).unwrap();
    let rec = Recording::open(&p).unwrap();
    assert_eq!(rec.stats.warning(), None);
    assert_eq!(rec.windows.len() as u64, w.stats.windows);
}

#[test]
fn files_are_created_exclusively_and_never_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::write(&target, b"precious").unwrap();
    let link = dir.path().join("r");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = Writer::create(&link, HELLO.as_bytes(), None, OnFull::Stop, false)
        .err()
        .unwrap();
    assert!(matches!(e, WriteError::Link { .. }), "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // --force replaces the link itself; its target is untouched.
    let w = Writer::create(&link, HELLO.as_bytes(), None, OnFull::Stop, true).unwrap();
    drop(w);
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    let m = std::fs::symlink_metadata(&link).unwrap();
    assert!(m.file_type().is_file());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_big_name_table_goes_in_bounded_records_and_is_pruned_at_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let mut w = Writer::create(
        &p,
        HELLO.as_bytes(),
        Some(256 << 10),
        OnFull::Rotate { keep: 1 },
        false,
    )
    .unwrap();
    w.set_sync(false);
    // 20 000 cgroups with long paths, seen once (gone), then one cgroup seen every window.
    for id in 1..=20_000u64 {
        w.name(NameEntry {
            id,
            path: Some(format!(
                "/kubepods/burstable/pod{id:032x}/{}",
                "c".repeat(64)
            )),
            name: None,
            name_kind: None,
        });
    }
    w.window(1, 2000, window_json(1).as_bytes());
    w.flush(false).unwrap();
    let rec = Recording::open(&p).unwrap();
    assert_eq!(rec.names().len(), 20_000);
    let mut biggest = 0;
    rec.for_each(|i| {
        if let Item::Names(j) = i {
            biggest = biggest.max(j.len());
        }
    });
    assert!(biggest <= super::writer::TABLE_RECORD, "{biggest}");
    let mut x = 1u64;
    for s in 2..=(super::writer::TABLE_KEEP_WINDOWS + 400) {
        w.name(NameEntry {
            id: 1_000_000,
            path: Some("/live".into()),
            name: None,
            name_kind: None,
        });
        for _ in 0..20 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w.event(&runq_record(x, 1_000_000, x >> 3));
        }
        w.window(s, 1000 + s, window_json(s).as_bytes());
        w.flush(false).unwrap();
    }
    assert!(w.stats.rotations >= 1, "{:?}", w.stats);
    drop(w);
    // The newest part names the live cgroup, not the 20 000 gone for more than the keep time.
    let rec = Recording::open(&p).unwrap();
    let names = rec.names();
    assert!(names.contains_key(&1_000_000));
    assert!(names.len() < 100, "{}", names.len());
}

#[test]
fn only_regular_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Recording::open(&fifo).err().unwrap().to_string();
    assert!(e.contains("FIFO") && e.contains("regular file"), "{e}");
    let e = Recording::open(std::path::Path::new("/dev/zero"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("a device"), "{e}");
    let e = Recording::open(dir.path()).err().unwrap().to_string();
    assert!(e.contains("a directory"), "{e}");
}

#[test]
fn reads_in_place_past_garbage_of_any_length() {
    // A recording followed by 3 MiB of garbage (more than one scan block), then one more whole
    // chunk: the scan crosses block boundaries, including a sync marker cut by one.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let bytes = write(&p, 2, 5);
    let first = bytes.windows(8).position(|w| w == SYNC).unwrap();
    let mut b = bytes.clone();
    let mut x = 7u64;
    for _ in 0..(3 << 20) {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        b.push((x >> 56) as u8 & 0x7f);
    }
    // Put the tail's chunks so that the sync marker straddles the second 1 MiB boundary.
    let pad = (2 << 20) - 3 - (b.len() - bytes.len()) % (1 << 20);
    b.extend(std::iter::repeat_n(0u8, pad % (1 << 20)));
    b.extend_from_slice(&bytes[first..]);
    std::fs::write(&p, &b).unwrap();
    let rec = Recording::open(&p).unwrap();
    assert_eq!(windows_of(&rec), vec![1, 2, 1, 2]);
    assert!(rec.stats.skipped_bytes >= 3 << 20);
}

#[test]
fn shifting_parts_keeps_the_newest_and_replaces_links_without_following() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let target = dir.path().join("precious");
    std::fs::write(&target, b"precious").unwrap();
    std::fs::write(&p, b"run 3").unwrap();
    std::fs::write(dir.path().join("r.1"), b"run 2").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("r.2")).unwrap();
    super::writer::shift_parts(&p, 2).unwrap();
    assert!(!p.exists());
    assert_eq!(std::fs::read(dir.path().join("r.1")).unwrap(), b"run 3");
    assert_eq!(std::fs::read(dir.path().join("r.2")).unwrap(), b"run 2");
    assert!(!dir.path().join("r.3").exists(), "the oldest goes");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"precious",
        "the link was removed, not followed"
    );
}

/// A part at `p` holding `windows` windows (none: the header only).
fn part_with(p: &std::path::Path, windows: u64) {
    let mut w = Writer::create(p, HELLO.as_bytes(), None, OnFull::Stop, true).unwrap();
    for s in 1..=windows {
        w.window(s, 1000 + s, window_json(s).as_bytes());
    }
    w.flush(true).unwrap();
}

#[test]
fn a_restart_shifts_only_parts_with_records_and_never_refuses_what_a_run_left() {
    use super::restart::make_way;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let at = |s: &str| dir.path().join(s);
    part_with(&at("r.1"), 3);
    let before = std::fs::read(at("r.1")).unwrap();
    // An empty FILE (a start on a full disk) and a header-only one are reused, not shifted in.
    std::fs::write(&p, b"").unwrap();
    let notes = make_way(&p, 3).unwrap();
    assert!(notes[0].contains("reused"), "{notes:?}");
    part_with(&p, 0);
    make_way(&p, 3).unwrap();
    // Cut inside the header too.
    part_with(&p, 0);
    let h = std::fs::read(&p).unwrap();
    std::fs::write(&p, &h[..h.len() / 2]).unwrap();
    make_way(&p, 3).unwrap();
    assert!(!p.exists() && !at("r.2").exists());
    assert_eq!(std::fs::read(at("r.1")).unwrap(), before);
    // Events and no window (a recorder that died within its first window): shifted, kept.
    let mut w = Writer::create(&p, HELLO.as_bytes(), None, OnFull::Stop, true).unwrap();
    w.event(&runq_record(1, 8, 1));
    w.flush(true).unwrap();
    drop(w);
    let events_only = std::fs::read(&p).unwrap();
    let notes = make_way(&p, 3).unwrap();
    assert!(notes[0].contains("existed"), "{notes:?}");
    assert_eq!(std::fs::read(at("r.1")).unwrap(), events_only);
    assert_eq!(std::fs::read(at("r.2")).unwrap(), before);
    std::fs::rename(at("r.2"), at("r.1")).unwrap();
    // A header-only FILE.next (killed between creating it and its rename) is removed.
    part_with(&Writer::next_path(&p), 0);
    let notes = make_way(&p, 3).unwrap();
    assert!(notes[0].contains("removed"), "{notes:?}");
    assert!(!Writer::next_path(&p).exists());
    // A FILE.next with windows is the newest part: shifted in after FILE.
    part_with(&p, 2);
    let file = std::fs::read(&p).unwrap();
    part_with(&Writer::next_path(&p), 1);
    let next = std::fs::read(Writer::next_path(&p)).unwrap();
    make_way(&p, 3).unwrap();
    assert_eq!(std::fs::read(at("r.1")).unwrap(), next);
    assert_eq!(std::fs::read(at("r.2")).unwrap(), file);
    assert_eq!(std::fs::read(at("r.3")).unwrap(), before);
    assert!(!p.exists() && !Writer::next_path(&p).exists());
    // What is not a recording, or a link, is set aside, never followed, removed or refused.
    std::fs::write(&p, b"not a recording at all").unwrap();
    let target = at("precious");
    std::fs::write(&target, b"precious").unwrap();
    std::os::unix::fs::symlink(&target, Writer::next_path(&p)).unwrap();
    let notes = make_way(&p, 3).unwrap();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes.iter().all(|n| n.contains("set aside")), "{notes:?}");
    let orphans = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".orphan-")
        })
        .count();
    assert_eq!(orphans, 2);
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(std::fs::read(at("r.3")).unwrap(), before);
}

#[test]
fn below_min_free_nothing_is_written_and_it_is_counted() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let free = super::part::free_bytes(&p).expect("statvfs of a temporary directory");
    assert!(free > 0);
    // More free space asked than the filesystem has: not even the header is written.
    let mut part = super::part::Part::new(
        &p,
        crate::safety::files::create_new(&p).unwrap(),
        super::format::header(HELLO.as_bytes()),
        Some(u64::MAX),
    );
    let why = part.down().expect("not writing").to_string();
    assert!(why.contains("below --min-free"), "{why}");
    part.write(b"a chunk", 1);
    let d = part.counters();
    assert_eq!(
        (
            d.dropped_chunks.load(Relaxed),
            d.dropped_bytes.load(Relaxed)
        ),
        (1, 7)
    );
    assert_eq!(d.write_errors.load(Relaxed), 0, "nothing was tried");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
}

#[test]
fn a_part_that_holds_only_its_header_is_started_again_not_shifted() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let at = |n: &str| dir.path().join(n);
    let header = super::format::header(HELLO.as_bytes());
    let mut part = super::part::Part::new(
        &p,
        crate::safety::files::create_new(&p).unwrap(),
        header.clone(),
        None,
    );
    part.set_sync(false);
    // Every chunk for it dropped on the way (the disk thread's queue was full): at the rotation
    // it holds its header only, and no empty part goes into the history.
    let newer = super::format::header(br#"{"type":"hello","schema":1,"newer":true}"#);
    part.rotate(3, &newer);
    assert!(!at("r.1").exists(), "an empty part was shifted in");
    assert!(!at("r.next").exists());
    assert_eq!(
        std::fs::read(&p).unwrap(),
        newer,
        "started again with the new header"
    );
    assert_eq!(
        part.counters()
            .rotations
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // With a chunk in it, the part is shifted as always.
    part.write(b"a chunk", 1);
    part.rotate(3, &header);
    let mut old = newer.clone();
    old.extend_from_slice(b"a chunk");
    assert_eq!(std::fs::read(at("r.1")).unwrap(), old);
    assert_eq!(std::fs::read(&p).unwrap(), header);
}

#[test]
fn the_next_part_starts_with_the_hello_set_last() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let mut w = Writer::create(
        &p,
        HELLO.as_bytes(),
        Some(64 << 10),
        OnFull::Rotate { keep: 2 },
        false,
    )
    .unwrap();
    w.set_sync(false);
    let mut hello: serde_json::Value = serde_json::from_str(HELLO).unwrap();
    hello["recorder"] = serde_json::json!({"recorder_dropped_chunks": 3});
    w.set_hello(hello.to_string().as_bytes());
    let mut x = 1u64;
    for s in 1..=100u64 {
        for _ in 0..100 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w.event(&runq_record(x, s, x >> 3));
        }
        w.window(s, 1000 + s, window_json(s).as_bytes());
        if w.flush(false).unwrap() == Flushed::Rotated {
            break;
        }
    }
    let old = Recording::open(&dir.path().join("r.1")).unwrap();
    assert_eq!(old.hello_json.as_deref(), Some(HELLO.as_bytes()));
    let new = Recording::open(&p).unwrap();
    let got: serde_json::Value =
        serde_json::from_slice(new.hello_json.as_deref().unwrap()).unwrap();
    assert_eq!(got["recorder"]["recorder_dropped_chunks"], 3);
    assert!(!new.windows.is_empty());
}

/// A chunk of `records` compressed as the writer compresses them.
fn zstd_chunk(records: &[u8], seq: u32) -> Vec<u8> {
    let payload = zstd::bulk::compress(records, 3).unwrap();
    format::ChunkHeader {
        payload_len: payload.len() as u32,
        raw_len: records.len() as u32,
        records: 0,
        seq,
        codec: format::CODEC_ZSTD,
        crc: 0,
    }
    .frame(&payload)
}

/// Records of `tag` with bodies of `body` bytes, `raw` bytes of them in all.
fn records_of(tag: u8, body: usize, raw: usize) -> Vec<u8> {
    let mut one = vec![tag];
    format::put_uleb(&mut one, body as u64);
    one.resize(one.len() + body, 0);
    let mut out = Vec::with_capacity(raw);
    while out.len() + one.len() <= raw {
        out.extend_from_slice(&one);
    }
    out
}

#[test]
fn a_file_of_overlapping_chunk_headers_is_checksummed_a_bounded_number_of_times() {
    // A candidate header every 32 bytes for 4 MiB, each saying a 1 MiB payload follows: read
    // one candidate at a time, that is 128 Ki checksums of 1 MiB each.
    let dir = tempfile::tempdir().unwrap();
    let good = write(&dir.path().join("r"), 3, 5);
    let first = good.windows(8).position(|w| w == SYNC).unwrap();
    let mut b = good[..first].to_vec();
    let h = format::ChunkHeader {
        payload_len: 1 << 20,
        raw_len: 1 << 20,
        records: 1,
        seq: 0,
        codec: format::CODEC_STORED,
        crc: 0,
    };
    while b.len() < first + (4 << 20) {
        b.extend_from_slice(&SYNC);
        b.extend_from_slice(&h.fields());
        b.extend_from_slice(&0u32.to_le_bytes());
    }
    // Then the recording's chunks, past where the last candidate's payload would end.
    b.resize(b.len() + (1 << 20) + 64, 0);
    b.extend_from_slice(&good[first..]);
    let len = b.len() as u64;
    let rec = Recording::from_bytes(b).unwrap();
    assert_eq!(windows_of(&rec), vec![1, 2, 3]);
    assert!(
        rec.stats.checksummed_bytes <= format::MAX_OVERLAP as u64 * len,
        "{} bytes checksummed in a file of {len}",
        rec.stats.checksummed_bytes
    );
    assert!(rec.stats.bad_chunks >= (4 << 20) / 32, "{:?}", rec.stats);
}

#[test]
fn a_damaged_length_overlapping_good_chunks_still_resyncs_to_them() {
    // The first window's chunk claims a payload running over the next two: they are still read.
    let dir = tempfile::tempdir().unwrap();
    let mut b = write(&dir.path().join("r"), 3, 5);
    let starts: Vec<usize> = b
        .windows(SYNC.len())
        .enumerate()
        .filter(|(_, w)| *w == SYNC)
        .map(|(i, _)| i)
        .collect();
    let claim = (starts[4] - starts[1]) as u32 + 10;
    b[starts[1] + 8..starts[1] + 12].copy_from_slice(&claim.to_le_bytes());
    let rec = Recording::from_bytes(b).unwrap();
    assert_eq!(windows_of(&rec), vec![2, 3]);
    assert_eq!(rec.stats.bad_chunks, 1);
}

#[test]
fn more_windows_than_a_file_may_index_is_refused_in_one_line() {
    // Empty windows (18 bytes a record) in two chunks of 32 MiB: 3.7 M windows from 2 KiB.
    let recs = records_of(Tag::Window as u8, 16, format::MAX_CHUNK);
    let c = zstd_chunk(&recs, 0);
    let mut file = format::header(HELLO.as_bytes());
    file.extend_from_slice(&c);
    file.extend_from_slice(&c);
    let e = Recording::from_bytes(file).err().unwrap();
    assert_eq!(
        e,
        FormatError::TooManyWindows {
            limit: format::MAX_WINDOWS
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("more than 2097152 window records")
            && msg.contains("check where it came from"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
}

#[test]
fn chunks_expanding_past_the_files_budget_are_refused() {
    // Unknown records of 1 MiB of zeros: each 32 MiB chunk is a few KiB on disk. Eight of them
    // are the least budget any file has; the ninth is past it.
    let recs = records_of(0x42, 1 << 20, format::MAX_CHUNK);
    let c = zstd_chunk(&recs, 0);
    let file = |n: usize| {
        let mut f = format::header(HELLO.as_bytes());
        for _ in 0..n {
            f.extend_from_slice(&c);
        }
        f
    };
    let n = (format::MIN_EXPANSION / recs.len() as u64) as usize;
    let rec = Recording::from_bytes(file(n)).unwrap();
    assert_eq!(rec.stats.chunks, n as u64);
    let e = Recording::from_bytes(file(n + 1)).err().unwrap();
    assert_eq!(e, FormatError::Expands { limit_mib: 256 });
    let msg = e.to_string();
    assert!(msg.contains("expand to more than 256 MiB"), "{msg}");
}

/// Characters a recorded string may hold that must never reach an output raw.
const HOSTILE: &[char] = &[
    '\0', '\x07', '\x08', '\t', '\n', '\x0b', '\x0c', '\r', '\x1b', '\x1f', '\x7f', '\u{80}',
    '\u{85}', '\u{9b}', '\u{9f}', '\u{61c}', '\u{200b}', '\u{200f}', '\u{2028}', '\u{2029}',
    '\u{202e}', '\u{2066}', '\u{2069}', '\u{feff}', '"', '\\', '{', '}', 'a', '/', 'é',
];

/// A deterministic string of `HOSTILE` characters for `seed`.
fn hostile(seed: &mut u64, len: usize) -> String {
    (0..len)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            HOSTILE[(*seed >> 33) as usize % HOSTILE.len()]
        })
        .collect()
}

/// `s` as a JSON string, the way a recorder would write it (the encoder escapes C0 and leaves
/// DEL, C1 and the invisible characters raw), or raw as a forger would.
fn json_str(s: &str, raw: bool) -> String {
    if raw {
        format!("\"{s}\"")
    } else {
        serde_json::to_string(s).unwrap()
    }
}

/// The lines of `out` (each must end with its newline): none may hold a raw control or
/// invisible character.
fn assert_lines_clean(out: &str, what: &str) {
    assert!(out.is_empty() || out.ends_with('\n'), "{what}: {out:?}");
    for line in out.split_terminator('\n') {
        assert!(
            !line.chars().any(crate::safety::escape::is_unsafe),
            "{what}: raw control or invisible character in {line:?}"
        );
    }
}

#[test]
fn no_output_line_holds_a_raw_control_character_whatever_was_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 7u64;
    for round in 0..48 {
        // Even rounds: what a recorder writes (valid JSON, C0 escaped). Odd: raw bytes, raw
        // newlines between tokens, invalid JSON: what a forger writes.
        let raw = round % 2 == 1;
        let mut h = |n| json_str(&hostile(&mut seed, n), raw);
        let mut plain = 11u64 + round;
        let hello = HELLO
            .replace(r#""host":"h""#, &format!(r#""host":{}"#, h(12)))
            .replace(r#""kernel":"6.18""#, &format!(r#""kernel":{}"#, h(6)));
        let p = dir.path().join(format!("r{round}"));
        let mut w = Writer::create(&p, hello.as_bytes(), None, OnFull::Stop, false).unwrap();
        w.set_sync(false);
        let sep = if raw { "\n" } else { "" };
        for s in 1..=2u64 {
            w.name(NameEntry {
                id: 7,
                path: Some(hostile(&mut plain, 10)),
                name: Some(hostile(&mut plain, 5)),
                name_kind: None,
            });
            w.event(&runq_record(s * 1_000_000_000, 7, 30_000_000));
            let hist = r#"{"count":200,"sum_us":900.0,"mean_us":4.5,"p50_us":4.0,"p90_us":8.0,"p99_us":9.0,"max_us":9.0,"buckets":[[4096,200]]}"#;
            let runq = hist.replace('}', r#","kinds":{}}"#);
            let json = format!(
                r#"{{"type":"window",{sep}"seq":{s},"end_unix_ms":{},"duration_ms":1000,"events":{{"seen":1,"dropped":0,"counters":{{}}}},"cgroups_tracked":1,"cgroups_evicted":0,"cgroups":[{{"id":7,"hierarchy":{},"path":{},"name":{},"name_kind":null,"runq":{runq},"flags":[{{"family":{},"code":{},"message":{},"suggestion":{}}}],{}:{hist},{}:{{{}:{hist}}}}}]}}"#,
                1000 + s * 1000,
                h(4),
                h(10),
                h(5),
                h(4),
                h(6),
                h(8),
                h(8),
                h(7),
                h(7),
                h(3),
            );
            w.window(s * 1_000_000_000, 1000 + s * 1000, json.as_bytes());
            w.flush(false).unwrap();
        }
        let summary = format!(r#"{{"type":"summary",{sep}"windows":2,"note":{}}}"#, h(9));
        w.record(Tag::Summary, summary.as_bytes());
        w.flush(true).unwrap();
        drop(w);
        let rec = Recording::open(&p).unwrap();
        let r = crate::report::build(&rec);
        if !raw {
            assert!(
                r.windows == 2 && r.families.len() >= 3,
                "round {round}: {r:?}"
            );
        }
        assert_lines_clean(&crate::report::render_text(&r), "report");
        let json = crate::report::render_json(&r);
        assert_lines_clean(&json, "report --json");
        assert_eq!(json.lines().count(), 1, "report --json: {json}");
        let mut out = Vec::new();
        let got = crate::replay::stream(
            &rec,
            &mut out,
            &crate::family::select::EventSelection::all(),
            true,
        )
        .unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_lines_clean(&out, "replay --stream");
        // One line per hello, window, event line and summary: a recorded string made no line of
        // its own, and every line is one JSON object.
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect();
        let printed = lines
            .iter()
            .filter(|v| v["type"] == "window" || v["type"] == "summary")
            .count() as u64;
        assert_eq!(printed + got.not_json, got.windows + 1, "round {round}");
        assert!(lines[0]["type"] == "hello" || raw, "{:?}", lines[0]);
    }
}

#[test]
fn parts_appended_read_as_one_recording_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("r.1"), dir.path().join("r"));
    part_with(&old, 3);
    let mut w = Writer::create(&new, HELLO.as_bytes(), None, OnFull::Stop, true).unwrap();
    for s in 4..=5 {
        w.window(s, 1000 + s, window_json(s).as_bytes());
    }
    w.flush(true).unwrap();
    let mut rec = Recording::open(&old).unwrap();
    let (chunks, events) = (rec.stats.chunks, rec.events);
    let next = Recording::open(&new).unwrap();
    let next_chunks = next.stats.chunks;
    rec.append(next).unwrap();
    assert_eq!(
        windows_of(&rec),
        vec![1, 2, 3, 4, 5],
        "both parts' windows, in order"
    );
    assert_eq!(rec.stats.chunks, chunks + next_chunks);
    assert_eq!(rec.events, events);
    // Every window's JSON comes from its own part's file.
    let (mut buf, mut cached) = (Vec::new(), None);
    for i in 0..rec.windows.len() {
        let j = rec.window_json(i, &mut buf, &mut cached).expect("window");
        let v: serde_json::Value = serde_json::from_slice(j).unwrap();
        assert_eq!(v["seq"], (i + 1) as u64);
    }
    let r = crate::report::build(&rec);
    assert_eq!(r.windows, 5);
}

#[test]
fn a_restart_closes_the_gap_a_kill_mid_shift_left_keeping_the_order() {
    use super::restart::make_way;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r");
    let at = |s: &str| dir.path().join(s);
    // Killed while shifting: FILE.2 → FILE.3 done, FILE.1 → FILE.2 not yet (and older parts
    // beyond): FILE, FILE.1, FILE.3, FILE.4.
    part_with(&p, 1);
    part_with(&at("r.1"), 2);
    part_with(&at("r.3"), 3);
    part_with(&at("r.4"), 4);
    let bytes: Vec<Vec<u8>> = ["r", "r.1", "r.3", "r.4"]
        .iter()
        .map(|n| std::fs::read(at(n)).unwrap())
        .collect();
    let notes = make_way(&p, 10).unwrap();
    assert!(notes.iter().any(|n| n.contains("renumbered")), "{notes:?}");
    // In order, no gap: the old FILE is FILE.1, then FILE.1, FILE.3, FILE.4 as FILE.2 … FILE.4.
    for (i, want) in bytes.iter().enumerate() {
        let got = std::fs::read(at(&format!("r.{}", i + 1))).unwrap();
        assert_eq!(&got, want, "part {i}");
    }
    assert!(!p.exists() && !at("r.5").exists());
}

/// A window serialised straight into the chunk is the same record, byte for byte, as its line
/// handed over whole: short, and long enough for a three-byte length.
#[test]
fn a_window_serialised_in_place_is_the_window_handed_over() {
    let dir = tempfile::tempdir().unwrap();
    let long = serde_json::json!({"type": "window", "names": vec!["x\u{202e}y"; 4000]});
    let values: Vec<serde_json::Value> = (1..=3)
        .map(|s| serde_json::from_str(&window_json(s)).unwrap())
        .chain([long])
        .collect();
    let write = |name: &str, in_place: bool| {
        let path = dir.path().join(name);
        let mut w = writer(&path);
        for (i, v) in values.iter().enumerate() {
            let s = i as u64 + 1;
            if in_place {
                w.window_value(s, 1000 + s, v).unwrap();
            } else {
                let line = serde_json::to_string(v).unwrap();
                let line = crate::safety::escape::json_line(&line);
                w.window(s, 1000 + s, line.as_bytes());
            }
            assert_eq!(w.flush(false).unwrap(), Flushed::Ok);
        }
        w.flush(true).unwrap();
        std::fs::read(&path).unwrap()
    };
    let whole = write("whole.cgtr", false);
    assert_eq!(write("in-place.cgtr", true), whole);
    let rec = Recording::from_bytes(whole).unwrap();
    let mut n = 0;
    rec.for_each(|i| {
        if let Item::Window { json, .. } = i {
            let v: serde_json::Value = serde_json::from_slice(json).unwrap();
            assert_eq!(v, values[n]);
            n += 1;
        }
    });
    assert_eq!(n, 4);
}
