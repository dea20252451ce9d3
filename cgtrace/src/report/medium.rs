//! What the text report and the page write alike, each in its medium's markup: a cgroup's name.

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
