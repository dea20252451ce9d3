//! Whole reads of a BPF hash map in a few `BPF_MAP_LOOKUP_BATCH` calls (Linux 5.6+) instead of
//! two syscalls per entry (aya's iterator: `BPF_MAP_GET_NEXT_KEY`, then `BPF_MAP_LOOKUP_ELEM`).
//! A per-window read of tens of thousands of entries (the blame ledger's pairs on a node) cost
//! the daemon a tenth of a core that way. aya 0.16 has no batch operations, hence this module.
//! Deletes of many keys go the same way (`BPF_MAP_DELETE_BATCH`).

use std::{
    io,
    os::fd::{AsFd, AsRawFd, OwnedFd},
};

use aya::{
    Pod,
    maps::{HashMap, IterableMap, MapData},
};

/// `enum bpf_cmd`: `BPF_MAP_LOOKUP_BATCH`.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// `enum bpf_cmd`: `BPF_MAP_DELETE_BATCH`.
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
/// The kernel's internal `ENOTSUPP` (no libc name).
const ENOTSUPP: i32 = 524;

/// `union bpf_attr`'s member for the `BPF_MAP_*_BATCH` commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// One `BPF_MAP_*_BATCH` command `cmd` on `attr`; the kernel writes back `attr.count`.
///
/// # Safety
/// `attr`'s pointers must be valid for the command: `count` keys (and values, where the command
/// uses them) of the map's sizes, and live batch positions.
unsafe fn bpf_batch(cmd: libc::c_long, attr: &mut BatchAttr) -> io::Result<()> {
    // SAFETY: the caller's promise; `attr` is a live `union bpf_attr` prefix of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A hash map read whole once per window: in a few batch lookups where the kernel has them, with
/// aya's iterator where not.
pub struct WholeHashMap<K, V> {
    map: HashMap<MapData, K, V>,
    /// `None`: its fd could not be duplicated; iterate.
    batch: Option<BatchReader<K, V>>,
}

impl<K: Pod, V: Pod> WholeHashMap<K, V> {
    /// `chunk` entries per batch lookup.
    pub fn new(map: HashMap<MapData, K, V>, chunk: usize) -> Self {
        let batch = BatchReader::new(&map, chunk).ok();
        Self { map, batch }
    }

    /// Calls `f` with every entry. A batch walk that fails midway is not redone: callers keep
    /// cumulative values, so the next window has what this one missed.
    pub fn for_each(&mut self, mut f: impl FnMut(&K, &V)) {
        let batched = match &mut self.batch {
            Some(b) => b.for_each(&mut f).unwrap_or(true),
            None => false,
        };
        if !batched {
            // An entry deleted while iterating ends the walk early for that key only.
            for (k, v) in self.map.iter().flatten() {
                f(&k, &v);
            }
        }
    }

    /// The value of `key` now, if present.
    pub fn get(&self, key: &K) -> Option<V> {
        self.map.get(key, 0).ok()
    }

    /// Deletes `key` (absent is fine).
    pub fn remove(&mut self, key: &K) {
        let _ = self.map.remove(key);
    }

    /// Deletes every key of `keys` (absent ones are skipped): one syscall per chunk where the
    /// kernel has batch deletes, one per key where not.
    pub fn remove_all(&mut self, keys: &[K]) {
        let done = match &mut self.batch {
            Some(b) => b.delete(keys),
            None => 0,
        };
        for k in &keys[done..] {
            let _ = self.map.remove(k);
        }
    }
}

/// Reads one hash map whole, `chunk` entries per syscall.
struct BatchReader<K, V> {
    fd: OwnedFd,
    chunk: usize,
    keys: Vec<K>,
    values: Vec<V>,
    /// The kernel refused the command (before 5.6, or a map type without it): use the iterator.
    unsupported: bool,
}

impl<K: Pod, V: Pod> BatchReader<K, V> {
    /// A reader of `map` (its fd is duplicated). The typed map has had its key and value sizes
    /// checked against the kernel's, which the buffers below rely on; per-CPU maps (values laid
    /// out per CPU) are another type.
    fn new(map: &HashMap<MapData, K, V>, chunk: usize) -> io::Result<Self> {
        Ok(Self {
            fd: map.map().fd().as_fd().try_clone_to_owned()?,
            chunk: chunk.max(1),
            keys: Vec::new(),
            values: Vec::new(),
            unsupported: false,
        })
    }

    /// `BPF_MAP_DELETE_BATCH` of `keys`, a chunk per call. Returns how many keys it got
    /// through: the rest are left to single-key calls (a kernel without the command; an error).
    /// A key the kernel stops at (one already gone) is stepped over.
    fn delete(&mut self, keys: &[K]) -> usize {
        if self.unsupported {
            return 0;
        }
        let mut at = 0;
        while at < keys.len() {
            let chunk = &keys[at..keys.len().min(at + self.chunk)];
            let mut attr = BatchAttr {
                keys: chunk.as_ptr() as u64,
                count: chunk.len() as u32,
                map_fd: self.fd.as_raw_fd() as u32,
                ..BatchAttr::default()
            };
            // SAFETY: `attr` points at `count` keys of the map's size, which the kernel only
            // reads.
            let Err(err) = (unsafe { bpf_batch(BPF_MAP_DELETE_BATCH, &mut attr) }) else {
                at += chunk.len();
                continue;
            };
            let n = (attr.count as usize).min(chunk.len());
            match err.raw_os_error() {
                // Stopped at key `n` (gone): past it.
                Some(libc::ENOENT) => at += n + 1,
                Some(libc::EINVAL | ENOTSUPP | libc::EOPNOTSUPP) if at == 0 && n == 0 => {
                    return 0;
                }
                _ => return at + n,
            }
        }
        keys.len()
    }

    /// Calls `f` with every entry of the map. `Ok(false)`: the kernel has no batch lookup for it
    /// (nothing was read; the caller iterates instead, and so on every later call).
    /// Entries added or removed meanwhile may be seen or not, as with any walk of a live map.
    fn for_each(&mut self, mut f: impl FnMut(&K, &V)) -> io::Result<bool> {
        if self.unsupported {
            return Ok(false);
        }
        // A hash map's batch position is a bucket index (u32).
        let mut in_batch: u32 = 0;
        let mut out_batch: u32 = 0;
        let mut first = true;
        loop {
            self.keys.clear();
            self.values.clear();
            self.keys.reserve(self.chunk);
            self.values.reserve(self.chunk);
            let mut attr = BatchAttr {
                in_batch: if first {
                    0
                } else {
                    &in_batch as *const u32 as u64
                },
                out_batch: &mut out_batch as *mut u32 as u64,
                keys: self.keys.as_mut_ptr() as u64,
                values: self.values.as_mut_ptr() as u64,
                count: self.chunk as u32,
                map_fd: self.fd.as_raw_fd() as u32,
                ..BatchAttr::default()
            };
            // SAFETY: `attr` points at buffers with room for `count` keys and values of the map's
            // sizes (K and V are the map's key and value types) and at two live u32s.
            let err = unsafe { bpf_batch(BPF_MAP_LOOKUP_BATCH, &mut attr) }.err();
            let n = (attr.count as usize).min(self.chunk);
            // SAFETY: the kernel wrote `n` keys and values (it sets `count` on success and at the
            // end, ENOENT); K and V are plain data.
            unsafe {
                self.keys.set_len(n);
                self.values.set_len(n);
            }
            for (k, v) in self.keys.iter().zip(&self.values) {
                f(k, v);
            }
            match err.as_ref().and_then(io::Error::raw_os_error) {
                None => {}
                // The walk is over.
                Some(libc::ENOENT) => return Ok(true),
                // One bucket holds more entries than a chunk: nothing was copied, retry bigger.
                Some(libc::ENOSPC) if n == 0 => {
                    self.chunk *= 2;
                    continue;
                }
                Some(libc::EINVAL | ENOTSUPP | libc::EOPNOTSUPP) if first => {
                    self.unsupported = true;
                    return Ok(false);
                }
                Some(_) => return Err(err.unwrap_or_else(|| io::Error::other("bpf"))),
            }
            in_batch = out_batch;
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeMap,
        os::fd::{FromRawFd, OwnedFd},
    };

    use aya::maps::{HashMap, Map, MapData};

    use super::{BatchReader, WholeHashMap};

    /// A new `BPF_MAP_TYPE_HASH` of u64 -> [u64; 3], or `None` without the right to make one.
    fn hash_map(max_entries: u32) -> Option<Map> {
        #[repr(C)]
        struct CreateAttr {
            map_type: u32,
            key_size: u32,
            value_size: u32,
            max_entries: u32,
            map_flags: u32,
        }
        let attr = CreateAttr {
            map_type: 1,
            key_size: 8,
            value_size: 24,
            max_entries,
            map_flags: 0,
        };
        // SAFETY: BPF_MAP_CREATE (0) with an attr of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                0,
                &attr as *const CreateAttr,
                size_of::<CreateAttr>(),
            )
        };
        if fd < 0 {
            eprintln!(
                "skipped: BPF_MAP_CREATE: {}",
                std::io::Error::last_os_error()
            );
            return None;
        }
        // SAFETY: a new fd of ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Some(Map::from_map_data(MapData::from_fd(fd).expect("map data")).expect("map"))
    }

    /// Every entry once, with its value, whatever the chunk (1 forces a retry on every bucket
    /// holding two keys), and an empty map reads as empty.
    #[test]
    fn reads_every_entry_once() {
        let Some(map) = hash_map(4096) else { return };
        let mut hm: HashMap<MapData, u64, [u64; 3]> = map.try_into().expect("hash map");
        let mut reader = BatchReader::new(&hm, 1).expect("reader");
        let mut seen = BTreeMap::new();
        assert!(
            reader
                .for_each(|k, v| {
                    seen.insert(*k, *v);
                })
                .expect("empty walk")
        );
        assert!(seen.is_empty());
        let want: BTreeMap<u64, [u64; 3]> = (0..3000u64)
            .map(|k| (k * 7919, [k, k * 2, u64::MAX - k]))
            .collect();
        for (k, v) in &want {
            hm.insert(k, v, 0).expect("insert");
        }
        for chunk in [1, 64, 4096] {
            reader.chunk = chunk;
            let mut n = 0;
            seen.clear();
            assert!(
                reader
                    .for_each(|k, v| {
                        n += 1;
                        seen.insert(*k, *v);
                    })
                    .expect("walk")
            );
            assert_eq!(n, want.len(), "chunk {chunk}: each entry once");
            assert_eq!(seen, want, "chunk {chunk}");
        }
    }

    /// Batch deletes: absent keys stepped over; what is left is what was not named.
    #[test]
    fn removes_many_keys() {
        let Some(map) = hash_map(8192) else { return };
        let mut hm: HashMap<MapData, u64, [u64; 3]> = map.try_into().expect("hash map");
        for k in 0..5000u64 {
            hm.insert(&k, &[k; 3], 0).expect("insert");
        }
        let mut whole = WholeHashMap::new(hm, 64);
        // Every other key, with absent ones among them.
        let gone: Vec<u64> = (0..7000).step_by(2).collect();
        whole.remove_all(&gone);
        let mut left = Vec::new();
        whole.for_each(|k, v| {
            assert_eq!(*v, [*k; 3]);
            left.push(*k);
        });
        left.sort_unstable();
        assert_eq!(left, (1..5000).step_by(2).collect::<Vec<u64>>());
    }
}
