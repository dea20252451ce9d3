//! Files cgtrace creates: owner-only (mode 0600), never through a symbolic link (`O_NOFOLLOW`),
//! closed on exec. A directory a tenant can write to cannot make cgtrace, running as root, write
//! through a link it planted.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

/// Creates `path` for writing; fails if anything is already there (`O_CREAT|O_EXCL`).
pub fn create_new(path: &Path) -> io::Result<File> {
    private().write(true).create_new(true).open(path)
}

/// Opens `path` for appending, creating it if missing.
pub fn append(path: &Path) -> io::Result<File> {
    private().create(true).append(true).open(path)
}

fn private() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    o
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn files_are_private_exclusive_and_never_through_a_link() {
        let dir = std::env::temp_dir().join(format!("cgtrace-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a");
        let _ = std::fs::remove_file(&f);
        create_new(&f).unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            create_new(&f).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        append(&f).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(append(&link).is_err(), "opened through a link");
        assert!(create_new(&link).is_err(), "created through a link");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
