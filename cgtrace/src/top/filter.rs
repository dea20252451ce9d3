//! The `/` filter: a case-insensitive substring, or a regular expression matched against the name
//! and the path (each its own line, so `^` and `$` anchor either).

use regex_lite::{Regex, RegexBuilder};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FilterKind {
    #[default]
    Substring,
    Regex,
}

impl FilterKind {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Substring => "substring",
            Self::Regex => "regex",
        }
    }
}

/// A compiled filter. Empty text matches everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub text: String,
    pub kind: FilterKind,
    /// Lower-cased text (substring) or the compiled expression (regex).
    needle: String,
    regex: Option<Regex>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid regex {text:?}: {source}")]
pub struct FilterError {
    pub text: String,
    #[source]
    pub source: regex_lite::Error,
}

impl Filter {
    pub fn new(text: &str, kind: FilterKind) -> Result<Self, FilterError> {
        let regex = match kind {
            FilterKind::Regex if !text.is_empty() => Some(
                RegexBuilder::new(text)
                    .case_insensitive(true)
                    .multi_line(true)
                    .build()
                    .map_err(|source| FilterError {
                        text: text.to_string(),
                        source,
                    })?,
            ),
            _ => None,
        };
        Ok(Self {
            text: text.to_string(),
            kind,
            needle: text.to_lowercase(),
            regex,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Whether `haystack` (already lower-cased: see [`haystack`]) matches.
    pub fn matches(&self, haystack: &str) -> bool {
        match (&self.kind, &self.regex) {
            _ if self.text.is_empty() => true,
            (FilterKind::Regex, Some(re)) => re.is_match(haystack),
            _ => haystack.contains(&self.needle),
        }
    }
}

/// What a filter is matched against: the name, the path and a Kubernetes QoS class as
/// `qos:<class>` (`qos:guaranteed` finds guaranteed pods, whose path does not say it),
/// lower-cased, `\n`-separated (so a substring never spans two).
pub fn haystack(name: Option<&str>, path: Option<&str>, qos: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(n) = name {
        s.push_str(&n.to_lowercase());
    }
    s.push('\n');
    if let Some(p) = path {
        s.push_str(&p.to_lowercase());
    }
    if let Some(q) = qos {
        s.push_str("\nqos:");
        s.push_str(q);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_is_case_insensitive_and_regex_compiles_once() {
        let h = haystack(
            Some("default/web/Nginx"),
            Some("/kubepods/pod1/abc"),
            Some("guaranteed"),
        );
        assert!(
            Filter::new("qos:guaranteed", FilterKind::Substring)
                .expect("f")
                .matches(&h)
        );
        assert!(
            Filter::new("NGINX", FilterKind::Substring)
                .expect("f")
                .matches(&h)
        );
        assert!(
            Filter::new("pod1/a", FilterKind::Substring)
                .expect("f")
                .matches(&h)
        );
        assert!(
            !Filter::new("nginx\n/kube", FilterKind::Substring)
                .expect("f")
                .matches("x")
        );
        let re = Filter::new("^/kube.*abc$", FilterKind::Regex).expect("f");
        assert!(re.matches(&h), "anchors match the path line");
        assert!(
            !Filter::new("nginx.*kube", FilterKind::Regex)
                .expect("f")
                .matches(&h)
        );
        assert!(
            Filter::new("", FilterKind::Regex)
                .expect("f")
                .matches("anything")
        );
        let e = Filter::new("(", FilterKind::Regex).expect_err("bad regex");
        assert!(e.to_string().starts_with("invalid regex \"(\""), "{e}");
    }
}
