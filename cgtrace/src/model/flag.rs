//! A diagnosis, as every family makes them.

use serde::{Deserialize, Serialize};

/// A diagnosis with the change it suggests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Flag {
    /// The family that made it.
    #[serde(default)]
    pub family: String,
    /// What was found, as a stable name: `runq_long_waits`; `throttled_below_quota`,
    /// `many_threads_burn`, `long_throttle_waits`; `reads_rstat_flush`, `reads_fuse`,
    /// `reads_slow`.
    pub code: String,
    pub message: String,
    pub suggestion: String,
}
