//! The recording file format (`cgtrace record`), version [`MAJOR`].[`MINOR`].
//!
//! ```text
//! file    = header chunk*
//! header  = MAGIC(8) major:u16 minor:u16 flags:u32 hello_len:u32 hello_crc:u32 hello(JSON)
//! chunk   = SYNC(8) payload_len:u32 raw_len:u32 records:u32 seq:u32 codec:u8 0:u8 0:u16 crc:u32
//!           payload(payload_len)
//! payload = zstd(record*)            (codec 1; codec 0 is stored uncompressed)
//! record  = tag:u8 len:uleb128 body(len)
//! ```
//!
//! All integers are little-endian. `crc` is CRC-32C over the 20 header bytes before it and the
//! payload, so a reader can tell a damaged chunk and skip it: it then searches for the next
//! [`SYNC`] marker and carries on, counting what it skipped. A chunk is self-contained (its own
//! zstd frame), written with one `write` and followed by `fdatasync`, so a killed recorder or a
//! full disk leaves at most one incomplete chunk at the end.
//!
//! Record tags ([`Tag`]): a window (`mono_ns:u64` at its end, then the `window` JSON exactly as
//! the stream prints it), an event (the ring-buffer record bytes as the kernel wrote them:
//! [`cgtrace_common::event::EventHeader`] first, kind at offset 0, cgroup id at offset 16), the
//! cgroup names (a JSON array of `{id, path, name, name_kind}`, written when an id is first seen
//! or its name changes, and in full at the start of every file), the files slow reads read (a
//! JSON array of `{file, dev, path, fs, hierarchy, dir}`, likewise), the closing `summary` JSON, the
//! recorder's own losses, and the end marker. Readers skip tags they do not know, and windows and
//! events are carried as the stream's JSON and the kernel's bytes, so a new family's fields and
//! event kinds pass through without a format change. A change old readers would misread bumps
//! [`MAJOR`]; readers refuse a newer major version.

use thiserror::Error;

/// First bytes of every recording (PNG-style: a high byte, the name, CR LF, a DOS EOF, LF).
pub const MAGIC: [u8; 8] = *b"\x89CGTR\r\x1a\n";
/// Start of every chunk.
pub const SYNC: [u8; 8] = *b"\xfeCGTchk\x01";
pub const MAJOR: u16 = 1;
pub const MINOR: u16 = 1;
/// Bytes before the hello JSON.
pub const HEADER_LEN: usize = 8 + 2 + 2 + 4 + 4 + 4;
/// Bytes of a chunk header, sync marker included.
pub const CHUNK_HEADER_LEN: usize = 8 + 20 + 4;
/// Largest chunk payload and decompressed size a reader accepts (the writer stays below: a chunk
/// is cut at [`CHUNK_BYTES`](super::writer::CHUNK_BYTES) plus at most one window).
pub const MAX_CHUNK: usize = 32 << 20;
/// Largest window JSON a reader parses (a window of 10 000 cgroups is a few MiB); larger ones are
/// skipped and counted, so one record cannot expand into more than this.
pub const MAX_WINDOW: usize = 16 << 20;
/// Largest hello.
pub const MAX_HELLO: usize = 1 << 20;
/// Most windows a reader indexes in one file: 24 days of 1 s windows, far more than a part
/// `cgtrace record --max-size` writes; the index then holds about 140 MiB. Past it the file is
/// refused ([`FormatError::TooManyWindows`]).
pub const MAX_WINDOWS: usize = 1 << 21;
/// Most chunks a reader indexes in one file (the writer writes about one a window).
pub const MAX_CHUNKS: usize = 1 << 21;
/// A file's chunks may expand to this many times its size in all (the writer's zstd makes
/// about ten of one), or to [`MIN_EXPANSION`], whichever is more: so reading is linear in the
/// file's size whatever it holds ([`FormatError::Expands`]).
pub const MAX_RATIO: u64 = 256;
/// What any file may expand to (a few largest chunks).
pub const MIN_EXPANSION: u64 = 256 << 20;
/// A candidate chunk's payload is checksummed only while fewer than this many failed
/// candidates overlap where it starts: each byte is checksummed at most this many times, so a
/// file of overlapping headers costs a bounded number of passes, not one per header.
pub const MAX_OVERLAP: usize = 4;

pub const CODEC_STORED: u8 = 0;
pub const CODEC_ZSTD: u8 = 1;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// `mono_ns:u64` then the window JSON.
    Window = 1,
    /// A raw ring-buffer record.
    Event = 2,
    /// JSON array of [`NameEntry`](super::NameEntry).
    Names = 3,
    /// The stream's `summary` JSON.
    Summary = 4,
    /// JSON `{"events_lost": n, "bytes_lost": n}`: what the recorder itself could not keep.
    Loss = 5,
    /// JSON `{"reason": "..."}`: the recorder stopped cleanly; nothing follows in this file.
    End = 6,
    /// JSON array of the files slow reads read
    /// ([`ReadFile`](crate::family::reads::model::ReadFile)), as the tracer named them (since 1.1).
    Files = 7,
}

impl Tag {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Window,
            2 => Self::Event,
            3 => Self::Names,
            4 => Self::Summary,
            5 => Self::Loss,
            6 => Self::End,
            7 => Self::Files,
            _ => return None,
        })
    }
}

/// A fixed-size chunk header, after the sync marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub payload_len: u32,
    pub raw_len: u32,
    pub records: u32,
    pub seq: u32,
    pub codec: u8,
    pub crc: u32,
}

impl ChunkHeader {
    /// The header of a stored (uncompressed) payload of `len` bytes and `records` records, its
    /// checksum not yet set.
    pub fn stored(len: u32, records: u32) -> Self {
        Self {
            payload_len: len,
            raw_len: len,
            records,
            seq: 0,
            codec: CODEC_STORED,
            crc: 0,
        }
    }

    /// The 20 bytes between the sync marker and the crc.
    pub fn fields(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[0..4].copy_from_slice(&self.payload_len.to_le_bytes());
        b[4..8].copy_from_slice(&self.raw_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.records.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16] = self.codec;
        b
    }

    pub fn parse(b: &[u8; 24]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            payload_len: u32_at(0),
            raw_len: u32_at(4),
            records: u32_at(8),
            seq: u32_at(12),
            codec: b[16],
            crc: u32_at(20),
        }
    }

    /// CRC-32C of the header fields and the payload.
    pub fn checksum(&self, payload: &[u8]) -> u32 {
        crc32c::crc32c_append(crc32c::crc32c(&self.fields()), payload)
    }

    /// The chunk as the writer writes it: [`SYNC`], the fields, their checksum over `payload`
    /// (set here), then `payload`.
    pub fn frame(mut self, payload: &[u8]) -> Vec<u8> {
        self.crc = self.checksum(payload);
        let mut out = Vec::with_capacity(CHUNK_HEADER_LEN + payload.len());
        out.extend_from_slice(&SYNC);
        out.extend_from_slice(&self.fields());
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(payload);
        out
    }
}

/// Appends `v` as unsigned LEB128.
pub fn put_uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Reads an unsigned LEB128 of at most 32 bits; returns it and the bytes used.
pub fn get_uleb32(b: &[u8]) -> Option<(u32, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(5) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return u32::try_from(v).ok().map(|v| (v, i + 1));
        }
    }
    None
}

/// Appends one record.
pub fn put_record(out: &mut Vec<u8>, tag: Tag, body: &[u8]) {
    out.push(tag as u8);
    put_uleb(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Appends one record whose body is `prefix` then `rest` (a window: its time, then its JSON).
pub fn put_record2(out: &mut Vec<u8>, tag: Tag, prefix: &[u8], rest: &[u8]) {
    out.push(tag as u8);
    put_uleb(out, (prefix.len() + rest.len()) as u64);
    out.extend_from_slice(prefix);
    out.extend_from_slice(rest);
}

/// The file header for `hello`.
pub fn header(hello_json: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + hello_json.len());
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&MAJOR.to_le_bytes());
    b.extend_from_slice(&MINOR.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(hello_json.len() as u32).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(hello_json).to_le_bytes());
    b.extend_from_slice(hello_json);
    b
}

/// Recomputes the hello's and every framed chunk's checksum in place (the fuzzer uses it to get
/// mutated bytes past the CRC into the decompressor and the record parser; tests to forge files).
#[doc(hidden)]
pub fn repair_checksums(data: &mut [u8]) {
    if data.len() >= HEADER_LEN && data[..MAGIC.len()] == MAGIC {
        let len = u32::from_le_bytes([data[16], data[17], data[18], data[19]]) as usize;
        if let Some(hello) = data.get(HEADER_LEN..HEADER_LEN.saturating_add(len)) {
            let crc = crc32c::crc32c(hello).to_le_bytes();
            data[20..24].copy_from_slice(&crc);
        }
    }
    let mut at = 0;
    while at + CHUNK_HEADER_LEN <= data.len() {
        if data[at..at + SYNC.len()] != SYNC {
            at += 1;
            continue;
        }
        let mut hb = [0u8; 24];
        hb.copy_from_slice(&data[at + SYNC.len()..at + CHUNK_HEADER_LEN]);
        let h = ChunkHeader::parse(&hb);
        let start = at + CHUNK_HEADER_LEN;
        let Some(end) = start
            .checked_add(h.payload_len as usize)
            .filter(|&e| e <= data.len())
        else {
            at += 1;
            continue;
        };
        let crc = h.checksum(&data[start..end]).to_le_bytes();
        data[at + 28..at + 32].copy_from_slice(&crc);
        at = end;
    }
}

/// Why a file cannot be read at all. Each message says what is wrong and what to do.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    #[error(
        "the file is empty: nothing was recorded (the recorder stopped before writing its header)"
    )]
    Empty,
    #[error(
        "this is a cgtrace NDJSON stream, not a recording: read it with jq, or record with `cgtrace record -o FILE`"
    )]
    Stream,
    #[error(
        "not a cgtrace recording (its first bytes are not the cgtrace magic): check the file name"
    )]
    NotOurs,
    #[error("the file ends inside its header ({len} bytes): nothing was recorded")]
    TruncatedHeader { len: usize },
    #[error(
        "recorded with format version {major}.{minor}, newer than this cgtrace reads ({}.x): replay it with a newer cgtrace",
        MAJOR
    )]
    NewerMajor { major: u16, minor: u16 },
    #[error("format version {major}.{minor} is not one this cgtrace knows")]
    BadVersion { major: u16, minor: u16 },
    #[error(
        "more than {limit} window records, more than this cgtrace reads from one file (`cgtrace record` writes far fewer per --max-size part): it was not written by cgtrace record; check where it came from"
    )]
    TooManyWindows { limit: usize },
    #[error(
        "more than {limit} chunks, more than this cgtrace reads from one file (`cgtrace record` writes far fewer per --max-size part): it was not written by cgtrace record; check where it came from"
    )]
    TooManyChunks { limit: usize },
    #[error(
        "its chunks expand to more than {limit_mib} MiB, the most this cgtrace reads ({} times the file's size, or {} MiB; what cgtrace record writes expands about ten times): it was made to exhaust memory or time, not written by cgtrace record; check where it came from",
        MAX_RATIO,
        MIN_EXPANSION >> 20
    )]
    Expands { limit_mib: u64 },
}

/// A parsed file header.
#[derive(Debug, PartialEq, Eq)]
pub struct FileHeader<'a> {
    pub major: u16,
    pub minor: u16,
    /// The hello JSON; `None` when its checksum failed (then the reader carries on without it).
    pub hello: Option<&'a [u8]>,
    /// Where the first chunk starts.
    pub body: usize,
}

/// Checks the magic and version and finds the hello.
pub fn parse_header(data: &[u8]) -> Result<FileHeader<'_>, FormatError> {
    if data.is_empty() {
        return Err(FormatError::Empty);
    }
    if data.len() < MAGIC.len() {
        return Err(if MAGIC.starts_with(data) {
            FormatError::TruncatedHeader { len: data.len() }
        } else {
            FormatError::NotOurs
        });
    }
    if data[..MAGIC.len()] != MAGIC {
        let start = &data[..data.len().min(64)];
        let text = String::from_utf8_lossy(start);
        let t = text.trim_start();
        return Err(
            if t.starts_with('{') && t.contains("\"type\"") && t.contains("\"hello\"") {
                FormatError::Stream
            } else {
                FormatError::NotOurs
            },
        );
    }
    if data.len() < HEADER_LEN {
        return Err(FormatError::TruncatedHeader { len: data.len() });
    }
    let u16_at = |i: usize| u16::from_le_bytes([data[i], data[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
    let (major, minor) = (u16_at(8), u16_at(10));
    if major > MAJOR {
        return Err(FormatError::NewerMajor { major, minor });
    }
    if major == 0 {
        return Err(FormatError::BadVersion { major, minor });
    }
    let hello_len = u32_at(16) as usize;
    let hello_crc = u32_at(20);
    if hello_len > MAX_HELLO {
        // A damaged length: look for the first chunk instead.
        return Ok(FileHeader {
            major,
            minor,
            hello: None,
            body: HEADER_LEN,
        });
    }
    let end = HEADER_LEN + hello_len;
    if data.len() < end {
        return Err(FormatError::TruncatedHeader { len: data.len() });
    }
    let hello = &data[HEADER_LEN..end];
    Ok(FileHeader {
        major,
        minor,
        hello: (crc32c::crc32c(hello) == hello_crc).then_some(hello),
        body: end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uleb_round_trips_and_rejects_overlong() {
        for v in [0u32, 1, 127, 128, 300, 65_535, u32::MAX] {
            let mut b = Vec::new();
            put_uleb(&mut b, u64::from(v));
            assert_eq!(get_uleb32(&b), Some((v, b.len())));
        }
        assert_eq!(get_uleb32(&[0x80, 0x80]), None, "unterminated");
        assert_eq!(
            get_uleb32(&[0xff, 0xff, 0xff, 0xff, 0x7f]),
            None,
            "over 32 bits"
        );
    }

    #[test]
    fn chunk_header_round_trips() {
        let h = ChunkHeader {
            payload_len: 123,
            raw_len: 456,
            records: 7,
            seq: 9,
            codec: CODEC_ZSTD,
            crc: 0xdead_beef,
        };
        let mut b = [0u8; 24];
        b[..20].copy_from_slice(&h.fields());
        b[20..].copy_from_slice(&h.crc.to_le_bytes());
        assert_eq!(ChunkHeader::parse(&b), h);
    }

    #[test]
    fn header_checks() {
        let h = header(br#"{"type":"hello"}"#);
        let p = parse_header(&h).unwrap();
        assert_eq!((p.major, p.minor), (MAJOR, MINOR));
        assert_eq!(p.hello, Some(&br#"{"type":"hello"}"#[..]));
        assert_eq!(p.body, h.len());
        assert_eq!(parse_header(b""), Err(FormatError::Empty));
        assert_eq!(
            parse_header(&h[..5]),
            Err(FormatError::TruncatedHeader { len: 5 })
        );
        assert_eq!(
            parse_header(&h[..h.len() - 1]).unwrap_err(),
            FormatError::TruncatedHeader { len: h.len() - 1 }
        );
        assert_eq!(
            parse_header(b"{\"type\":\"hello\",\"schema\":1}\n"),
            Err(FormatError::Stream)
        );
        assert_eq!(
            parse_header(b"\x7fELF\x02\x01\x01\0\0\0"),
            Err(FormatError::NotOurs)
        );
        let mut newer = h.clone();
        newer[8..10].copy_from_slice(&2u16.to_le_bytes());
        let e = parse_header(&newer).unwrap_err();
        assert_eq!(
            e,
            FormatError::NewerMajor {
                major: 2,
                minor: MINOR
            }
        );
        assert!(
            e.to_string().contains("replay it with a newer cgtrace"),
            "{e}"
        );
        let mut newer_minor = h.clone();
        newer_minor[10..12].copy_from_slice(&7u16.to_le_bytes());
        assert_eq!(
            parse_header(&newer_minor).unwrap().minor,
            7,
            "newer minor is read"
        );
        let mut bad_hello = h.clone();
        let last = bad_hello.len() - 2;
        bad_hello[last] ^= 0xff;
        assert_eq!(parse_header(&bad_hello).unwrap().hello, None);
    }
}
