//! The resolver's cache: a least-recently-used map with a fixed capacity.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Least-recently-used map id → path with a fixed capacity.
pub(super) struct Lru {
    pub(super) capacity: usize,
    tick: u64,
    map: HashMap<u64, (Arc<str>, u64)>,
    /// tick of last use → id
    order: BTreeMap<u64, u64>,
}

impl Lru {
    pub(super) fn new(capacity: usize) -> Lru {
        Lru {
            capacity: capacity.max(1),
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Looks up and marks as most recently used.
    pub(super) fn get(&mut self, id: u64) -> Option<Arc<str>> {
        let t = self.next_tick();
        let (path, used) = self.map.get_mut(&id)?;
        self.order.remove(used);
        *used = t;
        self.order.insert(t, id);
        Some(path.clone())
    }

    /// Looks up without touching the recency order.
    pub(super) fn peek(&self, id: u64) -> Option<Arc<str>> {
        self.map.get(&id).map(|(p, _)| p.clone())
    }

    pub(super) fn insert(&mut self, id: u64, path: Arc<str>) {
        self.remove(id);
        while self.map.len() >= self.capacity {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&old);
        }
        let t = self.next_tick();
        self.map.insert(id, (path, t));
        self.order.insert(t, id);
    }

    pub(super) fn remove(&mut self, id: u64) {
        if let Some((_, used)) = self.map.remove(&id) {
            self.order.remove(&used);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut l = Lru::new(3);
        l.insert(1, Arc::from("/1"));
        l.insert(2, Arc::from("/2"));
        l.insert(3, Arc::from("/3"));
        assert_eq!(l.get(1).as_deref(), Some("/1"));
        l.insert(4, Arc::from("/4"));
        assert_eq!(l.peek(2), None);
        assert_eq!(l.len(), 3);
        l.insert(5, Arc::from("/5"));
        assert_eq!(l.peek(3), None);
        assert!(l.peek(1).is_some() && l.peek(4).is_some() && l.peek(5).is_some());
        // Re-inserting an id replaces it without growing.
        l.insert(5, Arc::from("/5b"));
        assert_eq!(l.len(), 3);
        assert_eq!(l.peek(5).as_deref(), Some("/5b"));
        l.remove(5);
        assert_eq!(l.len(), 2);
        assert_eq!(l.order.len(), 2);
        assert_eq!(Lru::new(0).capacity, 1);
    }
}
