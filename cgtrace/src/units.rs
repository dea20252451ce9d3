//! Clocks as the kernel programs read them.

pub use cgtrace_common::clock::monotonic_ns;

/// Wall-clock time of day in UTC, `HH:MM:SSZ`, from Unix milliseconds.
pub fn clock_utc(unix_ms: u64) -> String {
    let s = unix_ms / 1000;
    format!("{:02}:{:02}:{:02}Z", (s / 3600) % 24, (s / 60) % 60, s % 60)
}
