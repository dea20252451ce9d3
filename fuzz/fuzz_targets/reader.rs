//! The recording reader on arbitrary bytes: it must never panic, hang or allocate without bound,
//! whatever the file holds. With the first byte odd, the chunk checksums of the rest are
//! recomputed first, so mutations get past the CRC into the decompressor and the record parser.
#![no_main]

use cgtrace::{
    family::select::EventSelection,
    model::Window,
    record::{format::repair_checksums, reader::Recording},
    replay, report,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 {
        repair_checksums(&mut bytes);
    }
    let Ok(rec) = Recording::from_bytes(bytes) else {
        return;
    };
    let _ = rec.hello();
    let _ = rec.stats.warning();
    let (mut buf, mut cached) = (Vec::new(), None);
    for i in 0..rec.windows.len() {
        if let Some(j) = rec.window_json(i, &mut buf, &mut cached) {
            let _ = serde_json::from_slice::<Window>(j);
        }
    }
    let _ = replay::stream(&rec, &mut std::io::sink(), &EventSelection::all(), true);
    let _ = report::render_text(&report::build(&rec));
});
