//! Text a tenant controls (process names, cgroup paths and names, file names, hostnames) made
//! safe to show: nothing in it can move a terminal's cursor, change its colours, reorder what is
//! shown (bidi overrides) or hide in plain sight (zero-width characters), and in a page nothing
//! in it is markup.
//!
//! Control characters become `\xNN` (C0 and DEL) or `\u{NN}` (C1), and the invisible format
//! characters `\u{NNNN}`. A backslash is left alone: cgroup names hold systemd's own escapes
//! (`dev-disk-by\x2duuid-….swap`), shown as they are.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal or page as itself.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'                  // Arabic letter mark
                | '\u{200b}'..='\u{200f}' // zero-width space/joiners, LRM, RLM
                | '\u{2028}'..='\u{202e}' // line/paragraph separators, LRE..RLO
                | '\u{2060}'..='\u{2069}' // word joiner .. PDI (LRI, RLI, FSI, PDI)
                | '\u{feff}'              // zero-width no-break space
        )
}

fn push_escaped(out: &mut String, c: char) {
    use std::fmt::Write as _;
    let v = u32::from(c);
    let _ = if v < 0x80 {
        write!(out, "\\x{v:02x}")
    } else {
        write!(out, "\\u{{{v:x}}}")
    };
}

/// `s` for a terminal: unsafe characters escaped (borrowed when there are none).
pub fn terminal(s: &str) -> Cow<'_, str> {
    // Printable ASCII, nearly every name and path, is checked a byte at a time (vectorised)
    // instead of a char at a time: the view escapes every cgroup's strings at each snapshot.
    let printable_ascii = s
        .bytes()
        .fold(true, |ok, b| ok & (b.wrapping_sub(0x20) < 0x5f));
    if printable_ascii || !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` for HTML text or an attribute value: unsafe characters escaped as for a terminal, then
/// `& < > " '` as entities.
pub fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_unsafe(c) => push_escaped(&mut out, c),
            c => out.push(c),
        }
    }
    out
}

/// Raw in a JSON line but unsafe: all but the whitespace JSON may hold between tokens (inside a
/// string the encoder has escaped those already).
fn json_unsafe(c: char) -> bool {
    is_unsafe(c) && !matches!(c, '\t' | '\n' | '\r')
}

/// The first character of `s` that [`json_unsafe`] holds, with its byte offset. Printable ASCII
/// and JSON's whitespace, nearly every byte of a window line, are passed over a byte at a time;
/// a character is decoded only where a byte is DEL, a C0 control or not ASCII (the daemon spent
/// 7 % of its time decoding every character of 10 000 cgroups' lines, `perf`).
fn first_json_unsafe(s: &str) -> Option<(usize, char)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let x = b[i];
        if x.wrapping_sub(0x20) < 0x5f || matches!(x, b'\t' | b'\n' | b'\r') {
            i += 1;
            continue;
        }
        // A char boundary: every byte passed over was ASCII, and a char is stepped whole.
        let c = s[i..].chars().next()?;
        if json_unsafe(c) {
            return Some((i, c));
        }
        i += c.len_utf8();
    }
    None
}

/// A JSON encoder's string fragment (what `serde_json` writes between escapes) with the
/// characters [`json_line`] escapes written as `\uNNNN`, for a value serialised straight onto a
/// writer ([`crate::model::ndjson::SafeFormatter`]) rather than escaped as a whole line after.
pub fn json_fragment<W: std::io::Write + ?Sized>(
    out: &mut W,
    fragment: &str,
) -> std::io::Result<()> {
    let mut rest = fragment;
    while let Some((i, c)) = first_json_unsafe(rest) {
        out.write_all(&rest.as_bytes()[..i])?;
        write!(out, "\\u{:04x}", u32::from(c))?;
        rest = &rest[i + c.len_utf8()..];
    }
    out.write_all(rest.as_bytes())
}

/// A JSON line whose strings may hold characters JSON leaves raw but a terminal acts on: DEL
/// and the C1 controls (U+0080..U+009F: CSI is U+009B), invisible format characters (bidi
/// overrides, zero-width characters, line separators). Each is written as a `\uNNNN` escape, so
/// the line parses to the same value and a terminal shows it as text, in order. (The encoder
/// escapes the C0 controls itself; found by the `names` fuzz target.)
pub fn json_line(line: &str) -> Cow<'_, str> {
    if first_json_unsafe(line).is_none() {
        return Cow::Borrowed(line);
    }
    use std::fmt::Write as _;
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if json_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_what_moves_or_hides() {
        assert!(matches!(terminal("kubepods/pod-a"), Cow::Borrowed(_)));
        assert_eq!(terminal("a\x1b[31mred\x07"), "a\\x1b[31mred\\x07");
        assert_eq!(terminal("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(terminal("x\u{9b}y\u{200b}z\n"), "x\\u{9b}y\\u{200b}z\\x0a");
        // systemd's own escapes and non-Latin names pass as they are.
        assert_eq!(
            terminal("dev-disk-by\\x2duuid.swap"),
            "dev-disk-by\\x2duuid.swap"
        );
        assert_eq!(terminal("服务-α"), "服务-α");
    }

    #[test]
    fn html_escapes_markup_too() {
        assert_eq!(
            html("<script>alert('x')</script>&\"\u{202e}\x1b"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\\u{202e}\\x1b"
        );
    }

    #[test]
    fn the_view_keeps_only_escaped_strings() {
        let mut cg = crate::model::CgroupWindow {
            name: Some("pod\u{202e}x".into()),
            path: Some("/evil\x1b]0;owned\x07".into()),
            ..Default::default()
        };
        crate::top::rows::escape_for_view(&mut cg);
        assert_eq!(cg.name.as_deref(), Some("pod\\u{202e}x"));
        assert_eq!(cg.path.as_deref(), Some("/evil\\x1b]0;owned\\x07"));
    }

    #[test]
    fn json_lines_keep_their_value() {
        let v = serde_json::json!({"comm": "a\u{202e}b\u{2066}c\x1bd\x7fe\u{9b}f"});
        let line = serde_json::to_string(&v).unwrap();
        let safe = json_line(&line);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }

    #[test]
    fn the_ascii_pass_finds_what_a_char_scan_finds() {
        for s in [
            "",
            "kubepods/pod-a",
            "\x7f",
            "a\tb\nc\rd",
            "a\x01b",
            "é\u{202e}x",
            "服务\u{9b}",
            "plain ascii then \u{feff}",
            "\u{2069}",
            "ascii é ascii",
        ] {
            let want = s.char_indices().find(|&(_, c)| json_unsafe(c));
            assert_eq!(first_json_unsafe(s), want, "{s:?}");
            let mut out = Vec::new();
            json_fragment(&mut out, s).unwrap();
            let mut slow = String::new();
            for c in s.chars() {
                if json_unsafe(c) {
                    slow.push_str(&format!("\\u{:04x}", u32::from(c)));
                } else {
                    slow.push(c);
                }
            }
            assert_eq!(String::from_utf8(out).unwrap(), slow, "{s:?}");
        }
    }
}
