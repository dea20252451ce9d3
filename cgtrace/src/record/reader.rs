//! Reads a recording, whatever state it is in: chunks whose checksum fails, that do not
//! decompress, or that the file ends inside are skipped and counted, and reading resumes at the
//! next sync marker. Only a file with no cgtrace header at all ([`FormatError`]) is refused.
//!
//! [`Recording::open`] checks the header, walks every chunk once and keeps an index of the
//! windows (chunk, place, time, and what events came before each), so the player can seek
//! without holding every window in memory; [`Recording::for_each`] visits every record in
//! order, for `replay --stream`, `report` and the benchmarks. Event records are never parsed
//! beyond their 4-byte kind here.
//!
//! Memory and time are bounded whatever the file holds: the file is read in place (`pread`), one
//! chunk at a time, never whole; a chunk may hold and expand into at most [`MAX_CHUNK`] bytes and
//! a window at most [`MAX_WINDOW`]; what the reader keeps for the whole file is the index (a few
//! dozen bytes a chunk and a window), of at most [`MAX_WINDOWS`] windows and [`MAX_CHUNKS`]
//! chunks. All chunks together expand to at most [`MAX_RATIO`] times the file's size (or
//! [`MIN_EXPANSION`]), and a byte is checksummed at most [`MAX_OVERLAP`] times however many
//! candidate chunk headers overlap it; the sync search reads each byte about once. A file past
//! one of these bounds is refused with what it is ([`FormatError`]). Only regular files are
//! read: a FIFO, a device or a directory is refused before anything is read from it.

use std::{
    fs::File,
    io,
    os::unix::fs::{FileExt as _, FileTypeExt as _, OpenOptionsExt as _},
    path::Path,
};

use thiserror::Error;

use super::{
    NameEntry,
    format::{
        self, CHUNK_HEADER_LEN, CODEC_STORED, CODEC_ZSTD, ChunkHeader, FormatError, HEADER_LEN,
        MAX_CHUNK, MAX_CHUNKS, MAX_HELLO, MAX_OVERLAP, MAX_RATIO, MAX_WINDOW, MAX_WINDOWS,
        MIN_EXPANSION, SYNC, Tag,
    },
};
use crate::{family, model::Hello};

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("reading {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is {what}, not a recording file: copy the recording to a regular file and open that"
    )]
    NotAFile { path: String, what: &'static str },
    #[error("{path}")]
    Format {
        path: String,
        #[source]
        source: FormatError,
    },
}

/// What had to be skipped, for the one-line warning.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadStats {
    pub chunks: u64,
    /// Chunks whose checksum failed, that did not decompress, or whose records were malformed.
    pub bad_chunks: u64,
    /// Bytes not read as part of a good chunk (bad chunks, garbage between chunks, the tail).
    pub skipped_bytes: u64,
    /// The file ends inside a chunk (a killed recorder or a full disk).
    pub truncated: bool,
    /// The recorder's end marker was seen.
    pub clean_end: bool,
    /// The hello failed its checksum.
    pub bad_hello: bool,
    /// Records with a tag this cgtrace does not know (from a newer minor version).
    pub unknown_records: u64,
    /// Windows larger than [`MAX_WINDOW`], not read.
    pub oversized_windows: u64,
    /// Payload bytes checksummed while scanning (at most [`MAX_OVERLAP`] times the file).
    #[serde(skip)]
    pub checksummed_bytes: u64,
}

impl ReadStats {
    /// Adds a later part's (the end marker is the last part's).
    fn add(&mut self, o: &ReadStats) {
        self.chunks += o.chunks;
        self.bad_chunks += o.bad_chunks;
        self.skipped_bytes += o.skipped_bytes;
        self.truncated |= o.truncated;
        self.clean_end = o.clean_end;
        self.bad_hello |= o.bad_hello;
        self.unknown_records += o.unknown_records;
        self.oversized_windows += o.oversized_windows;
        self.checksummed_bytes += o.checksummed_bytes;
    }

    /// One line about what was not readable, or `None` when everything was.
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.bad_hello {
            parts.push("its header (host, kernel) is damaged".to_string());
        }
        if self.bad_chunks > 0 {
            parts.push(format!(
                "skipped {} damaged chunk{} ({} bytes)",
                self.bad_chunks,
                if self.bad_chunks == 1 { "" } else { "s" },
                self.skipped_bytes
            ));
        } else if self.skipped_bytes > 0 {
            parts.push(format!("skipped {} unreadable bytes", self.skipped_bytes));
        }
        if self.oversized_windows > 0 {
            parts.push(format!(
                "skipped {} window{} larger than {} MiB",
                self.oversized_windows,
                if self.oversized_windows == 1 { "" } else { "s" },
                MAX_WINDOW >> 20
            ));
        }
        if self.truncated {
            parts.push(
                "it ends inside a chunk (the recorder was killed or the disk filled): the last second may be missing"
                    .to_string(),
            );
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Where a window is, and what came with it.
#[derive(Clone, Copy, Debug)]
pub struct WindowRef {
    /// Index into the chunk list.
    pub chunk: u32,
    /// Byte range of the window JSON in the decompressed chunk.
    pub start: u32,
    pub len: u32,
    pub mono_ns: u64,
    pub end_unix_ms: u64,
    /// Event kinds (families) seen since the previous window: [`Marks`].
    pub marks: Marks,
    /// Events since the previous window.
    pub events: u32,
}

/// Which families sent single events before a window (seek targets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks(pub u32);

impl Marks {
    pub const RUNQ: u32 = family::runq::INFO.mark;
    pub const THROTTLE: u32 = family::throttle::INFO.mark;
    pub const READS: u32 = family::reads::INFO.mark;
    pub const OTHER: u32 = family::MARK_OTHER;

    /// The mark of an event kind: its family's, for the family's single event (a throttle
    /// episode, not its slices), from the registry.
    pub fn of_kind(kind: u32) -> u32 {
        family::mark_of_kind(kind)
    }

    pub fn has(self, m: u32) -> bool {
        self.0 & m != 0
    }
}

#[derive(Clone, Copy, Debug)]
struct ChunkRef {
    /// Which part's file ([`Recording::append`]).
    part: u32,
    /// Where the payload starts in the file.
    start: u64,
    header: ChunkHeader,
}

/// Where the bytes are: a file read in place, or bytes in memory (tests, the fuzzer).
enum Source {
    File { file: File, len: u64 },
    Mem(Vec<u8>),
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Self::File { len, .. } => *len,
            Self::Mem(b) => b.len() as u64,
        }
    }

    /// Fills `buf` from `at`; the caller keeps within [`Source::len`].
    fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<()> {
        match self {
            Self::File { file, .. } => file.read_exact_at(buf, at),
            Self::Mem(b) => {
                let s = usize::try_from(at)
                    .ok()
                    .and_then(|a| b.get(a..a.checked_add(buf.len())?))
                    .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(s);
                Ok(())
            }
        }
    }

    /// `n` bytes from `at` into `buf` (resized).
    fn read_vec(&self, at: u64, n: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        buf.resize(n, 0);
        self.read_at(at, buf)
    }
}

/// Bytes looked at per read while searching for a sync marker.
const SCAN_BLOCK: usize = 1 << 20;

/// The last block the sync search read, kept so that searching again just after a failed
/// candidate reads nothing new: the search reads each byte of the file about once.
#[derive(Default)]
struct Block {
    at: u64,
    buf: Vec<u8>,
}

impl Block {
    fn end(&self) -> u64 {
        self.at + self.buf.len() as u64
    }

    /// `out.len()` bytes at `at`, if the block holds them.
    fn copy(&self, at: u64, out: &mut [u8]) -> bool {
        let Some(off) = at.checked_sub(self.at) else {
            return false;
        };
        match usize::try_from(off)
            .ok()
            .and_then(|o| self.buf.get(o..o.checked_add(out.len())?))
        {
            Some(b) => {
                out.copy_from_slice(b);
                true
            }
            None => false,
        }
    }
}

/// What the scan has spent, against the bounds in the module's doc.
struct Budget {
    /// Bytes the chunks may still expand to.
    expand_left: u64,
    expand_limit: u64,
    /// Ends of the candidates whose checksum failed and that may still overlap what follows.
    failed_ends: Vec<u64>,
}

impl Budget {
    fn new(file_len: u64) -> Self {
        let limit = file_len.saturating_mul(MAX_RATIO).max(MIN_EXPANSION);
        Self {
            expand_left: limit,
            expand_limit: limit,
            failed_ends: Vec::new(),
        }
    }

    /// Whether a candidate at `at` may be checksummed: fewer than [`MAX_OVERLAP`] failed
    /// candidates cover it (all began before it, so none covers more of what follows).
    fn may_check(&mut self, at: u64) -> bool {
        self.failed_ends.retain(|&e| e > at);
        self.failed_ends.len() < MAX_OVERLAP
    }

    fn expand(&mut self, raw_len: u32) -> Result<(), FormatError> {
        self.expand_left =
            self.expand_left
                .checked_sub(u64::from(raw_len))
                .ok_or(FormatError::Expands {
                    limit_mib: self.expand_limit >> 20,
                })?;
        Ok(())
    }
}

/// One record, as [`Recording::for_each`] hands it out.
#[derive(Debug)]
pub enum Item<'a> {
    Window {
        mono_ns: u64,
        end_unix_ms: u64,
        json: &'a [u8],
    },
    Event(&'a [u8]),
    Names(&'a [u8]),
    Files(&'a [u8]),
    Summary(&'a [u8]),
    Loss(&'a [u8]),
    End(&'a [u8]),
}

/// A recording in memory with its index: one file, or the parts of a rotated recording read as
/// one ([`Recording::append`]).
pub struct Recording {
    /// Each part's bytes; the first part's header is the recording's.
    srcs: Vec<Source>,
    pub major: u16,
    pub minor: u16,
    /// The hello JSON as recorded (`None` when damaged).
    pub hello_json: Option<Vec<u8>>,
    chunks: Vec<ChunkRef>,
    pub windows: Vec<WindowRef>,
    pub events: u64,
    pub stats: ReadStats,
}

impl Recording {
    /// Opens a recording file. Refuses anything but a regular file before reading from it (a FIFO
    /// would block, a device never ends).
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let io_err = |source| ReadError::Io {
            path: path.display().to_string(),
            source,
        };
        // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        let t = meta.file_type();
        if !t.is_file() {
            let what = if t.is_fifo() {
                "a FIFO (named pipe)"
            } else if t.is_dir() {
                "a directory"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            return Err(ReadError::NotAFile {
                path: path.display().to_string(),
                what,
            });
        }
        let src = Source::File {
            file,
            len: meta.len(),
        };
        Self::from_source(src).map_err(|e| match e {
            SourceError::Io(source) => io_err(source),
            SourceError::Format(source) => ReadError::Format {
                path: path.display().to_string(),
                source,
            },
        })
    }

    /// Parses a recording held in memory. Fails only when the header is unusable.
    pub fn from_bytes(data: Vec<u8>) -> Result<Self, FormatError> {
        Self::from_source(Source::Mem(data)).map_err(|e| match e {
            SourceError::Format(f) => f,
            // Memory reads do not fail but at the end, which the scan keeps within.
            SourceError::Io(_) => FormatError::Empty,
        })
    }

    fn from_source(src: Source) -> Result<Self, SourceError> {
        let head_len = src.len().min((HEADER_LEN + MAX_HELLO) as u64) as usize;
        let mut head = Vec::new();
        src.read_vec(0, head_len, &mut head)
            .map_err(SourceError::Io)?;
        let h = format::parse_header(&head).map_err(SourceError::Format)?;
        let (major, minor, body) = (h.major, h.minor, h.body as u64);
        let hello_json = h.hello.map(<[u8]>::to_vec);
        drop(head);
        let mut rec = Self {
            major,
            minor,
            stats: ReadStats {
                bad_hello: hello_json.is_none(),
                ..ReadStats::default()
            },
            hello_json,
            srcs: vec![src],
            chunks: Vec::new(),
            windows: Vec::new(),
            events: 0,
        };
        rec.scan(body)?;
        Ok(rec)
    }

    /// The hello, or a stand-in naming what is known when it was damaged.
    pub fn hello(&self) -> Hello {
        self.hello_json
            .as_deref()
            .and_then(|j| serde_json::from_slice(j).ok())
            .unwrap_or_else(|| placeholder_hello(self.windows.first().map(|w| w.end_unix_ms)))
    }

    /// Appends `next`, a later part of the same rotated recording (FILE.1 after FILE.2, FILE after
    /// FILE.1, or the next run's first part after a restart): its chunks and windows follow
    /// this one's, read in that order; the hello stays the first part's. The limits on windows
    /// and chunks hold for the whole.
    pub fn append(&mut self, next: Recording) -> Result<(), FormatError> {
        if self.chunks.len() + next.chunks.len() > MAX_CHUNKS {
            return Err(FormatError::TooManyChunks { limit: MAX_CHUNKS });
        }
        if self.windows.len() + next.windows.len() > MAX_WINDOWS {
            return Err(FormatError::TooManyWindows { limit: MAX_WINDOWS });
        }
        let (parts, chunks) = (self.srcs.len() as u32, self.chunks.len() as u32);
        self.srcs.extend(next.srcs);
        self.chunks
            .extend(next.chunks.into_iter().map(|c| ChunkRef {
                part: c.part + parts,
                ..c
            }));
        self.windows
            .extend(next.windows.into_iter().map(|w| WindowRef {
                chunk: w.chunk + chunks,
                ..w
            }));
        self.events += next.events;
        self.stats.add(&next.stats);
        if self.hello_json.is_none() {
            self.hello_json = next.hello_json;
        }
        Ok(())
    }

    /// Finds every chunk and indexes the windows.
    fn scan(&mut self, mut pos: u64) -> Result<(), SourceError> {
        let (mut payload, mut buf, mut block) = (Vec::new(), Vec::new(), Block::default());
        let mut marks = 0u32;
        let mut events = 0u32;
        let src = &self.srcs[0];
        let len = src.len();
        let mut budget = Budget::new(len);
        while pos < len {
            let Some(at) = find_sync_in(&self.srcs[0], pos, &mut block)? else {
                // Trailing bytes with no chunk: the start of a chunk header cut off, or garbage.
                let tail = len - pos;
                self.stats.skipped_bytes += tail;
                if tail < CHUNK_HEADER_LEN as u64 {
                    let mut t = Vec::new();
                    self.srcs[0].read_vec(pos, tail as usize, &mut t)?;
                    if SYNC.starts_with(&t) || tail < CHUNK_HEADER_LEN as u64 {
                        self.stats.truncated = true;
                    }
                }
                break;
            };
            self.stats.skipped_bytes += at - pos;
            let check = check_chunk(&self.srcs[0], at, &mut payload, &block, &mut budget)?;
            if matches!(check, Check::Good(..) | Check::BadChecksum) {
                self.stats.checksummed_bytes += payload.len() as u64;
            }
            match check {
                Check::Good(header, start) => {
                    let end = start + u64::from(header.payload_len);
                    if self.chunks.len() >= MAX_CHUNKS {
                        return Err(SourceError::Format(FormatError::TooManyChunks {
                            limit: MAX_CHUNKS,
                        }));
                    }
                    budget.expand(header.raw_len).map_err(SourceError::Format)?;
                    let idx = self.chunks.len() as u32;
                    let ok = decompress(&header, &payload, &mut buf).is_ok()
                        && index_records(&buf, idx, self, &mut marks, &mut events)?;
                    if ok {
                        self.chunks.push(ChunkRef {
                            part: 0,
                            start,
                            header,
                        });
                        self.stats.chunks += 1;
                    } else {
                        // Drop what this chunk indexed, and resync after it.
                        self.windows.retain(|w| w.chunk != idx);
                        self.stats.bad_chunks += 1;
                        self.stats.skipped_bytes += end - at;
                    }
                    pos = end;
                }
                Check::Truncated => {
                    // A torn write may still be followed by whole chunks (a file appended to).
                    match find_sync_in(&self.srcs[0], at + 1, &mut block)? {
                        Some(next) => {
                            self.stats.bad_chunks += 1;
                            self.stats.skipped_bytes += next - at;
                            pos = next;
                        }
                        None => {
                            self.stats.truncated = true;
                            self.stats.skipped_bytes += len - at;
                            break;
                        }
                    }
                }
                Check::Bad | Check::BadChecksum => {
                    self.stats.bad_chunks += 1;
                    let next = find_sync_in(&self.srcs[0], at + 1, &mut block)?.unwrap_or(len);
                    self.stats.skipped_bytes += next - at;
                    pos = next;
                }
            }
        }
        // The scan's buffers (up to a chunk each) go; what stays is the index.
        Ok(())
    }

    /// Decompresses chunk `i` into `buf`.
    pub fn chunk(&self, i: u32, buf: &mut Vec<u8>) -> bool {
        let Some(c) = self.chunks.get(i as usize) else {
            return false;
        };
        let mut payload = Vec::new();
        self.srcs[c.part as usize]
            .read_vec(c.start, c.header.payload_len as usize, &mut payload)
            .is_ok()
            && decompress(&c.header, &payload, buf).is_ok()
    }

    /// The JSON of window `i` (decompressing its chunk into `buf` unless `cached` says it is
    /// there already).
    pub fn window_json<'b>(
        &self,
        i: usize,
        buf: &'b mut Vec<u8>,
        cached: &mut Option<u32>,
    ) -> Option<&'b [u8]> {
        let w = self.windows.get(i)?;
        if *cached != Some(w.chunk) {
            *cached = None;
            if !self.chunk(w.chunk, buf) {
                return None;
            }
            *cached = Some(w.chunk);
        }
        buf.get(w.start as usize..(w.start + w.len) as usize)
    }

    /// Calls `f` with every record of every good chunk, in file order.
    pub fn for_each(&self, mut f: impl FnMut(Item<'_>)) {
        let mut buf = Vec::new();
        for i in 0..self.chunks.len() as u32 {
            if !self.chunk(i, &mut buf) {
                continue;
            }
            for_records(&buf, |tag, body| {
                let item = match Tag::from_u8(tag) {
                    Some(Tag::Event) => Item::Event(body),
                    Some(Tag::Window) if body.len() >= 16 && body.len() <= MAX_WINDOW + 16 => {
                        Item::Window {
                            mono_ns: u64_le(&body[..8]),
                            end_unix_ms: u64_le(&body[8..16]),
                            json: &body[16..],
                        }
                    }
                    Some(Tag::Names) => Item::Names(body),
                    Some(Tag::Files) => Item::Files(body),
                    Some(Tag::Summary) => Item::Summary(body),
                    Some(Tag::Loss) => Item::Loss(body),
                    Some(Tag::End) => Item::End(body),
                    _ => return,
                };
                f(item);
            });
        }
    }

    /// Every name entry, last one per id winning.
    pub fn names(&self) -> std::collections::HashMap<u64, NameEntry> {
        let mut out = std::collections::HashMap::new();
        self.for_each(|item| {
            if let Item::Names(j) = item
                && let Ok(v) = serde_json::from_slice::<Vec<NameEntry>>(j)
            {
                out.extend(v.into_iter().map(|e| (e.id, e)));
            }
        });
        out
    }
}

fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Offset of the next sync marker in `b`; a marker cut off by the end of `b` counts as found.
fn find_sync(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&x| x == SYNC[0]) {
        let at = from + i;
        if b.len() - at < SYNC.len() {
            return SYNC.starts_with(&b[at..]).then_some(at);
        }
        if b[at..at + SYNC.len()] == SYNC {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Offset of the next sync marker at or after `pos`, read a block at a time; a marker cut off by
/// the end of the file counts as found (a truncated chunk).
fn find_sync_in(src: &Source, mut pos: u64, block: &mut Block) -> io::Result<Option<u64>> {
    let len = src.len();
    while pos < len {
        // The block read last is searched again from `pos` when it holds `pos` and a marker's
        // length after it (or the file's end): nothing is read twice but a marker's tail.
        let last_block = block.end() == len;
        let held = block.at <= pos
            && pos < block.end()
            && (last_block || block.end() - pos >= SYNC.len() as u64);
        if !held {
            let n = (len - pos).min(SCAN_BLOCK as u64) as usize;
            src.read_vec(pos, n, &mut block.buf)?;
            block.at = pos;
        }
        let last = block.end() == len;
        let off = (pos - block.at) as usize;
        let rest = &block.buf[off..];
        match find_sync(rest) {
            Some(i) if last || i + SYNC.len() <= rest.len() => return Ok(Some(pos + i as u64)),
            // Cut off by the block, not the file: look again from there (read anew: fewer than
            // a marker's bytes are left in the block).
            Some(i) => pos += i as u64,
            None if last => return Ok(None),
            None => pos = block.end(),
        }
    }
    Ok(None)
}

enum Check {
    /// The header and the payload's checksum are right; the payload starts here (and is in the
    /// caller's buffer).
    Good(ChunkHeader, u64),
    /// The file ends inside the chunk.
    Truncated,
    /// Impossible sizes, or overlapped by too many failed candidates to be checked.
    Bad,
    /// The checksum does not match.
    BadChecksum,
}

fn check_chunk(
    src: &Source,
    at: u64,
    payload: &mut Vec<u8>,
    block: &Block,
    budget: &mut Budget,
) -> io::Result<Check> {
    let len = src.len();
    if len - at < CHUNK_HEADER_LEN as u64 {
        return Ok(Check::Truncated);
    }
    let mut hb = [0u8; 24];
    if !block.copy(at + SYNC.len() as u64, &mut hb) {
        src.read_at(at + SYNC.len() as u64, &mut hb)?;
    }
    let h = ChunkHeader::parse(&hb);
    if h.payload_len as usize > MAX_CHUNK
        || h.raw_len as usize > MAX_CHUNK
        || !matches!(h.codec, CODEC_STORED | CODEC_ZSTD)
    {
        return Ok(Check::Bad);
    }
    let start = at + CHUNK_HEADER_LEN as u64;
    let end = start + u64::from(h.payload_len);
    if end > len {
        return Ok(Check::Truncated);
    }
    // Overlapped by as many failed candidates as a byte may be checksummed: not checked (a
    // file of overlapping headers), and not a chunk the writer wrote.
    if !budget.may_check(at) {
        return Ok(Check::Bad);
    }
    src.read_vec(start, h.payload_len as usize, payload)?;
    if h.checksum(payload) != h.crc {
        budget.failed_ends.push(end);
        return Ok(Check::BadChecksum);
    }
    Ok(Check::Good(h, start))
}

/// Why a source could not be opened as a recording.
enum SourceError {
    Io(io::Error),
    Format(FormatError),
}

impl From<io::Error> for SourceError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

fn decompress(h: &ChunkHeader, payload: &[u8], buf: &mut Vec<u8>) -> Result<(), ()> {
    buf.clear();
    match h.codec {
        CODEC_STORED => {
            if payload.len() != h.raw_len as usize {
                return Err(());
            }
            buf.extend_from_slice(payload);
            Ok(())
        }
        CODEC_ZSTD => {
            buf.reserve(h.raw_len as usize);
            let mut d = zstd::bulk::Decompressor::new().map_err(|_| ())?;
            let n = d.decompress_to_buffer(payload, buf).map_err(|_| ())?;
            if n != h.raw_len as usize {
                return Err(());
            }
            Ok(())
        }
        _ => Err(()),
    }
}

/// Calls `f(tag, body)` for each record; `false` when the records do not fill the buffer
/// exactly (a chunk that passed its checksum but is malformed: written by something else).
fn for_records(buf: &[u8], mut f: impl FnMut(u8, &[u8])) -> bool {
    let mut p = 0;
    while p < buf.len() {
        let tag = buf[p];
        let Some((len, n)) = format::get_uleb32(&buf[p + 1..]) else {
            return false;
        };
        let start = p + 1 + n;
        let Some(end) = start.checked_add(len as usize).filter(|&e| e <= buf.len()) else {
            return false;
        };
        f(tag, &buf[start..end]);
        p = end;
    }
    true
}

/// Indexes a chunk's records; `Ok(false)` when they are malformed (nothing of them kept),
/// an error past [`MAX_WINDOWS`].
fn index_records(
    buf: &[u8],
    chunk: u32,
    rec: &mut Recording,
    marks: &mut u32,
    events: &mut u32,
) -> Result<bool, SourceError> {
    let before = rec.windows.len();
    let (m0, e0, ev0, unk0, big0) = (
        *marks,
        *events,
        rec.events,
        rec.stats.unknown_records,
        rec.stats.oversized_windows,
    );
    let mut end = false;
    let mut full = false;
    let ok = for_records(buf, |tag, body| match Tag::from_u8(tag) {
        Some(Tag::Event) => {
            rec.events += 1;
            *events = events.saturating_add(1);
            if body.len() >= 4 {
                *marks |= Marks::of_kind(u32::from_le_bytes([body[0], body[1], body[2], body[3]]));
            }
        }
        Some(Tag::Window) if body.len() > MAX_WINDOW + 16 => {
            rec.stats.oversized_windows += 1;
        }
        Some(Tag::Window) if body.len() >= 16 && rec.windows.len() >= MAX_WINDOWS => full = true,
        Some(Tag::Window) if body.len() >= 16 => {
            rec.windows.push(WindowRef {
                chunk,
                start: (body.as_ptr() as usize - buf.as_ptr() as usize + 16) as u32,
                len: (body.len() - 16) as u32,
                mono_ns: u64_le(&body[..8]),
                end_unix_ms: u64_le(&body[8..16]),
                marks: Marks(std::mem::take(marks)),
                events: std::mem::take(events),
            });
        }
        Some(Tag::End) => end = true,
        Some(_) => {}
        None => rec.stats.unknown_records += 1,
    });
    if full {
        return Err(SourceError::Format(FormatError::TooManyWindows {
            limit: MAX_WINDOWS,
        }));
    }
    if !ok {
        rec.windows.truncate(before);
        (
            *marks,
            *events,
            rec.events,
            rec.stats.unknown_records,
            rec.stats.oversized_windows,
        ) = (m0, e0, ev0, unk0, big0);
        return Ok(false);
    }
    if end {
        rec.stats.clean_end = true;
    }
    Ok(true)
}

/// What the view shows when the hello was damaged.
fn placeholder_hello(start_unix_ms: Option<u64>) -> Hello {
    use crate::model::{Capabilities, CgroupLayoutInfo, HistSpec, SCHEMA};
    Hello {
        kind: "hello".into(),
        schema: SCHEMA,
        cgtrace: "?".into(),
        host: "(header damaged)".into(),
        kernel: "?".into(),
        cpus: 0,
        start_unix_ms: start_unix_ms.unwrap_or(0),
        interval_ms: 1000,
        cgroup: CgroupLayoutInfo {
            layout: "?".into(),
            runq_hierarchy: "?".into(),
            runq_mount: "?".into(),
        },
        families: ["runq", "throttle"]
            .into_iter()
            .map(|f| {
                let mode = crate::model::FamilyMode {
                    mode: crate::model::AttachMode::Unknown,
                    detail: "the recording's header is damaged".into(),
                };
                (f.to_string(), mode)
            })
            .collect(),
        capabilities: Capabilities::default(),
        hist: HistSpec::this_build(),
        kept_capabilities: Vec::new(),
        wait_split: None,
        blame_min_us: None,
        blame: None,
        sched_ext: None,
    }
}
