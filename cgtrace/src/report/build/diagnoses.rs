//! The diagnoses of the families other than `throttle` (whose flags go with its throttled
//! cgroups), by cgroup and code over the recording.

use std::collections::HashMap;

use crate::{
    family,
    model::{CgroupWindow, Flag},
    report::{model::Diagnosed, model::FlagSeen, model::TOP},
};

impl FlagSeen {
    /// Counts one more window flagged with `f`, keeping its finding and suggestion.
    pub(super) fn see(&mut self, f: &Flag) {
        self.windows += 1;
        self.message.clone_from(&f.message);
        self.suggestion.clone_from(&f.suggestion);
    }
}

/// Counts the windows each (cgroup, code) was flagged in, keeping the last finding.
#[derive(Default)]
pub(super) struct Diagnoses(HashMap<(u64, String), Diagnosed>);

impl Diagnoses {
    /// Counts a cgroup's diagnoses of one window.
    pub(super) fn add(&mut self, c: &CgroupWindow) {
        for f in c
            .flags
            .iter()
            .filter(|f| f.family != family::throttle::INFO.name)
        {
            let d = self
                .0
                .entry((c.id, f.code.clone()))
                .or_insert_with(|| Diagnosed {
                    id: c.id,
                    path: None,
                    name: None,
                    family: f.family.clone(),
                    code: f.code.clone(),
                    seen: FlagSeen::default(),
                });
            d.path.clone_from(&c.path);
            d.name.clone_from(&c.name);
            d.seen.see(f);
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
