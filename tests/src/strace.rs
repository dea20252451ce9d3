//! An independent measurement of read latency to compare the tracer with: runs a command under
//! `strace -f -T` and returns every `read`/`pread64` with its duration, result and the path its fd
//! was opened from.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

/// One traced `read` or `pread64`.
#[derive(Debug, Clone, PartialEq)]
pub struct StraceRead {
    /// The thread that made the call (strace `-f` prefix).
    pub pid: u32,
    /// `read` or `pread64`.
    pub syscall: String,
    pub fd: i32,
    /// The path `fd` was last opened from by `openat` in this pid (as given to `openat`, so it
    /// may be relative), if it was seen.
    pub path: Option<PathBuf>,
    /// The return value: bytes read, or -1 on error.
    pub ret: i64,
    /// Time in the system call (`-T`).
    pub duration: Duration,
}

/// Runs `cmd` (program and arguments) under
/// `strace -f -T -qq -e trace=read,pread64,openat,close -o FILE` (close so that a reused fd is not
/// charged to the file it had before; stdout of the command goes to /dev/null) and parses FILE
/// with [`parse_strace`]. Fails if strace or the command fails.
pub fn strace_reads(cmd: &[&str]) -> Result<Vec<StraceRead>> {
    if cmd.is_empty() {
        bail!("strace_reads: empty command");
    }
    let out = std::env::temp_dir().join(format!(
        "cgtrace-strace-{}-{}.txt",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let status = Command::new("strace")
        .args([
            "-f",
            "-T",
            "-qq",
            "-e",
            "trace=read,pread64,openat,close",
            "-o",
        ])
        .arg(&out)
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context("running strace (Debian package strace)")?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    let text = text.with_context(|| format!("reading strace output {}", out.display()))?;
    if !status.success() {
        bail!("strace {cmd:?} failed: {status}");
    }
    Ok(parse_strace(&text))
}

/// Parses `strace -f -T` output (lines `PID syscall(args) = RET <SECONDS>`, `<unfinished ...>` /
/// `<... resumed>` pairs joined per pid) into the reads, each with the path of its fd from the
/// pid's earlier `openat` (forgotten at `close`). Other lines are ignored.
pub fn parse_strace(text: &str) -> Vec<StraceRead> {
    let mut pending: HashMap<u32, String> = HashMap::new();
    let mut fds: HashMap<(u32, i32), PathBuf> = HashMap::new();
    let mut reads = Vec::new();
    for raw in text.lines() {
        let (pid, rest) = split_pid(raw);
        let line = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, head.to_string());
            continue;
        } else if let Some(r) = rest.strip_prefix("<... ") {
            // "<... read resumed>, 4096) = 12 <0.000010>"
            let Some((_, tail)) = r.split_once(" resumed>") else {
                continue;
            };
            match pending.remove(&pid) {
                Some(head) => format!("{head}{tail}"),
                None => continue,
            }
        } else {
            rest.to_string()
        };
        let Some(call) = parse_call(&line) else {
            continue;
        };
        match call.name {
            "openat" => {
                if call.ret >= 0
                    && let Some(path) = call.args.get(1).and_then(|a| unquote(a))
                {
                    fds.insert((pid, call.ret as i32), PathBuf::from(path));
                }
            }
            "close" => {
                if let Some(fd) = call.args.first().and_then(|a| a.trim().parse().ok()) {
                    fds.remove(&(pid, fd));
                }
            }
            "read" | "pread64" => {
                let Some(fd) = call.args.first().and_then(|a| a.trim().parse::<i32>().ok()) else {
                    continue;
                };
                reads.push(StraceRead {
                    pid,
                    syscall: call.name.to_string(),
                    fd,
                    path: fds.get(&(pid, fd)).cloned(),
                    ret: call.ret,
                    duration: call.duration,
                });
            }
            _ => {}
        }
    }
    reads
}

/// The reads of `path` (exact match) in `reads`.
pub fn reads_of<'a>(reads: &'a [StraceRead], path: &Path) -> Vec<&'a StraceRead> {
    reads
        .iter()
        .filter(|r| r.path.as_deref() == Some(path))
        .collect()
}

struct Call<'a> {
    name: &'a str,
    /// Top-level arguments, split at commas outside quotes/brackets (raw text).
    args: Vec<String>,
    ret: i64,
    duration: Duration,
}

/// `1234 rest` → (1234, rest); a line without a numeric prefix gets pid 0.
fn split_pid(line: &str) -> (u32, &str) {
    let t = line.trim_start();
    if let Some((p, rest)) = t.split_once(' ')
        && let Ok(pid) = p.parse()
    {
        return (pid, rest.trim_start());
    }
    (0, t)
}

/// `name(args) = RET [ERRNO (text)] <SECONDS>`.
fn parse_call(line: &str) -> Option<Call<'_>> {
    let (body, dur) = line.trim_end().strip_suffix('>')?.rsplit_once(" <")?;
    let duration = Duration::from_secs_f64(dur.parse::<f64>().ok()?);
    let (call, ret) = body.rsplit_once(" = ")?;
    let ret: i64 = ret.split_whitespace().next()?.parse().ok()?;
    let open = call.find('(')?;
    let name = &call[..open];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let inner = call[open + 1..].trim_end().strip_suffix(')')?;
    Some(Call {
        name,
        args: split_args(inner),
        ret,
        duration,
    })
}

/// Splits strace's argument list at top-level commas (not inside "…", {…}, […]).
fn split_args(s: &str) -> Vec<String> {
    let mut args = Vec::new();
    let (mut depth, mut in_str, mut esc) = (0i32, false, false);
    let mut cur = String::new();
    for c in s.chars() {
        if in_str {
            cur.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                cur.push(c);
            }
            '{' | '[' | '(' => {
                depth += 1;
                cur.push(c);
            }
            '}' | ']' | ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => {
                args.push(cur.trim().to_string());
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() {
        args.push(cur.trim().to_string());
    }
    args
}

/// Decodes a strace C string `"…"` (escapes `\n \t \" \\ \NNN \xNN`); a trailing `...` (truncated)
/// is dropped. Non-UTF-8 bytes are replaced.
fn unquote(arg: &str) -> Option<String> {
    let s = arg.trim().trim_end_matches("...");
    let s = s.strip_prefix('"')?.strip_suffix('"')?;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        match b[i] {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'v' => out.push(0x0b),
            b'f' => out.push(0x0c),
            b'x' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = 0u32;
                let mut k = 0;
                while k < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + u32::from(b[i] - b'0');
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
                continue;
            }
            other => out.push(other),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real output: `strace -T cat memory.stat` (the v1 memory root, else cgroup2's root
    /// `cgroup.stat`, else /proc/self/status), captured now, not hard-coded.
    #[test]
    fn parses_real_strace_of_cat() -> Result<()> {
        if Command::new("strace").arg("-V").output().is_err() {
            crate::skip("no strace");
            return Ok(());
        }
        let file = [
            "/sys/fs/cgroup/memory/memory.stat",
            "/sys/fs/cgroup/cgroup.stat",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .unwrap_or(Path::new("/proc/self/status"));
        let size = std::fs::read(file)?.len() as i64;
        let reads = strace_reads(&["cat", file.to_str().unwrap()])?;
        let mine = reads_of(&reads, file);
        assert!(mine.len() >= 2, "reads of {}: {mine:?}", file.display());
        let total: i64 = mine.iter().map(|r| r.ret.max(0)).sum();
        // The file may change between our read and cat's; its size stays close.
        assert!(
            (total - size).abs() < size / 2 + 64,
            "cat read {total} bytes, we read {size}"
        );
        assert_eq!(mine.last().unwrap().ret, 0, "last read is EOF");
        assert!(mine.iter().all(|r| r.syscall == "read" && r.fd >= 0));
        assert!(mine.iter().all(|r| r.duration < Duration::from_secs(5)));
        assert!(mine[0].duration > Duration::ZERO);
        // The loader's reads (ld.so.cache / libc) are attributed to their own paths.
        assert!(reads.iter().any(|r| {
            r.path
                .as_ref()
                .is_some_and(|p| p.to_string_lossy().contains("libc"))
        }));
        Ok(())
    }

    #[test]
    fn joins_unfinished_and_resumed_per_pid() {
        let text = "\
10 openat(AT_FDCWD, \"/proc/meminfo\", O_RDONLY) = 3 <0.000020>
11 openat(AT_FDCWD, \"/a \\\"b\\\"\\n\", O_RDONLY) = 3 <0.000020>
10 read(3,  <unfinished ...>
11 read(3, \"x = 1\"..., 4096) = 5 <0.000100>
10 <... read resumed>\"MemTotal: 1 kB\\n\", 131072) = 15 <0.250000>
11 read(3, 0x7ffd, 10) = -1 EAGAIN (Resource temporarily unavailable) <0.000003>
10 close(3) = 0 <0.000002>
10 read(3, \"\", 10) = 0 <0.000001>
10 +++ exited with 0 +++
";
        let r = parse_strace(text);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].pid, 11);
        assert_eq!(r[0].path.as_deref(), Some(Path::new("/a \"b\"\n")));
        assert_eq!(r[0].ret, 5);
        assert_eq!(r[1].pid, 10);
        assert_eq!(r[1].path.as_deref(), Some(Path::new("/proc/meminfo")));
        assert_eq!(r[1].ret, 15);
        assert_eq!(r[1].duration, Duration::from_millis(250));
        assert_eq!(r[2].ret, -1);
        assert_eq!(r[3].path, None, "fd 3 was closed");
    }
}
