//! One NDJSON line on a writer: what the live stream, `record --stream` and `replay --stream`
//! print, escaped the same way ([`crate::safety::escape::json_line`]).

use std::io::{self, Write};

use serde::Serialize;

/// Writes one JSON line; `Ok(false)` when the reader went away (EPIPE).
pub fn emit<W: Write, T: Serialize>(out: &mut W, value: &T) -> anyhow::Result<bool> {
    emit_line(out, &serde_json::to_string(value)?)
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
