//! Event families as the view sees them. A family contributes table columns, detail-pane
//! sections and flags (diagnoses); the view shows a family only when the session's `hello` says it
//! is attached, and shows `—` for a cgroup the family has no data for.
//!
//! Adding a family is one new module here implementing [`Family`] and one line in [`FAMILIES`],
//! as [`reads`] did: its columns read `cg.<family>.as_ref()` and return [`Cell::Absent`] (`—`)
//! when it is `None`; its `detail` appends its sections; its diagnoses are the daemon's (each
//! cgroup's `flags` of that family), with their short codes in [`short_code`]. Nothing else in
//! the view changes. Columns of one family that only make sense
//! with another attached list it in [`Column::needs`] (the run-queue `WTHR%`, the share of waiting
//! that was throttling, needs `throttle`).

pub mod interface;
pub mod reads;
pub mod runq;
pub mod throttle;

pub use super::columns::Ctx;
pub use interface::{Detail, Family, Flag, View, daemon_flags, short_code};

#[allow(unused_imports, reason = "referenced by the docs above")]
use super::columns::{Cell, Column};

/// Every family the view knows, in column order.
pub static FAMILIES: &[&dyn Family] = &[&runq::Runq, &throttle::Throttle, &reads::Reads];

#[cfg(test)]
mod tests {
    #[test]
    fn the_view_has_every_family_of_the_registry_in_its_order() {
        let view: Vec<&str> = super::FAMILIES.iter().map(|f| f.name()).collect();
        let registry: Vec<&str> = crate::family::FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(view, registry);
    }
}
