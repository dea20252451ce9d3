//! Run-queue histograms drawn the way runqlat draws them: one line per power-of-two range of
//! microseconds, the count, and a bar. cgtrace's buckets are 4× finer than runqlat's; each is put
//! in the runqlat slot that holds its midpoint. Bars are stacked by wait kind, each kind with its
//! own character, so the split reads without colour.

use cgtrace_common::{
    hist::{bucket_of, bucket_upper},
    runq::WaitKind,
};
use ratatui::text::{Line, Span};

use crate::hist::HistSummary;

use super::theme::Theme;

/// Bar characters by wait kind (`WaitKind as usize`: wakeup, preempt, throttled).
const BAR_CHARS: [char; cgtrace_common::runq::NR_WAIT_KINDS] = ['█', '▒', '░'];

/// One runqlat slot: `lo_us ..= hi_us` and a count per kind given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub lo_us: u64,
    pub hi_us: u64,
    pub counts: Vec<u64>,
}

/// The runqlat slot (0: 0–1 µs, k: 2^k – 2^(k+1)-1 µs) of a cgtrace bucket given by its lower
/// bound in ns.
pub fn slot_of(lower_ns: u64) -> u32 {
    let upper = bucket_upper(bucket_of(lower_ns) as usize);
    let mid = if upper == u64::MAX {
        lower_ns
    } else {
        lower_ns + (upper - lower_ns) / 2
    };
    let us = mid / 1000;
    if us < 2 { 0 } else { 63 - us.leading_zeros() }
}

/// Slots from the lowest to the highest non-empty one, with each kind's count.
pub fn log2_slots(kinds: &[&HistSummary]) -> Vec<Slot> {
    let mut counts: Vec<[u64; 64]> = vec![[0; 64]; kinds.len()];
    for (k, h) in kinds.iter().enumerate() {
        for &(lower, n) in &h.buckets {
            counts[k][slot_of(lower) as usize] += n;
        }
    }
    let nonempty = |s: usize| counts.iter().any(|c| c[s] > 0);
    let Some(first) = (0..64).find(|&s| nonempty(s)) else {
        return Vec::new();
    };
    let last = (0..64).rev().find(|&s| nonempty(s)).unwrap_or(first);
    (first..=last)
        .map(|s| Slot {
            lo_us: if s == 0 { 0 } else { 1 << s },
            hi_us: (1u64 << (s + 1)) - 1,
            counts: counts.iter().map(|c| c[s]).collect(),
        })
        .collect()
}

/// Appends the runqlat-style histogram of `kinds` (wait kind, histogram) within `width` columns;
/// each kind has its bar character and colour.
pub fn runqlat_lines(
    kinds: &[(WaitKind, &HistSummary)],
    theme: &Theme,
    width: u16,
    out: &mut Vec<Line<'static>>,
) {
    let hists: Vec<&HistSummary> = kinds.iter().map(|(_, h)| *h).collect();
    let slots = log2_slots(&hists);
    if slots.is_empty() {
        return;
    }
    let prefix = 8 + 4 + 8 + 2 + 9 * kinds.len();
    let bar_w = (usize::from(width).saturating_sub(prefix + 3)).clamp(8, 40);
    let mut head = format!("{:>8}    {:<8}:", "usecs", "");
    for (kind, _) in kinds {
        head.push_str(&format!(" {:>8}", kind.name()));
    }
    let mut header = vec![Span::styled(head, theme.dim), Span::raw(" ")];
    for (i, (kind, _)) in kinds.iter().enumerate() {
        let k = *kind as usize;
        if i > 0 {
            header.push(Span::raw(" "));
        }
        header.push(Span::styled(
            format!("{} {}", BAR_CHARS[k], kind.name()),
            theme.kinds[k],
        ));
    }
    out.push(Line::from(header));
    let max_total = slots
        .iter()
        .map(|s| s.counts.iter().sum::<u64>())
        .max()
        .unwrap_or(1)
        .max(1);
    for slot in &slots {
        let mut spans = vec![Span::raw(format!(
            "{:>8} -> {:<8}:",
            slot.lo_us, slot.hi_us
        ))];
        for n in &slot.counts {
            spans.push(Span::raw(format!(" {n:>8}")));
        }
        spans.push(Span::raw(" |"));
        let mut cum = 0u64;
        let mut drawn = 0usize;
        for (i, n) in slot.counts.iter().enumerate() {
            cum += n;
            let mut end = ((cum as f64 / max_total as f64) * bar_w as f64).round() as usize;
            if *n > 0 && end == drawn && drawn < bar_w {
                end = drawn + 1; // a non-empty kind always shows
            }
            let end = end.min(bar_w);
            if end > drawn {
                let k = kinds[i].0 as usize;
                spans.push(Span::styled(
                    BAR_CHARS[k].to_string().repeat(end - drawn),
                    theme.kinds[k],
                ));
                drawn = end;
            }
        }
        spans.push(Span::raw(format!("{}|", " ".repeat(bar_w - drawn))));
        out.push(Line::from(spans));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::Hist;

    fn summary(values_ns: &[u64]) -> HistSummary {
        let mut h = Hist::default();
        for &v in values_ns {
            h.record(v);
        }
        h.summary()
    }

    #[test]
    fn slots_match_runqlat_ranges() {
        assert_eq!(slot_of(0), 0);
        assert_eq!(slot_of(1500), 0); // 1.5 µs
        assert_eq!(slot_of(2048), 1); // 2–3 µs
        assert_eq!(slot_of(5000), 2); // 4–7 µs
        assert_eq!(slot_of(3_000_000), 11); // 2048–4095 µs
        let a = summary(&[3_000, 3_100, 5_000, 1_000_000]);
        let b = summary(&[5_000]);
        let slots = log2_slots(&[&a, &b]);
        assert_eq!(slots.first().map(|s| (s.lo_us, s.hi_us)), Some((2, 3)));
        assert_eq!(slots.last().map(|s| (s.lo_us, s.hi_us)), Some((512, 1023)));
        assert_eq!(slots[0].counts, vec![2, 0]);
        assert_eq!(slots[1].counts, vec![1, 1]);
        let total: u64 = slots.iter().flat_map(|s| s.counts.iter()).sum();
        assert_eq!(total, 5);
    }

    #[test]
    fn bars_are_stacked_and_scaled_to_the_largest_slot() {
        let wake = summary(&[3_000; 30]);
        let pre = summary(&[3_000; 10]);
        let mut out = Vec::new();
        runqlat_lines(
            &[(WaitKind::Wakeup, &wake), (WaitKind::Preempt, &pre)],
            &Theme::plain(),
            80,
            &mut out,
        );
        let text: Vec<String> = out.iter().map(|l| l.to_string()).collect();
        assert!(
            text[0].contains("usecs")
                && text[0].contains("█ wakeup")
                && text[0].contains("▒ preempt")
        );
        let bar = text[1].split('|').nth(1).expect("bar");
        // The largest slot fills the 37-column bar: 30 of 40 waits are wakeups.
        assert_eq!(bar.chars().filter(|&c| c == '█').count(), 28);
        assert_eq!(bar.chars().filter(|&c| c == '▒').count(), 9);
        assert!(
            text[1].starts_with("       2 -> 3       :       30       10 |"),
            "{}",
            text[1]
        );
        assert!(text.iter().all(|l| l.chars().count() <= 80));
    }
}
