//! The recorder's writer thread: file writes, `fdatasync` and rotations of a [`Part`] run here,
//! fed by a bounded queue, so a stalled disk never holds up the thread that traces and answers
//! `/metrics`. A chunk that finds the queue full is dropped and counted
//! ([`DiskCounters::queue_full`]): memory stays bounded however long the disk stalls.

use std::{
    sync::{
        Arc,
        atomic::Ordering::Relaxed,
        mpsc::{Receiver, SyncSender, TrySendError, sync_channel},
    },
    thread::JoinHandle,
    time::Duration,
};

use super::part::{DiskCounters, Part};

/// Chunks waiting for the disk at most (each at most about a megabyte and a quarter).
pub const QUEUE_CHUNKS: usize = 16;

/// What the writer thread is asked to do, in order.
pub enum Job {
    /// Whole chunks to append.
    Write { bytes: Vec<u8>, chunks: u64 },
    /// Start a new part with this header.
    Rotate { keep: u32, header: Vec<u8> },
}

/// The writer thread and its queue.
pub struct DiskThread {
    tx: Option<SyncSender<Job>>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<DiskCounters>,
}

impl DiskThread {
    /// Moves `part` to a thread of its own.
    pub fn start(mut part: Part, queue: usize) -> std::io::Result<Self> {
        let counters = part.counters().clone();
        let (tx, rx) = sync_channel::<Job>(queue);
        let (done_tx, done) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("cgtrace-writer".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Write { bytes, chunks } => part.write(&bytes, chunks),
                        Job::Rotate { keep, header } => part.rotate(keep, &header),
                    }
                }
                let _ = done_tx.send(());
            })?;
        Ok(Self {
            tx: Some(tx),
            done,
            thread: Some(thread),
            counters,
        })
    }

    pub fn counters(&self) -> &Arc<DiskCounters> {
        &self.counters
    }

    /// Queues `job`; a full queue drops it and counts it.
    pub fn send(&self, job: Job) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => match job {
                Job::Write { bytes, chunks } => {
                    self.counters.queue_full.fetch_add(chunks, Relaxed);
                    self.counters.drop_chunks(chunks, bytes.len());
                }
                Job::Rotate { .. } => self.counters.rotation_failed(),
            },
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
