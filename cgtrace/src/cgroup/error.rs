//! Why a cgroup hierarchy could not be read.

use std::io;
use std::path::PathBuf;

/// Errors of the cgroup module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file (`/proc/self/mountinfo`, `/proc/cgroups`, ...) could not be read.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file was read but a line of it is malformed.
    #[error("{path}:{line}: {reason}")]
    Parse {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// Neither a cgroup v1 nor a cgroup2 filesystem is mounted.
    #[error("no cgroup filesystem found in {path}")]
    NoCgroups { path: PathBuf },
    /// A hierarchy mount could not be opened or inspected.
    #[error("cannot open cgroup mount {path}")]
    Mount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
