//! The daemon's structure, checked from its source (ARCHITECTURE.md says the same in words):
//!
//! - no import cycle between its modules, file by file: every path is resolved the way rustc
//!   does (`crate::`, `self::`, `super::`, child modules named bare, and `use` aliases), and
//!   edges between a parent module and its children count like any other;
//! - offline code (`record`, `replay`, `report`, the view's `top::player`) reaches neither the
//!   kernel plumbing (`bpf`) nor the live run (`live`), not even through another module;
//! - `aya` is imported only by `bpf/`, the live session, each family's `attach` and `collect`, and
//!   the collector interface they share (`family/collect.rs`);
//! - ring-buffer bytes become typed records only in `decode.rs`.
//!
//! The tests at the end plant a cycle, an offline import and a stray `aya` in small made-up
//! trees, so a checker that stopped seeing them would fail.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// A module path: `["family", "runq"]`; the crate root is empty.
type Module = Vec<String>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `family/runq/mod.rs` → `family::runq`; `lib.rs`/`main.rs` → the crate root.
fn module_of(root: &Path, file: &Path) -> Module {
    let rel = file
        .strip_prefix(root)
        .expect("under src")
        .with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// The crate's files as (module, code without comments, literals and `#[cfg(test)]` items).
fn crate_tree() -> Vec<(Module, String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    files
        .into_iter()
        // Test modules in files of their own (`record/tests.rs`, `top/app/tests.rs`).
        .filter(|f| !f.ends_with("tests.rs"))
        .map(|f| {
            let src = std::fs::read_to_string(&f).expect("read");
            (module_of(&root, &f), without_tests(&strip(&src)), f)
        })
        .collect()
}

/// Source with comments removed and string and char literals emptied, so that nothing in them
/// reads as a path or a brace.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && matches!(b.get(i + 1), Some(b'"' | b'#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // r"…" or r#"…"#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            i = j + close.len();
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                // A multi-byte char: find the closing quote within 5 bytes.
                (i + 2..(i + 6).min(b.len()))
                    .find(|&k| b[k] == b'\'')
                    .filter(|_| !b[i + 1].is_ascii())
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = src[i..].chars().next().expect("char");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Code without the items marked `#[cfg(test)]` (a test module, a test-only function or `use`).
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let brace = after.find('{');
        let semi = after.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => s + 1,
            (Some(b), _) => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, ch) in after[b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The identifier at the start of `s`, if any.
fn ident(s: &str) -> &str {
    let n = s.bytes().take_while(|&c| is_ident(c)).count();
    &s[..n]
}

/// One imported path and the name it is known by (`as` or its last segment; none for a glob).
#[derive(Debug, PartialEq)]
struct Import {
    path: Vec<String>,
    alias: Option<String>,
}

/// The paths of one `use` tree: `a::b::{c, d::{e as f, self}}`, `a::*`.
fn use_tree(s: &str, prefix: &[String], out: &mut Vec<Import>) {
    let s = s.trim();
    if let Some(body) = s.strip_prefix('{') {
        let body = body.strip_suffix('}').unwrap_or(body);
        let mut depth = 0;
        let mut start = 0;
        for (i, ch) in body.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_tree(&body[start..i], prefix, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        use_tree(&body[start..], prefix, out);
        return;
    }
    if s.is_empty() {
        return;
    }
    if s == "*" {
        out.push(Import {
            path: prefix.to_vec(),
            alias: None,
        });
        return;
    }
    let id = ident(s);
    if id.is_empty() {
        return;
    }
    let rest = s[id.len()..].trim_start();
    if let Some(more) = rest.strip_prefix("::") {
        let mut p = prefix.to_vec();
        p.push(id.to_string());
        use_tree(more, &p, out);
    } else if id == "self" {
        out.push(Import {
            path: prefix.to_vec(),
            alias: Some(
                rest.strip_prefix("as")
                    .map(|a| ident(a.trim()).to_string())
                    .or_else(|| prefix.last().cloned())
                    .unwrap_or_default(),
            ),
        });
    } else {
        let mut p = prefix.to_vec();
        p.push(id.to_string());
        let alias = rest
            .strip_prefix("as")
            .map_or(id, |a| ident(a.trim()))
            .to_string();
        out.push(Import {
            path: p,
            alias: Some(alias),
        });
    }
}

/// Every `use` of a file (anywhere in it) and the code with those `use` items removed.
fn uses(code: &str) -> (Vec<Import>, String) {
    let mut imports = Vec::new();
    let mut rest_code = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let at = rest.match_indices("use ").map(|(i, _)| i).find(|&i| {
            i == 0 || !is_ident(rest.as_bytes()[i - 1]) && rest.as_bytes()[i - 1] != b':'
        });
        let Some(at) = at else { break };
        let Some(end) = rest[at..].find(';') else {
            break;
        };
        rest_code.push_str(&rest[..at]);
        use_tree(&rest[at + 4..at + end], &[], &mut imports);
        rest = &rest[at + end + 1..];
    }
    rest_code.push_str(rest);
    (imports, rest_code)
}

/// Every path of two or more segments written in code (`a::b::c`, generics left out).
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) || (i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let id = ident(&code[j..]);
            if id.is_empty() {
                break;
            }
            segs.push(id.to_string());
            j += id.len();
            if code[j..].starts_with("::")
                && code[j + 2..].starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
            {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() >= 2 && !segs[0].starts_with(|c: char| c.is_ascii_digit()) {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// The module graph: an edge from each module to every other module a path of it names.
struct Graph {
    modules: BTreeSet<Module>,
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl Graph {
    /// `files`: (module, code as [`strip`] and [`without_tests`] leave it). `cgtrace::…` in the
    /// binary's files (the crate root's siblings `main.rs`, `cli.rs`) is the library's root.
    fn new(files: &[(Module, String)]) -> Self {
        let modules: BTreeSet<Module> = files.iter().map(|(m, _)| m.clone()).collect();
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (m, code) in files {
            let (imports, rest) = uses(code);
            let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut targets = Vec::new();
            // Aliases may refer to each other (`use crate::bpf; use bpf::loader;`): two passes,
            // the second one with every alias known.
            for pass in 0..2 {
                for imp in &imports {
                    if let Some(abs) = resolve(m, &imp.path, &modules, &aliases) {
                        if let Some(a) = &imp.alias {
                            aliases.insert(a.clone(), abs.clone());
                        }
                        if pass == 1 {
                            targets.push(abs);
                        }
                    }
                }
            }
            for p in inline_paths(&rest) {
                if let Some(abs) = resolve(m, &p, &modules, &aliases) {
                    targets.push(abs);
                }
            }
            for abs in targets {
                let to = (0..=abs.len())
                    .rev()
                    .map(|k| abs[..k].to_vec())
                    .find(|p| modules.contains(p))
                    .unwrap_or_default();
                if to != *m && !to.is_empty() && !m.is_empty() {
                    edges.entry(m.clone()).or_default().insert(to);
                }
            }
        }
        Graph { modules, edges }
    }

    /// The cycles: every strongly connected set of more than one module (Tarjan).
    fn cycles(&self) -> Vec<Vec<Module>> {
        struct T<'a> {
            g: &'a Graph,
            index: BTreeMap<&'a Module, usize>,
            low: BTreeMap<&'a Module, usize>,
            on: BTreeSet<&'a Module>,
            stack: Vec<&'a Module>,
            out: Vec<Vec<Module>>,
        }
        fn visit<'a>(t: &mut T<'a>, m: &'a Module) {
            let n = t.index.len();
            t.index.insert(m, n);
            t.low.insert(m, n);
            t.stack.push(m);
            t.on.insert(m);
            for next in t.g.edges.get(m).into_iter().flatten() {
                if !t.index.contains_key(next) {
                    visit(t, next);
                    let l = t.low[next].min(t.low[m]);
                    t.low.insert(m, l);
                } else if t.on.contains(next) {
                    let l = t.index[next].min(t.low[m]);
                    t.low.insert(m, l);
                }
            }
            if t.low[m] == t.index[m] {
                let mut scc = Vec::new();
                while let Some(x) = t.stack.pop() {
                    t.on.remove(x);
                    scc.push(x.clone());
                    if x == m {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    t.out.push(scc);
                }
            }
        }
        let mut t = T {
            g: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            on: BTreeSet::new(),
            stack: Vec::new(),
            out: Vec::new(),
        };
        for m in &self.modules {
            if !t.index.contains_key(m) {
                visit(&mut t, m);
            }
        }
        t.out
    }

    /// Every module `from` reaches, with the path it takes to each.
    fn reach(&self, from: &Module) -> BTreeMap<Module, Vec<Module>> {
        let mut seen: BTreeMap<Module, Vec<Module>> = BTreeMap::new();
        let mut queue = vec![(from.clone(), vec![from.clone()])];
        while let Some((m, path)) = queue.pop() {
            for next in self.edges.get(&m).into_iter().flatten() {
                if !seen.contains_key(next) && next != from {
                    let mut p = path.clone();
                    p.push(next.clone());
                    seen.insert(next.clone(), p.clone());
                    queue.push((next.clone(), p));
                }
            }
        }
        seen
    }

    /// What offline modules reach of the live side: `(offline module, the path to it)`.
    fn offline_violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in self.modules.iter().filter(|m| is_offline(m)) {
            for (to, path) in self.reach(m) {
                if to.first().is_some_and(|f| f == "bpf" || f == "live") {
                    out.push(names(&path).join(" -> "));
                }
            }
        }
        out
    }
}

/// Offline code: it reads recordings and must run on a machine with no BPF at all.
fn is_offline(m: &Module) -> bool {
    matches!(
        m.first().map(String::as_str),
        Some("record" | "replay" | "report")
    ) || m.starts_with(&["top".to_string(), "player".to_string()])
}

/// A path's absolute form from module `m`, or `None` when it names nothing of this crate.
fn resolve(
    m: &Module,
    path: &[String],
    modules: &BTreeSet<Module>,
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let rest = &path[1..];
    let mut base: Vec<String> = match first.as_str() {
        "crate" | "cgtrace" => Vec::new(),
        "self" => m.clone(),
        "super" => {
            let mut b = m.clone();
            b.pop()?;
            let mut k = 0;
            while rest.get(k).is_some_and(|s| s == "super") {
                b.pop()?;
                k += 1;
            }
            b.extend(rest[k..].iter().cloned());
            return Some(b);
        }
        _ => {
            let mut child = m.clone();
            child.push(first.clone());
            if modules.contains(&child) {
                child
            } else {
                aliases.get(first)?.clone()
            }
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

fn names(path: &[Module]) -> Vec<String> {
    path.iter().map(|m| m.join("::")).collect()
}

/// Files that may import `aya`: the kernel plumbing, the live session, each family's attach and
/// collect code.
fn may_import_aya(m: &Module) -> bool {
    let s: Vec<&str> = m.iter().map(String::as_str).collect();
    matches!(
        s.as_slice(),
        ["bpf", ..]
            | ["live", "session"]
            | ["family", "collect"]
            | ["family", _, "attach" | "collect", ..]
    )
}

fn aya_violations(files: &[(Module, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(m, code)| {
            !may_import_aya(m)
                && code.match_indices("aya").any(|(i, _)| {
                    let b = code.as_bytes();
                    (i == 0 || !is_ident(b[i - 1]) && b[i - 1] != b':')
                        && code[i + 3..].starts_with("::")
                })
        })
        .map(|(m, _)| m.join("::"))
        .collect()
}

fn tree_graph() -> (Graph, Vec<(Module, String)>) {
    let files: Vec<(Module, String)> = crate_tree()
        .into_iter()
        .map(|(m, code, _)| (m, code))
        .collect();
    (Graph::new(&files), files)
}

#[test]
fn no_import_cycles_between_modules() {
    let (g, _) = tree_graph();
    let edges: usize = g.edges.values().map(BTreeSet::len).sum();
    assert!(edges > 150, "the graph was read: {edges} edges");
    // Each cycle with the imports that make it, so the one to turn around is easy to find.
    let cycles: Vec<String> = g
        .cycles()
        .iter()
        .map(|c| {
            let inside: Vec<String> = c
                .iter()
                .flat_map(|m| {
                    g.edges[m]
                        .iter()
                        .filter(|to| c.contains(to))
                        .map(move |to| format!("  {} -> {}", m.join("::"), to.join("::")))
                })
                .collect();
            format!("{}\n{}", names(c).join(", "), inside.join("\n"))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles (modules that reach each other):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn offline_code_never_reaches_bpf_or_the_live_run() {
    let (g, _) = tree_graph();
    assert!(g.modules.iter().any(is_offline), "no offline module found");
    let bad = g.offline_violations();
    assert!(bad.is_empty(), "offline code reaches:\n{}", bad.join("\n"));
}

#[test]
fn aya_is_imported_only_where_the_kernel_is_talked_to() {
    let (_, files) = tree_graph();
    assert!(
        files
            .iter()
            .any(|(m, c)| may_import_aya(m) && c.contains("aya::"))
    );
    let bad = aya_violations(&files);
    assert!(bad.is_empty(), "aya imported in: {}", bad.join(", "));
}

#[test]
fn bytes_become_records_only_in_the_decoder() {
    for (m, code, f) in crate_tree() {
        if m == ["decode"] {
            continue;
        }
        for needle in ["read_unaligned", "read_pod", "transmute", "from_raw_parts"] {
            assert!(
                !code.contains(needle),
                "{}: {needle} outside decode.rs",
                f.display()
            );
        }
    }
}

// The checker, on made-up trees.

fn tree(files: &[(&str, &str)]) -> Vec<(Module, String)> {
    files
        .iter()
        .map(|(m, src)| {
            let module = if m.is_empty() {
                Vec::new()
            } else {
                m.split("::").map(String::from).collect()
            };
            (module, without_tests(&strip(src)))
        })
        .collect()
}

#[test]
fn the_checker_finds_a_cycle_through_super_a_child_and_an_alias() {
    // family (parent) names its child bare; the child reaches back with `super::`.
    let g = Graph::new(&tree(&[
        ("", "pub mod family;"),
        (
            "family",
            "pub mod runq;\npub const ALL: [u8; 1] = [runq::INFO];",
        ),
        ("family::runq", "pub const INFO: u8 = super::BASE;"),
    ]));
    assert_eq!(
        g.cycles(),
        vec![vec![
            vec!["family".to_string()],
            vec!["family".into(), "runq".into()]
        ]]
    );
    // Through an alias of a module: `use crate::top::render as r; r::bars::X`.
    let g = Graph::new(&tree(&[
        (
            "top::columns",
            "use crate::top::render as r;\nfn f() { r::bars::X; }",
        ),
        ("top::render", ""),
        ("top::render::bars", "use super::super::columns::Ctx;"),
    ]));
    assert_eq!(g.cycles().len(), 1, "{:?}", g.edges);
    // Nothing in comments, strings or test code counts.
    let g = Graph::new(&tree(&[
        (
            "a",
            "// crate::b::X\nconst S: &str = \"crate::b::X\";\n#[cfg(test)]\nmod tests { use crate::b::X; }",
        ),
        ("b", "use crate::a::Y;"),
    ]));
    assert!(g.cycles().is_empty(), "{:?}", g.edges);
}

#[test]
fn the_checker_finds_offline_code_reaching_bpf_through_another_module() {
    let g = Graph::new(&tree(&[
        ("report", "use crate::{model::Window, hist};"),
        ("model", "pub fn f() { crate::bpf::loader::object(); }"),
        ("hist", ""),
        ("bpf::loader", ""),
    ]));
    assert_eq!(
        g.offline_violations(),
        vec!["report -> model -> bpf::loader"]
    );
    let g = Graph::new(&tree(&[
        ("top::player", "use super::app::App;"),
        ("top::app", "use crate::live::session::Pump;"),
        ("live::session", ""),
    ]));
    assert_eq!(
        g.offline_violations(),
        vec!["top::player -> top::app -> live::session"]
    );
}

#[test]
fn the_checker_finds_aya_outside_its_places() {
    let files = tree(&[
        ("bpf::loader", "use aya::Ebpf;"),
        ("family::runq::collect", "fn f(m: aya::maps::Map) {}"),
        ("family::runq::blame", "use aya::maps::HashMap;"),
        ("report", "let s = \"aya::maps\"; // aya::Ebpf"),
    ]);
    assert_eq!(aya_violations(&files), vec!["family::runq::blame"]);
}

#[test]
fn the_checker_reads_use_trees() {
    let (imports, rest) = uses(
        "use crate::{a::{b::C, d as e}, f::{self, *}};\nuse super::g;\nlet x = crate::h::i();",
    );
    let got: Vec<(String, Option<String>)> = imports
        .into_iter()
        .map(|i| (i.path.join("::"), i.alias))
        .collect();
    assert_eq!(
        got,
        vec![
            ("crate::a::b::C".into(), Some("C".into())),
            ("crate::a::d".into(), Some("e".into())),
            ("crate::f".into(), Some("f".into())),
            ("crate::f".into(), None),
            ("super::g".into(), Some("g".into())),
        ]
    );
    assert_eq!(inline_paths(&rest), vec![vec!["crate", "h", "i"]]);
}
