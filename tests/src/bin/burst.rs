//! Bursty load: `burst THREADS BURST_MS EVERY_MS` — every EVERY_MS, THREADS threads spin for
//! BURST_MS together, then all sleep. Average use is THREADS*BURST_MS/EVERY_MS CPUs.
use std::time::{Duration, Instant};

fn main() {
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (threads, burst, every) = (arg(1, 2), arg(2, 80), arg(3, 500));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut k = 0u64;
                loop {
                    let cycle = start + Duration::from_millis(every * k);
                    let now = Instant::now();
                    if cycle > now {
                        std::thread::sleep(cycle - now);
                    }
                    let until = cycle + Duration::from_millis(burst);
                    let mut x = 0u64;
                    while Instant::now() < until {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                    k += 1;
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}
