//! Private apt configuration: the system's sources and state stay untouched.

use super::*;

/// Mirror URIs taken from the system's apt sources.
pub struct Mirrors {
    pub archive: String,
    pub security: String,
    pub signed_by: Option<String>,
}

/// One `deb` source entry (from either the one-line or the deb822 format).
#[derive(Debug, PartialEq)]
pub struct Source {
    pub uri: String,
    pub suites: Vec<String>,
    pub signed_by: Option<String>,
}

pub fn system_mirrors() -> Result<Mirrors> {
    let codename = host_codename()?;
    let sources = system_sources()?;
    mirrors_for(&codename, &sources)
}

fn host_codename() -> Result<String> {
    let text = fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .context("no VERSION_CODENAME in /etc/os-release (is this Debian?)")
}

fn system_sources() -> Result<Vec<Source>> {
    let mut sources = Vec::new();
    let main = Path::new("/etc/apt/sources.list");
    if main.exists() {
        sources.extend(parse_one_line(&fs::read_to_string(main)?));
    }
    let mut parts: Vec<PathBuf> = match fs::read_dir("/etc/apt/sources.list.d") {
        Ok(dir) => dir.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    parts.sort();
    for path in parts {
        let text = || fs::read_to_string(&path);
        match path.extension().and_then(|e| e.to_str()) {
            Some("list") => sources.extend(parse_one_line(&text()?)),
            Some("sources") => sources.extend(parse_deb822(&text()?)),
            _ => {}
        }
    }
    Ok(sources)
}

/// The archive serves `<codename>`, the security archive `<codename>-security`.
pub fn mirrors_for(codename: &str, sources: &[Source]) -> Result<Mirrors> {
    let with_suite = |suite: &str| sources.iter().find(|s| s.suites.iter().any(|x| x == suite));
    let archive = with_suite(codename)
        .with_context(|| format!("no apt source for suite {codename} in /etc/apt"))?;
    let security = with_suite(&format!("{codename}-security"))
        .with_context(|| format!("no apt source for suite {codename}-security in /etc/apt"))?;
    Ok(Mirrors {
        archive: archive.uri.trim_end_matches('/').to_string(),
        security: security.uri.trim_end_matches('/').to_string(),
        signed_by: archive.signed_by.clone(),
    })
}

/// `deb [opts] uri suite component...` lines.
pub fn parse_one_line(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let (opts, rest) = match rest.trim_start().strip_prefix('[') {
            Some(r) => r.split_once(']').unwrap_or((r, "")),
            None => ("", rest),
        };
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        let signed_by = opts
            .split_whitespace()
            .find_map(|o| o.strip_prefix("signed-by=").map(str::to_string));
        out.push(Source {
            uri: uri.to_string(),
            suites: vec![suite.to_string()],
            signed_by,
        });
    }
    out
}

/// deb822 stanzas (`Types:`, `URIs:`, `Suites:`, `Signed-By:`, `Enabled:`).
pub fn parse_deb822(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut fields = BTreeMap::new();
        for line in stanza.lines().filter(|l| !l.starts_with('#')) {
            if let Some((k, v)) = line.split_once(':').filter(|_| !line.starts_with(' ')) {
                fields.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let words = |k: &str| -> Vec<String> {
            fields
                .get(k)
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        let enabled = fields.get("enabled").is_none_or(|v| v != "no");
        if !enabled || !words("types").iter().any(|t| t == "deb") {
            continue;
        }
        let signed_by = fields
            .get("signed-by")
            .filter(|v| v.starts_with('/'))
            .cloned();
        for uri in words("uris") {
            out.push(Source {
                uri,
                suites: words("suites"),
                signed_by: signed_by.clone(),
            });
        }
    }
    out
}

pub struct PrivateApt {
    root: PathBuf,
}

impl PrivateApt {
    pub fn new(cache: &Path, release: &str, mirrors: &Mirrors) -> Result<Self> {
        let root = cache.join("apt").join(release);
        for dir in ["lists/partial", "cache/archives/partial", "debs"] {
            fs::create_dir_all(root.join(dir))?;
        }
        fs::write(root.join("status"), "")?;
        fs::write(root.join("sources.list"), sources_list(release, mirrors))?;
        Ok(Self { root })
    }

    fn command(&self, tool: &str) -> Command {
        let r = |p: &str| self.root.join(p).display().to_string();
        let mut cmd = Command::new(tool);
        for (key, value) in [
            ("Dir::Etc::SourceList", r("sources.list")),
            ("Dir::Etc::SourceParts", "/dev/null".into()),
            ("Dir::Etc::Preferences", "/dev/null".into()),
            ("Dir::Etc::PreferencesParts", "/dev/null".into()),
            ("Dir::State::Lists", r("lists")),
            ("Dir::State::status", r("status")),
            ("Dir::Cache", r("cache")),
            ("Dir::Cache::archives", r("cache/archives")),
            ("APT::Sandbox::User", "root".into()),
            // Only the Packages indices are needed.
            ("Acquire::Languages", "none".into()),
            (
                "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled",
                "false".into(),
            ),
            (
                "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled",
                "false".into(),
            ),
        ] {
            cmd.arg("-o").arg(format!("{key}={value}"));
        }
        cmd
    }

    pub fn update(&self) -> Result<()> {
        run_command(self.command("apt-get").args(["-q", "update"]))
    }

    /// The first dependency of `meta` that starts with `prefix`.
    pub fn resolve_dependency(&self, meta: &str, prefix: &str) -> Result<String> {
        let out = command_stdout(self.command("apt-cache").args(["depends", meta]))?;
        out.lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.starts_with(prefix))
            .map(str::to_string)
            .with_context(|| format!("{meta} depends on no {prefix}*:\n{out}"))
    }

    /// Downloads `package` into `debs/` and returns the file.
    pub fn download(&self, package: &str) -> Result<PathBuf> {
        let debs = self.root.join("debs");
        for stale in fs::read_dir(&debs)? {
            fs::remove_file(stale?.path())?;
        }
        run_command(
            self.command("apt-get")
                .args(["-q", "download", package])
                .current_dir(&debs),
        )?;
        let deb = fs::read_dir(&debs)?
            .next()
            .context("apt-get download left no file")??;
        Ok(deb.path())
    }
}

pub fn sources_list(release: &str, m: &Mirrors) -> String {
    let opts = m
        .signed_by
        .as_ref()
        .map(|k| format!("[signed-by={k}] "))
        .unwrap_or_default();
    format!(
        "deb {opts}{a} {release} main\ndeb {opts}{a} {release}-updates main\n\
         deb {opts}{s} {release}-security main\n",
        a = m.archive,
        s = m.security
    )
}
