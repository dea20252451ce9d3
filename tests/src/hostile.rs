//! Hostile recordings: files `report` and `replay` may be handed from any node, made to exhaust
//! the reader's memory or time. Each is framed with the recording format's own code
//! (`cgtrace::record::format`), so its chunks are valid where the hostility needs them to be.
use std::{
    fs::File,
    io::Write as _,
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    path::Path,
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use cgtrace::record::format::{self, CODEC_STORED, CODEC_ZSTD, ChunkHeader, SYNC, Tag};

/// A hello as a recorder writes it.
pub const HELLO: &str = r#"{"type":"hello","schema":1,"cgtrace":"0.1.0","host":"hostile","kernel":"6.18","cpus":2,"start_unix_ms":1000,"interval_ms":1000,"cgroup":{"layout":"v2","runq_hierarchy":"unified","runq_mount":"/sys/fs/cgroup"},"families":{},"capabilities":{"btf":true,"tp_btf":true,"fentry":false,"kprobe":false,"notes":{}},"hist":{"unit":"ns","sub_bits":2,"buckets":140}}"#;

/// A window with one cgroup, as the stream prints it (`seq` 1).
pub const WINDOW: &str = r#"{"type":"window","seq":1,"end_unix_ms":2000,"duration_ms":1000,"events":{"seen":1,"dropped":0,"counters":{}},"cgroups_tracked":1,"cgroups_evicted":0,"cgroups":[{"id":7,"hierarchy":"unified","path":"/a","name":null,"name_kind":null,"runq":{"count":1,"sum_us":5.0,"mean_us":5.0,"p50_us":5.0,"p90_us":5.0,"p99_us":5.0,"max_us":5.0,"buckets":[[4096,1]],"kinds":{}}}]}"#;

/// One chunk of `records`, framed and checksummed as the writer does, zstd-compressed when
/// `zstd` (else stored).
pub fn chunk(records: &[u8], zstd: bool) -> Result<Vec<u8>> {
    chunk_at(records, zstd.then_some(19))
}

/// [`chunk`], zstd-compressed at `level` (stored when `None`).
fn chunk_at(records: &[u8], level: Option<i32>) -> Result<Vec<u8>> {
    let zstd = level.is_some();
    let payload = if let Some(level) = level {
        zstd::bulk::compress(records, level)?
    } else {
        records.to_vec()
    };
    Ok(ChunkHeader {
        payload_len: u32::try_from(payload.len())?,
        raw_len: u32::try_from(records.len())?,
        records: 0,
        seq: 0,
        codec: if zstd { CODEC_ZSTD } else { CODEC_STORED },
        crc: 0,
    }
    .frame(&payload))
}

/// What a compression bomb's chunks hold.
#[derive(Clone, Copy, Debug)]
pub enum Bomb {
    /// Empty window records (18 bytes each): the most windows to index.
    EmptyWindows,
    /// Whole windows ([`WINDOW`]): the most windows to parse and sum.
    Windows,
    /// Ring-buffer records of 4 bytes (a kind and nothing else): the most events to play.
    Events,
}

/// One chunk's records of `bomb`, as many as fit in the largest chunk a reader accepts.
fn bomb_records(bomb: Bomb) -> Vec<u8> {
    let mut one = Vec::new();
    match bomb {
        Bomb::EmptyWindows => format::put_record(&mut one, Tag::Window, &[0u8; 16]),
        Bomb::Windows => one = window_record(),
        Bomb::Events => format::put_record(&mut one, Tag::Event, &0x100u32.to_ne_bytes()),
    }
    let n = format::MAX_CHUNK / one.len();
    one.repeat(n)
}

/// A compression bomb at `path`: a valid recording of `chunks` chunks of `bomb` each, every
/// chunk expanding to nearly [`format::MAX_CHUNK`] from a few KiB. Returns the file's size.
pub fn compression_bomb(path: &Path, bomb: Bomb, chunks: usize) -> Result<u64> {
    let c = chunk(&bomb_records(bomb), true)?;
    let mut f = File::create(path)?;
    f.write_all(&format::header(HELLO.as_bytes()))?;
    for _ in 0..chunks {
        f.write_all(&c)?;
    }
    Ok(f.metadata()?.len())
}

/// A file of `size` bytes of overlapping chunk headers at `path`: a header every 32 bytes, each
/// saying the largest payload a reader accepts follows, after the file header. A reader that
/// checksums each candidate's payload reads 32 MiB per 32 bytes of file.
pub fn overlapping_headers(path: &Path, size: usize) -> Result<()> {
    let h = ChunkHeader {
        payload_len: u32::try_from(format::MAX_CHUNK)?,
        raw_len: u32::try_from(format::MAX_CHUNK)?,
        records: 1,
        seq: 0,
        codec: CODEC_STORED,
        crc: 0,
    };
    let mut one = SYNC.to_vec();
    one.extend_from_slice(&h.fields());
    one.extend_from_slice(&h.crc.to_le_bytes());
    let mut b = format::header(HELLO.as_bytes());
    b.reserve(size);
    while b.len() + one.len() <= size {
        b.extend_from_slice(&one);
    }
    // And one whole chunk with a window at the end, which a reader may find or skip.
    b.extend_from_slice(&chunk(&window_record(), false)?);
    std::fs::write(path, b)?;
    Ok(())
}

/// A recording at `path` whose windows name a new cgroup in every entry: `windows` windows of
/// `per_window` cgroups, each with a run-queue histogram and `families` more found by shape
/// (histograms under keys no build knows), a long path and a `caused` naming as many victims as
/// cgroups. Every entry is a new tally for `report`: a forged file's way to make it keep more
/// than the file holds. Returns the file's size.
pub fn many_cgroups(
    path: &Path,
    windows: usize,
    per_window: usize,
    families: usize,
) -> Result<u64> {
    let hist = r#"{"count":200,"sum_us":5000.0,"mean_us":25.0,"p50_us":5.0,"p90_us":5.0,"p99_us":5.0,"max_us":900.0,"buckets":[[4096,100],[8192,60],[65536,30],[900000,10]]}"#;
    // The run-queue part: a histogram and its (empty) split by kind.
    let runq = format!(r#"{},"kinds":{{}}}}"#, &hist[..hist.len() - 1]);
    let mut f = File::create(path)?;
    f.write_all(&format::header(HELLO.as_bytes()))?;
    let mut records = Vec::new();
    let mut id = 1000u64;
    for w in 0..windows {
        let mut cgroups = Vec::with_capacity(per_window);
        for _ in 0..per_window {
            id += 1;
            let other: Vec<String> = (0..families)
                .map(|k| format!(r#""fam{k}":{hist}"#))
                .collect();
            let victims: Vec<String> = (0..8)
                .map(|v| {
                    format!(
                        r#"{{"id":{},"path":"/v/{v}/{id}","name":null,"wait_us":5.0}}"#,
                        id * 8 + v
                    )
                })
                .collect();
            cgroups.push(format!(
                r#"{{"id":{id},"hierarchy":"unified","path":"/kubepods/burstable/pod-{id:0>64}","name":"ns/pod-{id}/c","name_kind":"k8s","runq":{runq},"caused":{{"wait_us":40.0,"victims":[{}]}},{}}}"#,
                victims.join(","),
                other.join(",")
            ));
        }
        let json = format!(
            r#"{{"type":"window","seq":{},"end_unix_ms":{},"duration_ms":1000,"events":{{"seen":1,"dropped":0,"counters":{{}}}},"cgroups_tracked":{per_window},"cgroups_evicted":0,"cgroups":[{}]}}"#,
            w + 1,
            2000 + 1000 * w,
            cgroups.join(",")
        );
        // As a reader parses it: a window no report can read would test nothing.
        serde_json::from_str::<cgtrace::model::Window>(&json).context("many_cgroups: a window")?;
        let mut body = (1_000_000_000u64 * (w as u64 + 1)).to_le_bytes().to_vec();
        body.extend_from_slice(&(2000 + 1000 * w as u64).to_le_bytes());
        body.extend_from_slice(json.as_bytes());
        format::put_record(&mut records, Tag::Window, &body);
        if records.len() > format::MAX_CHUNK / 2 || w + 1 == windows {
            f.write_all(&chunk_at(&records, Some(3))?)?;
            records.clear();
        }
    }
    Ok(f.metadata()?.len())
}

/// [`WINDOW`] as a window record.
fn window_record() -> Vec<u8> {
    let mut body = 1_000_000_000u64.to_le_bytes().to_vec();
    body.extend_from_slice(&2000u64.to_le_bytes());
    body.extend_from_slice(WINDOW.as_bytes());
    let mut out = Vec::new();
    format::put_record(&mut out, Tag::Window, &body);
    out
}

/// A command's end, what it printed and what it cost.
#[derive(Debug)]
pub struct Measured {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// Peak resident memory (the kernel's `ru_maxrss` of the child).
    pub max_rss_kib: u64,
    pub elapsed: Duration,
}

/// Runs `cmd` to its end and measures it; kills it and fails past `limit`.
///
/// The child is forked, not spawned with `vfork`: a child that execs from its parent's memory
/// (vfork) starts its `ru_maxrss` at the parent's peak; a forked one at the parent's resident
/// size when forked (a few MiB here), which counts against the child.
pub fn measure(cmd: &mut Command, limit: Duration) -> Result<Measured> {
    let out = tempfile_in_tmp("out")?;
    let err = tempfile_in_tmp("err")?;
    // SAFETY: the hook does nothing (it only makes std fork instead of vfork).
    unsafe {
        cmd.pre_exec(|| Ok(()));
    }
    let start = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out)?)
        .stderr(File::create(&err)?)
        .spawn()
        .context("spawning")?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value to be filled in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our child, not yet reaped (the `Child` is never waited on).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            bail!("wait4: {}", std::io::Error::last_os_error());
        }
        if start.elapsed() > limit {
            // SAFETY: signalling and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            bail!("still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = Measured {
        status: ExitStatus::from_raw(status),
        stdout: std::fs::read(&out)?,
        stderr: std::fs::read_to_string(&err)?,
        max_rss_kib: u64::try_from(ru.ru_maxrss)?,
        elapsed: start.elapsed(),
    };
    let _ = std::fs::remove_file(out);
    let _ = std::fs::remove_file(err);
    Ok(m)
}

fn tempfile_in_tmp(what: &str) -> Result<std::path::PathBuf> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(std::env::temp_dir().join(format!("cgtrace-hostile-{}-{n}.{what}", std::process::id())))
}
