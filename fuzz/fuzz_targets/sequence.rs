//! Chunk sequences, structure-aware: the input is a list of pieces (whole chunks of records,
//! stored or compressed and possibly repeated, bare chunk headers with any lengths, garbage)
//! built into a file with the format's own framing, so inputs reach multi-chunk states byte
//! mutation rarely does (compression bombs, overlapping headers, a window index near its bound).
//! The file is replayed and reported, and no line of any output may hold a raw control or
//! invisible character.
#![no_main]

use arbitrary::Arbitrary;
use cgtrace::{
    family::select::EventSelection,
    record::{
        format::{self, CODEC_STORED, CODEC_ZSTD, ChunkHeader, SYNC, Tag},
        reader::Recording,
    },
    replay, report,
    safety::escape::is_unsafe,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Piece {
    /// A chunk of records, `repeat` + 1 times.
    Chunk {
        records: Vec<Rec>,
        zstd: bool,
        repeat: u8,
    },
    /// A chunk header alone, whatever its lengths say.
    Header {
        payload_len: u32,
        raw_len: u32,
        codec: u8,
    },
    /// Bytes between chunks.
    Garbage(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Rec {
    /// A window whose strings are the input's.
    Window {
        mono_ns: u64,
        end_unix_ms: u64,
        path: String,
        family: String,
        code: String,
    },
    /// A window record of any bytes.
    RawWindow(Vec<u8>),
    /// A ring-buffer record of any bytes.
    Event(Vec<u8>),
    /// A record of any tag, its body `len` × 256 zeros (compresses to nearly nothing).
    Zeros {
        tag: u8,
        len: u16,
    },
    Summary(String),
}

/// Largest file the harness builds (its own memory, not the reader's).
const MAX_FILE: usize = 64 << 20;

fn build(recs: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        if out.len() > format::MAX_CHUNK {
            break;
        }
        match r {
            Rec::Window {
                mono_ns,
                end_unix_ms,
                path,
                family,
                code,
            } => {
                let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
                let hist = r#"{"count":1,"sum_us":5.0,"mean_us":5.0,"p50_us":5.0,"p90_us":5.0,"p99_us":5.0,"max_us":5.0,"buckets":[[4096,1]]"#;
                let json = format!(
                    r#"{{"type":"window","seq":1,"end_unix_ms":{end_unix_ms},"duration_ms":1000,"events":{{"seen":1,"dropped":0,"counters":{{}}}},"cgroups_tracked":1,"cgroups_evicted":0,"cgroups":[{{"id":7,"hierarchy":"cpu","path":{},"name":null,"name_kind":null,"runq":{hist},"kinds":{{}}}},"flags":[{{"family":{},"code":{},"message":"m","suggestion":"s"}}],{}:{hist}}}}}]}}"#,
                    q(path),
                    q(family),
                    q(code),
                    q(family),
                );
                let mut body = mono_ns.to_le_bytes().to_vec();
                body.extend_from_slice(&end_unix_ms.to_le_bytes());
                format::put_record2(&mut out, Tag::Window, &body, json.as_bytes());
            }
            Rec::RawWindow(b) => format::put_record(&mut out, Tag::Window, b),
            Rec::Event(b) => format::put_record(&mut out, Tag::Event, b),
            Rec::Zeros { tag, len } => {
                out.push(*tag);
                format::put_uleb(&mut out, u64::from(*len) * 256);
                out.resize(out.len() + usize::from(*len) * 256, 0);
            }
            Rec::Summary(s) => {
                let j = format!(
                    r#"{{"type":"summary","note":{}}}"#,
                    serde_json::to_string(s).unwrap_or_default()
                );
                format::put_record(&mut out, Tag::Summary, j.as_bytes());
            }
        }
    }
    out
}

fn framed(h: &ChunkHeader, payload: &[u8]) -> Vec<u8> {
    let mut b = SYNC.to_vec();
    b.extend_from_slice(&h.fields());
    b.extend_from_slice(&h.crc.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

fn assert_clean(out: &str, what: &str) {
    for line in out.split_terminator('\n') {
        assert!(!line.chars().any(is_unsafe), "{what}: {line:?}");
    }
}

fuzz_target!(|pieces: Vec<Piece>| {
    let mut file = format::header(br#"{"type":"hello","host":"fuzz"}"#);
    for p in &pieces {
        match p {
            Piece::Chunk {
                records,
                zstd,
                repeat,
            } => {
                let raw = build(records);
                if raw.len() > format::MAX_CHUNK {
                    continue;
                }
                let payload = if *zstd {
                    zstd::bulk::compress(&raw, 1).unwrap_or_default()
                } else {
                    raw.clone()
                };
                let mut h = ChunkHeader {
                    payload_len: payload.len() as u32,
                    raw_len: raw.len() as u32,
                    records: records.len() as u32,
                    seq: 0,
                    codec: if *zstd { CODEC_ZSTD } else { CODEC_STORED },
                    crc: 0,
                };
                h.crc = h.checksum(&payload);
                let c = framed(&h, &payload);
                for _ in 0..=*repeat {
                    if file.len() + c.len() > MAX_FILE {
                        break;
                    }
                    file.extend_from_slice(&c);
                }
            }
            Piece::Header {
                payload_len,
                raw_len,
                codec,
            } => {
                let h = ChunkHeader {
                    payload_len: *payload_len,
                    raw_len: *raw_len,
                    records: 1,
                    seq: 0,
                    codec: *codec,
                    crc: 0,
                };
                file.extend_from_slice(&framed(&h, &[]));
            }
            Piece::Garbage(g) => file.extend_from_slice(g),
        }
    }
    let Ok(rec) = Recording::from_bytes(file) else {
        return;
    };
    let mut out = Vec::new();
    let _ = replay::stream(&rec, &mut out, &EventSelection::all(), true);
    let out = String::from_utf8(out).expect("replay --stream writes UTF-8");
    assert_clean(&out, "replay --stream");
    for line in out.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "{line:?}"
        );
    }
    let r = report::build(&rec);
    assert_clean(&report::render_text(&r), "report");
    let json = report::render_json(&r);
    assert_clean(&json, "report --json");
    assert_eq!(json.lines().count(), 1);
});
