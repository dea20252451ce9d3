//! What the text report and the page write alike: a cgroup's name (each in its medium's
//! markup), and the warnings above the numbers.

use super::model::Report;
use crate::safety::escape;

/// Where the report is read.
#[derive(Clone, Copy)]
pub(super) enum Medium {
    /// A terminal (the text report): tenant text escaped for it.
    Text,
    /// The HTML page: tenant text escaped for HTML, names in bold, paths as code.
    Html,
}

impl Medium {
    /// What a reader must know before trusting the numbers, a line each: single events the
    /// recorder could not keep, and damage to the file.
    pub(super) fn warnings(self, r: &Report) -> Vec<String> {
        let mut what = Vec::new();
        if r.recorder_lost > 0 {
            what.push(format!(
                "recorder could not keep {} single events (its buffer was full: the disk was too slow)",
                r.recorder_lost
            ));
        }
        if r.recorder_dropped_chunks > 0 {
            what.push(format!(
                "recorder could not write {} chunks ({} bytes) of windows and events (the disk was full or failing, or below --min-free): the time they cover is missing",
                r.recorder_dropped_chunks, r.recorder_dropped_bytes
            ));
        }
        if r.untallied > 0 {
            what.push(format!(
                "report's per-cgroup tallies reached their bound ({} MiB): {} entries for cgroups seen after that were left out of the rankings",
                crate::report::build::MAX_TALLY_BYTES >> 20,
                r.untallied
            ));
        }
        if let Some(w) = r.read.warning() {
            what.push(format!("file is damaged: {w}"));
        }
        what.iter()
            .map(|w| match self {
                Self::Text => format!("note: the {w}"),
                Self::Html => format!("<p class=\"warn\">The {}.</p>", escape::html(w)),
            })
            .collect()
    }

    /// A cgroup as the report names it: its name and path (escaped: both are the tenant's), or
    /// its id when it was removed before it was named.
    pub(super) fn who(self, path: &Option<String>, name: &Option<String>, id: u64) -> String {
        let name = name.as_deref().map(|n| match self {
            Self::Text => escape::terminal(n).into_owned(),
            Self::Html => format!("<b>{}</b>", escape::html(n)),
        });
        let path = path.as_deref().map(|p| match self {
            Self::Text => escape::terminal(p).into_owned(),
            Self::Html => format!("<code>{}</code>", escape::html(p)),
        });
        match (name, path) {
            (Some(n), Some(p)) => match self {
                Self::Text => format!("{n} ({p})"),
                Self::Html => format!("{n} {p}"),
            },
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => format!("cgroup id {id} (removed before it was named)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Medium::{Html, Text};
    use crate::{record::reader::ReadStats, report::model::Report, safety::escape};

    /// As the text report and the page wrote them before they shared the sentences.
    #[test]
    fn warnings_are_one_list_in_two_media() {
        let r = Report {
            recorder_lost: 5,
            read: ReadStats {
                truncated: true,
                ..ReadStats::default()
            },
            ..Report::default()
        };
        let w = r.read.warning().expect("a truncated file is damaged");
        let lost = "could not keep 5 single events (its buffer was full: the disk was too slow)";
        assert_eq!(
            Text.warnings(&r),
            [
                format!("note: the recorder {lost}"),
                format!("note: the file is damaged: {w}")
            ]
        );
        assert_eq!(
            Html.warnings(&r),
            [
                format!("<p class=\"warn\">The recorder {lost}.</p>"),
                format!(
                    "<p class=\"warn\">The file is damaged: {}.</p>",
                    escape::html(&w)
                )
            ]
        );
        assert!(Text.warnings(&Report::default()).is_empty());
    }

    #[test]
    fn a_cgroup_is_named_escaped_in_each_medium() {
        let (n, p) = (Some("we<b>\u{202e}".to_string()), Some("/a/b".to_string()));
        assert_eq!(Text.who(&p, &n, 7), "we<b>\\u{202e} (/a/b)");
        assert_eq!(
            Html.who(&p, &n, 7),
            "<b>we&lt;b&gt;\\u{202e}</b> <code>/a/b</code>"
        );
        assert_eq!(Text.who(&p, &None, 7), "/a/b");
        assert_eq!(Html.who(&None, &n, 7), "<b>we&lt;b&gt;\\u{202e}</b>");
        for m in [Text, Html] {
            assert_eq!(
                m.who(&None, &None, 7),
                "cgroup id 7 (removed before it was named)"
            );
        }
    }
}
