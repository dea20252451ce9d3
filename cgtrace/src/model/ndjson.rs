//! One NDJSON line on a writer: what the live stream, `record --stream` and `replay --stream`
//! print, escaped the same way ([`crate::safety::escape::json_line`]).

use std::io::{self, Write};

use serde::Serialize;

/// Writes one JSON line; `Ok(false)` when the reader went away (EPIPE).
pub fn emit<W: Write, T: Serialize>(out: &mut W, value: &T) -> anyhow::Result<bool> {
    emit_line(out, &serde_json::to_string(value)?)
}

/// `value` as JSON in a buffer sized from `hint` (the length of the last such line) rather than
/// grown by doubling: a window line is ~1 KiB per cgroup (10 MB at 10 000 cgroups), and a
/// doubled buffer would hold up to twice that. Updates `hint`.
pub fn to_string_sized<T: Serialize>(value: &T, hint: &mut usize) -> serde_json::Result<String> {
    let mut buf = Vec::with_capacity(*hint + *hint / 16 + 4096);
    serde_json::to_writer(&mut buf, value)?;
    *hint = buf.len();
    // serde_json writes UTF-8 only.
    Ok(String::from_utf8(buf).expect("serde_json writes UTF-8"))
}

/// A recorded JSON value encoded again by serde, token by token and in its order: what comes
/// out is one line whatever the bytes held (no raw newline between tokens, every string escaped
/// by the encoder). `None` when it is not one JSON value.
pub fn reencode(json: &[u8]) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let mut out = Vec::with_capacity(json.len());
    serde_transcode::transcode(&mut de, &mut serde_json::Serializer::new(&mut out)).ok()?;
    de.end().ok()?;
    String::from_utf8(out).ok()
}

/// Writes one line already serialised (invisible format characters escaped, see
/// [`crate::safety::escape::json_line`]); `Ok(false)` when the reader went away (EPIPE).
pub fn emit_line<W: Write>(out: &mut W, line: &str) -> anyhow::Result<bool> {
    let line = crate::safety::escape::json_line(line);
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reencoding_keeps_order_and_values_and_makes_one_line() {
        let j = br#"{"type":"window","b":1,"a":[1.5,-2,"x"],"n":null}"#;
        assert_eq!(reencode(j).as_deref(), std::str::from_utf8(j).ok());
        // Whitespace between tokens, a forged second record: one line, or nothing.
        let forged = b"{\"type\":\n\"window\"}";
        assert_eq!(reencode(forged).as_deref(), Some(r#"{"type":"window"}"#));
        assert_eq!(reencode(b"{}\n{\"type\":\"hello\"}"), None);
        assert_eq!(
            reencode(b"{\"a\":\"x\ny\"}"),
            None,
            "a raw newline in a string"
        );
        assert_eq!(reencode(b"[[[[").as_deref(), None);
    }
}
