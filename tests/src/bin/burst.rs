//! Bursty load: `burst THREADS BURST_MS EVERY_MS` — every EVERY_MS, THREADS threads spin for
//! BURST_MS together, then all sleep. Average use is THREADS*BURST_MS/EVERY_MS CPUs.
use std::time::Instant;

use cgtrace_tests::workload::{arg, bursts};

fn main() {
    let (threads, burst, every) = (arg(1, 2), arg(2, 80), arg(3, 500));
    bursts(threads, burst, every, |until| {
        let mut x = 0u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    });
}
