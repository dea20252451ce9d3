//! Latency histograms in the daemon: deltas of the kernel's cumulative histograms, merging, and
//! percentiles. Buckets are `cgtrace_common::hist` (4 per power of two, in ns).

use cgtrace_common::hist::{NR_BUCKETS, bucket_lower, bucket_of, bucket_upper};
use serde::{Deserialize, Serialize};

/// A latency histogram over one window or since start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hist {
    pub count: u64,
    pub sum_ns: u64,
    /// Run-queue waits: what the tasks waited beyond `sum_ns` (the run queue's clock, stale at
    /// the switches that ended them; see `RqClockOffset`). The buckets and the maximum are of
    /// the whole waits, `sum_ns + stale_ns` is their total. 0 elsewhere.
    pub stale_ns: u64,
    /// Largest value seen; 0 when unknown (then percentiles are capped by the top bucket only).
    pub max_ns: u64,
    pub buckets: Box<[u64; NR_BUCKETS]>,
}

impl Default for Hist {
    fn default() -> Self {
        Self {
            count: 0,
            sum_ns: 0,
            stale_ns: 0,
            max_ns: 0,
            buckets: Box::new([0; NR_BUCKETS]),
        }
    }
}

impl Hist {
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds one value.
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
        self.buckets[bucket_of(ns) as usize] += 1;
    }

    /// Adds another histogram into this one.
    pub fn merge(&mut self, other: &Hist) {
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.stale_ns = self.stale_ns.saturating_add(other.stale_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    /// `cur - prev` of two cumulative readings of the same kernel histogram. Counters that went
    /// backwards (the entry was deleted and re-created in between) count from zero.
    pub fn delta(
        cur_count: u64,
        cur_sum: u64,
        cur: &[u64; NR_BUCKETS],
        prev: Option<(u64, u64, &[u64; NR_BUCKETS])>,
    ) -> Self {
        let mut h = Self::default();
        match prev {
            Some((pc, ps, pb)) if pc <= cur_count => {
                h.count = cur_count - pc;
                h.sum_ns = cur_sum.saturating_sub(ps);
                for i in 0..NR_BUCKETS {
                    h.buckets[i] = cur[i].saturating_sub(pb[i]);
                }
            }
            _ => {
                h.count = cur_count;
                h.sum_ns = cur_sum;
                h.buckets.copy_from_slice(cur);
            }
        }
        h
    }

    /// The value (ns) below which a fraction `q` of the samples fall, interpolated linearly
    /// inside its bucket and never above the maximum. 0 for an empty histogram.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if seen + n >= rank {
                let lo = bucket_lower(i);
                let hi = match bucket_upper(i) {
                    u64::MAX => lo.max(self.max_ns),
                    hi => hi,
                };
                let frac = (rank - seen) as f64 / n as f64;
                let v = lo + ((hi - lo) as f64 * frac) as u64;
                return if self.max_ns > 0 {
                    v.min(self.max_ns)
                } else {
                    v
                };
            }
            seen += n;
        }
        self.max_ns
    }

    /// Upper bound of the highest non-empty bucket: the max when the exact one is unknown.
    pub fn top_bucket_upper_ns(&self) -> u64 {
        self.buckets
            .iter()
            .rposition(|&n| n > 0)
            .map(|i| match bucket_upper(i) {
                u64::MAX => bucket_lower(i),
                hi => hi - 1,
            })
            .unwrap_or(0)
    }

    /// The summary the stream and the view show.
    pub fn summary(&self) -> HistSummary {
        HistSummary {
            count: self.count,
            sum_us: self.sum_ns as f64 / 1e3,
            stale_us: self.stale_ns as f64 / 1e3,
            // Of the whole waits, like the percentiles.
            mean_us: if self.count > 0 {
                self.sum_ns.saturating_add(self.stale_ns) as f64 / self.count as f64 / 1e3
            } else {
                0.0
            },
            p50_us: self.quantile_ns(0.50) as f64 / 1e3,
            p90_us: self.quantile_ns(0.90) as f64 / 1e3,
            p99_us: self.quantile_ns(0.99) as f64 / 1e3,
            max_us: self.max_ns as f64 / 1e3,
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .filter(|&(_, &n)| n > 0)
                .map(|(i, &n)| (bucket_lower(i), n))
                .collect(),
        }
    }

    /// Rebuilds a histogram from a summary's buckets (replay, tests).
    pub fn from_summary(s: &HistSummary) -> Self {
        let mut h = Self {
            count: s.count,
            sum_ns: (s.sum_us * 1e3).round() as u64,
            stale_ns: (s.stale_us * 1e3).round() as u64,
            max_ns: (s.max_us * 1e3).round() as u64,
            ..Self::default()
        };
        for &(lower, n) in &s.buckets {
            let b = &mut h.buckets[bucket_of(lower) as usize];
            *b = b.saturating_add(n);
        }
        h
    }
}

/// A histogram kept for long (the since-start totals of every cgroup): only its non-empty
/// buckets, in one allocation sized to them, so a cgroup with waits in forty buckets costs 344
/// bytes rather than [`Hist`]'s 1.1 KiB (or the 1 KiB a `Vec<(u8, u64)>` grown by doubling took).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseHist {
    count: u64,
    sum_ns: u64,
    /// See [`Hist::stale_ns`].
    stale_ns: u64,
    max_ns: u64,
    /// Which buckets are non-empty ([`MAP_WORDS`] words: bucket `i` is bit `i % 64` of word
    /// `i / 64`), then their counts by index. Empty, not allocated, while every bucket is.
    buckets: Box<[u64]>,
}

/// Words of [`SparseHist`]'s bitmap.
const MAP_WORDS: usize = NR_BUCKETS.div_ceil(64);

// Its bucket indexes are bytes.
const _: () = assert!(NR_BUCKETS <= 256);

/// Packs (bucket, count) pairs, by bucket and with no count 0, into [`SparseHist::buckets`].
fn pack(pairs: &[(u8, u64)]) -> Box<[u64]> {
    if pairs.is_empty() {
        return Box::default();
    }
    let mut v = Vec::with_capacity(MAP_WORDS + pairs.len());
    v.resize(MAP_WORDS, 0u64);
    for &(i, n) in pairs {
        v[usize::from(i) / 64] |= 1 << (i % 64);
        v.push(n);
    }
    v.into_boxed_slice()
}

impl SparseHist {
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The non-empty buckets: (index, count), by index.
    fn pairs(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        let (map, counts) = self.buckets.split_at(MAP_WORDS.min(self.buckets.len()));
        map.iter()
            .enumerate()
            .flat_map(|(w, &bits)| {
                let mut bits = bits;
                std::iter::from_fn(move || {
                    (bits != 0).then(|| {
                        let b = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        (w * 64 + b) as u8
                    })
                })
            })
            .zip(counts.iter().copied())
    }

    /// Where bucket `i`'s count is, if it is non-empty.
    fn slot(&self, i: u8) -> Option<usize> {
        let (w, bit) = (usize::from(i) / 64, 1u64 << (i % 64));
        let map = self.buckets.get(..MAP_WORDS)?;
        (map[w] & bit != 0).then(|| {
            let below: u32 = map[..w].iter().map(|m| m.count_ones()).sum();
            MAP_WORDS + (below + (map[w] & (bit - 1)).count_ones()) as usize
        })
    }

    /// Adds `n` values to bucket `i`.
    fn put(&mut self, i: u8, n: u64) {
        match self.slot(i) {
            Some(at) => self.buckets[at] += n,
            None => self.add_pairs(&[(i, n)]),
        }
    }

    /// Adds (bucket, count) pairs, by bucket: in place when every bucket is already there, else
    /// into one new allocation of the union's size.
    fn add_pairs(&mut self, more: &[(u8, u64)]) {
        if more.iter().all(|&(i, _)| self.slot(i).is_some()) {
            for &(i, n) in more {
                if let Some(at) = self.slot(i) {
                    self.buckets[at] += n;
                }
            }
            return;
        }
        let mut union = [(0u8, 0u64); NR_BUCKETS];
        let mut k = 0;
        let (mut a, mut b) = (self.pairs().peekable(), more.iter().copied().peekable());
        while k < NR_BUCKETS {
            let next = match (a.peek(), b.peek()) {
                (Some(&(i, x)), Some(&(j, y))) if i == j => {
                    a.next();
                    b.next();
                    (i, x + y)
                }
                (Some(&(i, _)), Some(&(j, _))) if i < j => a.next().unwrap(),
                (Some(_), Some(_)) | (None, Some(_)) => b.next().unwrap(),
                (Some(_), None) => a.next().unwrap(),
                (None, None) => break,
            };
            union[k] = next;
            k += 1;
        }
        drop(a);
        self.buckets = pack(&union[..k]);
    }

    /// Adds one value.
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
        self.put(bucket_of(ns) as u8, 1);
    }

    /// Adds `h` into it.
    pub fn merge(&mut self, h: &SparseHist) {
        self.count += h.count;
        self.sum_ns = self.sum_ns.saturating_add(h.sum_ns);
        self.stale_ns = self.stale_ns.saturating_add(h.stale_ns);
        self.max_ns = self.max_ns.max(h.max_ns);
        let mut more = [(0u8, 0u64); NR_BUCKETS];
        let mut k = 0;
        for p in h.pairs() {
            more[k] = p;
            k += 1;
        }
        self.add_pairs(&more[..k]);
    }

    /// The largest value, when known exactly (a kernel window's maximum).
    pub fn set_max(&mut self, ns: u64) {
        self.max_ns = ns;
    }

    /// Upper bound of the highest non-empty bucket ([`Hist::top_bucket_upper_ns`]).
    pub fn top_bucket_upper_ns(&self) -> u64 {
        self.pairs()
            .last()
            .map(|(i, _)| match bucket_upper(usize::from(i)) {
                u64::MAX => bucket_lower(usize::from(i)),
                hi => hi - 1,
            })
            .unwrap_or(0)
    }

    /// A cumulative reading of a kernel histogram, kept to take the next delta from
    /// ([`SparseHist::delta`]). `count` is the sum of the buckets as read; `sums` are the
    /// kernel's `sum_ns` and `stale_ns`.
    pub fn reading(sums: (u64, u64), buckets: &[u32; NR_BUCKETS]) -> Self {
        let mut h = Self::default();
        h.read_again(sums, buckets);
        h
    }

    /// [`SparseHist::reading`] again, into this value's own buffer when the same buckets are
    /// non-empty (the common case: the remembered reading of each (cgroup, kind) is refilled
    /// every window, 10 000 of them a second at 10 000 cgroups).
    pub fn read_again(&mut self, sums: (u64, u64), buckets: &[u32; NR_BUCKETS]) {
        let mut map = [0u64; MAP_WORDS];
        for (i, &n) in buckets.iter().enumerate() {
            if n > 0 {
                map[i / 64] |= 1 << (i % 64);
            }
        }
        let counts = buckets.iter().filter(|&&n| n > 0).map(|&n| u64::from(n));
        if self.buckets.get(..MAP_WORDS) == Some(&map[..]) {
            for (to, n) in self.buckets[MAP_WORDS..].iter_mut().zip(counts) {
                *to = n;
            }
        } else if map == [0; MAP_WORDS] {
            self.buckets = Box::default();
        } else {
            self.buckets = map.into_iter().chain(counts).collect();
        }
        self.count = self
            .buckets
            .get(MAP_WORDS..)
            .unwrap_or_default()
            .iter()
            .sum();
        self.sum_ns = sums.0;
        self.stale_ns = sums.1;
        self.max_ns = 0;
    }

    /// `cur - self` of two cumulative readings of the same kernel histogram (sparse on both
    /// sides). The kernel's buckets are `u32` and wrap: each bucket's difference is taken modulo
    /// 2^32 (a bucket cannot gain 2^32 waits between two readings), so a bucket that wrapped
    /// still counts what it gained. The entry must not have been re-created in between (the
    /// caller forgets its reading when it deletes the entry).
    pub fn delta(&self, cur_sums: (u64, u64), cur: &[u32; NR_BUCKETS]) -> SparseHist {
        let mut prev = self.pairs().peekable();
        let mut gained_in = [(0u8, 0u64); NR_BUCKETS];
        let (mut k, mut count) = (0, 0);
        for (i, &n) in cur.iter().enumerate() {
            while prev.next_if(|&(b, _)| usize::from(b) < i).is_some() {}
            let before = prev
                .next_if(|&(b, _)| usize::from(b) == i)
                .map_or(0, |(_, p)| p as u32);
            let gained = n.wrapping_sub(before);
            if gained > 0 {
                count += u64::from(gained);
                gained_in[k] = (i as u8, u64::from(gained));
                k += 1;
            }
        }
        Self {
            count,
            sum_ns: cur_sums.0.wrapping_sub(self.sum_ns),
            stale_ns: cur_sums.1.wrapping_sub(self.stale_ns),
            max_ns: 0,
            buckets: pack(&gained_in[..k]),
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn to_hist(&self) -> Hist {
        let mut h = Hist {
            count: self.count,
            sum_ns: self.sum_ns,
            stale_ns: self.stale_ns,
            max_ns: self.max_ns,
            ..Hist::default()
        };
        for (i, n) in self.pairs() {
            h.buckets[usize::from(i)] = n;
        }
        h
    }
}

/// Count, sum, percentiles, max and the non-empty buckets (`[lower_bound_ns, count]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistSummary {
    pub count: u64,
    /// Run-queue waits: in the run queue's clock (the kernel's `run_delay`).
    pub sum_us: f64,
    /// Run-queue waits: what they lasted beyond `sum_us` (see [`Hist::stale_ns`]); the mean,
    /// percentiles, maximum and buckets are of the whole waits. Absent when 0.
    #[serde(default, skip_serializing_if = "crate::units::is_zero")]
    pub stale_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub buckets: Vec<(u64, u64)>,
}

/// A duration given in microseconds, in at most six characters: `0`, `<1µs`, `6.1µs`, `180µs`,
/// `2.21ms`, `41.2ms`, `350ms`, `1.50s`, `12.5s`, `125s`. Nothing under a microsecond is
/// printed in ns: no wait is timed that finely (the run queue's clock is updated at scheduler
/// events, and a stamp can be stale by more than that).
pub fn micros(us: f64) -> String {
    if !us.is_finite() || us < 0.0 {
        return "?".into();
    }
    if us == 0.0 {
        "0".into()
    } else if us < 0.9995 {
        "<1µs".into()
    } else if us < 9.95 {
        format!("{us:.1}µs")
    } else if us < 999.5 {
        format!("{us:.0}µs")
    } else if us < 9_995.0 {
        format!("{:.2}ms", us / 1e3)
    } else if us < 99_950.0 {
        format!("{:.1}ms", us / 1e3)
    } else if us < 999_500.0 {
        format!("{:.0}ms", us / 1e3)
    } else if us < 9_995_000.0 {
        format!("{:.2}s", us / 1e6)
    } else if us < 99_950_000.0 {
        format!("{:.1}s", us / 1e6)
    } else {
        format!("{:.0}s", us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_are_contiguous_and_contain_their_values() {
        for i in 0..NR_BUCKETS - 1 {
            assert_eq!(bucket_upper(i), bucket_lower(i + 1), "bucket {i}");
            assert_eq!(bucket_of(bucket_lower(i)) as usize, i);
            assert_eq!(bucket_of(bucket_upper(i) - 1) as usize, i);
        }
        for v in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            9,
            1000,
            1023,
            1024,
            123_456_789,
            u64::MAX,
        ] {
            let i = bucket_of(v) as usize;
            assert!(bucket_lower(i) <= v, "{v}");
            assert!(v < bucket_upper(i) || i == NR_BUCKETS - 1, "{v}");
        }
    }

    #[test]
    fn buckets_are_at_most_a_quarter_wide() {
        for i in 4..NR_BUCKETS - 1 {
            let (lo, hi) = (bucket_lower(i), bucket_upper(i));
            assert!((hi - lo) * 4 <= lo, "bucket {i}: {lo}..{hi}");
        }
    }

    #[test]
    fn each_log2_bucket_is_a_union_of_whole_buckets() {
        // runqlat's bucket [2^k, 2^(k+1)) starts and ends on our bucket boundaries.
        for k in 2..35u32 {
            let lo = 1u64 << k;
            assert_eq!(bucket_lower(bucket_of(lo) as usize), lo);
        }
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = Hist::default();
        for v in 1..=1000u64 {
            h.record(v * 1000); // 1 µs .. 1 ms
        }
        let p50 = h.quantile_ns(0.5) as f64;
        let p99 = h.quantile_ns(0.99) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.13, "{p50}");
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.13, "{p99}");
        assert_eq!(h.quantile_ns(1.0), 1_000_000);
        assert_eq!(h.max_ns, 1_000_000);
        assert_eq!(Hist::default().quantile_ns(0.5), 0);
    }

    #[test]
    fn quantile_never_exceeds_max() {
        let mut h = Hist::default();
        h.record(1_000_001);
        assert_eq!(h.quantile_ns(0.99), 1_000_001);
    }

    #[test]
    fn delta_of_cumulative_readings() {
        let mut a = [0u64; NR_BUCKETS];
        a[10] = 5;
        let mut b = a;
        b[10] = 8;
        b[20] = 2;
        let d = Hist::delta(10, 1000, &b, Some((5, 400, &a)));
        assert_eq!(d.count, 5);
        assert_eq!(d.sum_ns, 600);
        assert_eq!(d.buckets[10], 3);
        assert_eq!(d.buckets[20], 2);
        // Entry re-created: counts from zero.
        let d = Hist::delta(3, 30, &b, Some((5, 400, &a)));
        assert_eq!(d.count, 3);
        assert_eq!(d.buckets[10], 8);
    }

    #[test]
    fn summary_round_trips() {
        let mut h = Hist::default();
        for v in [10u64, 2000, 2100, 50_000, 7_000_000] {
            h.record(v);
        }
        let back = Hist::from_summary(&h.summary());
        assert_eq!(back, h);
    }

    #[test]
    fn a_sparse_histogram_keeps_what_the_merged_ones_hold() {
        let (mut dense, mut sparse) = (Hist::default(), SparseHist::default());
        for (i, ns) in [300u64, 5_000, 5_100, 9_000_000, 300]
            .into_iter()
            .enumerate()
        {
            let mut h = Hist::default();
            for _ in 0..=i {
                h.record(ns);
            }
            dense.merge(&h);
            let mut one = SparseHist::reading((h.sum_ns, 0), &h.buckets.map(|n| n as u32));
            one.set_max(h.max_ns);
            sparse.merge(&one);
        }
        assert_eq!(sparse.to_hist(), dense);
        // 5 000 and 5 100 ns share a bucket (4 096 to 5 120).
        assert_eq!(sparse.pairs().count(), 3, "one entry per non-empty bucket");
        assert_eq!(
            sparse.buckets.len(),
            MAP_WORDS + 3,
            "the bitmap and one count each"
        );
    }

    /// Run-queue waits: the clock's staleness comes through deltas and merges apart from the
    /// sum, the mean is of the whole waits, and a summary without any omits it.
    #[test]
    fn staleness_is_kept_apart_from_the_sum() {
        let mut b = [0u32; NR_BUCKETS];
        b[bucket_of(6_000) as usize] = 4;
        let before = SparseHist::reading((1_000, 500), &[0; NR_BUCKETS]);
        let mut h = before.delta((5_000, 24_500), &b).to_hist();
        assert_eq!((h.sum_ns, h.stale_ns, h.count), (4_000, 24_000, 4));
        h.merge(&h.clone());
        let s = h.summary();
        assert_eq!((s.sum_us, s.stale_us), (8.0, 48.0));
        assert_eq!(s.mean_us, 7.0);
        assert_eq!(Hist::from_summary(&s).stale_ns, 48_000);
        let json = serde_json::to_string(&Hist::default().summary()).unwrap();
        assert!(!json.contains("stale_us"), "{json}");
        let old: HistSummary = serde_json::from_str(&json).unwrap();
        assert_eq!(old.stale_us, 0.0);
    }

    #[test]
    fn a_delta_from_a_sparse_reading_is_the_dense_one() {
        let mut a = [0u32; NR_BUCKETS];
        let mut b = [0u32; NR_BUCKETS];
        (a[10], b[10], b[20]) = (2, 5, 2);
        let dense = Hist::delta(
            10,
            1000,
            &b.map(u64::from),
            Some((5, 400, &a.map(u64::from))),
        );
        let sparse = SparseHist::reading((400, 0), &a).delta((1000, 0), &b);
        assert_eq!(sparse.count(), 5);
        assert_eq!(sparse.to_hist(), dense);
        // The kernel's u32 buckets wrap: what a bucket gained across the wrap still counts, as
        // does a bucket that wrapped to exactly 0.
        (a[10], b[10]) = (u32::MAX - 1, 3);
        (a[30], b[30]) = (u32::MAX, 0);
        let wrapped = SparseHist::reading((400, 0), &a).delta((1000, 0), &b);
        assert_eq!(
            wrapped.pairs().collect::<Vec<_>>(),
            [(10, 5), (20, 2), (30, 1)]
        );
        assert_eq!(wrapped.count(), 8);
        assert_eq!(wrapped.sum_ns, 600);
        // A reading refilled in place is the reading made anew.
        let mut again = SparseHist::reading((400, 7), &a);
        again.read_again((1000, 9), &b);
        assert_eq!(again, SparseHist::reading((1000, 9), &b));
        // Recorded one by one, merged, and the top bucket's bound.
        let (mut s, mut d) = (SparseHist::default(), Hist::default());
        for ns in [300, 5_000, 9_000_000] {
            s.record(ns);
            d.record(ns);
        }
        let mut twice = s.clone();
        twice.merge(&s);
        d.merge(&d.clone());
        assert_eq!(twice.to_hist(), d);
        assert_eq!(s.top_bucket_upper_ns(), d.top_bucket_upper_ns());
    }

    /// Buckets added one by one, merged into ones that hold some of them already or none, and
    /// read again over other buckets: always what a dense histogram holds.
    #[test]
    fn a_sparse_histogram_matches_the_dense_one_whatever_is_added_in_which_order() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut total, mut dense) = (SparseHist::default(), Hist::default());
        for round in 0..200 {
            let (mut part, mut d) = (SparseHist::default(), Hist::default());
            for _ in 0..next() % 20 {
                // Values from 0 to ~2^(round % 40) ns: new buckets keep coming.
                let ns = next() % (1u64 << (round % 40 + 1));
                part.record(ns);
                d.record(ns);
            }
            assert_eq!(part.to_hist(), d);
            total.merge(&part);
            dense.merge(&d);
            assert_eq!(total.to_hist(), dense, "round {round}");
            assert_eq!(total.buckets.len(), MAP_WORDS + total.pairs().count());
            let mut raw = [0u32; NR_BUCKETS];
            for _ in 0..next() % 5 {
                raw[(next() % NR_BUCKETS as u64) as usize] = (next() % 7) as u32;
            }
            let mut again = part.clone();
            again.read_again((1, 2), &raw);
            assert_eq!(again, SparseHist::reading((1, 2), &raw));
        }
    }
}
