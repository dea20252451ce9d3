//! The recording file: its layout ([`format`]), writing it ([`writer`]) and reading it back
//! whatever state it is in ([`reader`]). The live recorder that fills it is
//! [`crate::live::recorder`]; `replay`, `report` and the view's player read it.

pub mod disk;
pub mod format;
pub mod part;
pub mod reader;
pub mod restart;
pub mod writer;

use serde::{Deserialize, Serialize};

/// A cgroup's path and name, as the windows show them (for event lines on replay).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameEntry {
    pub id: u64,
    pub path: Option<String>,
    pub name: Option<String>,
    pub name_kind: Option<crate::cgroup::name::NameKind>,
}

/// Parses `--max-size`: bytes with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let m: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(format!("{s:?}: use a number of bytes with K, M, G or T")),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: use a number of bytes with K, M, G or T"))?;
    let v = (n * mult as f64) as u64;
    if v < 64 << 10 {
        return Err(format!("{s:?}: at least 64K"));
    }
    Ok(v)
}

pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
pub(crate) mod tests;
