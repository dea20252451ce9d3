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
                if let Err(e) = crate::privilege::drop_to_kept() {
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

/// Ring-buffer records kept as bytes for `cgtrace record`, bounded: past `cap` bytes records are
/// counted in `lost` instead (the recorder takes them after every drain, so this only fills when
/// the disk stalls).
#[derive(Debug, Default)]
pub struct RawRecords {
    /// Each record as `len:u32` (native endian) then its bytes.
    pub buf: Vec<u8>,
    pub cap: usize,
    pub lost: u64,
}

impl RawRecords {
    pub fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            lost: 0,
        }
    }

    pub fn push(&mut self, rec: &[u8]) {
        if self.buf.len() + 4 + rec.len() > self.cap {
            self.lost += 1;
            return;
        }
        append(&mut self.buf, rec);
    }

    /// Calls `f` with each record kept, then forgets them.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) {
        for_each(&self.buf, f);
        self.buf.clear();
    }
}

/// Appends `rec` to `buf` in the queue's format (`len:u32` native endian, then its bytes), read
/// back by [`for_each`].
pub fn append(buf: &mut Vec<u8>, rec: &[u8]) {
    buf.extend_from_slice(&(rec.len() as u32).to_ne_bytes());
    buf.extend_from_slice(rec);
}

/// Calls `f` with each record of a buffer filled by [`RawRecords::push`] or [`append`].
pub fn for_each(buf: &[u8], mut f: impl FnMut(&[u8])) {
    let mut p = 0;
    while p + 4 <= buf.len() {
        let len = u32::from_ne_bytes([buf[p], buf[p + 1], buf[p + 2], buf[p + 3]]) as usize;
        let Some(rec) = buf.get(p + 4..p + 4 + len) else {
            return;
        };
        f(rec);
        p += 4 + len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_in_order_and_the_cap_counts_losses() {
        let mut q = RawRecords::new(32);
        q.push(b"abc");
        q.push(b"");
        q.push(&[7; 20]);
        q.push(b"x");
        // 7 + 4 bytes kept; the 24-byte record would pass 32: counted; the last one fits.
        let mut got = Vec::new();
        for_each(&q.buf, |r| got.push(r.to_vec()));
        assert_eq!(got, vec![b"abc".to_vec(), Vec::new(), b"x".to_vec()]);
        assert_eq!(q.lost, 1);
    }
}
