//! What `cgtrace stream` prints, as `bench runq` reads it: each stdout line classified, the
//! window lines kept, and what the windows add up to (events, drops, each BPF program's runs).

use std::time::Instant;

use serde_json::Value;

use super::progcost::{ProgramRuns, sum_by_name};

/// One stdout line of `cgtrace stream`, by what it is.
#[derive(Debug, PartialEq)]
pub(super) enum Msg {
    Hello,
    Window {
        seen: u64,
        dropped: u64,
        programs: Vec<ProgramRuns>,
    },
    /// Another well-formed type (e.g. the closing `summary`).
    Other,
    Bad(String),
}

/// A window line, stamped when it arrived.
#[derive(Clone, Debug)]
pub(super) struct Window {
    pub(super) at: Instant,
    pub(super) seen: u64,
    pub(super) dropped: u64,
    /// The window's `self.programs`.
    pub(super) programs: Vec<ProgramRuns>,
}

pub(super) fn classify(line: &str) -> Msg {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return Msg::Bad(format!("not JSON: {}", clip(line)));
    };
    match v["type"].as_str() {
        Some("hello") => Msg::Hello,
        Some("window") => {
            let events = &v["events"];
            match (events["seen"].as_u64(), events["dropped"].as_u64()) {
                (Some(seen), Some(dropped)) => Msg::Window {
                    seen,
                    dropped,
                    programs: self_programs(&v),
                },
                _ => Msg::Bad(format!(
                    "window without events.seen/dropped: {}",
                    clip(line)
                )),
            }
        }
        Some(_) => Msg::Other,
        None => Msg::Bad(format!("no \"type\": {}", clip(line))),
    }
}

/// A window line's `self.programs` (empty before cgtrace reported them).
fn self_programs(window: &Value) -> Vec<ProgramRuns> {
    window
        .pointer("/self/programs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(ProgramRuns {
                name: p["name"].as_str()?.to_string(),
                runs: p["runs"].as_u64()?,
                run_ns: (p["run_us"].as_f64()? * 1e3).round() as u64,
            })
        })
        .collect()
}

/// Programs summed over the windows after the first (it covers the idle time before perf).
pub(super) fn window_programs(windows: &[Window]) -> Vec<ProgramRuns> {
    sum_by_name(windows.iter().skip(1).flat_map(|w| &w.programs))
}

fn clip(line: &str) -> String {
    line.chars().take(200).collect()
}

#[derive(Debug, PartialEq)]
pub(super) struct WindowStats {
    pub(super) seen: u64,
    pub(super) dropped: u64,
    pub(super) per_s: Option<f64>,
}

/// Windows after the first, over the time between the first and the last arrival.
pub(super) fn window_stats(windows: &[Window]) -> WindowStats {
    let seen = windows.iter().skip(1).map(|w| w.seen).sum();
    let dropped = windows.iter().map(|w| w.dropped).sum();
    let span = match (windows.first(), windows.last()) {
        (Some(first), Some(last)) => last.at.duration_since(first.at).as_secs_f64(),
        _ => 0.0,
    };
    let per_s = (windows.len() > 1 && span > 0.0).then(|| seen as f64 / span);
    WindowStats {
        seen,
        dropped,
        per_s,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn classifies_stream_lines() {
        assert_eq!(classify(r#"{"type":"hello","schema":1}"#), Msg::Hello);
        let window = r#"{"type":"window","seq":3,"interval_ms":1000,
            "events":{"seen":201234,"dropped":7},"cgroups":[]}"#
            .replace('\n', "");
        assert_eq!(
            classify(&window),
            Msg::Window {
                seen: 201234,
                dropped: 7,
                programs: Vec::new(),
            }
        );
        let with_self = r#"{"type":"window","events":{"seen":5,"dropped":0},"self":{"programs":
            [{"name":"sched_switch","runs":1000,"run_us":350.5,"ns_per_run":350.5}]}}"#
            .replace('\n', "");
        let Msg::Window { programs, .. } = classify(&with_self) else {
            panic!("not a window");
        };
        assert_eq!(
            programs,
            [ProgramRuns {
                name: "sched_switch".into(),
                runs: 1000,
                run_ns: 350_500
            }]
        );
        assert_eq!(classify(r#"{"type":"summary","windows":4}"#), Msg::Other);
        assert!(matches!(classify("garbage"), Msg::Bad(_)));
        assert!(matches!(classify(r#"{"type":"window"}"#), Msg::Bad(_)));
    }

    #[test]
    fn window_rate_skips_the_first_window() {
        let t0 = Instant::now();
        let w = |ms: u64, seen: u64, dropped: u64| Window {
            at: t0 + Duration::from_millis(ms),
            seen,
            dropped,
            programs: vec![ProgramRuns {
                name: "sched_switch".into(),
                runs: seen,
                run_ns: seen * 100,
            }],
        };
        let stats = window_stats(&[w(0, 999, 1), w(1000, 200, 0), w(1500, 100, 2)]);
        assert_eq!(stats.seen, 300);
        assert_eq!(stats.dropped, 3);
        assert_eq!(stats.per_s, Some(200.0));
        assert_eq!(window_stats(&[w(0, 5, 0)]).per_s, None);
        let programs = window_programs(&[w(0, 999, 1), w(1000, 200, 0), w(1500, 100, 2)]);
        assert_eq!((programs[0].runs, programs[0].run_ns), (300, 30_000));
    }
}
