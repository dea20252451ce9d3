//! The diagnoses of the families other than `throttle` (whose flags go with its throttled
//! cgroups), by cgroup and code over the recording.

use std::collections::HashMap;

use crate::{
    family,
    model::CgroupWindow,
    report::{Diagnosed, TOP},
};

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
                    windows: 0,
                    message: String::new(),
                    suggestion: String::new(),
                });
            d.windows += 1;
            d.path.clone_from(&c.path);
            d.name.clone_from(&c.name);
            d.message.clone_from(&f.message);
            d.suggestion.clone_from(&f.suggestion);
        }
    }

    /// The `2 × TOP` most flagged, most windows first.
    pub(super) fn finish(self) -> Vec<Diagnosed> {
        let mut diagnoses: Vec<Diagnosed> = self.0.into_values().collect();
        diagnoses.sort_by(|a, b| {
            b.windows
                .cmp(&a.windows)
                .then(a.id.cmp(&b.id))
                .then(a.code.cmp(&b.code))
        });
        diagnoses.truncate(TOP * 2);
        diagnoses
    }
}
