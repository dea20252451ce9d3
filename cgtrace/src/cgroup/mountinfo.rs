//! The mount table, `/proc/self/mountinfo` (proc(5)): one mount a line,
//! `id parent major:minor root mount_point options [optional fields...] - fstype source super_options`,
//! with spaces, tabs, newlines and backslashes in paths written as three-digit octal escapes.
//! [`crate::cgroup::hierarchy`] finds the cgroup hierarchies in it; the `reads` family the mount
//! of each filesystem its files are read from.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::error::Error;

/// The fields of a mountinfo line that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// `major:minor`; identifies the superblock, hence the hierarchy.
    pub dev: String,
    /// The directory of the filesystem mounted (`/` for its root, deeper for a bind mount).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
    pub super_opts: String,
}

/// Every line of a mount table; blank lines are skipped, a malformed one is an error naming it.
pub(crate) fn parse(text: &str, path: &Path) -> Result<Vec<MountEntry>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(line).map_err(|reason| Error::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            reason: reason.to_string(),
        })?);
    }
    Ok(out)
}

/// One line of a mount table, or why it is not one.
pub(crate) fn parse_line(line: &str) -> Result<MountEntry, &'static str> {
    let fields: Vec<&str> = line.split(' ').collect();
    if fields.len() < 10 {
        return Err("too few fields");
    }
    let sep = fields[6..]
        .iter()
        .position(|f| *f == "-")
        .map(|p| p + 6)
        .ok_or("missing '-' separator")?;
    if fields.len() < sep + 4 {
        return Err("too few fields after '-'");
    }
    Ok(MountEntry {
        dev: fields[2].to_string(),
        root: unescape(fields[3]),
        mount_point: unescape(fields[4]),
        fstype: fields[sep + 1].to_string(),
        super_opts: fields[sep + 3].to_string(),
    })
}

/// Decodes mountinfo's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134`
/// backslash): a backslash and three octal digits of a byte's value. Anything else (`\8`, `\19`,
/// `\400` and above, too few digits) stays as it is.
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_octal() {
        assert_eq!(unescape(r"/a\040b"), Path::new("/a b"));
        assert_eq!(unescape(r"/a\011b\012c\134d"), Path::new("/a\tb\nc\\d"));
        assert_eq!(unescape(r"/a\04"), Path::new(r"/a\04"));
        assert_eq!(unescape(r"/a\999"), Path::new(r"/a\999"));
    }

    /// Only octal digits make an escape, and only up to a byte (`\377`): `8` and `9` are not
    /// octal digits, `\400` and above would not fit.
    #[test]
    fn unescape_takes_no_decimal_digits_and_no_overflow() {
        for kept in [
            r"/a\080b", r"/a\008", r"/a\9", r"/a\189", r"/a\800", r"/a\400", r"/a\777", r"/a\4000",
        ] {
            assert_eq!(unescape(kept), Path::new(kept), "{kept}");
        }
        assert_eq!(
            unescape(r"/a\377b"),
            PathBuf::from(OsString::from_vec(b"/a\xffb".to_vec()))
        );
        assert_eq!(unescape(r"/a\0400"), Path::new("/a 0"));
        assert_eq!(unescape(r"/a\\040"), Path::new("/a\\ "));
    }

    #[test]
    fn lines_and_their_errors() {
        let line = r"29 25 0:26 /docker/abc /sys/fs/cgroup/bind\040cpu rw,relatime shared:1 - cgroup cgroup rw,cpu,cpuacct";
        assert_eq!(
            parse_line(line),
            Ok(MountEntry {
                dev: "0:26".into(),
                root: "/docker/abc".into(),
                mount_point: "/sys/fs/cgroup/bind cpu".into(),
                fstype: "cgroup".into(),
                super_opts: "rw,cpu,cpuacct".into(),
            })
        );
        assert_eq!(parse_line(""), Err("too few fields"));
        assert_eq!(
            parse_line("22 1 0:21 / /proc rw,nosuid proc proc rw x y"),
            Err("missing '-' separator")
        );
        assert_eq!(
            parse_line("22 1 0:21 / /proc rw a b c d - proc proc"),
            Err("too few fields after '-'")
        );
        // A mount point named `-` is not the separator.
        assert_eq!(
            parse_line("22 1 0:21 / - rw - proc proc rw").map(|m| m.mount_point),
            Ok(PathBuf::from("-"))
        );
        let e = parse(
            "\n22 1 0:21 / /proc rw - proc proc rw\nbad\n",
            Path::new("m"),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Parse { line: 3, .. }), "{e:?}");
    }
}
