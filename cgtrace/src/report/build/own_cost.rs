//! What cgtrace itself cost the recorded host: its windows' `self` objects summed.

use std::collections::BTreeMap;

use crate::{
    model::Window,
    report::{model::OwnCost, model::ProgramTotal},
};

/// Sums the windows' `self` objects as they come.
#[derive(Default)]
pub(super) struct OwnAcc {
    windows: u64,
    timed: u64,
    daemon_pct_sum: f64,
    daemon_pct_max: f64,
    rss_max: u64,
    timed_ms: u64,
    programs: BTreeMap<String, (u64, f64)>,
}

impl OwnAcc {
    pub(super) fn add(&mut self, w: &Window) {
        let Some(s) = &w.self_cost else {
            return;
        };
        self.windows += 1;
        self.daemon_pct_sum += s.daemon_cpu_pct;
        self.daemon_pct_max = self.daemon_pct_max.max(s.daemon_cpu_pct);
        self.rss_max = self.rss_max.max(s.rss_kib);
        if s.bpf_stats {
            self.timed += 1;
            self.timed_ms += w.duration_ms;
            for p in &s.programs {
                let e = self.programs.entry(p.name.clone()).or_default();
                e.0 += p.runs;
                e.1 += p.run_us;
            }
        }
    }

    pub(super) fn finish(self) -> Option<OwnCost> {
        if self.windows == 0 {
            return None;
        }
        let total_us: f64 = self.programs.values().map(|p| p.1).sum();
        let mut programs: Vec<ProgramTotal> = self
            .programs
            .into_iter()
            .filter(|(_, (runs, _))| *runs > 0)
            .map(|(name, (runs, run_us))| ProgramTotal {
                name,
                runs,
                run_us,
                ns_per_run: run_us * 1e3 / runs as f64,
            })
            .collect();
        programs.sort_by(|a, b| b.run_us.total_cmp(&a.run_us).then(a.name.cmp(&b.name)));
        Some(OwnCost {
            windows: self.windows,
            timed_windows: self.timed,
            mean_daemon_cpu_pct: self.daemon_pct_sum / self.windows as f64,
            max_daemon_cpu_pct: self.daemon_pct_max,
            max_rss_kib: self.rss_max,
            mean_bpf_cpu_pct: if self.timed_ms > 0 {
                total_us / (self.timed_ms as f64 * 1e3) * 100.0
            } else {
                0.0
            },
            programs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ProgramCost, SelfCost};

    fn window_with_self(seq: u64, timed: bool, daemon: f64, rss: u64) -> Window {
        let mut w: Window =
            serde_json::from_str(&crate::record::tests::window_json(seq)).expect("window");
        w.duration_ms = 1000;
        w.self_cost = Some(SelfCost {
            bpf_stats: timed,
            programs: if timed {
                vec![
                    ProgramCost {
                        name: "sched_switch".into(),
                        runs: 1000,
                        run_us: 600.0,
                        ns_per_run: Some(600.0),
                        recursion_misses: 0,
                    },
                    ProgramCost {
                        name: "sched_wakeup".into(),
                        runs: 500,
                        run_us: 200.0,
                        ns_per_run: Some(400.0),
                        recursion_misses: 0,
                    },
                ]
            } else {
                Vec::new()
            },
            bpf_cpu_pct: if timed { 0.08 } else { 0.0 },
            daemon_cpu_pct: daemon,
            rss_kib: rss,
        });
        w
    }

    #[test]
    fn own_cost_sums_the_windows_self_and_times_only_timed_windows() {
        let mut acc = OwnAcc::default();
        acc.add(&window_with_self(1, true, 1.0, 30_000));
        acc.add(&window_with_self(2, true, 3.0, 32_000));
        acc.add(&window_with_self(3, false, 2.0, 31_000));
        let c = acc.finish().expect("own cost");
        assert_eq!((c.windows, c.timed_windows, c.max_rss_kib), (3, 2, 32_000));
        assert!((c.mean_daemon_cpu_pct - 2.0).abs() < 1e-9);
        assert_eq!(c.max_daemon_cpu_pct, 3.0);
        // 1.6 ms of program time over 2 s of timed windows.
        assert!((c.mean_bpf_cpu_pct - 0.08).abs() < 1e-9);
        assert_eq!(c.programs[0].name, "sched_switch");
        assert_eq!(
            (c.programs[0].runs, c.programs[0].ns_per_run),
            (2000, 600.0)
        );
        assert!(OwnAcc::default().finish().is_none());
    }
}
