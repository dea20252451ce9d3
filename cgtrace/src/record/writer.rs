//! Writes a recording: records are gathered into a chunk, and a chunk is compressed, checksummed
//! and written with one `write` followed by `fdatasync` when [`Writer::flush`] is called (the
//! recorder does so on every window and at least once a second). A failed write cuts the file
//! back to the end of the last whole chunk, so what was written stays readable.

use std::{
    collections::HashMap,
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    time::Instant,
};

use thiserror::Error;

use super::{
    NameEntry,
    format::{self, CHUNK_HEADER_LEN, CODEC_ZSTD, ChunkHeader, SYNC, Tag},
};

/// zstd level: 3 is zstd's default, fast enough for 100 k events/s on one core with room to
/// spare (see the README's figures).
const LEVEL: i32 = 3;
/// A chunk is written once this much is gathered, even before its second is up.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Room kept below `--max-size` for the closing summary (at most an eighth of it).
const CLOSING_ROOM: u64 = 256 << 10;

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
        "writing {}: {source}; the recording is kept up to its last whole chunk ({kept} bytes)",
        path.display()
    )]
    Write {
        path: PathBuf,
        kept: u64,
        /// In the message, not a `#[source]`: what follows it says what was kept.
        source: io::Error,
    },
    #[error("rotating {}", path.display())]
    Rotate {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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

/// A recording being written.
pub struct Writer {
    path: PathBuf,
    file: File,
    /// Bytes of the current file that are whole (header and complete chunks).
    written: u64,
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
    /// Names written so far (in this file), and names to write with the next chunk.
    names: HashMap<u64, NameEntry>,
    pending_names: Vec<NameEntry>,
    /// A write failed: nothing more is written.
    failed: bool,
    /// `--max-size` was reached with [`OnFull::Stop`]: only the closing records may follow.
    full: bool,
    sync: bool,
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

    /// Writes the header into `file`, created by [`open_new`] at `path` (the recorder creates the
    /// file before it starts tracing, so a bad path fails at once).
    pub fn with_file(
        file: File,
        path: &Path,
        hello_json: &[u8],
        max_size: Option<u64>,
        on_full: OnFull,
    ) -> Result<Self, WriteError> {
        let mut w = Self {
            path: path.to_path_buf(),
            file,
            written: 0,
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
            names: HashMap::new(),
            pending_names: Vec::new(),
            failed: false,
            full: false,
            sync: true,
            compress: true,
            stats: WriterStats::default(),
        };
        w.write_header()?;
        Ok(w)
    }

    /// Skips `fdatasync` after each chunk (benchmarks of the format alone).
    pub fn set_sync(&mut self, sync: bool) {
        self.sync = sync;
    }

    /// Tests: write to another file from now on (e.g. one that fails every write).
    #[cfg(test)]
    pub fn swap_file_for_test(&mut self, f: File) {
        self.file = f;
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
        self.failed || self.full
    }

    fn write_header(&mut self) -> Result<(), WriteError> {
        let h = format::header(&self.hello);
        self.write_whole(&h)?;
        Ok(())
    }

    /// Writes `bytes` at the end of the whole part; on failure cuts the file back.
    fn write_whole(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        let r = self.file.write_all(bytes).and_then(|()| {
            if self.sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(source) = r {
            // Cut a partial chunk off so the file ends on a whole one; if even that fails the
            // reader still skips the partial chunk as truncated.
            let _ = self.file.set_len(self.written);
            let _ = self.file.sync_data();
            self.failed = true;
            return Err(WriteError::Write {
                path: self.path.clone(),
                kept: self.written,
                source,
            });
        }
        self.written += bytes.len() as u64;
        self.stats.bytes += bytes.len() as u64;
        Ok(())
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
        match self.names.get(&e.id) {
            Some(old) if *old == e => {}
            _ => {
                self.names.insert(e.id, e.clone());
                self.pending_names.push(e);
            }
        }
    }

    /// Whether `id` has a name entry in this file already.
    pub fn knows(&self, id: u64) -> bool {
        self.names.contains_key(&id)
    }

    /// One raw ring-buffer record.
    pub fn event(&mut self, raw: &[u8]) {
        self.push(Tag::Event, &[], raw);
        self.stats.events += 1;
    }

    /// One window: its end on CLOCK_MONOTONIC and the wall clock, then its JSON.
    pub fn window(&mut self, mono_ns: u64, end_unix_ms: u64, json: &[u8]) {
        let mut prefix = [0u8; 16];
        prefix[..8].copy_from_slice(&mono_ns.to_le_bytes());
        prefix[8..].copy_from_slice(&end_unix_ms.to_le_bytes());
        self.push(Tag::Window, &prefix, json);
        self.stats.windows += 1;
    }

    /// Any other record (summary, loss, end).
    pub fn record(&mut self, tag: Tag, body: &[u8]) {
        self.push(tag, &[], body);
    }

    /// Compresses and writes what was gathered. With `closing`, the room kept below
    /// `--max-size` for the summary may be used.
    pub fn flush(&mut self, closing: bool) -> Result<Flushed, WriteError> {
        if self.failed || (self.full && !closing) {
            self.clear();
            return Ok(Flushed::Full);
        }
        if !self.pending_names.is_empty() {
            // Names go first, so a reader knows them before the events that need them.
            let names = std::mem::take(&mut self.pending_names);
            let json = serde_json::to_vec(&names).unwrap_or_default();
            let mut rec = Vec::with_capacity(json.len() + 6);
            format::put_record(&mut rec, Tag::Names, &json);
            self.buf.splice(0..0, rec);
            self.records += 1;
        }
        if self.records == 0 {
            return Ok(Flushed::Ok);
        }
        self.build_chunk();
        let mut outcome = Flushed::Ok;
        if let Some(max) = self.max_size {
            let room = if closing {
                max
            } else {
                max.saturating_sub(CLOSING_ROOM.min(max / 8))
            };
            // A chunk always fits an empty file, however small --max-size is.
            let empty = self.written as usize == format::HEADER_LEN + self.hello.len();
            if self.written + self.out.len() as u64 > room && !empty {
                match self.on_full {
                    OnFull::Stop => {
                        self.full = true;
                        self.clear();
                        return Ok(Flushed::Full);
                    }
                    OnFull::Rotate { keep } => {
                        self.rotate(keep)?;
                        outcome = Flushed::Rotated;
                    }
                }
            }
        }
        let out = std::mem::take(&mut self.out);
        let r = self.write_whole(&out);
        self.out = out;
        r?;
        self.stats.chunks += 1;
        self.stats.raw_bytes += self.buf.len() as u64;
        self.clear();
        Ok(outcome)
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.records = 0;
        self.started = None;
    }

    fn build_chunk(&mut self) {
        let payload = self
            .compress
            .then(|| self.compressor.compress(&self.buf).ok())
            .flatten()
            .filter(|p| p.len() < self.buf.len());
        let (codec, payload) = match payload {
            Some(p) => (CODEC_ZSTD, p),
            None => (format::CODEC_STORED, self.buf.clone()),
        };
        let mut h = ChunkHeader {
            payload_len: payload.len() as u32,
            raw_len: self.buf.len() as u32,
            records: self.records,
            seq: self.seq,
            codec,
            crc: 0,
        };
        h.crc = h.checksum(&payload);
        self.seq = self.seq.wrapping_add(1);
        self.out.clear();
        self.out.reserve(CHUNK_HEADER_LEN + payload.len());
        self.out.extend_from_slice(&SYNC);
        self.out.extend_from_slice(&h.fields());
        self.out.extend_from_slice(&h.crc.to_le_bytes());
        self.out.extend_from_slice(&payload);
    }

    /// FILE → FILE.1 → … → FILE.keep (the oldest is removed), then a new FILE with the header and
    /// every name known, and the pending chunk rebuilt with them.
    fn rotate(&mut self, keep: u32) -> Result<(), WriteError> {
        let err = |source| WriteError::Rotate {
            path: self.path.clone(),
            source,
        };
        let numbered = |n: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        if keep == 0 {
            fs::remove_file(&self.path).map_err(err)?;
        } else {
            let _ = fs::remove_file(numbered(keep));
            for n in (1..keep).rev() {
                match fs::rename(numbered(n), numbered(n + 1)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(err(e)),
                }
            }
            fs::rename(&self.path, numbered(1)).map_err(err)?;
        }
        self.file = open_new(&self.path, true)?;
        self.written = 0;
        self.stats.rotations += 1;
        self.write_header()?;
        // The new file carries every name, ahead of the records gathered for it.
        let mut all: Vec<NameEntry> = self.names.values().cloned().collect();
        all.sort_by_key(|e| e.id);
        let json = serde_json::to_vec(&all).unwrap_or_default();
        let mut rec = Vec::with_capacity(json.len() + 6);
        format::put_record(&mut rec, Tag::Names, &json);
        // Drop the (already included) delta names record at the front of the buffer.
        if self.buf.first() == Some(&(Tag::Names as u8))
            && let Some((len, n)) = format::get_uleb32(&self.buf[1..])
        {
            self.buf.drain(..1 + n + len as usize);
            self.records -= 1;
        }
        self.buf.splice(0..0, rec);
        self.records += 1;
        self.build_chunk();
        Ok(())
    }
}

/// Creates a recording file with mode 0600 (also when overwriting one with `force`).
pub fn open_new(path: &Path, force: bool) -> Result<File, WriteError> {
    let mut o = OpenOptions::new();
    o.write(true).mode(0o600);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    let file = o.open(path).map_err(|source| {
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
    })?;
    // An existing file keeps its mode through O_TRUNC: make it private too.
    if force {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|source| WriteError::Create {
                path: path.to_path_buf(),
                source,
            })?;
    }
    Ok(file)
}
