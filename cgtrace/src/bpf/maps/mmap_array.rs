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

/// An mmapable BPF array, mapped shared and writable from its first value up to the highest one
/// reached so far ([`MappedArray::reach`]): the whole mapping counts in the daemon's RSS (the
/// kernel inserts every page of it at `mmap`), so a prefix is mapped, not the array.
pub struct MappedArray {
    /// Keeps the map alive while it is mapped.
    map: MapData,
    /// The mapping (null while nothing is mapped).
    base: *mut u8,
    /// Bytes mapped.
    len: usize,
    /// Values wholly inside the mapping.
    mapped: u32,
    entries: u32,
    /// The kernel's element stride: the value size rounded up to 8.
    stride: usize,
    page: usize,
}

// SAFETY: the mapping is owned by this value and only accessed through atomic loads and stores.
unsafe impl Send for MappedArray {}

impl MappedArray {
    /// Takes `map`, whose values are `value_size` bytes (checked against the kernel's); nothing is
    /// mapped until a value is reached.
    pub fn new(map: MapData, value_size: usize) -> io::Result<Self> {
        let info = map.info().map_err(io::Error::other)?;
        if info.value_size() as usize != value_size || !value_size.is_multiple_of(8) {
            return Err(io::Error::other(format!(
                "map value is {} bytes, expected {value_size}",
                info.value_size()
            )));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        Ok(Self {
            map,
            base: std::ptr::null_mut(),
            len: 0,
            mapped: 0,
            entries: info.max_entries(),
            stride: value_size,
            page,
        })
    }

    /// Maps the array at least up to value `index` (an eighth more, so a growing table is
    /// remapped a few times, not once per value): a new mapping of the longer prefix replaces the
    /// old one. Values past the array stay unmapped (accesses to them read 0).
    pub fn reach(&mut self, index: u32) -> io::Result<()> {
        if index < self.mapped || index >= self.entries {
            return Ok(());
        }
        let whole = (self.stride * self.entries as usize).div_ceil(self.page) * self.page;
        let need = (index as usize + 1) * self.stride;
        let len = ((need + need / 8).div_ceil(self.page) * self.page).min(whole);
        // SAFETY: a fresh shared mapping of the map's fd, inside the array (the kernel refuses a
        // longer one); checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.unmap();
        self.base = base.cast();
        self.len = len;
        self.mapped = ((len / self.stride) as u32).min(self.entries);
        Ok(())
    }

    fn unmap(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made by `reach`, unmapped once (`base` is cleared).
            unsafe { libc::munmap(self.base.cast(), self.len) };
            self.base = std::ptr::null_mut();
            self.len = 0;
            self.mapped = 0;
        }
    }

    fn word(&self, index: u32, offset: usize) -> Option<&AtomicU64> {
        if index >= self.mapped || !offset.is_multiple_of(8) || offset + 8 > self.stride {
            return None;
        }
        let at = index as usize * self.stride + offset;
        // SAFETY: inside the mapping (checked above), 8-aligned (the mapping is page-aligned, the
        // stride and offset multiples of 8), and only ever accessed atomically by this process.
        Some(unsafe { &*self.base.add(at).cast::<AtomicU64>() })
    }

    fn word32(&self, index: u32, offset: usize) -> Option<&AtomicU32> {
        if index >= self.mapped || !offset.is_multiple_of(4) || offset + 4 > self.stride {
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

    /// The `u64` at byte `offset` of value `index` (0 outside the mapping).
    pub fn load(&self, index: u32, offset: usize) -> u64 {
        self.word(index, offset)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Writes the `u64` at byte `offset` of value `index` (nothing outside the mapping).
    pub fn store(&self, index: u32, offset: usize, v: u64) {
        if let Some(w) = self.word(index, offset) {
            w.store(v, Ordering::Relaxed);
        }
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        self.unmap();
    }
}
