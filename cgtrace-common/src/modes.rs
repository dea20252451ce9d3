//! The attach modes a user can force (`--throttle-mode`, `--reads-mode`): one definition for the
//! daemon's command line and the kernel matrix (xtask). With the `clap` feature they are clap
//! value enums.

/// How throttle episodes are detected (`--throttle-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ThrottleMode {
    /// The best this kernel allows: fentry, else kprobe, else tracepoint.
    Auto,
    /// fentry/fexit on throttle_cfs_rq and unthrottle_cfs_rq.
    Fentry,
    /// kprobe/kretprobe twins of the same.
    Kprobe,
    /// fentry (else kprobe) on tg_throttle_down/tg_unthrottle_up, for kernels where
    /// throttle_cfs_rq is inlined away (those two are called through pointers, never inlined).
    Tgwalk,
    /// Tracepoints only (sched_switch, hrtimer expiry, CSD exit).
    Tracepoint,
}

impl ThrottleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Tgwalk => "tgwalk",
            Self::Tracepoint => "tracepoint",
        }
    }
}

/// How pseudo-file reads are timed (`--reads-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ReadsMode {
    /// fentry on the pseudo-filesystems' read functions where the kernel allows it, else off
    /// (the syscall mode costs every syscall of every task: ask for it by name).
    Auto,
    /// fentry/fexit on kernfs_fop_read_iter, seq_read_iter, proc_reg_read(_iter) and
    /// fuse_file_read_iter: only pseudo-file reads pay.
    Fentry,
    /// tp_btf on the raw sys_enter/sys_exit tracepoints, filtered by syscall number and then by
    /// the file's superblock.
    Syscall,
    /// Do not trace reads.
    Off,
}

impl ReadsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Fentry => "fentry",
            Self::Syscall => "syscall",
            Self::Off => "off",
        }
    }
}
