//! A container's process for the node simulator, started the way runc starts one: it first joins
//! every cgroup listed in `CGTRACE_JOIN` (directories separated by `:`, one per hierarchy) by
//! writing `0` to their `cgroup.procs`, optionally writes `CGTRACE_CACHE=FILE:KIB` of page cache
//! (charged to its memory cgroup, so a removed pod leaves a dying memcg behind as real ones do),
//! then runs one workload until killed:
//!
//! - `sleep MS`: one thread that sleeps MS in a loop (a quiet service);
//! - `burst THREADS BURST_MS EVERY_MS`: THREADS threads spin BURST_MS together every EVERY_MS;
//! - `busy THREADS`: THREADS threads that never sleep (meant to run under a quota);
//! - `pipe ROUNDS SLEEP_MS`: two threads pass a byte back and forth ROUNDS times over pipes, then
//!   sleep SLEEP_MS (a request/response pair).
use std::{
    io::{Read, Write},
    time::{Duration, Instant},
};

use cgtrace_tests::workload::{arg, bursts};

fn spin_until(until: Instant) {
    let mut x = 0u64;
    while Instant::now() < until {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}

fn main() {
    if let Ok(dirs) = std::env::var("CGTRACE_JOIN") {
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            if let Err(e) = std::fs::write(format!("{dir}/cgroup.procs"), b"0\n") {
                eprintln!("podproc: joining {dir}: {e}");
                std::process::exit(1);
            }
        }
    }
    if let Ok(spec) = std::env::var("CGTRACE_CACHE")
        && let Some((file, kib)) = spec.rsplit_once(':')
    {
        let kib: usize = kib.parse().unwrap_or(0);
        let _ = std::fs::write(file, vec![b'c'; kib * 1024]);
    }
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "sleep" => {
            let d = Duration::from_millis(arg(2, 50));
            loop {
                std::thread::sleep(d);
            }
        }
        "burst" => {
            let (threads, burst, every) = (arg(2, 1), arg(3, 20), arg(4, 500));
            bursts(threads, burst, every, spin_until);
        }
        "busy" => {
            let handles: Vec<_> = (0..arg(2, 1))
                .map(|_| std::thread::spawn(|| spin_until(Instant::now() + Duration::MAX / 4)))
                .collect();
            for h in handles {
                let _ = h.join();
            }
        }
        "pipe" => {
            let (rounds, pause) = (arg(2, 50), Duration::from_millis(arg(3, 20)));
            let mut fds = [0i32; 4];
            // SAFETY: pipe writes two descriptors into each two-element array slice.
            let ok = unsafe {
                libc::pipe(fds.as_mut_ptr()) == 0 && libc::pipe(fds[2..].as_mut_ptr()) == 0
            };
            if !ok {
                eprintln!("podproc: pipe: {}", std::io::Error::last_os_error());
                std::process::exit(1);
            }
            // SAFETY: each descriptor was just created and is owned by exactly one File.
            let [mut ping_r, mut ping_w, mut pong_r, mut pong_w] =
                fds.map(|fd| unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            let echo = std::thread::spawn(move || {
                let mut b = [0u8; 1];
                while ping_r.read_exact(&mut b).is_ok() {
                    if pong_w.write_all(&b).is_err() {
                        return;
                    }
                }
            });
            let mut b = [0u8; 1];
            loop {
                for _ in 0..rounds {
                    if ping_w.write_all(b"p").is_err() || pong_r.read_exact(&mut b).is_err() {
                        let _ = echo.join();
                        return;
                    }
                }
                std::thread::sleep(pause);
            }
        }
        _ => {
            eprintln!(
                "usage: podproc sleep MS | burst THREADS BURST_MS EVERY_MS | busy THREADS | pipe ROUNDS SLEEP_MS"
            );
            std::process::exit(2);
        }
    }
}
