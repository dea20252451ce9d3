//! The diagnoses of the families other than `throttle` (whose flags go with its throttled
//! cgroups), by cgroup and code over the recording.

use std::collections::{HashMap, hash_map::Entry};

use super::budget::Budget;

use crate::{
    family,
    model::{
        CgroupWindow, Flag,
        flag::{Change, Expected},
    },
    report::{model::Diagnosed, model::FlagSeen, model::TOP},
};

impl FlagSeen {
    /// Counts one more window flagged with `f`, keeping its finding and suggestion (while the
    /// report's budget has room for them).
    pub(super) fn see(&mut self, f: &Flag, budget: &mut Budget) {
        self.windows += 1;
        budget.set_str(&mut self.message, &f.message);
        budget.set_str(&mut self.evidence, &f.evidence);
        budget.set_str(&mut self.suggestion, &f.suggestion);
        budget.set_sized(&mut self.change, &f.change, |c| {
            c.iter()
                .map(|c| size_of::<Change>() + c.knob.len() + c.value.len())
                .sum()
        });
        budget.set_sized(&mut self.expected, &f.expected, |e| {
            e.as_ref().map_or(0, |e| {
                size_of::<Expected>() + e.metric.len() + e.words.len()
            })
        });
    }
}

/// Counts the windows each (cgroup, code) was flagged in, keeping the last finding.
#[derive(Default)]
pub(super) struct Diagnoses(HashMap<(u64, String), Diagnosed>);

impl Diagnoses {
    /// Counts a cgroup's diagnoses of one window.
    pub(super) fn add(&mut self, c: &CgroupWindow, budget: &mut Budget) {
        for f in c
            .flags
            .iter()
            .filter(|f| f.family != family::throttle::INFO.name)
        {
            let d = match self.0.entry((c.id, f.code.clone())) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let size =
                        size_of::<((u64, String), Diagnosed)>() + 2 * f.code.len() + f.family.len();
                    if !budget.take(size) {
                        continue;
                    }
                    e.insert(Diagnosed {
                        id: c.id,
                        path: None,
                        name: None,
                        family: f.family.clone(),
                        code: f.code.clone(),
                        seen: FlagSeen::default(),
                    })
                }
            };
            budget.set(&mut d.path, &c.path);
            budget.set(&mut d.name, &c.name);
            d.seen.see(f, budget);
        }
    }

    /// The `2 × TOP` most flagged, most windows first.
    pub(super) fn finish(self) -> Vec<Diagnosed> {
        let mut diagnoses: Vec<Diagnosed> = self.0.into_values().collect();
        diagnoses.sort_by(|a, b| {
            b.seen
                .windows
                .cmp(&a.seen.windows)
                .then(a.id.cmp(&b.id))
                .then(a.code.cmp(&b.code))
        });
        diagnoses.truncate(TOP * 2);
        diagnoses
    }
}
