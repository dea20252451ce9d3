//! The recorder's writer thread: file writes, `fdatasync` and rotations of a [`Part`] run here,
//! fed by a queue bounded in bytes ([`QUEUE_BYTES`]), so a stalled disk never holds up the thread
//! that traces and answers `/metrics`. A chunk that finds the queue full is dropped and counted
//! ([`DiskCounters::queue_full`]): memory stays bounded however long the disk stalls.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering::Relaxed},
        mpsc::{Receiver, Sender, SyncSender, channel, sync_channel},
    },
    thread::JoinHandle,
    time::Duration,
};

use super::part::{DiskCounters, Part};

/// Bytes of chunks waiting for the disk at most: minutes of a busy node's chunks, well within
/// the chart's memory limit.
pub const QUEUE_BYTES: usize = 32 << 20;

/// What the writer thread is asked to do, in order.
pub enum Job {
    /// Whole chunks to append.
    Write { bytes: Vec<u8>, chunks: u64 },
    /// Start a new part with this header.
    Rotate { keep: u32, header: Vec<u8> },
}

/// The writer thread and its queue.
pub struct DiskThread {
    tx: Option<Sender<Job>>,
    /// Bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    limit: usize,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<DiskCounters>,
}

impl DiskThread {
    /// Moves `part` to a thread of its own, with a queue of at most `limit` bytes.
    pub fn start(mut part: Part, limit: usize) -> std::io::Result<Self> {
        let counters = part.counters().clone();
        let (tx, rx) = channel::<Job>();
        let (done_tx, done): (SyncSender<()>, _) = sync_channel(1);
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = queued.clone();
        let thread = std::thread::Builder::new()
            .name("cgtrace-writer".into())
            .spawn(move || {
                // Capabilities are per thread, and this one starts before the recorder drops
                // them: it needs none beyond what the others keep.
                if let Err(e) = crate::safety::privilege::drop_to_kept() {
                    log::debug!("writer thread: could not drop capabilities: {e}");
                }
                for job in rx {
                    match job {
                        Job::Write { bytes, chunks } => {
                            part.write(&bytes, chunks);
                            taken.fetch_sub(bytes.len(), Relaxed);
                        }
                        Job::Rotate { keep, header } => part.rotate(keep, &header),
                    }
                }
                let _ = done_tx.send(());
            })?;
        Ok(Self {
            tx: Some(tx),
            queued,
            limit,
            done,
            thread: Some(thread),
            counters,
        })
    }

    pub fn counters(&self) -> &Arc<DiskCounters> {
        &self.counters
    }

    /// Queues `job`; a write that would take the queue past its bytes is dropped and counted.
    pub fn send(&self, job: Job) {
        let Some(tx) = &self.tx else { return };
        if let Job::Write { bytes, chunks } = &job {
            let len = bytes.len();
            if self.queued.load(Relaxed) + len > self.limit {
                self.counters.queue_full.fetch_add(*chunks, Relaxed);
                self.counters.drop_chunks(*chunks, len);
                return;
            }
            self.queued.fetch_add(len, Relaxed);
        }
        if let Err(e) = tx.send(job) {
            // The thread is gone (it panicked): nothing more can be written.
            match e.0 {
                Job::Write { bytes, chunks } => {
                    self.queued.fetch_sub(bytes.len(), Relaxed);
                    self.counters.drop_chunks(chunks, bytes.len());
                }
                Job::Rotate { .. } => self.counters.rotation_failed(),
            }
        }
    }

    /// Waits up to `wait` for what is queued to be written; `false` if the disk did not take it
    /// in time (the thread is left to finish on its own).
    pub fn close(&mut self, wait: Duration) -> bool {
        drop(self.tx.take());
        if self.done.recv_timeout(wait).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            true
        } else {
            false
        }
    }
}

impl Drop for DiskThread {
    fn drop(&mut self) {
        self.close(Duration::from_secs(10));
    }
}
