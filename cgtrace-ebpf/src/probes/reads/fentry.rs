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

#[fentry(function = "kernfs_fop_read_iter")]
pub fn reads_kernfs_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_KERNFS);
    0
}

#[fexit(function = "kernfs_fop_read_iter")]
pub fn reads_kernfs_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_KERNFS, ctx.arg(2)) {
        lost_read(HOOK_KERNFS, iocb_file(ctx.arg(0)));
    }
    0
}

#[fentry(function = "seq_read_iter")]
pub fn reads_seq_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_SEQ);
    0
}

#[fexit(function = "seq_read_iter")]
pub fn reads_seq_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_SEQ, ctx.arg(2)) {
        lost_read(HOOK_SEQ, iocb_file(ctx.arg(0)));
    }
    0
}

#[fentry(function = "proc_reg_read_iter")]
pub fn reads_proc_iter_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_PROC);
    0
}

#[fexit(function = "proc_reg_read_iter")]
pub fn reads_proc_iter_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_PROC, ctx.arg(2)) {
        lost_read(HOOK_PROC, iocb_file(ctx.arg(0)));
    }
    0
}

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

#[fentry(function = "fuse_file_read_iter")]
pub fn reads_fuse_enter(ctx: FEntryContext) -> u32 {
    iter_enter(ctx.arg(0), HOOK_FUSE);
    0
}

#[fexit(function = "fuse_file_read_iter")]
pub fn reads_fuse_exit(ctx: FExitContext) -> u32 {
    if close_read(HOOK_FUSE, ctx.arg(2)) {
        lost_read(HOOK_FUSE, iocb_file(ctx.arg(0)));
    }
    0
}
