//! One NDJSON line on a writer: what the live stream, `record --stream` and `replay --stream`
//! print, escaped the same way ([`crate::safety::escape::json_line`]).

use std::io::{self, Write};

use serde::Serialize;

/// `serde_json`'s compact encoding, its strings escaped as [`crate::safety::escape::json_line`]
/// escapes a whole line: a value can go straight onto a writer, without a line in memory first
/// (a window is ~1 KiB per cgroup: 10 MB at 10 000 cgroups).
pub struct SafeFormatter;

impl serde_json::ser::Formatter for SafeFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        crate::safety::escape::json_fragment(writer, fragment)
    }
}

/// Writes `value` as one escaped JSON line straight onto `out` (no copy of the line in memory);
/// `Ok(false)` when the reader went away (EPIPE).
pub fn emit_streamed<W: Write, T: Serialize>(out: &mut W, value: &T) -> anyhow::Result<bool> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, SafeFormatter);
    let written = value
        .serialize(&mut ser)
        .map_err(|e| match e.io_error_kind() {
            Some(kind) => io::Error::from(kind),
            None => io::Error::other(e),
        })
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `value` as escaped JSON appended to `out` (a recording's chunk buffer).
pub fn append<T: Serialize>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(
        out,
        SafeFormatter,
    ))
}

/// Writes one JSON line; `Ok(false)` when the reader went away (EPIPE).
pub fn emit<W: Write, T: Serialize>(out: &mut W, value: &T) -> anyhow::Result<bool> {
    emit_line(out, &serde_json::to_string(value)?)
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

    #[test]
    fn a_streamed_line_is_the_escaped_line() {
        #[derive(Serialize)]
        struct V<'a> {
            name: &'a str,
            #[serde(rename = "k\u{202e}ey")]
            n: u32,
            list: Vec<&'a str>,
        }
        let v = V {
            name: "evil\u{202e}txt\u{9b}31m\x7f\"q\"\n\u{200b}",
            n: 3,
            list: vec!["plain", "é\u{2028}", ""],
        };
        let whole = format!(
            "{}\n",
            crate::safety::escape::json_line(&serde_json::to_string(&v).unwrap())
        );
        let mut out = Vec::new();
        assert!(emit_streamed(&mut out, &v).unwrap());
        assert_eq!(String::from_utf8(out).unwrap(), whole);
        assert!(
            whole.contains("\\u202e") && whole.contains("\\u009b") && whole.contains("\\u007f")
        );
        let mut appended = b"x".to_vec();
        append(&mut appended, &v).unwrap();
        assert_eq!(&appended[1..], whole.trim_end().as_bytes());
    }
}
