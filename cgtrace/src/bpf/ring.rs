//! The ring buffer's own thread. It only moves records out of the kernel's ring buffer into a
//! bounded queue, so a collection loop busy with blocking work (a recorder's `fdatasync` during
//! an I/O stall, thousands of cgroupfs reads, map iteration at a window's end) never leaves the
//! ring buffer undrained: the kernel keeps its records, and what the queue cannot hold is counted
//! (`drain_full`), never silent.

use std::{
    os::fd::{AsRawFd, RawFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::sync::Notify;

use crate::decode::RawRecords;

/// How long the thread waits for the ring buffer before draining anyway (the programs wake it
/// only once enough bytes are pending).
const POLL: Duration = Duration::from_millis(50);

struct Shared {
    queue: Mutex<RawRecords>,
    stop: AtomicBool,
    ready: Notify,
}

/// The drain thread and its queue.
pub struct Drain {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drain {
    /// Starts the thread; the queue holds at most `cap` bytes of records.
    pub fn start(mut ring: RingBuf<MapData>, cap: usize) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(RawRecords::new(cap)),
            stop: AtomicBool::new(false),
            ready: Notify::new(),
        });
        let s = shared.clone();
        let fd: RawFd = ring.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name("cgtrace-drain".into())
            .spawn(move || {
                // Capabilities are per thread, and this one starts before the session drops
                // them: it needs none of its own beyond what the others keep.
                if let Err(e) = crate::safety::privilege::drop_to_kept() {
                    log::debug!("drain thread: could not drop capabilities: {e}");
                }
                loop {
                    let stopping = s.stop.load(Ordering::Acquire);
                    if !stopping {
                        let mut p = libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one valid pollfd; the ring buffer (and its fd) lives in this
                        // closure until the loop ends.
                        unsafe { libc::poll(&mut p, 1, POLL.as_millis() as i32) };
                    }
                    let mut moved = false;
                    {
                        let mut q = s.queue.lock().unwrap_or_else(|e| e.into_inner());
                        while let Some(item) = ring.next() {
                            q.push(&item);
                            moved = true;
                        }
                    }
                    if moved {
                        s.ready.notify_one();
                    }
                    if stopping {
                        s.ready.notify_one();
                        return;
                    }
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Waits until the thread moved records (cancel-safe).
    pub async fn ready(&self) {
        self.shared.ready.notified().await;
    }

    /// Swaps the queued records into `into` (left empty by the caller); returns the records the
    /// queue could not hold since the last call.
    pub fn take(&self, into: &mut Vec<u8>) -> u64 {
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut q.buf, into);
        std::mem::take(&mut q.lost)
    }

    /// Stops the thread after one last drain of the ring buffer.
    pub fn finish(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.finish();
    }
}
