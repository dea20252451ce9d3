//! A BPF array created with `BPF_F_MMAPABLE` (Linux 5.5+), mapped into the daemon: its values are
//! read and written in place, with no syscall per value. aya 0.16 has no mapping, hence this
//! module.
//!
//! The programs update the values while the daemon reads them, so every access is one relaxed
//! atomic 64-bit load or store at an offset inside a value (the values are `#[repr(C)]` structs of
//! `u64`s); a value read field by field is not a snapshot, and callers read what they need that
//! way (cumulative counters whose next reading catches up).

use std::{
    io,
    os::fd::{AsFd, AsRawFd},
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};

use aya::maps::MapData;

/// An mmapable BPF array, mapped shared and writable.
pub struct MappedArray {
    /// Keeps the map alive while it is mapped.
    _map: MapData,
    base: *mut u8,
    len: usize,
    entries: u32,
    /// The kernel's element stride: the value size rounded up to 8.
    stride: usize,
}

// SAFETY: the mapping is owned by this value and only accessed through atomic loads and stores.
unsafe impl Send for MappedArray {}

impl MappedArray {
    /// Maps `map`, whose values are `value_size` bytes (checked against the kernel's).
    pub fn new(map: MapData, value_size: usize) -> io::Result<Self> {
        let info = map.info().map_err(io::Error::other)?;
        if info.value_size() as usize != value_size || !value_size.is_multiple_of(8) {
            return Err(io::Error::other(format!(
                "map value is {} bytes, expected {value_size}",
                info.value_size()
            )));
        }
        let entries = info.max_entries();
        let stride = value_size;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = (stride * entries as usize).div_ceil(page) * page;
        // SAFETY: a fresh shared mapping of the map's fd; checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            _map: map,
            base: base.cast(),
            len,
            entries,
            stride,
        })
    }

    /// Number of values.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    fn word(&self, index: u32, offset: usize) -> Option<&AtomicU64> {
        if index >= self.entries || !offset.is_multiple_of(8) || offset + 8 > self.stride {
            return None;
        }
        let at = index as usize * self.stride + offset;
        // SAFETY: inside the mapping (checked above), 8-aligned (the mapping is page-aligned, the
        // stride and offset multiples of 8), and only ever accessed atomically by this process.
        Some(unsafe { &*self.base.add(at).cast::<AtomicU64>() })
    }

    fn word32(&self, index: u32, offset: usize) -> Option<&AtomicU32> {
        if index >= self.entries || !offset.is_multiple_of(4) || offset + 4 > self.stride {
            return None;
        }
        let at = index as usize * self.stride + offset;
        // SAFETY: inside the mapping (checked above), 4-aligned (the mapping is page-aligned, the
        // stride a multiple of 8, the offset of 4), and only ever accessed atomically here.
        Some(unsafe { &*self.base.add(at).cast::<AtomicU32>() })
    }

    /// Takes the `u64` at byte `offset` of value `index`: returns it and leaves 0 (one atomic
    /// swap, and none where it is already 0), so an add by a program meanwhile is either taken
    /// now or left for the next take, never lost.
    pub fn take(&self, index: u32, offset: usize) -> u64 {
        self.word(index, offset)
            .map_or(0, |w| match w.load(Ordering::Relaxed) {
                0 => 0,
                _ => w.swap(0, Ordering::Relaxed),
            })
    }

    /// [`MappedArray::take`] of the `u32` at byte `offset` (the programs add to it as a `u32`:
    /// the same width, so the swap and their add are atomic against each other on every
    /// architecture).
    pub fn take_u32(&self, index: u32, offset: usize) -> u32 {
        self.word32(index, offset)
            .map_or(0, |w| match w.load(Ordering::Relaxed) {
                0 => 0,
                _ => w.swap(0, Ordering::Relaxed),
            })
    }

    /// The `u64` at byte `offset` of value `index` (0 outside the array).
    pub fn load(&self, index: u32, offset: usize) -> u64 {
        self.word(index, offset)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Writes the `u64` at byte `offset` of value `index` (nothing outside the array).
    pub fn store(&self, index: u32, offset: usize, v: u64) {
        if let Some(w) = self.word(index, offset) {
            w.store(v, Ordering::Relaxed);
        }
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
