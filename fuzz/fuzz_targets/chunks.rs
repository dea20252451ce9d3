//! Chunk framing alone: the scan (sync search, header checks, checksums, decompression, the
//! record index) on arbitrary bytes behind a valid file header, without playing the recording.
//! With the first byte odd, the chunk checksums are recomputed first.
#![no_main]

use cgtrace::record::{
    format::{header, repair_checksums},
    reader::Recording,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = header(br#"{"type":"hello"}"#);
    bytes.extend_from_slice(rest);
    if mode & 1 == 1 {
        repair_checksums(&mut bytes);
    }
    let Ok(rec) = Recording::from_bytes(bytes) else {
        return;
    };
    let _ = rec.stats.warning();
    let mut n = 0usize;
    rec.for_each(|_| n += 1);
    assert!(n as u64 >= rec.windows.len() as u64);
});
