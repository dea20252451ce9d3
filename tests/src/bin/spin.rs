//! Busy threads for tests: `spin N` runs N threads that never sleep.
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let threads: Vec<_> = (0..n)
        .map(|_| {
            std::thread::spawn(|| {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
