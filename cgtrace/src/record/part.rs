//! The part of a recording being written, as far as the disk allows. A write that fails (disk
//! full, an I/O error, a read-only remount) or that would go below `--min-free` is not retried in
//! a loop and ends nothing: the chunk is dropped and counted ([`DiskCounters`]), the file is cut
//! back to its last whole chunk, and writing resumes at the next chunk after a backoff (1 s,
//! doubling to 30 s). A header that could not be written goes in before the first chunk that can
//! be. A rotation that fails keeps writing to the old part (up to twice `--max-size`) and is tried
//! again later. After drops, the first chunk that can be written is followed by a loss record
//! of the totals, so the file itself says what it is missing (a loss record queued while the disk
//! refused would have been dropped with the chunks it counts).

use std::{
    ffi::CString,
    fs::{self, File},
    io,
    os::unix::{ffi::OsStrExt as _, fs::FileExt as _},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use super::{
    format::{ChunkHeader, Tag, put_record},
    human_bytes,
};

/// First wait after a failed write; doubled after each failed retry up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What could not be written, since the recorder started (shared with the recorder, which puts
/// the deltas in every window and the totals in the hello of each new part).
#[derive(Debug, Default)]
pub struct DiskCounters {
    /// Bytes written to disk (headers and whole chunks), every part.
    pub written_bytes: AtomicU64,
    /// Chunks not written, whatever the reason (`recorder_dropped_chunks`).
    pub dropped_chunks: AtomicU64,
    pub dropped_bytes: AtomicU64,
    /// Of those, dropped because the writer thread's queue was full (the disk stalled).
    pub queue_full: AtomicU64,
    /// Writes the disk refused (each retry counts).
    pub write_errors: AtomicU64,
    /// Rotations done.
    pub rotations: AtomicU64,
    /// A rotation asked for could not be done; the writer asks again later.
    rotation_failed: AtomicBool,
}

/// One of the disk counters.
pub type Counter = fn(&DiskCounters) -> &AtomicU64;

/// The disk counters a window, a loss record and a part's hello carry, by name.
pub const DISK_COUNTERS: [(&str, Counter); 4] = [
    ("recorder_dropped_chunks", |d| &d.dropped_chunks),
    ("recorder_dropped_bytes", |d| &d.dropped_bytes),
    ("recorder_queue_full", |d| &d.queue_full),
    ("recorder_write_errors", |d| &d.write_errors),
];

impl DiskCounters {
    /// The totals so far, as a JSON object of [`DISK_COUNTERS`].
    pub fn totals(&self) -> serde_json::Map<String, serde_json::Value> {
        DISK_COUNTERS
            .iter()
            .map(|(name, get)| ((*name).to_string(), get(self).load(Relaxed).into()))
            .collect()
    }

    pub fn drop_chunks(&self, chunks: u64, bytes: usize) {
        self.dropped_chunks.fetch_add(chunks, Relaxed);
        self.dropped_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub fn rotation_failed(&self) {
        self.rotation_failed.store(true, Relaxed);
    }

    /// Whether a rotation failed since the last call.
    pub fn take_rotation_failed(&self) -> bool {
        self.rotation_failed.swap(false, Relaxed)
    }
}

/// Not writing, since a write failed or free space went below `--min-free`.
struct Down {
    why: String,
    retry_at: Instant,
    backoff: Duration,
}

/// The file being written.
pub struct Part {
    path: PathBuf,
    file: Option<File>,
    /// Whole bytes of the file (header and complete chunks); every write goes there.
    written: u64,
    /// The header, until it is on disk.
    header: Option<Vec<u8>>,
    /// The current file's header length: a part no longer than it holds nothing.
    header_len: u64,
    sync: bool,
    min_free: Option<u64>,
    /// Past this size the old part takes no more (a rotation keeps failing).
    cap: Option<u64>,
    down: Option<Down>,
    rotate_retry_at: Option<(Instant, Duration)>,
    counters: Arc<DiskCounters>,
    /// `dropped_chunks` as the last loss record in this part said it.
    noted: u64,
}

impl Part {
    /// A part in `file` (just created at `path`); writes `header` now if it can.
    pub fn new(path: &Path, file: File, header: Vec<u8>, min_free: Option<u64>) -> Self {
        let mut p = Self {
            path: path.to_path_buf(),
            file: Some(file),
            written: 0,
            header_len: header.len() as u64,
            header: Some(header),
            sync: true,
            min_free,
            cap: None,
            down: None,
            rotate_retry_at: None,
            counters: Arc::default(),
            noted: 0,
        };
        p.ready();
        p
    }

    pub fn counters(&self) -> &Arc<DiskCounters> {
        &self.counters
    }

    pub fn set_sync(&mut self, sync: bool) {
        self.sync = sync;
    }

    /// The old part takes at most `cap` bytes while rotations fail.
    pub fn set_cap(&mut self, cap: Option<u64>) {
        self.cap = cap;
    }

    /// Why nothing is written now, if so.
    pub fn down(&self) -> Option<&str> {
        self.down.as_ref().map(|d| d.why.as_str())
    }

    #[cfg(test)]
    pub fn swap_file_for_test(&mut self, f: File) {
        self.file = Some(f);
    }

    /// Writes `bytes` (`chunks` whole chunks) at the end of the part, or drops and counts them.
    pub fn write(&mut self, bytes: &[u8], chunks: u64) {
        if let Some(cap) = self.cap
            && self.written + bytes.len() as u64 > cap
            && self.written > 0
        {
            self.counters.drop_chunks(chunks, bytes.len());
            return;
        }
        if !self.ready() {
            self.counters.drop_chunks(chunks, bytes.len());
            return;
        }
        match self.append(bytes) {
            Ok(()) => {
                self.up();
                self.note_losses();
            }
            Err(e) => {
                self.fail(format!("writing {}: {e}", self.path.display()));
                self.counters.drop_chunks(chunks, bytes.len());
            }
        }
    }

    /// Whether a write may be tried now: not waiting out a backoff, enough free space, a file
    /// with its header.
    fn ready(&mut self) -> bool {
        if self
            .down
            .as_ref()
            .is_some_and(|d| Instant::now() < d.retry_at)
        {
            return false;
        }
        if let Some(min) = self.min_free
            && let Some(free) = free_bytes(&self.path)
            && free < min
        {
            self.fail(format!(
                "{} has {} free, below --min-free {}",
                dir_of(&self.path).display(),
                human_bytes(free),
                human_bytes(min)
            ));
            return false;
        }
        if self.file.is_none() {
            match crate::safety::files::create_new(&self.path) {
                Ok(f) => (self.file, self.written, self.noted) = (Some(f), 0, 0),
                Err(e) => {
                    self.fail(format!("creating {}: {e}", self.path.display()));
                    return false;
                }
            }
        }
        if let Some(h) = self.header.take()
            && let Err(e) = self.append(&h)
        {
            self.header = Some(h);
            self.fail(format!(
                "writing the header of {}: {e}",
                self.path.display()
            ));
            return false;
        }
        true
    }

    /// One write and `fdatasync` at the end of the whole part; on failure the part is cut back
    /// to it (if even that fails, the reader skips the torn chunk).
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(f) = self.file.as_ref() else {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        };
        let r = f
            .write_all_at(bytes, self.written)
            .and_then(|()| if self.sync { f.sync_data() } else { Ok(()) });
        if r.is_err() {
            let _ = f.set_len(self.written);
            self.counters.write_errors.fetch_add(1, Relaxed);
        } else {
            self.written += bytes.len() as u64;
            self.counters
                .written_bytes
                .fetch_add(bytes.len() as u64, Relaxed);
        }
        r
    }

    /// After drops not yet said in this part, a chunk of one loss record of the totals (a part
    /// made after drops says them once too: a report reads one part).
    fn note_losses(&mut self) {
        let dropped = self.counters.dropped_chunks.load(Relaxed);
        if dropped == self.noted {
            return;
        }
        let mut loss = self.counters.totals();
        loss.insert("reason".into(), "recorder could not write".into());
        let mut record = Vec::new();
        put_record(
            &mut record,
            Tag::Loss,
            serde_json::Value::Object(loss).to_string().as_bytes(),
        );
        let chunk = ChunkHeader::stored(record.len() as u32, 1).frame(&record);
        if self.append(&chunk).is_ok() {
            self.noted = dropped;
        }
    }

    fn fail(&mut self, why: String) {
        let backoff = self
            .down
            .as_ref()
            .map_or(BACKOFF_MIN, |d| (d.backoff * 2).min(BACKOFF_MAX));
        if self.down.as_ref().is_none_or(|d| d.why != why) {
            eprintln!(
                "cgtrace: {why}: not recording until it can (retried after {} s, then up to every {} s; what is lost is counted in recorder_dropped_chunks); tracing, the stream and metrics go on",
                backoff.as_secs(),
                BACKOFF_MAX.as_secs()
            );
        }
        self.down = Some(Down {
            why,
            retry_at: Instant::now() + backoff,
            backoff,
        });
    }

    fn up(&mut self) {
        if self.down.take().is_some() {
            eprintln!(
                "cgtrace: writing {} again ({} chunks could not be written so far)",
                self.path.display(),
                self.counters.dropped_chunks.load(Relaxed)
            );
        }
    }

    /// Makes a new part: FILE.next is created (exclusively, never through a link) with `header`,
    /// then FILE.keep is removed, FILE.n → FILE.n+1, FILE → FILE.1, FILE.next → FILE (a FILE that
    /// holds nothing but its header is only replaced, see below). If any of it
    /// fails, the old part stays the one written to and the failure is flagged for the writer,
    /// which asks again later.
    pub fn rotate(&mut self, keep: u32, header: &[u8]) {
        let now = Instant::now();
        if self.rotate_retry_at.is_some_and(|(at, _)| now < at) || self.down.is_some() {
            self.counters.rotation_failed();
            return;
        }
        // A part that holds nothing but its header (every chunk for it was dropped on the way:
        // the disk thread's queue was full) is not pushed into the history as an empty part: it
        // is started again in place with the new header.
        let empty = self.header.is_some() || self.written <= self.header_len;
        match self.try_rotate(keep, header, !empty) {
            Ok(()) => {
                self.rotate_retry_at = None;
                self.counters.rotations.fetch_add(1, Relaxed);
                // Said here, where it is known to have worked (the writer only asked for it).
                if empty {
                    eprintln!(
                        "cgtrace: {} reached --max-size with no chunk written to it (dropped on the way to the disk): started again in place, no part shifted",
                        self.path.display()
                    );
                } else {
                    eprintln!(
                        "cgtrace: {} reached --max-size: rotated (the older part is {}.1)",
                        self.path.display(),
                        self.path.display()
                    );
                }
            }
            Err(why) => {
                let backoff = self
                    .rotate_retry_at
                    .map_or(BACKOFF_MIN, |(_, b)| (b * 2).min(BACKOFF_MAX));
                if self.rotate_retry_at.is_none() {
                    eprintln!(
                        "cgtrace: rotating {}: {why}; still writing to {} (tried again up to every {} s)",
                        self.path.display(),
                        self.path.display(),
                        BACKOFF_MAX.as_secs()
                    );
                }
                self.rotate_retry_at = Some((now + backoff, backoff));
                self.counters.rotation_failed();
            }
        }
    }

    /// `shift`: the parts move up one (FILE → FILE.1); else FILE.next only replaces FILE.
    fn try_rotate(&mut self, keep: u32, header: &[u8], shift: bool) -> Result<(), String> {
        let next = next_path(&self.path);
        let file = crate::safety::files::create_new(&next)
            .map_err(|e| format!("cannot create the next part {}: {e}", next.display()))?;
        let wrote = file
            .write_all_at(header, 0)
            .and_then(|()| if self.sync { file.sync_data() } else { Ok(()) });
        if let Err(e) = wrote {
            drop(file);
            let _ = fs::remove_file(&next);
            self.counters.write_errors.fetch_add(1, Relaxed);
            return Err(format!("writing the header of {}: {e}", next.display()));
        }
        let shifted = if shift {
            shift_parts(&self.path, keep)
        } else {
            Ok(())
        };
        if let Err(e) = shifted.and_then(|()| fs::rename(&next, &self.path)) {
            let _ = fs::remove_file(&next);
            return Err(format!("renaming the parts: {e}"));
        }
        self.counters
            .written_bytes
            .fetch_add(header.len() as u64, Relaxed);
        self.file = Some(file);
        self.written = header.len() as u64;
        self.header_len = self.written;
        self.header = None;
        self.noted = 0;
        Ok(())
    }
}

/// FILE.keep is removed, FILE.n → FILE.n+1, FILE → FILE.1 (with `keep` 0, FILE is removed).
/// Renames replace a link at the target, never follow it. Parts that are missing are skipped.
pub fn shift_parts(path: &Path, keep: u32) -> io::Result<()> {
    let numbered = |n: u32| {
        let mut p = path.to_path_buf().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    let gone_ok = |r: io::Result<()>| match r {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    if keep == 0 {
        return gone_ok(fs::remove_file(path));
    }
    gone_ok(fs::remove_file(numbered(keep)))?;
    for n in (1..keep).rev() {
        gone_ok(fs::rename(numbered(n), numbered(n + 1)))?;
    }
    gone_ok(fs::rename(path, numbered(1)))
}

/// The name the next part is created under before it takes FILE's place.
pub fn next_path(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf().into_os_string();
    p.push(".next");
    PathBuf::from(p)
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Bytes an unprivileged user may still write on the filesystem holding `path` (`statvfs`).
pub fn free_bytes(path: &Path) -> Option<u64> {
    let dir = CString::new(dir_of(path).as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `dir` is a NUL-terminated path and `st` is a valid place for one `statvfs`.
    let r = unsafe { libc::statvfs(dir.as_ptr(), st.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast, reason = "u32 on some targets")]
    let (avail, frsize) = (st.f_bavail as u64, st.f_frsize as u64);
    Some(avail.saturating_mul(frsize))
}
