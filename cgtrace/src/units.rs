//! Units and time formats for people: the time of day, and a throttled period in words (how fast
//! its quota went and the threads that used it) for each place that tells it. A leaf: it takes
//! plain numbers and names, so any module may use it.
//!
//! [`monotonic_ns`] is re-exported here for the live code that stamps with the kernel programs'
//! clock.

pub use cgtrace_common::clock::monotonic_ns;

use crate::safety::escape;

/// Wall-clock time of day in UTC, `HH:MM:SSZ`, from Unix milliseconds.
pub fn clock_utc(unix_ms: u64) -> String {
    let s = unix_ms / 1000;
    format!("{:02}:{:02}:{:02}Z", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

/// Where a throttled period is told. Each place keeps the words, punctuation and escaping it had
/// before one formatter served them all (the text report's `1 CPUs` included: its golden files
/// pin it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PeriodIn {
    /// The text report, under an episode; comms escaped for a terminal.
    Text,
    /// The HTML report's "who burned the quota" table; comms escaped for HTML.
    Html,
    /// The view's detail pane (it escaped the comms when the window came in).
    View,
    /// The `many_threads_burn` diagnosis, with the cgroup's quota in ms (messages are escaped
    /// where they are shown).
    Flag { quota_ms: f64 },
}

/// Milliseconds of a period: one decimal, `12.5 ms`.
pub fn ms(v: f64) -> String {
    format!("{v:.1} ms")
}

/// A throttled period (`ThrottledPeriod` of `family::throttle::burners`) in a phrase: how fast
/// its quota went (`burned_in_ms`, when both ends were seen) and how many threads used it.
///
/// - `Text`: `quota burned in 13.8 ms by 2 threads (20.0 ms CPU)`
/// - `Html`: `2 threads, 20.0 ms CPU`
/// - `View`: `quota gone after 13.8 ms, 2 threads used 20.0 ms`
/// - `Flag`: `quota of 20.0 ms burned in 11.6 ms by 3 threads`
pub fn period(burned_in_ms: Option<f64>, threads: usize, cpu_ms: f64, to: PeriodIn) -> String {
    let cpu = ms(cpu_ms);
    match to {
        PeriodIn::Text => format!(
            "quota burned{} by {threads} threads ({cpu} CPU)",
            burned_in_ms.map_or(String::new(), |b| format!(" in {}", ms(b)))
        ),
        PeriodIn::Html => format!("{threads} threads, {cpu} CPU"),
        PeriodIn::View => format!(
            "quota {}{threads} threads used {cpu}",
            burned_in_ms.map_or(String::new(), |b| format!("gone after {}, ", ms(b)))
        ),
        PeriodIn::Flag { quota_ms } => format!(
            "quota of {} burned in {} by {threads} threads",
            ms(quota_ms),
            ms(burned_in_ms.unwrap_or(0.0))
        ),
    }
}

/// One thread's share of a throttled period (a `PeriodThread`): its CPU time and the CPUs it
/// ran on.
///
/// - `Text`: `sh [13427] 12.0 ms on 1 CPUs`
/// - `Html`: `<code>sh</code> [13427] 12.0 ms on 1 CPU`
/// - `View`: `sh[13427] 12.0 ms on 1 CPU`
/// - `Flag`: `sh` (the diagnosis names the threads only)
pub fn period_thread(comm: &str, tid: u32, cpu_ms: f64, cpus: u32, to: PeriodIn) -> String {
    let comm = match to {
        PeriodIn::Text => format!("{} ", escape::terminal(comm)),
        PeriodIn::Html => format!("<code>{}</code> ", escape::html(comm)),
        PeriodIn::View => comm.to_string(),
        PeriodIn::Flag { .. } => return comm.to_string(),
    };
    let s = if cpus == 1 && to != PeriodIn::Text {
        ""
    } else {
        "s"
    };
    format!("{comm}[{tid}] {} on {cpus} CPU{s}", ms(cpu_ms))
}

/// A duration in µs as the text report writes it: `850 µs`, `12.3 ms`, `1.25 s` (the page writes
/// the view's compact [`crate::hist::micros`]).
pub fn duration_us(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} ms", v / 1e3)
    } else {
        format!("{v:.0} µs")
    }
}

/// For `skip_serializing_if`: a sum that is absent when nothing was added.
pub fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes each place printed before one formatter served them all.
    #[test]
    fn a_period_reads_as_each_place_has_always_written_it() {
        let flag = PeriodIn::Flag { quota_ms: 20.0 };
        let p = |to| period(Some(13.84), 2, 20.0, to);
        assert_eq!(
            p(PeriodIn::Text),
            "quota burned in 13.8 ms by 2 threads (20.0 ms CPU)"
        );
        assert_eq!(p(PeriodIn::Html), "2 threads, 20.0 ms CPU");
        assert_eq!(
            p(PeriodIn::View),
            "quota gone after 13.8 ms, 2 threads used 20.0 ms"
        );
        assert_eq!(p(flag), "quota of 20.0 ms burned in 13.8 ms by 2 threads");
        let p = |to| period(None, 2, 20.0, to);
        assert_eq!(p(PeriodIn::Text), "quota burned by 2 threads (20.0 ms CPU)");
        assert_eq!(p(PeriodIn::View), "quota 2 threads used 20.0 ms");
        assert_eq!(p(flag), "quota of 20.0 ms burned in 0.0 ms by 2 threads");

        let t = |cpus, to| period_thread("s<h>\u{202e}", 13427, 12.0, cpus, to);
        assert_eq!(
            t(1, PeriodIn::Text),
            "s<h>\\u{202e} [13427] 12.0 ms on 1 CPUs"
        );
        assert_eq!(
            t(1, PeriodIn::Html),
            "<code>s&lt;h&gt;\\u{202e}</code> [13427] 12.0 ms on 1 CPU"
        );
        assert_eq!(t(1, PeriodIn::View), "s<h>\u{202e}[13427] 12.0 ms on 1 CPU");
        assert_eq!(
            t(3, PeriodIn::View),
            "s<h>\u{202e}[13427] 12.0 ms on 3 CPUs"
        );
        assert_eq!(
            t(3, PeriodIn::Html),
            "<code>s&lt;h&gt;\\u{202e}</code> [13427] 12.0 ms on 3 CPUs"
        );
        assert_eq!(t(1, flag), "s<h>\u{202e}");
    }
}
