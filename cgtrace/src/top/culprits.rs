//! The node's top culprits: the cgroups that caused the most run-queue wait to others in the
//! window (the blame ledger's `caused`), each with its share of all the run-queue wait in the
//! window. Computed once per snapshot; the header draws it ([`super::render::header`]).

use super::rows::Store;

/// How many culprits the header names at most.
pub const TOP: usize = 3;

/// One culprit.
#[derive(Clone, Debug, PartialEq)]
pub struct Culprit {
    /// Its label as the table shows it (escaped when the store took it in).
    pub label: String,
    /// Run-queue wait it caused others, per second of window.
    pub caused_per_s_us: f64,
    /// That wait as a share (0–100) of all run-queue wait of the window's cgroups.
    pub share_pct: f64,
}

/// The culprits of the store's current window, most harm first (empty when nobody caused any).
pub fn of(store: &Store) -> Vec<Culprit> {
    let secs = store.ctx.map_or(1.0, |c| c.seconds());
    let mut total_us = 0.0;
    let mut found: Vec<(f64, &super::rows::Tracked)> = Vec::new();
    for t in store.iter().filter(|t| store.is_active(t)) {
        total_us += t.cg.runq.all.sum_us;
        if let Some(c) = t.cg.caused.as_ref().filter(|c| c.wait_us > 0.0) {
            found.push((c.wait_us, t));
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    found
        .into_iter()
        .take(TOP)
        .map(|(us, t)| Culprit {
            label: t.flat_label().into_owned(),
            caused_per_s_us: us / secs,
            share_pct: if total_us > 0.0 {
                us / total_us * 100.0
            } else {
                0.0
            },
        })
        .collect()
}
