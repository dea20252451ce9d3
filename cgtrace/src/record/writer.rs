//! Writes a recording: records are gathered into a chunk, and a chunk is compressed, checksummed
//! and handed to the [`Part`] being written (one `write` followed by `fdatasync`) when
//! [`Writer::flush`] is called (the recorder does so on every window and at least once a
//! second). The live recorder hands it to a thread of its own ([`DiskThread`]); a write the disk
//! refuses is dropped and counted, never the end of the recording (see [`super::part`]).
//!
//! Every file is created exclusively, never through a link (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode
//! 0600): a rotation first creates the next part as `FILE.next` that way, then renames (a rename
//! replaces a link, never follows it). The tables (cgroup names, read file names) go in records
//! of at most [`TABLE_RECORD`] bytes, in chunks of their own within the reader's limits; a new
//! part carries every entry seen in the last [`TABLE_KEEP_WINDOWS`] windows.

use std::{
    collections::HashMap,
    fs::{self, File},
    io,
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use thiserror::Error;

pub use super::part::shift_parts;
use super::{
    NameEntry,
    disk::{DiskThread, Job, QUEUE_BYTES},
    format::{self, CODEC_ZSTD, ChunkHeader, Tag},
    part::{BACKOFF_MAX, BACKOFF_MIN, DiskCounters, Part},
};
use crate::family::reads::model::ReadFile;

/// A window record's body before its JSON: its end on CLOCK_MONOTONIC, then the wall clock.
fn window_prefix(mono_ns: u64, end_unix_ms: u64) -> [u8; 16] {
    let mut prefix = [0u8; 16];
    prefix[..8].copy_from_slice(&mono_ns.to_le_bytes());
    prefix[8..].copy_from_slice(&end_unix_ms.to_le_bytes());
    prefix
}

/// The longest length a record's body may have, as LEB128 (the reader takes 32 bits).
const MAX_ULEB: usize = 5;

/// zstd level: 3 is zstd's default, fast enough for 100 k events/s on one core with room to
/// spare (see the README's figures).
const LEVEL: i32 = 3;
/// A chunk is written once this much is gathered, even before its second is up.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Room kept below `--max-size` for the closing summary (at most an eighth of it).
const CLOSING_ROOM: u64 = 256 << 10;
/// Largest table record (a JSON array of entries).
pub const TABLE_RECORD: usize = 256 << 10;
/// A table entry not seen for this many windows is not carried into the next part of a rotated
/// recording (a cgroup gone ten minutes).
pub const TABLE_KEEP_WINDOWS: u64 = 600;
/// Entries kept per table at most; beyond it the least recently seen are dropped.
pub const TABLE_MAX: usize = 262_144;

/// What to do when the next chunk would make the file larger than `--max-size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFull {
    /// Stop recording; the file is complete up to there.
    Stop,
    /// Rename FILE to FILE.1 (FILE.1 to FILE.2, …, dropping FILE.`keep`) and start a new FILE.
    Rotate { keep: u32 },
}

#[derive(Debug, Error)]
pub enum WriteError {
    #[error("creating {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{} already exists: choose another name, or pass --force to overwrite it",
        path.display()
    )]
    Exists { path: PathBuf },
    #[error(
        "{} exists and is a symbolic link: cgtrace does not write through links; choose another name",
        path.display()
    )]
    Link { path: PathBuf },
    #[error("starting the recorder's writer thread: {0}")]
    Thread(#[source] io::Error),
}

/// Entries of one table (cgroup names, read files) by key: each entry's JSON, and the window it
/// was last seen in.
#[derive(Default)]
struct Table {
    known: HashMap<u128, (Vec<u8>, u64)>,
    pending: Vec<Vec<u8>>,
}

impl Table {
    /// Notes an entry; queued for the file when new or changed.
    fn note(&mut self, key: u128, json: Vec<u8>, window: u64) {
        match self.known.get_mut(&key) {
            Some((old, seen)) if *old == json => *seen = window,
            _ => {
                if self.known.len() >= TABLE_MAX && !self.known.contains_key(&key) {
                    self.evict_oldest();
                }
                self.pending.push(json.clone());
                self.known.insert(key, (json, window));
            }
        }
    }

    fn evict_oldest(&mut self) {
        let mut seen: Vec<u64> = self.known.values().map(|v| v.1).collect();
        let cut = seen.len() / 8;
        let (_, &mut limit, _) = seen.select_nth_unstable(cut);
        self.known.retain(|_, v| v.1 > limit);
    }

    /// Forgets entries not seen since `window`; returns what is left, by key.
    fn prune(&mut self, since: u64) -> Vec<Vec<u8>> {
        self.known.retain(|_, v| v.1 >= since);
        let mut all: Vec<(&u128, &(Vec<u8>, u64))> = self.known.iter().collect();
        all.sort_by_key(|(k, _)| **k);
        all.into_iter().map(|(_, v)| v.0.clone()).collect()
    }
}

/// The key of a read file in the files table.
pub fn file_key(file: u64, dev: u32) -> u128 {
    (u128::from(dev) << 64) | u128::from(file)
}

/// The outcome of a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flushed {
    /// Written (or nothing to write).
    Ok,
    /// Written into a new file after rotating.
    Rotated,
    /// `--max-size` reached with [`OnFull::Stop`]: nothing more will be written.
    Full,
}

/// Figures for the recorder's closing line and the benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriterStats {
    pub chunks: u64,
    pub windows: u64,
    pub events: u64,
    pub raw_bytes: u64,
    /// Bytes on disk over every file written (rotated ones included).
    pub bytes: u64,
    pub rotations: u64,
}

/// Where chunks go: the part itself (tests, benchmarks) or the writer thread (the recorder).
enum Output {
    Inline(Part),
    Thread(DiskThread),
}

impl Output {
    fn write(&mut self, bytes: Vec<u8>, chunks: u64) {
        match self {
            Self::Inline(p) => p.write(&bytes, chunks),
            Self::Thread(t) => t.send(Job::Write { bytes, chunks }),
        }
    }

    fn rotate(&mut self, keep: u32, header: Vec<u8>) {
        match self {
            Self::Inline(p) => p.rotate(keep, &header),
            Self::Thread(t) => t.send(Job::Rotate { keep, header }),
        }
    }

    fn counters(&self) -> &Arc<DiskCounters> {
        match self {
            Self::Inline(p) => p.counters(),
            Self::Thread(t) => t.counters(),
        }
    }
}

/// A recording being written.
pub struct Writer {
    path: PathBuf,
    output: Output,
    /// Bytes handed to the current part (header and complete chunks).
    written: u64,
    /// Of those, its header's (the hello may change between parts).
    header_len: u64,
    /// A rotation failed: asked again from then on (backoff doubling up to 30 s).
    rotate_retry: Option<Instant>,
    /// The last wait between rotations asked (zero once one was done).
    rotate_backoff: Duration,
    /// Rotations the part had done when last looked at.
    rotations_seen: u64,
    /// Chunks framed into `out`.
    out_chunks: u64,
    max_size: Option<u64>,
    on_full: OnFull,
    hello: Vec<u8>,
    /// Uncompressed records of the chunk being gathered.
    buf: Vec<u8>,
    records: u32,
    seq: u32,
    started: Option<Instant>,
    compressor: zstd::bulk::Compressor<'static>,
    out: Vec<u8>,
    /// Cgroup names and read files written so far, and those to write with the next chunk.
    names: Table,
    files: Table,
    /// `--max-size` was reached with [`OnFull::Stop`]: only the closing records may follow.
    full: bool,
    compress: bool,
    pub stats: WriterStats,
}

impl Writer {
    /// Creates `path` (mode 0600) and writes the header.
    pub fn create(
        path: &Path,
        hello_json: &[u8],
        max_size: Option<u64>,
        on_full: OnFull,
        force: bool,
    ) -> Result<Self, WriteError> {
        let file = open_new(path, force)?;
        Self::with_file(file, path, hello_json, max_size, on_full)
    }

    /// Writes the header into `file`, created by [`open_new`] at `path`; writes happen in the
    /// caller's thread.
    pub fn with_file(
        file: File,
        path: &Path,
        hello_json: &[u8],
        max_size: Option<u64>,
        on_full: OnFull,
    ) -> Result<Self, WriteError> {
        let part = Part::new(path, file, format::header(hello_json), None);
        Self::with_output(Output::Inline(part), path, hello_json, max_size, on_full)
    }

    /// The recorder's writer: the header and every chunk are written by a thread of its own
    /// (`fdatasync` included), which stops writing while the filesystem has less than
    /// `min_free` bytes free. `file` was created by [`open_new`] at `path` before tracing
    /// started, so a bad path fails at once.
    pub fn threaded(
        file: File,
        path: &Path,
        hello_json: &[u8],
        max_size: Option<u64>,
        on_full: OnFull,
        min_free: Option<u64>,
    ) -> Result<Self, WriteError> {
        let mut part = Part::new(path, file, format::header(hello_json), min_free);
        if let (Some(max), OnFull::Rotate { .. }) = (max_size, on_full) {
            part.set_cap(Some(max.saturating_mul(2)));
        }
        let thread = DiskThread::start(part, QUEUE_BYTES).map_err(WriteError::Thread)?;
        Self::with_output(Output::Thread(thread), path, hello_json, max_size, on_full)
    }

    fn with_output(
        output: Output,
        path: &Path,
        hello_json: &[u8],
        max_size: Option<u64>,
        on_full: OnFull,
    ) -> Result<Self, WriteError> {
        Ok(Self {
            path: path.to_path_buf(),
            output,
            written: (format::HEADER_LEN + hello_json.len()) as u64,
            header_len: (format::HEADER_LEN + hello_json.len()) as u64,
            rotate_retry: None,
            rotate_backoff: Duration::ZERO,
            rotations_seen: 0,
            out_chunks: 0,
            max_size,
            on_full,
            hello: hello_json.to_vec(),
            buf: Vec::with_capacity(CHUNK_BYTES + (64 << 10)),
            records: 0,
            seq: 0,
            started: None,
            compressor: zstd::bulk::Compressor::new(LEVEL).map_err(|e| WriteError::Create {
                path: path.to_path_buf(),
                source: e,
            })?,
            out: Vec::new(),
            names: Table::default(),
            files: Table::default(),
            full: false,
            compress: true,
            stats: WriterStats::default(),
        })
    }

    /// Skips `fdatasync` after each chunk (benchmarks of the format alone; a writer written in
    /// the caller's thread only).
    pub fn set_sync(&mut self, sync: bool) {
        if let Output::Inline(p) = &mut self.output {
            p.set_sync(sync);
        }
    }

    /// Tests: write to another file from now on (e.g. one that fails every write).
    #[cfg(test)]
    pub fn swap_file_for_test(&mut self, f: File) {
        if let Output::Inline(p) = &mut self.output {
            p.swap_file_for_test(f);
        }
    }

    /// What could not be written so far, and what was.
    pub fn disk(&self) -> &Arc<DiskCounters> {
        self.output.counters()
    }

    /// The hello of parts started from now on (the recorder adds what it could not write).
    pub fn set_hello(&mut self, hello_json: &[u8]) {
        self.hello = hello_json.to_vec();
    }

    /// Why nothing is written now (a writer written in the caller's thread only).
    pub fn down(&self) -> Option<&str> {
        match &self.output {
            Output::Inline(p) => p.down(),
            Output::Thread(_) => None,
        }
    }

    /// Waits up to `wait` for the writer thread to write what is queued; `false` if the disk did
    /// not take it in time.
    pub fn close(&mut self, wait: Duration) -> bool {
        match &mut self.output {
            Output::Inline(_) => true,
            Output::Thread(t) => t.close(wait),
        }
    }

    /// Stores chunks uncompressed (seed files for the fuzzer, benchmarks).
    pub fn set_compress(&mut self, compress: bool) {
        self.compress = compress;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes gathered for the next chunk, and when its first record came.
    pub fn pending(&self) -> (usize, Option<Instant>) {
        (self.buf.len(), self.started)
    }

    pub fn is_stopped(&self) -> bool {
        self.full
    }

    fn push(&mut self, tag: Tag, prefix: &[u8], body: &[u8]) {
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        format::put_record2(&mut self.buf, tag, prefix, body);
        self.records += 1;
    }

    /// Notes a cgroup's path and name; written with the next chunk if new or changed.
    pub fn name(&mut self, e: NameEntry) {
        let json = serde_json::to_vec(&e).unwrap_or_default();
        self.names.note(u128::from(e.id), json, self.stats.windows);
    }

    /// Whether `id` has a name entry in this file already.
    pub fn knows(&self, id: u64) -> bool {
        self.names.known.contains_key(&u128::from(id))
    }

    /// Notes the name of a file a slow read read; written with the next chunk if new or changed.
    pub fn file(&mut self, f: &ReadFile) {
        let json = serde_json::to_vec(f).unwrap_or_default();
        self.files
            .note(file_key(f.file, f.dev), json, self.stats.windows);
    }

    /// Whether a read file has an entry in this file already.
    pub fn knows_file(&self, file: u64, dev: u32) -> bool {
        self.files.known.contains_key(&file_key(file, dev))
    }

    /// One raw ring-buffer record.
    pub fn event(&mut self, raw: &[u8]) {
        self.push(Tag::Event, &[], raw);
        self.stats.events += 1;
    }

    /// One window: its end on CLOCK_MONOTONIC and the wall clock, then its JSON.
    pub fn window(&mut self, mono_ns: u64, end_unix_ms: u64, json: &[u8]) {
        self.push(Tag::Window, &window_prefix(mono_ns, end_unix_ms), json);
        self.stats.windows += 1;
    }

    /// One window serialised straight into the chunk being gathered (escaped as a stream line
    /// is, [`crate::model::ndjson::append`]): no copy of its JSON in memory first.
    pub fn window_value<T: serde::Serialize>(
        &mut self,
        mono_ns: u64,
        end_unix_ms: u64,
        value: &T,
    ) -> serde_json::Result<()> {
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        let start = self.buf.len();
        let prefix = window_prefix(mono_ns, end_unix_ms);
        // The body's length goes before it: room for the longest length, closed up after.
        self.buf.push(Tag::Window as u8);
        let len_at = self.buf.len();
        self.buf.extend_from_slice(&[0; MAX_ULEB]);
        self.buf.extend_from_slice(&prefix);
        if let Err(e) = crate::model::ndjson::append(&mut self.buf, value) {
            self.buf.truncate(start);
            return Err(e);
        }
        let body = self.buf.len() - len_at - MAX_ULEB;
        if u32::try_from(body).is_err() {
            self.buf.truncate(start);
            return Err(serde::ser::Error::custom("a window of 4 GiB or more"));
        }
        let mut len = Vec::with_capacity(MAX_ULEB);
        format::put_uleb(&mut len, body as u64);
        self.buf[len_at..len_at + len.len()].copy_from_slice(&len);
        self.buf
            .copy_within(len_at + MAX_ULEB.., len_at + len.len());
        self.buf.truncate(len_at + len.len() + body);
        self.records += 1;
        self.stats.windows += 1;
        Ok(())
    }

    /// Any other record (summary, loss, end).
    pub fn record(&mut self, tag: Tag, body: &[u8]) {
        self.push(tag, &[], body);
    }

    /// Compresses and writes what was gathered. With `closing`, the room kept below
    /// `--max-size` for the summary may be used.
    pub fn flush(&mut self, closing: bool) -> Result<Flushed, WriteError> {
        if self.full && !closing {
            self.clear();
            self.names.pending.clear();
            self.files.pending.clear();
            return Ok(Flushed::Full);
        }
        if self.records == 0 && self.names.pending.is_empty() && self.files.pending.is_empty() {
            return Ok(Flushed::Ok);
        }
        // Tables first, in chunks of their own, so a reader knows the names before the records
        // that need them; then the records; one write.
        self.out.clear();
        self.out_chunks = 0;
        let names = std::mem::take(&mut self.names.pending);
        let files = std::mem::take(&mut self.files.pending);
        self.table_chunks(Tag::Names, &names);
        self.table_chunks(Tag::Files, &files);
        self.build_chunk();
        let mut outcome = Flushed::Ok;
        if let Some(max) = self.max_size {
            let room = if closing {
                max
            } else {
                max.saturating_sub(CLOSING_ROOM.min(max / 8))
            };
            // A chunk always fits an empty file, however small --max-size is.
            let empty = self.written == self.header_len;
            // A rotation that failed is asked again once its wait is over (what was gathered
            // meanwhile goes into the old part: nothing recorded is lost).
            let done = self.output.counters().rotations.load(Relaxed);
            if done > self.rotations_seen {
                (self.rotations_seen, self.rotate_backoff) = (done, Duration::ZERO);
            }
            if self.output.counters().take_rotation_failed() {
                self.rotation_failed();
            }
            let waiting = self.rotate_retry.is_some_and(|at| Instant::now() < at);
            let over = self.written + self.out.len() as u64 > room;
            if (over || self.rotate_retry.is_some()) && !empty {
                match self.on_full {
                    OnFull::Stop => {
                        self.full = true;
                        self.clear();
                        return Ok(Flushed::Full);
                    }
                    OnFull::Rotate { .. } if waiting || closing => {}
                    OnFull::Rotate { keep } => {
                        self.rotate(keep);
                        // Known at once when the part is written in this thread.
                        if self.output.counters().take_rotation_failed() {
                            self.rotation_failed();
                        } else {
                            outcome = Flushed::Rotated;
                        }
                    }
                }
            }
        }
        let out = std::mem::take(&mut self.out);
        self.written += out.len() as u64;
        self.stats.bytes += out.len() as u64;
        self.output.write(out, self.out_chunks);
        if self.records > 0 {
            self.stats.chunks += 1;
        }
        self.stats.raw_bytes += self.buf.len() as u64;
        self.clear();
        Ok(outcome)
    }

    /// Appends to `out` the chunks holding `entries` as `tag` records of at most [`TABLE_RECORD`]
    /// bytes, each chunk at most [`CHUNK_BYTES`].
    fn table_chunks(&mut self, tag: Tag, entries: &[Vec<u8>]) {
        if entries.is_empty() {
            return;
        }
        let (mut raw, mut records) = (Vec::new(), 0u32);
        let mut json = Vec::with_capacity(TABLE_RECORD);
        let mut i = 0;
        while i < entries.len() {
            json.clear();
            json.push(b'[');
            // At least one entry per record, however long.
            while i < entries.len()
                && (json.len() == 1 || json.len() + entries[i].len() + 2 <= TABLE_RECORD)
            {
                if json.len() > 1 {
                    json.push(b',');
                }
                json.extend_from_slice(&entries[i]);
                i += 1;
            }
            json.push(b']');
            format::put_record(&mut raw, tag, &json);
            records += 1;
            if raw.len() >= CHUNK_BYTES - TABLE_RECORD || i == entries.len() {
                let chunk = self.frame(&raw, records);
                self.out.extend_from_slice(&chunk);
                self.out_chunks += 1;
                self.stats.raw_bytes += raw.len() as u64;
                raw.clear();
                records = 0;
            }
        }
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.records = 0;
        self.started = None;
    }

    /// Appends the gathered records as a chunk to `out` (nothing when there are none).
    fn build_chunk(&mut self) {
        if self.records == 0 {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        let chunk = self.frame(&buf, self.records);
        self.buf = buf;
        self.out.extend_from_slice(&chunk);
        self.out_chunks += 1;
    }

    /// One chunk of `records` records: compressed when that is smaller, framed, checksummed.
    fn frame(&mut self, raw: &[u8], records: u32) -> Vec<u8> {
        let payload = self
            .compress
            .then(|| self.compressor.compress(raw).ok())
            .flatten()
            .filter(|p| p.len() < raw.len());
        let (codec, payload) = match payload {
            Some(p) => (CODEC_ZSTD, p),
            None => (format::CODEC_STORED, raw.to_vec()),
        };
        let h = ChunkHeader {
            payload_len: payload.len() as u32,
            raw_len: raw.len() as u32,
            records,
            seq: self.seq,
            codec,
            crc: 0,
        };
        self.seq = self.seq.wrapping_add(1);
        h.frame(&payload)
    }

    /// The name the next part is created under before it takes FILE's place.
    pub fn next_path(path: &Path) -> PathBuf {
        super::part::next_path(path)
    }

    /// A rotation failed: the old part is still the one written; asked again after a wait.
    fn rotation_failed(&mut self) {
        self.rotate_backoff = (self.rotate_backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        self.rotate_retry = Some(Instant::now() + self.rotate_backoff);
    }

    /// Asks for a new part (see [`Part::rotate`]); it starts with the header and every table
    /// entry seen lately, then the records gathered. Should the rotation fail, all of it goes
    /// into the old part instead.
    fn rotate(&mut self, keep: u32) {
        let header = format::header(&self.hello);
        self.rotate_retry = None;
        self.written = header.len() as u64;
        self.header_len = self.written;
        self.stats.rotations += 1;
        self.output.rotate(keep, header);
        // The new part carries every entry seen lately, ahead of the records gathered for it
        // (which replace the delta just built).
        let since = self.stats.windows.saturating_sub(TABLE_KEEP_WINDOWS);
        let names = self.names.prune(since);
        let files = self.files.prune(since);
        self.out.clear();
        self.out_chunks = 0;
        self.table_chunks(Tag::Names, &names);
        self.table_chunks(Tag::Files, &files);
        self.build_chunk();
    }
}

/// Creates a recording file exclusively with mode 0600, not through a link. With `force` a file
/// already there is removed first (a link itself, never its target).
pub fn open_new(path: &Path, force: bool) -> Result<File, WriteError> {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link && !force {
        return Err(WriteError::Link {
            path: path.to_path_buf(),
        });
    }
    if force {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(WriteError::Create {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
    crate::safety::files::create_new(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            WriteError::Exists {
                path: path.to_path_buf(),
            }
        } else {
            WriteError::Create {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}
