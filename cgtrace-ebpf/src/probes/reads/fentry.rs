//! Fentry mode: fentry/fexit on the pseudo file systems' read functions,
//! `f(struct kiocb *, struct iov_iter *)` and `proc_reg_read(struct file *, ...)`: only
//! pseudo-file reads pay anything. Nested calls (kernfs -> seq_file) keep the outermost.
use aya_ebpf::{
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use cgtrace_common::reads::{HOOK_FUSE, HOOK_KERNFS, HOOK_PROC, HOOK_SEQ};

use super::{
    P,
    inflight::{close_read, lost_read, open_read},
    rd,
};
use crate::{helpers::current_task, kernel::layout};

#[inline(always)]
fn iocb_file(iocb: P) -> Option<P> {
    rd::<P>(iocb, layout!(kiocb_filp))
}

#[inline(always)]
fn iter_enter(iocb: P, hook: u32) {
    if let Some(file) = iocb_file(iocb) {
        open_read(current_task(), file, hook);
    }
}

/// The fentry/fexit pair on a read function `f(struct kiocb *, struct iov_iter *)`:
/// `iter_hooks!(function, entry program, exit program, hook)`.
macro_rules! iter_hooks {
    ($function:literal, $enter:ident, $exit:ident, $hook:expr) => {
        #[fentry(function = $function)]
        pub fn $enter(ctx: FEntryContext) -> u32 {
            iter_enter(ctx.arg(0), $hook);
            0
        }

        #[fexit(function = $function)]
        pub fn $exit(ctx: FExitContext) -> u32 {
            if close_read($hook, ctx.arg(2)) {
                lost_read($hook, iocb_file(ctx.arg(0)));
            }
            0
        }
    };
}

iter_hooks!(
    "kernfs_fop_read_iter",
    reads_kernfs_enter,
    reads_kernfs_exit,
    HOOK_KERNFS
);
iter_hooks!("seq_read_iter", reads_seq_enter, reads_seq_exit, HOOK_SEQ);
iter_hooks!(
    "proc_reg_read_iter",
    reads_proc_iter_enter,
    reads_proc_iter_exit,
    HOOK_PROC
);
iter_hooks!(
    "fuse_file_read_iter",
    reads_fuse_enter,
    reads_fuse_exit,
    HOOK_FUSE
);

/// `proc_reg_read(struct file *, char __user *, size_t, loff_t *)`: the file is the argument.
#[fentry(function = "proc_reg_read")]
pub fn reads_proc_enter(ctx: FEntryContext) -> u32 {
    open_read(current_task(), ctx.arg(0), HOOK_PROC);
    0
}

#[fexit(function = "proc_reg_read")]
pub fn reads_proc_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_PROC, ctx.arg(4)) {
        lost_read(HOOK_PROC, Some(ctx.arg(0)));
    }
    0
}
