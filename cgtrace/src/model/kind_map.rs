//! [`KindMap`]: a cgroup's histograms by wait kind, as a JSON object. A sorted `Vec` rather than
//! a `BTreeMap`: a cgroup has one to three kinds, and a `BTreeMap` leaf is sized for eleven
//! (1.1 KiB with these values), in every cgroup of every window and of the since-start totals.

use std::{borrow::Cow, fmt, ops::Index};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, Visitor},
    ser::SerializeMap,
};

use crate::hist::HistSummary;

/// Histograms by wait kind name, sorted by name (so it serialises as a `BTreeMap` did). A live
/// window's names are the kinds' own (`&'static str`, nothing allocated per cgroup); a
/// recording's are read as strings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindMap(Vec<(Cow<'static, str>, HistSummary)>);

impl KindMap {
    /// Empty, with room for `n` kinds.
    pub fn with_capacity(n: usize) -> Self {
        Self(Vec::with_capacity(n))
    }

    pub fn get(&self, kind: &str) -> Option<&HistSummary> {
        self.find(kind).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, kind: &str) -> bool {
        self.find(kind).is_ok()
    }

    /// Sets `kind`'s histogram (replacing any).
    pub fn insert(&mut self, kind: impl Into<Cow<'static, str>>, h: HistSummary) {
        let kind = kind.into();
        match self.find(&kind) {
            Ok(i) => self.0[i].1 = h,
            Err(i) => self.0.insert(i, (kind, h)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &HistSummary)> {
        self.0.iter().map(|(k, h)| (&**k, h))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, kind: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(kind))
    }
}

impl Index<&str> for KindMap {
    type Output = HistSummary;
    fn index(&self, kind: &str) -> &HistSummary {
        self.get(kind)
            .unwrap_or_else(|| panic!("no wait kind {kind:?}"))
    }
}

impl<'a> IntoIterator for &'a KindMap {
    type Item = (&'a str, &'a HistSummary);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Cow<'static, str>, HistSummary)>,
        fn(&'a (Cow<'static, str>, HistSummary)) -> (&'a str, &'a HistSummary),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, h)| (&**k, h))
    }
}

impl Serialize for KindMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, h) in &self.0 {
            m.serialize_entry(&**k, h)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for KindMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KindMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("histograms by wait kind")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<KindMap, A::Error> {
                // A recording's object: at most a few kinds, each key once (the last one counts,
                // as it did in a BTreeMap).
                let mut m = KindMap::default();
                while let Some((k, h)) = a.next_entry::<String, HistSummary>()? {
                    m.insert(k, h);
                }
                m.0.shrink_to_fit();
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(count: u64) -> HistSummary {
        HistSummary {
            count,
            ..HistSummary::default()
        }
    }

    #[test]
    fn it_reads_and_writes_as_the_sorted_map_it_replaces() {
        let mut m = KindMap::default();
        m.insert("wakeup", h(3));
        m.insert("preempt", h(1));
        m.insert("wakeup", h(4));
        let json = serde_json::to_string(&m).unwrap();
        let map: std::collections::BTreeMap<String, HistSummary> =
            [("wakeup".into(), h(4)), ("preempt".into(), h(1))].into();
        assert_eq!(json, serde_json::to_string(&map).unwrap());
        let back: KindMap = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_eq!((back["wakeup"].count, back.len()), (4, 2));
        assert!(back.contains_key("preempt") && !back.contains_key("throttled"));
        let dup: KindMap =
            serde_json::from_str(r#"{"wakeup":{"count":1,"sum_us":0,"mean_us":0,"p50_us":0,"p90_us":0,"p99_us":0,"max_us":0,"buckets":[]},"wakeup":{"count":2,"sum_us":0,"mean_us":0,"p50_us":0,"p90_us":0,"p99_us":0,"max_us":0,"buckets":[]}}"#)
                .unwrap();
        assert_eq!((dup.len(), dup["wakeup"].count), (1, 2));
    }
}
