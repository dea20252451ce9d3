//! The throttled cgroups over the recording: periods, throttled time and episodes by our count,
//! the kernel's own `cpu.stat` next to ours over the same windows, and the `throttle` flags.

use std::collections::{HashMap, btree_map, hash_map};

use super::budget::Budget;
use crate::{
    model::CgroupWindow,
    report::model::{FlagSeen, ThrottledCgroup},
};

/// Sums the windows' `throttle` family per cgroup id.
#[derive(Default)]
pub(super) struct Throttled(HashMap<u64, ThrottledCgroup>);

impl Throttled {
    /// Adds a cgroup's `throttle` part of one window.
    pub(super) fn add(&mut self, c: &CgroupWindow, budget: &mut Budget) {
        let (id, path, name) = (c.id, &c.path, &c.name);
        let Some(t) = &c.throttle else {
            return;
        };
        let e = match self.0.entry(id) {
            hash_map::Entry::Occupied(e) => e.into_mut(),
            hash_map::Entry::Vacant(e) => {
                if !budget.take(size_of::<ThrottledCgroup>()) {
                    return;
                }
                e.insert(ThrottledCgroup {
                    id,
                    ..ThrottledCgroup::default()
                })
            }
        };
        budget.set(&mut e.path, path);
        budget.set(&mut e.name, name);
        e.quota_cores = t.quota_cores.or(e.quota_cores);
        e.nr_periods = e.nr_periods.saturating_add(t.nr_periods);
        e.nr_throttled = e.nr_throttled.saturating_add(t.nr_throttled);
        e.throttled_us += t.throttled_us;
        e.episodes = e.episodes.saturating_add(t.episodes);
        e.worst_window_share = e.worst_window_share.max(t.throttled_share);
        if let Some(k) = &t.kernel {
            e.kernel_windows = e.kernel_windows.saturating_add(1);
            e.kernel_nr_throttled = e.kernel_nr_throttled.saturating_add(k.nr_throttled);
            e.kernel_throttled_us += k.throttled_us;
            e.ours_nr_throttled_matched =
                e.ours_nr_throttled_matched.saturating_add(t.nr_throttled);
            e.ours_throttled_us_matched += t.throttled_us;
        }
        for fl in &t.flags {
            let seen = match e.flags.entry(fl.code.clone()) {
                btree_map::Entry::Occupied(s) => s.into_mut(),
                btree_map::Entry::Vacant(s) => {
                    if !budget.take(size_of::<FlagSeen>() + 2 * fl.code.len()) {
                        continue;
                    }
                    s.insert(FlagSeen::default())
                }
            };
            seen.see(fl, budget);
        }
    }

    /// Every cgroup with a quota seen (throttled or not), by id.
    pub(super) fn all(&self) -> impl Iterator<Item = &ThrottledCgroup> {
        self.0.values()
    }

    /// The cgroups that were throttled, most throttled time first.
    pub(super) fn finish(self) -> Vec<ThrottledCgroup> {
        let mut throttled: Vec<ThrottledCgroup> = self
            .0
            .into_values()
            .filter(|t| t.nr_throttled > 0 || t.episodes > 0)
            .collect();
        throttled.sort_by(|a, b| {
            b.throttled_us
                .total_cmp(&a.throttled_us)
                .then(a.id.cmp(&b.id))
        });
        throttled
    }
}
