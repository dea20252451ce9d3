//! Which families' single events to print (`--events`, `--events runq,throttle`).
//!
//! The families are the registry's ([`crate::family::FAMILIES`]); event kinds are numbered in
//! ranges per family, so the family of a kind is its range.

use std::{collections::BTreeSet, fmt};

use crate::family::{FAMILIES, of_kind};

/// A set of families; empty means no event lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSelection(BTreeSet<&'static str>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown event family {name:?}: choose from {}, or `all`", names())]
pub struct UnknownFamily {
    pub name: String,
}

fn names() -> String {
    FAMILIES
        .iter()
        .map(|f| f.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl EventSelection {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn all() -> Self {
        Self(FAMILIES.iter().map(|f| f.name).collect())
    }

    /// Parses `--events` values: family names, `all`, or `none`, comma-separated.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, UnknownFamily> {
        let mut set = BTreeSet::new();
        for v in values.iter().flat_map(|v| v.as_ref().split(',')) {
            let v = v.trim();
            match v {
                "" => {}
                "all" => set.extend(FAMILIES.iter().map(|f| f.name)),
                "none" => set.clear(),
                _ => match crate::family::by_name(v) {
                    Some(f) => {
                        set.insert(f.name);
                    }
                    None => return Err(UnknownFamily { name: v.into() }),
                },
            }
        }
        Ok(Self(set))
    }

    pub fn has(&self, family: &str) -> bool {
        self.0.contains(family)
    }

    pub fn has_kind(&self, kind: u32) -> bool {
        of_kind(kind).is_some_and(|f| self.has(f.name))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for EventSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<&str> = self.0.iter().copied().collect();
        f.write_str(&v.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_families_all_and_rejects_unknown() {
        let s = EventSelection::parse(&["runq,throttle"]).unwrap();
        assert!(s.has("runq") && s.has("throttle") && !s.has("reads"));
        assert_eq!(
            EventSelection::parse(&["all"]).unwrap(),
            EventSelection::all()
        );
        assert!(EventSelection::parse::<&str>(&[]).unwrap().is_empty());
        assert!(s.has_kind(0x100) && s.has_kind(0x202) && !s.has_kind(0x301));
        assert!(!EventSelection::all().has_kind(0x900), "no family");
        let e = EventSelection::parse(&["runq,bogus"]).unwrap_err();
        assert!(e.to_string().contains("\"bogus\""), "{e}");
    }
}
