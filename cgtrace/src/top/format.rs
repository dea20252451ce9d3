//! Numbers as the view prints them: short, fixed-width friendly, with units.

pub use crate::hist::micros;

/// A count or rate with a k/M/G suffix: `0`, `12`, `345`, `1.2k`, `12k`, `123k`, `1.2M`.
pub fn si(v: f64) -> String {
    if !v.is_finite() || v < 0.0 {
        return "?".into();
    }
    const UNITS: [(f64, &str); 3] = [(1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, unit) in UNITS {
        if v >= scale * 0.9995 {
            let x = v / scale;
            return if x < 9.95 {
                format!("{x:.1}{unit}")
            } else {
                format!("{x:.0}{unit}")
            };
        }
    }
    if v > 0.0 && v < 9.95 && v.fract() != 0.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// Bytes in binary units: `512B`, `12.3MiB`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b}B");
    }
    let mut v = b as f64 / 1024.0;
    for unit in UNITS {
        if v < 1023.95 {
            return if v < 9.95 {
                format!("{v:.1}{unit}")
            } else {
                format!("{v:.0}{unit}")
            };
        }
        v /= 1024.0;
    }
    format!("{v:.0}PiB")
}

/// A percentage: `0%`, `3.4%`, `42%`, `100%`.
pub fn percent(p: f64) -> String {
    if !p.is_finite() {
        return "?".into();
    }
    if p > 0.0 && p < 9.95 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// An interval: `100ms`, `1s`, `1.5s`, `2m`.
pub fn interval(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

pub use crate::units::clock_utc;

/// Display columns `s` takes on a terminal (a CJK character takes two, a combining mark none).
pub fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// The pieces of `s` a cut must not split, with their display widths: each escape the view wrote
/// for an unsafe character (`\x1b`, `\u{202e}`: see [`crate::safety::escape`]) is one piece, as is
/// every other character. Cutting by pieces never leaves half a multi-byte character or half an
/// escape (which would show a different, misleading one).
fn pieces(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let len =
            escape_len(&b[i..]).unwrap_or_else(|| s[i..].chars().next().map_or(1, char::len_utf8));
        out.push(&s[i..i + len]);
        i += len;
    }
    out
}

/// The length of the `\xNN` or `\u{N…}` escape at the start of `b`, if one is there.
fn escape_len(b: &[u8]) -> Option<usize> {
    match b {
        [b'\\', b'x', h1, h2, ..] if h1.is_ascii_hexdigit() && h2.is_ascii_hexdigit() => Some(4),
        [b'\\', b'u', b'{', rest @ ..] => {
            let digits = rest.iter().take_while(|c| c.is_ascii_hexdigit()).count();
            (digits > 0 && rest.get(digits) == Some(&b'}')).then_some(3 + digits + 1)
        }
        _ => None,
    }
}

/// The most pieces from the end of `p` that fit in `room` columns, and their width.
fn tail_fitting(p: &[&str], room: usize) -> (usize, usize) {
    let mut used = 0;
    let mut n = 0;
    for piece in p.iter().rev() {
        let w = width(piece);
        if used + w > room {
            break;
        }
        used += w;
        n += 1;
    }
    (n, used)
}

/// The most pieces from the start of `p` that fit in `room` columns.
fn head_fitting(p: &[&str], room: usize) -> usize {
    let mut used = 0;
    p.iter()
        .take_while(|piece| {
            used += width(piece);
            used <= room
        })
        .count()
}

/// Keeps the end of `s` (the most specific part of a path) within `cols` display columns, marking
/// the cut with `…`.
pub fn ellipsize_start(s: &str, cols: usize) -> String {
    if width(s) <= cols {
        return s.to_string();
    }
    if cols == 0 {
        return String::new();
    }
    let p = pieces(s);
    let (n, _) = tail_fitting(&p, cols - 1);
    let mut out = String::from("…");
    out.push_str(&p[p.len() - n..].concat());
    out
}

/// Keeps both ends of `s` (a name's namespace and container, a path's root and leaf) within
/// `cols` display columns, cutting the middle (a pod hash, a long id) with `…`. The end is the
/// informative part: it keeps the whole last path component (the container, the unit) when that
/// fits, and at least two thirds of the room.
pub fn ellipsize_middle(s: &str, cols: usize) -> String {
    if width(s) <= cols {
        return s.to_string();
    }
    if cols < 5 {
        return ellipsize_start(s, cols);
    }
    let room = cols - 1;
    let leaf = s.rfind('/').map_or(s.len(), |i| width(&s[i..]));
    let tail_room = if leaf <= room {
        leaf.max(room - room / 3)
    } else {
        room - room / 3
    };
    let p = pieces(s);
    let (tail_n, tail_w) = tail_fitting(&p, tail_room);
    let head_n = head_fitting(&p[..p.len() - tail_n], room - tail_w);
    let mut out: String = p[..head_n].concat();
    out.push('…');
    out.push_str(&p[p.len() - tail_n..].concat());
    out
}

/// Keeps the start of `s` within `cols` display columns, marking the cut with `…`.
pub fn ellipsize_end(s: &str, cols: usize) -> String {
    if width(s) <= cols {
        return s.to_string();
    }
    if cols == 0 {
        return String::new();
    }
    let p = pieces(s);
    let n = head_fitting(&p, cols - 1);
    let mut out: String = p[..n].concat();
    out.push('…');
    out
}

/// `s` cut to `cols` display columns ([`ellipsize_end`]) and padded to exactly `cols`, on the
/// right (`left_aligned`) or on the left.
pub fn pad(s: &str, cols: usize, left_aligned: bool) -> String {
    let mut cut = ellipsize_end(s, cols);
    let fill = " ".repeat(cols.saturating_sub(width(&cut)));
    if left_aligned {
        cut.push_str(&fill);
        cut
    } else {
        fill + &cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fit_six_characters() {
        let cases = [
            (0.8121, "<1µs"),
            (0.0004, "<1µs"),
            (0.9996, "1.0µs"),
            (6.1, "6.1µs"),
            (180.4, "180µs"),
            (2210.9, "2.21ms"),
            (41_233.2, "41.2ms"),
            (350_000.0, "350ms"),
            (1_500_000.0, "1.50s"),
            (12_500_000.0, "12.5s"),
            (125_000_000.0, "125s"),
            (0.0, "0"),
        ];
        for (us, want) in cases {
            assert_eq!(micros(us), want, "{us}");
            assert!(micros(us).chars().count() <= 6);
        }
        // Rounding at unit edges never gives four digits.
        assert_eq!(micros(9.99), "10µs");
        assert_eq!(micros(999.9), "1.00ms");
        assert_eq!(micros(99_990.0), "100ms");
    }

    #[test]
    fn si_and_bytes() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(12.0), "12");
        assert_eq!(si(2.5), "2.5");
        assert_eq!(si(345.0), "345");
        assert_eq!(si(1234.0), "1.2k");
        assert_eq!(si(999.9), "1.0k");
        assert_eq!(si(123_456.0), "123k");
        assert_eq!(si(1_234_567.0), "1.2M");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(12_900_000), "12MiB");
        assert_eq!(bytes(3 * 1024 * 1024 / 2), "1.5MiB");
        assert_eq!(percent(3.44), "3.4%");
        assert_eq!(percent(42.4), "42%");
        assert_eq!(interval(250), "250ms");
        assert_eq!(interval(2000), "2s");
        assert_eq!(interval(120_000), "2m");
        assert_eq!(clock_utc(1_763_825_696_000), "15:34:56Z");
    }

    #[test]
    fn ellipsis_keeps_the_right_end() {
        assert_eq!(ellipsize_start("/a/b/c", 10), "/a/b/c");
        assert_eq!(ellipsize_start("/kubepods/pod1/abc", 8), "…od1/abc");
        assert_eq!(ellipsize_start("/kubepods/pod1/abc", 8).chars().count(), 8);
        assert_eq!(ellipsize_end("interval", 4), "int…");
        let name = "shop/checkout-6c9f7d8b5-xk2p9/php-fpm";
        assert_eq!(ellipsize_middle(name, 20), "shop/c…xk2p9/php-fpm");
        assert_eq!(ellipsize_middle(name, 40), name);
        assert_eq!(ellipsize_middle(name, 3), "…pm");
        // The leaf is kept whole when it fits.
        let path = "/kubepods/burstable/pod0a1b2c3d-4e5f/cri-containerd-abc.scope";
        assert_eq!(
            ellipsize_middle(path, 40),
            "/kubepods/bur…f/cri-containerd-abc.scope"
        );
        assert_eq!(ellipsize_middle(path, 30), "/kub…/cri-containerd-abc.scope");
    }

    #[test]
    fn cuts_never_split_a_character_or_an_escape() {
        // Tenant names reach the view escaped (`\x1b`, `\u{202e}`): a cut keeps each escape whole.
        let hostile = "evil\\x1b[31m\\u{202e}服务-αβγ/\\x07leaf\\u{200b}";
        for cols in 0..=width(hostile) + 1 {
            for cut in [
                ellipsize_start(hostile, cols),
                ellipsize_middle(hostile, cols),
                ellipsize_end(hostile, cols),
            ] {
                assert!(width(&cut) <= cols, "{cut:?} wider than {cols}");
                let kept: String = cut.split('…').collect();
                // Every escape left in the cut is complete and was in the name.
                for (i, _) in kept.match_indices('\\') {
                    let len = escape_len(&kept.as_bytes()[i..]).expect("a whole escape");
                    assert!(hostile.contains(&kept[i..i + len]), "{cut:?}");
                }
            }
        }
        // A double-width character counts two columns and is never halved.
        assert_eq!(ellipsize_end("服务服务", 4), "服…");
        assert_eq!(pad("服务", 5, true), "服务 ");
        assert_eq!(pad("12", 4, false), "  12");
        assert_eq!(ellipsize_start("ab\\x1bcd", 7), "…\\x1bcd");
        assert_eq!(ellipsize_start("ab\\x1bcd", 5), "…cd");
        assert_eq!(ellipsize_end("ab\\x1bcd", 5), "ab…");
    }
}
