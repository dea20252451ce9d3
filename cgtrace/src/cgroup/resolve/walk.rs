//! The fallback: every directory below the mount, `lstat`ed.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Inode → relative path of every directory below `mount` on device `dev` (the mount itself
/// included as `/`). Directories that vanish or cannot be read mid-walk are skipped.
pub(super) fn walk(mount: &Path, dev: u64) -> HashMap<u64, Arc<str>> {
    let mut out = HashMap::new();
    if let Ok(md) = fs::symlink_metadata(mount) {
        out.insert(md.ino(), Arc::from("/"));
    }
    let mut stack: Vec<(PathBuf, String)> = vec![(mount.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            let Ok(md) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !md.is_dir() || md.dev() != dev {
                continue;
            }
            let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
            out.insert(md.ino(), Arc::from(child.as_str()));
            stack.push((path, child));
        }
    }
    out
}
