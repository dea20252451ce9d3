//! Reads a recording, whatever state it is in: chunks whose checksum fails, that do not
//! decompress, or that the file ends inside are skipped and counted, and reading resumes at the
//! next sync marker. Only a file with no cgtrace header at all ([`FormatError`]) is refused.
//!
//! [`Recording::open`] checks the header, walks every chunk once and keeps an index of the
//! windows (chunk, place, time, and what events came before each), so the player can seek
//! without holding every window in memory; [`Recording::for_each`] visits every record in
//! order, for `replay --stream`, `report` and the benchmarks. Event records are never parsed
//! beyond their 4-byte kind here.

use std::path::Path;

use thiserror::Error;

use super::{
    NameEntry,
    format::{
        self, CHUNK_HEADER_LEN, CODEC_STORED, CODEC_ZSTD, ChunkHeader, FormatError, MAX_CHUNK,
        SYNC, Tag,
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
}

impl ReadStats {
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
    /// Payload range in the file.
    start: usize,
    header: ChunkHeader,
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
    Summary(&'a [u8]),
    Loss(&'a [u8]),
    End(&'a [u8]),
}

/// A recording in memory with its index.
pub struct Recording {
    data: Vec<u8>,
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
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let data = std::fs::read(path).map_err(|source| ReadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_bytes(data).map_err(|source| ReadError::Format {
            path: path.display().to_string(),
            source,
        })
    }

    /// Parses a recording held in memory. Fails only when the header is unusable.
    pub fn from_bytes(data: Vec<u8>) -> Result<Self, FormatError> {
        let h = format::parse_header(&data)?;
        let (major, minor, body) = (h.major, h.minor, h.body);
        let hello_json = h.hello.map(<[u8]>::to_vec);
        let mut rec = Self {
            major,
            minor,
            stats: ReadStats {
                bad_hello: hello_json.is_none(),
                ..ReadStats::default()
            },
            hello_json,
            data,
            chunks: Vec::new(),
            windows: Vec::new(),
            events: 0,
        };
        rec.scan(body);
        Ok(rec)
    }

    /// The hello, or a stand-in naming what is known when it was damaged.
    pub fn hello(&self) -> Hello {
        self.hello_json
            .as_deref()
            .and_then(|j| serde_json::from_slice(j).ok())
            .unwrap_or_else(|| placeholder_hello(self.windows.first().map(|w| w.end_unix_ms)))
    }

    /// Finds every chunk and indexes the windows.
    fn scan(&mut self, mut pos: usize) {
        let mut buf = Vec::new();
        let mut marks = 0u32;
        let mut events = 0u32;
        let data = std::mem::take(&mut self.data);
        while pos < data.len() {
            let Some(found) = find_sync(&data[pos..]) else {
                // Trailing bytes with no chunk: the start of a chunk header cut off, or garbage.
                let tail = data.len() - pos;
                self.stats.skipped_bytes += tail as u64;
                if SYNC.starts_with(&data[pos..]) || tail < CHUNK_HEADER_LEN {
                    self.stats.truncated = true;
                }
                break;
            };
            if found > 0 {
                self.stats.skipped_bytes += found as u64;
            }
            let at = pos + found;
            match check_chunk(&data, at) {
                Check::Good(header, start) => {
                    let end = start + header.payload_len as usize;
                    let idx = self.chunks.len() as u32;
                    let ok = decompress(&header, &data[start..end], &mut buf).is_ok()
                        && index_records(&buf, idx, self, &mut marks, &mut events);
                    if ok {
                        self.chunks.push(ChunkRef { start, header });
                        self.stats.chunks += 1;
                        pos = end;
                    } else {
                        // Drop what this chunk indexed, and resync after its marker.
                        self.windows.retain(|w| w.chunk != idx);
                        self.stats.bad_chunks += 1;
                        self.stats.skipped_bytes += (end - at) as u64;
                        pos = end;
                    }
                }
                Check::Truncated => {
                    // A torn write may still be followed by whole chunks (a file appended to).
                    match find_sync(&data[at + 1..]) {
                        Some(n) => {
                            self.stats.bad_chunks += 1;
                            self.stats.skipped_bytes += (n + 1) as u64;
                            pos = at + 1 + n;
                        }
                        None => {
                            self.stats.truncated = true;
                            self.stats.skipped_bytes += (data.len() - at) as u64;
                            break;
                        }
                    }
                }
                Check::Bad => {
                    self.stats.bad_chunks += 1;
                    let next = find_sync(&data[at + 1..]).map_or(data.len(), |n| at + 1 + n);
                    self.stats.skipped_bytes += (next - at) as u64;
                    pos = next;
                }
            }
        }
        self.data = data;
    }

    /// Decompresses chunk `i` into `buf`.
    pub fn chunk(&self, i: u32, buf: &mut Vec<u8>) -> bool {
        let Some(c) = self.chunks.get(i as usize) else {
            return false;
        };
        let payload = &self.data[c.start..c.start + c.header.payload_len as usize];
        decompress(&c.header, payload, buf).is_ok()
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
                    Some(Tag::Window) if body.len() >= 16 => Item::Window {
                        mono_ns: u64_le(&body[..8]),
                        end_unix_ms: u64_le(&body[8..16]),
                        json: &body[16..],
                    },
                    Some(Tag::Names) => Item::Names(body),
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

/// Offset of the next sync marker.
fn find_sync(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&x| x == SYNC[0]) {
        let at = from + i;
        if b.len() - at < SYNC.len() {
            // A marker cut off by the end of the file counts as found (a truncated chunk).
            return SYNC.starts_with(&b[at..]).then_some(at);
        }
        if b[at..at + SYNC.len()] == SYNC {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

enum Check {
    /// The header and the payload's checksum are right; the payload starts here.
    Good(ChunkHeader, usize),
    /// The file ends inside the chunk.
    Truncated,
    /// Impossible sizes or a checksum mismatch.
    Bad,
}

fn check_chunk(data: &[u8], at: usize) -> Check {
    if data.len() - at < CHUNK_HEADER_LEN {
        return Check::Truncated;
    }
    let mut hb = [0u8; 24];
    hb.copy_from_slice(&data[at + SYNC.len()..at + CHUNK_HEADER_LEN]);
    let h = ChunkHeader::parse(&hb);
    if h.payload_len as usize > MAX_CHUNK
        || h.raw_len as usize > MAX_CHUNK
        || !matches!(h.codec, CODEC_STORED | CODEC_ZSTD)
    {
        return Check::Bad;
    }
    let start = at + CHUNK_HEADER_LEN;
    let end = start + h.payload_len as usize;
    if end > data.len() {
        return Check::Truncated;
    }
    if h.checksum(&data[start..end]) != h.crc {
        return Check::Bad;
    }
    Check::Good(h, start)
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

fn index_records(
    buf: &[u8],
    chunk: u32,
    rec: &mut Recording,
    marks: &mut u32,
    events: &mut u32,
) -> bool {
    let before = rec.windows.len();
    let (m0, e0, ev0, unk0) = (*marks, *events, rec.events, rec.stats.unknown_records);
    let mut end = false;
    let ok = for_records(buf, |tag, body| match Tag::from_u8(tag) {
        Some(Tag::Event) => {
            rec.events += 1;
            *events = events.saturating_add(1);
            if body.len() >= 4 {
                *marks |= Marks::of_kind(u32::from_le_bytes([body[0], body[1], body[2], body[3]]));
            }
        }
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
    if !ok {
        rec.windows.truncate(before);
        (*marks, *events, rec.events, rec.stats.unknown_records) = (m0, e0, ev0, unk0);
        return false;
    }
    if end {
        rec.stats.clean_end = true;
    }
    true
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
        hist: HistSpec {
            unit: "ns".into(),
            sub_bits: cgtrace_common::hist::SUB_BITS,
            buckets: cgtrace_common::hist::NR_BUCKETS,
        },
    }
}
