//! Least privilege: once the programs are attached, the bandwidth files opened and the metrics
//! port bound, cgtrace keeps only what the running daemon still uses ([`KEPT`]) and drops every
//! other capability (effective, permitted, inheritable, ambient and bounding sets), so a tracer
//! that reads tenant-controlled names is never `CAP_SYS_ADMIN` for its whole life.
//!
//! What the running daemon does: map reads, deletes and iteration on map fds it holds, the ring
//! buffer, reading cgroup, proc and sys files and kubelet's/Docker's metadata, writing the
//! recording it opened (rotation creates files in the same directory). `CAP_BPF` is kept for the
//! map operations on kernels where `kernel.unprivileged_bpf_disabled` makes every `bpf()` call
//! need it; `CAP_DAC_READ_SEARCH` for metadata files readable by their owner only.
//!
//! Capabilities are per thread in Linux: [`drop_to_kept`] is called on every thread that exists
//! when tracing has started (the driver's, and `top`'s UI thread), before any other is started,
//! so every later thread inherits the reduced sets. [`threads_with`] checks it.

use caps::{CapSet, Capability, CapsHashSet};

/// What the running daemon keeps.
pub const KEPT: &[Capability] = &[Capability::CAP_BPF, Capability::CAP_DAC_READ_SEARCH];

/// The names of [`KEPT`], for the hello line and `doctor`.
pub fn kept_names() -> Vec<String> {
    KEPT.iter().map(ToString::to_string).collect()
}

/// What dropping did on this thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// Capabilities the thread had in its effective set before, and has now.
    pub before: usize,
    pub after: Vec<Capability>,
}

/// Drops every capability but [`KEPT`] from the calling thread. A process without capabilities
/// (not root) has nothing to drop; a failure is returned, never half-applied silently.
pub fn drop_to_kept() -> Result<Dropped, caps::errors::CapsError> {
    let before = caps::read(None, CapSet::Effective)?.len();
    let permitted = caps::read(None, CapSet::Permitted)?;
    let keep: CapsHashSet = KEPT
        .iter()
        .copied()
        .filter(|c| permitted.contains(c))
        .collect();
    // The bounding set needs CAP_SETPCAP, which goes with the effective set below.
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)? {
        for c in caps::read(None, CapSet::Bounding)? {
            if !keep.contains(&c) {
                caps::drop(None, CapSet::Bounding, c)?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient)?;
    caps::set(None, CapSet::Inheritable, &CapsHashSet::new())?;
    caps::set(None, CapSet::Effective, &keep)?;
    caps::set(None, CapSet::Permitted, &keep)?;
    let mut after: Vec<Capability> = caps::read(None, CapSet::Effective)?.into_iter().collect();
    after.sort_by_key(|c| c.index());
    Ok(Dropped { before, after })
}

/// Drops privileges after start-up, saying so in the log; a failure is a warning (cgtrace still
/// works, with more privilege than it needs).
pub fn drop_after_attach(who: &str) {
    match drop_to_kept() {
        Ok(d) => log::info!(
            "{who}: capabilities dropped after attach: {} → {:?}",
            d.before,
            d.after
        ),
        Err(e) => log::warn!("{who}: could not drop capabilities after attach: {e}"),
    }
}

/// Threads of this process whose effective set holds `cap` (ids), from /proc/self/task.
pub fn threads_with(cap: Capability) -> Vec<u32> {
    let bit = 1u64 << cap.index();
    let Ok(rd) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let eff = status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
            (eff & bit != 0).then_some(tid)
        })
        .collect()
}
