//! A waker that never sleeps and a wakee that only sleeps: `pipe_pair waker|wakee` roles are
//! forked so the test can put each in its own cgroup. The waker spins and writes one byte to
//! stdout every ~1 ms; the wakee blocks reading stdin.
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("waker") => {
            let mut out = std::io::stdout().lock();
            let mut next = Instant::now();
            loop {
                if Instant::now() >= next {
                    if out.write_all(b"x").and_then(|()| out.flush()).is_err() {
                        return;
                    }
                    next += Duration::from_millis(1);
                }
                std::hint::spin_loop();
            }
        }
        Some("wakee") => {
            let mut buf = [0u8; 1];
            let mut inp = std::io::stdin().lock();
            while matches!(inp.read(&mut buf), Ok(1)) {}
        }
        _ => eprintln!("usage: pipe_pair waker|wakee"),
    }
}
