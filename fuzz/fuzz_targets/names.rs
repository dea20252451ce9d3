//! The names a recording carries (cgroup names, read files) and the strings a tenant controls:
//! the name tables' JSON, the container-name parser on any path, and every escaper (which must
//! leave nothing unsafe and keep JSON values equal).
#![no_main]

use cgtrace::{
    cgroup::name::derive,
    family::reads::ReadFile,
    record::NameEntry,
    safety::escape::{html, is_unsafe, json_line, terminal},
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Vec<NameEntry>>(data);
    let _ = serde_json::from_slice::<Vec<ReadFile>>(data);
    let s = String::from_utf8_lossy(data);
    if let Some(n) = derive(&s) {
        let _ = n.labels();
    }
    assert!(!terminal(&s).chars().any(is_unsafe));
    let h = html(&s);
    assert!(!h.chars().any(|c| is_unsafe(c) || c == '<' || c == '>'));
    let line = serde_json::to_string(&serde_json::Value::String(s.to_string())).unwrap();
    let safe = json_line(&line);
    assert!(!safe.chars().any(is_unsafe));
    assert_eq!(
        serde_json::from_str::<String>(&safe).unwrap(),
        s.as_ref(),
        "escaping keeps the value"
    );
});
