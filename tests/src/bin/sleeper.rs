//! A task that sleeps `USEC` microseconds (default 1000) in a loop: it is woken ~1000 times/s.
fn main() {
    let us: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let d = std::time::Duration::from_micros(us);
    loop {
        std::thread::sleep(d);
    }
}
