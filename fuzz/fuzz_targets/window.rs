//! A window's JSON: parsed into the typed model as replay, report and the view do, diagnosed by
//! every family, escaped for the view and rendered into the HTML report.
#![no_main]

use cgtrace::{family, model::Window, report, top::rows::escape_for_view};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut w) = serde_json::from_slice::<Window>(data) else {
        return;
    };
    family::diagnose(&mut w);
    for cg in &mut w.cgroups {
        let _ = family::flags(cg, w.duration_ms);
        escape_for_view(cg);
    }
    let _ = report::html::render_windows(std::slice::from_ref(&w));
});
