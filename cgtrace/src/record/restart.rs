//! What a restarted `record --rotate` finds where it writes. Only a part that holds a valid
//! header and at least one window or event is rotated away (FILE → FILE.1): an empty or header-only FILE
//! (a start on a full disk) is reused, so a crash loop cannot push the parts from before it out.
//! A FILE.next left by a recorder killed while rotating is shifted in as a part when it holds
//! windows or events and removed when it holds nothing; anything else in the way is set aside as
//! FILE.orphan-UNIXTIME. Parts left with a gap in their numbers (a recorder killed while shifting
//! FILE.N → FILE.N+1) are renumbered FILE.1, FILE.2, … in their order first, so no part is
//! stranded past the gap. A start never refuses because of what an earlier run left.

use std::{
    fs, io,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use super::{
    format::{HEADER_LEN, MAGIC, MAX_HELLO},
    part::{next_path, shift_parts},
    reader::Recording,
};

/// What is at a path.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Nothing,
    /// A regular file with no window or event in it (empty, header only, or a torn header).
    Empty,
    /// A recording with at least one window or event (a recorder that died before its first
    /// window ended still traced something).
    Recorded,
    /// Something else: not a recording, a link, a directory.
    Other(&'static str),
}

fn look(path: &Path) -> Found {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return Found::Nothing;
    };
    let t = meta.file_type();
    if t.is_symlink() {
        return Found::Other("a symbolic link");
    }
    if !t.is_file() {
        return Found::Other("not a regular file");
    }
    if meta.len() == 0 {
        return Found::Empty;
    }
    match Recording::open(path) {
        Ok(r) if !r.windows.is_empty() || r.events > 0 => Found::Recorded,
        Ok(_) => Found::Empty,
        // A header cut short by a kill or a full disk: cgtrace's own magic, nothing after it.
        Err(_) if meta.len() < (HEADER_LEN + MAX_HELLO) as u64 && starts_like_a_recording(path) => {
            Found::Empty
        }
        Err(_) => Found::Other("not a recording"),
    }
}

fn starts_like_a_recording(path: &Path) -> bool {
    use std::io::Read as _;
    let mut b = [0u8; MAGIC.len()];
    let mut n = 0;
    if let Ok(mut f) = fs::File::open(path) {
        while n < b.len() {
            match f.read(&mut b[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
    }
    b[..n] == MAGIC[..n]
}

fn orphan_path(path: &Path) -> PathBuf {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut p = path.to_path_buf().into_os_string();
    p.push(format!(".orphan-{now}"));
    PathBuf::from(p)
}

/// Sets `path` aside as FILE.orphan-UNIXTIME (a link is renamed, never followed).
fn set_aside(path: &Path, what: &str, notes: &mut Vec<String>) {
    let to = orphan_path(path);
    match fs::rename(path, &to) {
        Ok(()) => notes.push(format!(
            "{} was {what}: set aside as {}",
            path.display(),
            to.display()
        )),
        Err(e) => notes.push(format!(
            "{} is {what} and could not be set aside ({e}); it is left alone",
            path.display()
        )),
    }
}

/// Renumbers the parts FILE.N present (any N) as FILE.1, FILE.2, … in their order, closing the
/// gap a recorder killed mid-shift leaves (FILE.1, FILE.3, …: readers and the next shift would
/// stop at FILE.2). Each rename goes to a lower, free number, so a kill here leaves the parts in
/// order with a gap the next start closes.
fn close_gaps(path: &Path, notes: &mut Vec<String>) -> io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut numbered: Vec<u32> = fs::read_dir(dir)?
        .filter_map(|e| {
            let f = e.ok()?.file_name();
            let n = f.to_str()?.strip_prefix(&prefix)?;
            (!n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()))
                .then(|| n.parse().ok())
                .flatten()
        })
        .collect();
    numbered.sort_unstable();
    let part = |n: u32| {
        let mut p = path.to_path_buf().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    let mut moved = 0;
    for (i, n) in (1..).zip(numbered) {
        if n != i {
            fs::rename(part(n), part(i))?;
            moved += 1;
        }
    }
    if moved > 0 {
        notes.push(format!(
            "{}.N had gaps (a recorder stopped while rotating): {moved} parts renumbered in order",
            path.display()
        ));
    }
    Ok(())
}

/// Makes way for a new FILE under `--rotate` (`keep` parts): returns what was done, one line each,
/// for the log. Fails only when a part holding windows cannot be shifted (a permission problem
/// the user must fix), never because of what an earlier run left half-made.
pub fn make_way(path: &Path, keep: u32) -> io::Result<Vec<String>> {
    let mut notes = Vec::new();
    close_gaps(path, &mut notes)?;
    let next = next_path(path);
    let shift = |notes: &mut Vec<String>, what: &str| -> io::Result<()> {
        shift_parts(path, keep)?;
        notes.push(format!(
            "{} {what}: rotated to {}.1 (--rotate keeps the last run)",
            path.display(),
            path.display()
        ));
        Ok(())
    };
    match look(path) {
        Found::Nothing => {}
        Found::Recorded => shift(&mut notes, "existed")?,
        Found::Empty => {
            fs::remove_file(path)?;
            notes.push(format!(
                "{} held no window or event (a start that could not write?): reused",
                path.display()
            ));
        }
        Found::Other(what) => set_aside(path, what, &mut notes),
    }
    match look(&next) {
        Found::Nothing => {}
        Found::Recorded => {
            // Newer than FILE (which was just shifted): it becomes FILE.1.
            fs::rename(&next, path)?;
            shift(&mut notes, "was recovered from a rotation cut short")?;
        }
        Found::Empty => {
            fs::remove_file(&next)?;
            notes.push(format!(
                "{} (left by a recorder stopped while rotating) held no window or event: removed",
                next.display()
            ));
        }
        Found::Other(what) => set_aside(&next, what, &mut notes),
    }
    Ok(notes)
}
