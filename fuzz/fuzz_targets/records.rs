//! Record parsing: arbitrary bytes as the payload of one well-framed stored chunk (valid
//! checksum), so every input reaches the record parser, the index and the event decoder.
#![no_main]

use cgtrace::{
    decode::Record,
    record::{
        format::{CHUNK_HEADER_LEN, ChunkHeader, SYNC, header},
        reader::{Item, Recording},
    },
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut h = ChunkHeader::stored(data.len() as u32, 0);
    h.crc = h.checksum(data);
    let mut bytes = header(br#"{"type":"hello"}"#);
    bytes.reserve(CHUNK_HEADER_LEN + data.len());
    bytes.extend_from_slice(&SYNC);
    bytes.extend_from_slice(&h.fields());
    bytes.extend_from_slice(&h.crc.to_le_bytes());
    bytes.extend_from_slice(data);
    let rec = Recording::from_bytes(bytes).expect("a valid header");
    rec.for_each(|item| {
        if let Item::Event(raw) = item
            && let Ok(r) = Record::from_bytes(raw)
        {
            let _ = r.cgroup_id();
        }
    });
    let (mut buf, mut cached) = (Vec::new(), None);
    for i in 0..rec.windows.len() {
        let _ = rec.window_json(i, &mut buf, &mut cached);
    }
});
