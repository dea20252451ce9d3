//! Least privilege: once the programs are attached, the bandwidth files opened and the metrics
//! port bound, cgtrace keeps only what the running daemon still uses ([`KEPT`]) and drops every
//! other capability (effective, permitted, inheritable, ambient and bounding sets) and sets
//! `no_new_privs`, so a tracer that reads tenant-controlled names is never `CAP_SYS_ADMIN` for its
//! whole life, and nothing it could be made to execute gets a capability back.
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

use std::sync::atomic::{AtomicBool, Ordering};

use caps::{CapSet, Capability, CapsHashSet};

/// What the running daemon keeps.
pub const KEPT: &[Capability] = &[Capability::CAP_BPF, Capability::CAP_DAC_READ_SEARCH];

/// The names of [`KEPT`], for the hello line and `doctor`.
pub fn kept_names() -> Vec<String> {
    KEPT.iter().map(ToString::to_string).collect()
}

/// `--require-drop`: a failed drop ends cgtrace instead of being a warning.
static REQUIRED: AtomicBool = AtomicBool::new(false);

/// Makes a failed drop fatal (`--require-drop`), for the whole process.
pub fn require(on: bool) {
    REQUIRED.store(on, Ordering::Relaxed);
}

/// Why the drop failed.
#[derive(Debug, thiserror::Error)]
pub enum DropError {
    #[error("{0}")]
    Caps(#[from] caps::errors::CapsError),
    #[error(
        "the bounding set still holds {held}: grant CAP_SETPCAP too (cgtrace drops it with the rest)"
    )]
    Bounding { held: String },
    #[error("prctl(PR_SET_NO_NEW_PRIVS): {0}")]
    NoNewPrivs(#[source] std::io::Error),
    #[error("{set:?} set still holds {held} after the drop")]
    Kept { set: CapSet, held: String },
}

/// What dropping did on this thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// Capabilities the thread had in its effective set before, and has now.
    pub before: usize,
    pub after: Vec<Capability>,
}

fn names(set: &CapsHashSet) -> String {
    let mut v: Vec<Capability> = set.iter().copied().collect();
    v.sort_by_key(|c| c.index());
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Drops every capability but [`KEPT`] from the calling thread's effective, permitted,
/// inheritable, ambient and bounding sets, and sets `no_new_privs` (nothing this thread or a
/// child executes can gain a capability back). Trimming the bounding set needs `CAP_SETPCAP`,
/// which is dropped with the rest; without it a bounding set that holds more than is kept is an
/// error (a process with no capability at all has nothing to lose). The sets are read back and
/// checked; a failure is returned, never half-applied silently.
pub fn drop_to_kept() -> Result<Dropped, DropError> {
    let before = caps::read(None, CapSet::Effective)?.len();
    let permitted = caps::read(None, CapSet::Permitted)?;
    let keep: CapsHashSet = KEPT
        .iter()
        .copied()
        .filter(|c| permitted.contains(c))
        .collect();
    let all: CapsHashSet = KEPT.iter().copied().collect();
    let extra = |set: &CapsHashSet| -> CapsHashSet { set.difference(&all).copied().collect() };
    let bounding = caps::read(None, CapSet::Bounding)?;
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)? {
        for c in extra(&bounding) {
            caps::drop(None, CapSet::Bounding, c)?;
        }
    } else if !permitted.is_empty() && !extra(&bounding).is_empty() {
        return Err(DropError::Bounding {
            held: names(&extra(&bounding)),
        });
    }
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(DropError::NoNewPrivs(std::io::Error::last_os_error()));
    }
    caps::clear(None, CapSet::Ambient)?;
    caps::set(None, CapSet::Inheritable, &CapsHashSet::new())?;
    caps::set(None, CapSet::Effective, &keep)?;
    caps::set(None, CapSet::Permitted, &keep)?;
    let mut sets = vec![
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Ambient,
        CapSet::Inheritable,
    ];
    if !permitted.is_empty() {
        sets.push(CapSet::Bounding);
    }
    for set in sets {
        let held = extra(&caps::read(None, set)?);
        if !held.is_empty() {
            return Err(DropError::Kept {
                set,
                held: names(&held),
            });
        }
    }
    let mut after: Vec<Capability> = caps::read(None, CapSet::Effective)?.into_iter().collect();
    after.sort_by_key(|c| c.index());
    Ok(Dropped { before, after })
}

/// Drops privileges after start-up, saying so in the log. A failure is a warning (cgtrace still
/// works, with more privilege than it needs), or with `--require-drop` ([`require`]) the end of
/// cgtrace: one line on stderr and exit status 1, before any window is written or served.
pub fn drop_after_attach(who: &str) {
    match drop_to_kept() {
        Ok(d) => log::info!(
            "{who}: capabilities dropped after attach: {} → {:?}",
            d.before,
            d.after
        ),
        Err(e) if REQUIRED.load(Ordering::Relaxed) => {
            eprintln!(
                "cgtrace: error: {who}: could not drop capabilities after attach: {e} (--require-drop)"
            );
            std::process::exit(1);
        }
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
