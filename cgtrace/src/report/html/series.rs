//! What the page's pictures are drawn from: the windows bucketed into at most [`MAX_COLS`] time
//! columns (a longer recording merges neighbouring windows into a column), for the host and the
//! few cgroups drawn.

use std::collections::{BTreeMap, HashMap};

use crate::model::Window;

/// Time columns at most per picture.
pub const MAX_COLS: usize = 240;
/// Latency rows of a heatmap: octaves from 1 µs (2^10 ns) up.
const ROWS: usize = 25;
pub(super) const ROW_BASE: u32 = 10;

/// One time column of one cgroup (or the host).
#[derive(Clone, Default)]
pub(super) struct Col {
    pub(super) heat: [u64; ROWS],
    /// Merged run-queue buckets (upper bound ns → waits), for the column's percentiles.
    buckets: BTreeMap<u64, u64>,
    pub(super) max_us: f64,
    /// throttle: usage (sum of cores, windows with a reading), quota, periods.
    pub(super) usage: (f64, u32),
    pub(super) quota: Option<f64>,
    pub(super) periods: u64,
    pub(super) throttled: u64,
    pub(super) episodes: u64,
    pub(super) throttled_us: f64,
    pub(super) kernel_throttled: Option<u64>,
}

impl Col {
    fn add_runq(&mut self, buckets: &[(u64, u64)], max_us: f64) {
        for &(upper, n) in buckets {
            *self.buckets.entry(upper).or_default() += n;
            self.heat[row_of(upper)] += n;
        }
        if max_us.is_finite() {
            self.max_us = self.max_us.max(max_us);
        }
    }

    pub(super) fn waits(&self) -> u64 {
        self.heat.iter().sum()
    }

    /// The `q` quantile's bucket upper bound, in µs.
    pub(super) fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.waits();
        if total == 0 {
            return None;
        }
        let want = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&upper, &n) in &self.buckets {
            seen += n;
            if seen >= want {
                return Some(upper as f64 / 1e3);
            }
        }
        None
    }
}

fn row_of(upper_ns: u64) -> usize {
    let oct = 63 - upper_ns.max(1).leading_zeros();
    (oct.saturating_sub(ROW_BASE) as usize).min(ROWS - 1)
}

/// What the pictures are drawn from: per time column, the host and the cgroups drawn.
pub struct Series {
    cols: usize,
    windows: usize,
    seen: usize,
    pub(super) time: Vec<(u64, u64)>,
    pub(super) host: Vec<Col>,
    pub(super) cgroups: HashMap<u64, Vec<Col>>,
    pub(super) dying: Vec<Option<u64>>,
    pub(super) churn: Vec<(u64, u64)>,
    pub(super) counters: BTreeMap<String, u64>,
    pub(super) events_seen: u64,
    pub(super) events_dropped: u64,
}

impl Series {
    /// For `windows` windows, keeping columns for the cgroups `ids`.
    pub fn new(windows: usize, ids: impl IntoIterator<Item = u64>) -> Self {
        let cols = windows.clamp(1, MAX_COLS);
        Self {
            cols,
            windows: windows.max(1),
            seen: 0,
            time: vec![(u64::MAX, 0); cols],
            host: vec![Col::default(); cols],
            cgroups: ids
                .into_iter()
                .map(|id| (id, vec![Col::default(); cols]))
                .collect(),
            dying: vec![None; cols],
            churn: vec![(0, 0); cols],
            counters: BTreeMap::new(),
            events_seen: 0,
            events_dropped: 0,
        }
    }

    /// Adds the next window.
    pub fn add(&mut self, w: &Window) {
        let c = (self.seen * self.cols / self.windows).min(self.cols - 1);
        self.seen += 1;
        let t = &mut self.time[c];
        let start = w.end_unix_ms.saturating_sub(w.duration_ms);
        *t = (t.0.min(start), t.1.max(w.end_unix_ms));
        for cg in &w.cgroups {
            self.host[c].add_runq(&cg.runq.all.buckets, cg.runq.all.max_us);
            let Some(col) = self.cgroups.get_mut(&cg.id).map(|v| &mut v[c]) else {
                continue;
            };
            col.add_runq(&cg.runq.all.buckets, cg.runq.all.max_us);
            if let Some(th) = &cg.throttle {
                if let Some(u) = th.usage_cores.filter(|u| u.is_finite()) {
                    col.usage.0 += u;
                    col.usage.1 += 1;
                }
                col.quota = th.quota_cores.or(col.quota);
                col.periods += th.nr_periods;
                col.throttled += th.nr_throttled;
                col.episodes += th.episodes;
                col.throttled_us += th.throttled_us;
                if let Some(k) = &th.kernel {
                    *col.kernel_throttled.get_or_insert(0) += k.nr_throttled;
                }
            }
        }
        if let Some(d) = &w.dying_memcgs {
            let v = &mut self.dying[c];
            *v = Some(v.unwrap_or(0).max(d.total));
        }
        if let Some(ch) = &w.churn {
            self.churn[c].0 += ch.created;
            self.churn[c].1 += ch.removed;
        }
        for (k, v) in &w.events.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        self.events_seen += w.events.seen;
        self.events_dropped += w.events.dropped;
    }

    /// Columns that had a window.
    pub(super) fn used(&self) -> usize {
        self.time.iter().rposition(|t| t.1 > 0).map_or(0, |i| i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::html::tests::window;

    #[test]
    fn columns_merge_windows_beyond_the_limit() {
        let ws: Vec<Window> = (1..=1000).map(|s| window(s, "/a", &[(4096, 1)])).collect();
        let mut s = Series::new(ws.len(), [7]);
        for w in &ws {
            s.add(w);
        }
        assert_eq!(s.used(), MAX_COLS);
        let total: u64 = s.cgroups[&7].iter().map(Col::waits).sum();
        assert_eq!(total, 1000);
        assert_eq!(s.cgroups[&7][0].quantile_us(0.99), Some(4.096));
    }
}
