//! The report's bound on what it keeps per cgroup. A recording may name any number of cgroups
//! (a day of churn on a busy node names hundreds of thousands; a forged file names a new one in
//! every entry of every window), and each kept cgroup costs a histogram or a tally and its
//! strings: past [`MAX_TALLY_BYTES`], entries for cgroups not yet seen are left out and counted
//! (and a kept entry's strings are not grown), and the report says so above its numbers. Entries
//! already kept go on being summed.

/// What the per-cgroup tallies of one report may take: with the reader's own bounds (the window
/// index, one expanded chunk, one window) a report stays within 256 MiB.
pub(crate) const MAX_TALLY_BYTES: usize = 96 << 20;

/// What an entry costs beyond its value and its strings: a hash-table slot and an allocation.
const OVERHEAD: usize = 32;

#[derive(Debug)]
pub(crate) struct Budget {
    left: usize,
    /// Entries (and string updates) left out since the budget ran out.
    pub(crate) refused: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(MAX_TALLY_BYTES)
    }
}

/// The bytes of an optional string.
pub(crate) fn len(s: &Option<String>) -> usize {
    s.as_ref().map_or(0, String::len)
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            left: bytes,
            refused: 0,
        }
    }

    /// Room for a new entry of `bytes` (its value and strings); false, and counted, when there is
    /// none.
    pub(crate) fn take(&mut self, bytes: usize) -> bool {
        let cost = bytes.saturating_add(OVERHEAD);
        if cost > self.left {
            self.refused += 1;
            return false;
        }
        self.left -= cost;
        true
    }

    /// Room for a kept string to grow by `bytes` (nothing when it shrinks).
    fn grow(&mut self, bytes: usize) -> bool {
        if bytes > self.left {
            self.refused += 1;
            return false;
        }
        self.left -= bytes;
        true
    }

    /// `slot = new`, when there is room for what it grows by.
    pub(crate) fn set(&mut self, slot: &mut Option<String>, new: &Option<String>) {
        if slot != new && self.grow(len(new).saturating_sub(len(slot))) {
            slot.clone_from(new);
        }
    }

    /// `slot = new` for a value of `size(..)` bytes, when there is room for what it grows by.
    pub(crate) fn set_sized<T: Clone + PartialEq>(
        &mut self,
        slot: &mut T,
        new: &T,
        size: impl Fn(&T) -> usize,
    ) {
        if slot != new && self.grow(size(new).saturating_sub(size(slot))) {
            slot.clone_from(new);
        }
    }

    /// `slot = new`, when there is room for what it grows by.
    pub(crate) fn set_str(&mut self, slot: &mut String, new: &str) {
        if slot != new && self.grow(new.len().saturating_sub(slot.len())) {
            new.clone_into(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_past_the_bound_are_refused_and_counted() {
        let mut b = Budget::new(1000);
        let mut kept = 0;
        for _ in 0..20 {
            kept += usize::from(b.take(200));
        }
        // 232 bytes each: four fit in 1000, 72 left.
        assert_eq!((kept, b.refused), (4, 16));
        let mut s = Some("a".repeat(10));
        b.set(&mut s, &Some("b".repeat(90)));
        assert_eq!(s.as_deref(), Some("aaaaaaaaaa"), "no room to grow by 80");
        b.set(&mut s, &Some("c".repeat(60)));
        assert_eq!(s.as_deref().map(str::len), Some(60), "room to grow by 50");
        b.set(&mut s, &Some("d".into()));
        assert_eq!(s.as_deref(), Some("d"), "shrinking is free");
        assert_eq!(b.refused, 17);
    }
}
