//! The text report's opening section: who delayed whom ([`WhoDelayedWhom`]) as a table that fits
//! 100 columns: a row per victim (`V1`…), a column per culprit (`C1`…), seconds and, below, seconds
//! per second of the recording; then who each label is and the rest of each victim's wait.

use std::fmt::Write as _;

use super::model::{PARTS, WhoDelayedWhom};
use crate::{safety::escape::terminal as esc, units::duration_us as dur};

/// What the text report says instead of the table when the recording has no ledger.
pub(super) const NO_LEDGER: &str =
    "no blame ledger in this recording: it was recorded with --no-blame or by an older cgtrace";

/// Widest line the section writes.
const WIDTH: usize = 100;
/// The victim's name in its row.
const NAME: usize = 16;

/// Seconds in at most 5 characters (`0.12`, `12.3`, `1234`, `12k`); `-` for none.
fn secs(us: f64) -> String {
    let s = us / 1e6;
    if !s.is_finite() || s <= 0.0 {
        "-".into()
    } else if s < 9.995 {
        format!("{s:.2}")
    } else if s < 99.95 {
        format!("{s:.1}")
    } else if s < 99_999.5 {
        format!("{s:.0}")
    } else if s < 99_999.5e3 {
        format!("{:.0}k", s / 1e3)
    } else {
        format!("{:.0}M", s / 1e6)
    }
}

/// A cgroup's label cut to `width` characters keeping its end (the informative part of a path):
/// its name, else its path, else its id; escaped for a terminal before it is cut.
pub(super) fn short(path: &Option<String>, name: &Option<String>, id: u64, width: usize) -> String {
    let label = match name.as_deref().or(path.as_deref()) {
        Some(s) => esc(s).into_owned(),
        None => format!("id {id}"),
    };
    let n = label.chars().count();
    if n <= width {
        return label;
    }
    let tail: String = label.chars().skip(n - (width - 1)).collect();
    format!("…{tail}")
}

/// A cgroup in a legend line: `name (path)`, escaped, cut to `width` keeping the end.
fn long(path: &Option<String>, name: &Option<String>, id: u64, width: usize) -> String {
    match (name, path) {
        (Some(n), Some(p)) => {
            let n = short(&None, &Some(n.clone()), id, width / 2);
            let p = short(
                &Some(p.clone()),
                &None,
                id,
                width.saturating_sub(n.chars().count() + 3),
            );
            format!("{n} ({p})")
        }
        _ => short(path, name, id, width),
    }
}

/// A root-cgroup task as the report names it: `ksoftirqd/1 (pid 16)`, escaped; `pid 16` once
/// it had exited.
pub(super) fn task_label(t: &super::model::KernelTaskTotal) -> String {
    match &t.comm {
        Some(c) => format!("{} (pid {})", esc(c), t.pid),
        None => format!("pid {}", t.pid),
    }
}

/// Writes `words` after `head`, wrapped at [`WIDTH`] with continuation lines indented. A word
/// with more after it keeps room for the comma its line ends with if the next one wraps.
fn wrapped(o: &mut String, head: &str, words: &[String]) {
    let mut line = head.to_string();
    for (i, w) in words.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let comma = usize::from(i + 1 < words.len());
        if line.chars().count() + sep.len() + w.chars().count() + comma > WIDTH
            && !line.trim().is_empty()
        {
            let _ = writeln!(o, "{}{}", line.trim_end(), sep.trim_end());
            line = format!("       {w}");
        } else {
            line.push_str(sep);
            line.push_str(w);
        }
    }
    let _ = writeln!(o, "{line}");
}

/// The section, from its heading on.
pub(super) fn render(o: &mut String, m: &WhoDelayedWhom) {
    if !m.ledger {
        let _ = writeln!(o, "\n## who delayed whom: {NO_LEDGER}");
        return;
    }
    if m.victims.is_empty() {
        let _ = writeln!(
            o,
            "\n## who delayed whom: no cgroup waited for a CPU another cgroup held ({} of run-queue wait on the node)",
            dur(m.node_wait_us)
        );
        return;
    }
    let _ = writeln!(
        o,
        "\n## who delayed whom: seconds of run-queue wait culprit C cost victim V, and per s of {:.1} s",
        m.seconds
    );
    let mut head = format!("{:<4}{:<NAME$}{:>6}", "", "victim", "wait");
    for c in 1..=m.culprits.len() {
        let _ = write!(head, "{:>6}", format!("C{c}"));
    }
    let _ = write!(head, "{:>6}", "rest");
    let _ = writeln!(o, "{head}");
    let per_s = |us: f64| if m.seconds > 0.0 { us / m.seconds } else { 0.0 };
    for (vi, v) in m.victims.iter().enumerate() {
        let mut cells = vec![0.0; m.culprits.len()];
        for c in m.cells.iter().filter(|c| c.victim == vi) {
            cells[c.culprit] = c.wait_us;
        }
        let rest = v.wait_us - cells.iter().sum::<f64>();
        for (row, f) in [
            (
                format!(
                    "{:<4}{:<NAME$}",
                    format!("V{}", vi + 1),
                    short(&v.path, &v.name, v.id, NAME - 1)
                ),
                &(|us: f64| us) as &dyn Fn(f64) -> f64,
            ),
            (format!("{:<4}{:<NAME$}", "", "  per s"), &per_s),
        ] {
            let mut line = row;
            let _ = write!(line, "{:>6}", secs(f(v.wait_us)));
            for &us in &cells {
                let _ = write!(line, "{:>6}", secs(f(us)));
            }
            let _ = write!(line, "{:>6}", secs(f(rest)));
            let _ = writeln!(o, "{}", line.trim_end());
        }
    }
    for (ci, c) in m.culprits.iter().enumerate() {
        let _ = writeln!(
            o,
            "  C{:<3}{}: caused {} ({:.2} s/s)",
            ci + 1,
            long(&c.path, &c.name, c.id, 62),
            dur(c.caused_us),
            c.caused_us_per_s / 1e6
        );
    }
    for (vi, v) in m.victims.iter().enumerate() {
        let mut rest: Vec<String> = Vec::new();
        if v.other_neighbours_us > 0.0 {
            rest.push(format!("other neighbours {}", dur(v.other_neighbours_us)));
        }
        for p in PARTS {
            let us = v.parts.get(p.key).copied().flatten().unwrap_or(0.0);
            if us > 0.0 {
                rest.push(format!("{} {}", p.label, dur(us)));
            }
            if p.key == "throttled_ancestor_us" {
                for a in &v.throttled_ancestors {
                    rest.push(format!(
                        "ancestor quota: {} {}",
                        esc(&a.path),
                        dur(a.wait_us)
                    ));
                }
            }
        }
        if rest.is_empty() {
            rest.push("nothing else".into());
        }
        let head = format!(
            "  V{:<3}{}: waited {}; rest: ",
            vi + 1,
            long(&v.path, &v.name, v.id, 56),
            dur(v.wait_us)
        );
        wrapped(o, &head, &rest);
    }
    if !m.kernel_tasks.is_empty() {
        let tasks: Vec<String> = m
            .kernel_tasks
            .iter()
            .map(|t| format!("{} {}", task_label(t), dur(t.wait_us)))
            .collect();
        wrapped(o, "  kernel (root cgroup) tasks: ", &tasks);
    }
    let mut tail = vec![format!(
        "the cells are {:.0} % of the node's {} of run-queue wait",
        m.explained_share * 100.0,
        dur(m.node_wait_us)
    )];
    let l = &m.left_out;
    if l.victims > 0 {
        tail.push(format!(
            "{} more victims ({} charged to others)",
            l.victims,
            dur(l.victims_charged_to_others_us)
        ));
    }
    if l.culprits > 0 {
        tail.push(format!(
            "{} more culprits ({} caused)",
            l.culprits,
            dur(l.culprits_caused_us)
        ));
    }
    if l.untallied > 0 {
        tail.push(format!(
            "{} cgroups or pairs past the report's memory bound left out",
            l.untallied
        ));
    }
    wrapped(o, "  ", &tail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{
        build::who_tests::{HOSTILE, two_windows},
        html,
        model::Report,
        render_json, render_text,
    };

    fn report() -> Report {
        Report {
            who_delayed_whom: two_windows(),
            ..Report::default()
        }
    }

    #[test]
    fn wrapped_lines_keep_room_for_their_comma() {
        // Every split of words around the width: no line, comma included, is over it.
        for first in 80..100 {
            let words: Vec<String> = ["x".repeat(first - 10), "y".repeat(8), "z".repeat(30)]
                .into_iter()
                .collect();
            let mut o = String::new();
            wrapped(&mut o, "  head: ", &words);
            assert!(
                o.lines().all(|l| l.chars().count() <= WIDTH),
                "{first}: {o}"
            );
            assert_eq!(o.matches(',').count(), 2, "{o}");
        }
    }

    #[test]
    fn the_text_table_fits_100_columns_adds_up_and_escapes_names() {
        let mut o = String::new();
        render(&mut o, &report().who_delayed_whom);
        print!("{o}");
        for l in o.lines() {
            assert!(l.chars().count() <= WIDTH, "{l:?} is wider than {WIDTH}");
        }
        assert!(!o.contains('\u{202e}') && !o.contains('\x1b'), "{o}");
        let lines: Vec<&str> = o.lines().collect();
        // Victim 10: 1.5 s, 1.0 to the hog (C1), 0.2 to cgroup 11 (C2), 0.3 else; per second
        // of the 2 s: halves.
        let cols = |l: &str| {
            let nums: String = l.chars().skip(4 + NAME).collect();
            nums.split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert!(lines[3].starts_with("V1  …"), "{}", lines[3]);
        assert_eq!(cols(lines[3]), ["1.50", "1.00", "0.20", "0.30"]);
        assert_eq!(cols(lines[4]), ["0.75", "0.50", "0.10", "0.15"]);
        assert_eq!(cols(lines[5]), ["0.30", "0.25", "-", "0.05"]);
        assert!(o.contains("  C1  /c20: caused 1.25 s (0.62 s/s)"), "{o}");
        let v1 = format!("  V1  {} (/c10): waited 1.50 s; rest: ", esc(HOSTILE));
        assert!(o.contains(&v1), "{o}");
        assert!(o.contains("own quota 100.0 ms, its own tasks 50.0 ms, unattributed 120.0 ms"));
        assert!(o.contains("the cells are 72 % of the node's 2.00 s of run-queue wait"));
        assert!(
            o.contains("  kernel (root cgroup) tasks: ksoftirqd/1 (pid 16) 30.0 ms,"),
            "{o}"
        );
        assert!(
            o.contains(&format!("{} (pid 99) 20.0 ms", esc(HOSTILE))),
            "{o}"
        );
        assert!(
            o.contains("ancestor's quota 50.0 ms, ancestor quota: /kubepods/pod-q 50.0 ms"),
            "{o}"
        );
        // JSON: an unknown part is null, a told one a number; the ancestor by path.
        let j: serde_json::Value = serde_json::from_str(&render_json(&report())).unwrap();
        let v2 = &j["who_delayed_whom"]["victims"][1];
        assert!(v2["parts"]["irq_us"].is_null(), "{v2}");
        assert_eq!(v2["parts"]["steal_us"], 0.0);
        assert_eq!(v2["throttled_ancestors"][0]["path"], "/kubepods/pod-q");
        // HTML: unknown as n/a, the ancestor under the victim.
        let page = html::page_of(&report());
        assert!(page.contains("ancestor quota: /kubepods/pod-q (0.05 s)"));
        assert!(page.contains(">n/a</td>"));
        assert!(
            page.contains("The kernel part (root cgroup): ksoftirqd/1 (pid 16) 0.03 s · "),
            "{page}"
        );
        assert!(!page.contains(HOSTILE));
        // The whole report opens with it.
        let text = render_text(&report());
        assert!(text.find("who delayed whom") < text.find("single events recorded by family"));
    }

    #[test]
    fn a_recording_without_a_ledger_says_so_in_one_line() {
        let text = render_text(&Report::default());
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("who delayed")).collect();
        assert_eq!(lines, [format!("## who delayed whom: {NO_LEDGER}")]);
        let j: serde_json::Value = serde_json::from_str(&render_json(&Report::default())).unwrap();
        assert_eq!(j["who_delayed_whom"]["ledger"], false);
        assert!(html::page_of(&Report::default()).contains(&format!("{NO_LEDGER}.")));
    }

    #[test]
    fn json_and_page_carry_the_matrix_escaped() {
        let r = report();
        let line = render_json(&r);
        assert!(!line.contains('\u{202e}') && !line.contains('\x1b'));
        let j: serde_json::Value = serde_json::from_str(&line).unwrap();
        let m = &j["who_delayed_whom"];
        assert_eq!(m["victims"][0]["name"], HOSTILE);
        assert_eq!(m["culprits"][0]["path"], "/c20");
        assert_eq!(m["cells"][0]["wait_us"], 1e6);
        assert_eq!(m["cells"][0]["wait_us_per_s"], 5e5);
        assert_eq!(m["victims"][0]["parts"]["unattributed_us"], 120e3);
        assert_eq!(m["explained_share"], 0.725);
        let page = html::page_of(&r);
        assert!(!page.contains('\u{202e}') && !page.contains('\x1b') && !page.contains("we<b>"));
        assert!(page.contains("<b>we&lt;b&gt;"), "names escaped, in bold");
        let table = &page[page.find("<table class=\"who\">").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        assert_eq!(table.matches("<tr>").count(), 3, "a header and two victims");
        // The hog's 1.0 s of victim 10's 1.5 s: shaded 2/3 of the way.
        assert!(table.contains("rgba(179,38,30,0.62);color:#fff\">1.00 s<br><small>0.500 s/s"));
        assert!(page.find("Who delayed whom") < page.find("Diagnoses"));
    }
}
