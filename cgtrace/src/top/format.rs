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

/// Keeps the end of `s` (the most specific part of a path) within `width` characters, marking the
/// cut with `…`.
pub fn ellipsize_start(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let keep: String = s.chars().skip(n - (width - 1)).collect();
    format!("…{keep}")
}

/// Keeps both ends of `s` (a name's namespace and container, a path's root and leaf) within
/// `width` characters, cutting the middle (a pod hash, a long id) with `…`.
pub fn ellipsize_middle(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    if width < 5 {
        return ellipsize_start(s, width);
    }
    let head = (width - 1) / 3;
    let tail = width - 1 - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

/// Keeps the start of `s` within `width` characters, marking the cut with `…`.
pub fn ellipsize_end(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
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
    }
}
