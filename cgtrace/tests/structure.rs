//! The daemon's structure, checked: no import cycles between its modules (file by file), and no
//! byte reading with `unsafe` outside the decoder.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

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

/// `family/runq/mod.rs` → `family::runq`; `lib.rs`/`main.rs` → the crate root (``).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(root)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts.join("::")
}

/// The code of a file without its `#[cfg(test)]` part and without comments.
fn code(src: &str) -> String {
    let src = src.split("#[cfg(test)]").next().unwrap_or("");
    src.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b::…` path a file names, including inside `use crate::{a::{…}, b}` groups.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        out.extend(expand(rest));
    }
    out
}

/// The paths at the start of `s`: `a::b::C`, or a group `{a::b, c::{d, e}}`.
fn expand(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(body) = s.strip_prefix('{') {
        let mut depth = 0;
        let mut items = Vec::new();
        let mut start = 0;
        for (i, ch) in body.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&body[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return items.into_iter().flat_map(expand).collect();
    }
    let ident: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if ident.is_empty() || !ident.starts_with(|c: char| c.is_ascii_lowercase()) {
        return vec![Vec::new()];
    }
    let after = &s[ident.len()..];
    match after.strip_prefix("::") {
        Some(more) => expand(more)
            .into_iter()
            .map(|mut p| {
                p.insert(0, ident.clone());
                p
            })
            .collect(),
        None => vec![vec![ident]],
    }
}

#[test]
fn no_import_cycles_between_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&root, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = module_of(&root, f);
        let src = std::fs::read_to_string(f).expect("read");
        for path in crate_paths(&code(&src)) {
            // The longest prefix that is a module is what the file depends on.
            let Some(to) = (1..=path.len())
                .rev()
                .map(|k| path[..k].join("::"))
                .find(|m| modules.contains(m))
            else {
                continue;
            };
            let related = to == from
                || to.starts_with(&format!("{from}::"))
                || from.starts_with(&format!("{to}::"))
                || to.is_empty()
                || from.is_empty();
            if !related {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a cycle.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| s == m).unwrap_or(0);
                let mut cycle = stack[at..].to_vec();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        let mut stack = Vec::new();
        if let Some(cycle) = visit(m, &edges, &mut state, &mut stack) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
    assert!(edges.len() > 20, "the graph was read: {edges:?}");
}

#[test]
fn bytes_become_records_only_in_the_decoder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    for f in &files {
        if f.ends_with("decode.rs") {
            continue;
        }
        let src = code(&std::fs::read_to_string(f).expect("read"));
        for needle in ["read_unaligned", "read_pod", "transmute", "from_raw_parts"] {
            assert!(
                !src.contains(needle),
                "{}: {needle} outside decode.rs",
                f.display()
            );
        }
    }
}

#[test]
fn the_checker_reads_grouped_paths() {
    let paths = crate_paths("use crate::{a::{b::C, d}, e::f};\nlet x = crate::g::h();");
    assert_eq!(
        paths,
        vec![
            vec!["a".to_string(), "b".into()],
            vec!["a".into(), "d".into()],
            vec!["e".into(), "f".into()],
            vec!["g".into(), "h".into()],
        ]
    );
}
