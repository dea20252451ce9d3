//! Syscall mode: `sys_enter`/`sys_exit` on every kernel. The syscall number is compared first,
//! so other syscalls cost one compare; a read's fd is resolved to its file, kept only if traced.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use cgtrace_common::reads::{HOOK_SYSCALL, NR_READ_SYSCALLS};

use super::{
    P,
    files::fd_file,
    inflight::{close_read, lost_read, open_read},
    rd,
};
use crate::{
    helpers::{config, current_task},
    kernel::layout,
};

#[inline(always)]
fn is_read_syscall(id: u64) -> bool {
    let mut i = 0;
    while i < NR_READ_SYSCALLS {
        if u64::from(config!(read_syscalls[i])) == id {
            return true;
        }
        i += 1;
    }
    false
}

/// `sys_enter(regs, id)`.
#[btf_tracepoint(function = "sys_enter")]
pub fn reads_sys_enter(ctx: BtfTracePointContext) -> u32 {
    let id: u64 = ctx.arg(1);
    if !is_read_syscall(id) {
        return 0;
    }
    let regs: P = ctx.arg(0);
    if let Some(file) = syscall_file(regs, id) {
        open_read(current_task(), file, HOOK_SYSCALL);
    }
    0
}

/// The file a read syscall `nr` reads, from its saved registers.
#[inline(always)]
fn syscall_file(regs: P, nr: u64) -> Option<P> {
    // The last slot is sendfile(out_fd, in_fd, ...): the file read is the second argument.
    let sendfile = nr == u64::from(config!(read_syscalls[NR_READ_SYSCALLS - 1]));
    let slot = if sendfile {
        layout!(regs_arg1)
    } else {
        layout!(regs_arg0)
    };
    let fd = rd::<u64>(regs, slot)?;
    fd_file(current_task(), fd)
}

/// `sys_exit(regs, ret)`: the syscall number is read back from `regs`, so other syscalls cost
/// one load and a compare.
#[btf_tracepoint(function = "sys_exit")]
pub fn reads_sys_exit(ctx: BtfTracePointContext) -> u32 {
    let regs: P = ctx.arg(0);
    let Some(nr) = rd::<u64>(regs, layout!(regs_nr)) else {
        return 0;
    };
    if !is_read_syscall(nr) {
        return 0;
    }
    let ret: i64 = ctx.arg(1);
    if close_read(HOOK_SYSCALL, ret) {
        lost_read(HOOK_SYSCALL, syscall_file(regs, nr));
    }
    0
}
