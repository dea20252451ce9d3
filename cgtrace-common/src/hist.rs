//! Log-linear latency buckets shared by the kernel and the daemon.
//!
//! Values are nanoseconds. Below 4 ns each value has its own bucket; above, every power of two
//! is split into 4 equal sub-buckets (`SUB_BITS = 2`), so a bucket is at most 25 % wide — four
//! times finer than `runqlat`'s log2 buckets, and each `runqlat` bucket is the union of whole
//! buckets here. The last bucket collects everything from about 60 s up.

/// Sub-bucket bits per power of two.
pub const SUB_BITS: u32 = 2;
/// Sub-buckets per power of two.
pub const SUBS: u32 = 1 << SUB_BITS;
/// Number of buckets; values of 2^36 ns (68.7 s) and more land in the last one.
pub const NR_BUCKETS: usize = 140;

/// Position of the highest set bit of `v` (`v > 0`), written with shifts only so the BPF
/// backend needs no `ctlz`.
#[inline(always)]
pub fn log2(mut v: u64) -> u32 {
    let mut r = 0u32;
    if v >> 32 != 0 {
        v >>= 32;
        r += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        r += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        r += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        r += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        r += 2;
    }
    if v >> 1 != 0 {
        r += 1;
    }
    r
}

/// The bucket index of a value in nanoseconds.
#[inline(always)]
pub fn bucket_of(v: u64) -> u32 {
    if v < SUBS as u64 {
        return v as u32;
    }
    let msb = log2(v);
    let sub = ((v >> (msb - SUB_BITS)) & (SUBS as u64 - 1)) as u32;
    let idx = (msb - SUB_BITS + 1) * SUBS + sub;
    if idx >= NR_BUCKETS as u32 {
        NR_BUCKETS as u32 - 1
    } else {
        idx
    }
}

/// Smallest value (ns) that lands in bucket `idx`.
pub fn bucket_lower(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < SUBS as u64 {
        return idx;
    }
    let msb = idx / SUBS as u64 + SUB_BITS as u64 - 1;
    let sub = idx % SUBS as u64;
    (SUBS as u64 + sub) << (msb - SUB_BITS as u64)
}

/// One past the largest value (ns) of bucket `idx`; `u64::MAX` for the last bucket.
pub fn bucket_upper(idx: usize) -> u64 {
    if idx + 1 >= NR_BUCKETS {
        u64::MAX
    } else {
        bucket_lower(idx + 1)
    }
}
