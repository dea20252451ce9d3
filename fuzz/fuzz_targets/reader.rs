//! The recording reader on arbitrary bytes: it must never panic, hang or allocate without bound,
//! whatever the file holds. With the first byte odd, the chunk checksums of the rest are
//! recomputed first, so mutations get past the CRC into the decompressor and the record parser.
//! No line of `replay --stream`, the text report, `report --json` or `whatif` may hold a raw control or
//! invisible character, and every replayed line is one JSON value.
#![no_main]

use cgtrace::{
    family::select::EventSelection,
    model::Window,
    record::{format::repair_checksums, reader::Recording},
    replay, report,
    safety::escape::is_unsafe,
    whatif,
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
    let mut out = Vec::new();
    let _ = replay::stream(&rec, &mut out, &EventSelection::all(), true);
    let out = String::from_utf8(out).expect("replay --stream writes UTF-8");
    for line in out.lines() {
        assert!(!line.chars().any(is_unsafe), "replay --stream: {line:?}");
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "{line:?}"
        );
    }
    let r = report::build(&rec);
    let w = whatif::analyse(&rec, &whatif::Ask::default());
    for (what, text) in [
        ("report", report::render_text(&r)),
        ("report --json", report::render_json(&r)),
        ("whatif", whatif::render_text(&w)),
        ("whatif --json", whatif::render_json(&w)),
    ] {
        assert!(text.ends_with('\n'), "{what}: {text:?}");
        for line in text.split_terminator('\n') {
            assert!(!line.chars().any(is_unsafe), "{what}: {line:?}");
        }
    }
});
