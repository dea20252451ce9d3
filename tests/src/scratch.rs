//! A scratch directory for a test's files, removed on drop.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::Result;

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Result<Self> {
        let d = std::env::temp_dir().join(format!("cgtrace-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d)?;
        Ok(Self(d))
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `p` as a `&str` for a command line (the tests' paths are UTF-8).
pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
