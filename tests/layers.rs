//! The crate's layers, as docs/design.md ("The layers") lists them, hold in
//! the code: a top-level module of `src/` names only modules of a lower
//! layer, never one of its own layer or above, so the import graph has no
//! cycle. Every reference counts: `use` trees with their `{}` groups, paths
//! written inline, `super::` paths that climb out of a module, names the
//! crate root re-exports, and the unit tests inside `src/` too.
//!
//! The source is read as text, without comments and literals; no mount
//! needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The layers from the numbered list of docs/design.md's "The layers"
/// section, bottom first: the modules each item names in backquotes
/// before its first ": " (what follows describes them, and may name
/// modules of other layers).
fn documented_layers(modules: &BTreeSet<String>) -> Vec<Vec<String>> {
    let doc = fs::read_to_string(Path::new(ROOT).join("docs/design.md")).expect("docs/design.md");
    let section = doc.split("\n## The layers\n").nth(1).expect("docs/design.md has a \"The layers\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut items: Vec<String> = Vec::new();
    for line in section.lines() {
        let numbered = line.split_once(". ").filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if let Some((_, rest)) = numbered {
            items.push(rest.to_string());
        } else if line.starts_with("   ") && !items.is_empty() {
            let last = items.len() - 1;
            items[last].push(' ');
            items[last].push_str(line.trim());
        } else if !items.is_empty() {
            break;
        }
    }
    items
        .iter()
        .map(|item| {
            let mut layer: Vec<String> = Vec::new();
            let names = item.split(": ").next().unwrap_or(item);
            for name in names.split('`').skip(1).step_by(2) {
                if modules.contains(name) && !layer.iter().any(|m| m == name) {
                    layer.push(name.to_string());
                }
            }
            layer
        })
        .collect()
}

/// The top-level modules `src/lib.rs` declares, and the names it
/// re-exports (`pub use module::{A, B}`) with the module each comes from.
fn crate_root() -> (BTreeSet<String>, BTreeMap<String, String>) {
    let lib = fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).expect("src/lib.rs");
    let tokens = tokens(&strip(&lib));
    let mut modules = BTreeSet::new();
    let mut reexports = BTreeMap::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "mod" && i + 1 < tokens.len() {
            modules.insert(tokens[i + 1].clone());
        }
        if tokens[i] == "use" {
            let (paths, next) = use_tree(&tokens, i + 1, &[]);
            for path in paths {
                if let (Some(first), Some(last)) = (path.first(), path.last()) {
                    reexports.insert(last.clone(), first.clone());
                }
            }
            i = next;
            continue;
        }
        i += 1;
    }
    (modules, reexports)
}

/// `text` with comments, string, byte-string and char literals blanked out
/// (lifetimes kept), so only code remains.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
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
        } else if (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r')))
            && !ident_byte(i.checked_sub(1).map(|p| b[p]))
            && raw_string_start(b, if c == b'r' { i + 1 } else { i + 2 }).is_some()
        {
            let start = if c == b'r' { i + 1 } else { i + 2 };
            let hashes = raw_string_start(b, start).unwrap_or(0);
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            i = start + hashes + 1;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}', a multi-byte char), or
            // a lifetime or label ('a), which stays.
            let rest = &text[i + 1..];
            let mut chars = rest.char_indices();
            match chars.next() {
                Some((_, '\\')) => {
                    let end = rest[1..].find('\'').map(|e| e + 2).unwrap_or(rest.len());
                    i += 1 + end;
                    out.push_str("' '");
                }
                Some((_, ch)) if rest[ch.len_utf8()..].starts_with('\'') => {
                    i += 1 + ch.len_utf8() + 1;
                    out.push_str("' '");
                }
                _ => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn ident_byte(b: Option<u8>) -> bool {
    b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// How many `#` open a raw string whose `#`s start at `at`, if one does.
fn raw_string_start(b: &[u8], at: usize) -> Option<usize> {
    let hashes = b[at.min(b.len())..].iter().take_while(|&&c| c == b'#').count();
    (b.get(at + hashes) == Some(&b'"')).then_some(hashes)
}

/// Identifiers (with `$crate` as `crate`), `::` and single punctuation.
fn tokens(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(code[start..i].to_string());
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push("::".into());
            i += 2;
        } else if c.is_ascii_whitespace() || c == b'$' {
            i += 1;
        } else if c.is_ascii() {
            out.push((c as char).to_string());
            i += 1;
        } else {
            i += code[i..].chars().next().map(char::len_utf8).unwrap_or(1);
        }
    }
    out
}

/// The paths of the use tree starting at `tokens[at]`, each with `prefix`
/// in front, and the index just past the tree.
fn use_tree(tokens: &[String], mut at: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix.to_vec();
    let mut paths = Vec::new();
    while at < tokens.len() {
        match tokens[at].as_str() {
            "::" => at += 1,
            "{" => {
                at += 1;
                while at < tokens.len() && tokens[at] != "}" {
                    let (inner, next) = use_tree(tokens, at, &path);
                    paths.extend(inner);
                    at = next;
                    if tokens.get(at).map(String::as_str) == Some(",") {
                        at += 1;
                    }
                }
                return (paths, at + 1);
            }
            "as" => {
                paths.push(path);
                return (paths, at + 2);
            }
            "," | "}" | ";" => {
                paths.push(path);
                return (paths, if tokens[at] == ";" { at + 1 } else { at });
            }
            name => {
                path.push(name.to_string());
                at += 1;
            }
        }
    }
    paths.push(path);
    (paths, at)
}

/// The module path of a file under `src/`: `journal/retention.rs` is
/// `[journal, retention]`, `journal/mod.rs` is `[journal]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src/");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The top-level module a path written in module `here` names, if it
/// starts at the crate root (`crate::`, `$crate::`, or `super::` climbing
/// out of `here`'s top-level module).
fn top_module(path: &[String], here: &[String], reexports: &BTreeMap<String, String>) -> Option<String> {
    let mut base = here.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") | Some("self") => {
            while let Some(step) = rest.first().map(String::as_str) {
                match step {
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            if !base.is_empty() {
                return None;
            }
        }
        _ => return None,
    }
    let first = rest.first()?;
    Some(reexports.get(first).cloned().unwrap_or_else(|| first.clone()))
}

/// Every crate-root path one file names: (top-level module, the path).
fn references(file_path: &[String], code: &str, reexports: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    // Inline modules (`mod tests { ... }`) deepen the path `super` climbs.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let toks = tokens(code);
    let mut depth = 0usize;
    let mut i = 0;
    let here = |inline: &Vec<(String, usize)>| -> Vec<String> {
        file_path.iter().cloned().chain(inline.iter().map(|(m, _)| m.clone())).collect()
    };
    while i < toks.len() {
        let t = toks[i].as_str();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if toks.get(i + 2).map(String::as_str) == Some("{") => {
                inline.push((toks[i + 1].clone(), depth));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let (paths, next) = use_tree(&toks, i + 1, &[]);
                for p in paths {
                    if let Some(m) = top_module(&p, &here(&inline), reexports) {
                        found.push((m, format!("use {}", p.join("::"))));
                    }
                }
                i = next;
                continue;
            }
            "crate" | "super" | "self" if toks.get(i + 1).map(String::as_str) == Some("::") => {
                let mut path = Vec::new();
                while i < toks.len() {
                    path.push(toks[i].clone());
                    if toks.get(i + 1).map(String::as_str) == Some("::")
                        && toks
                            .get(i + 2)
                            .is_some_and(|n| n.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_'))
                    {
                        i += 2;
                    } else {
                        break;
                    }
                }
                i += 1;
                if let Some(m) = top_module(&path, &here(&inline), reexports) {
                    found.push((m, path.join("::")));
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        fs::read_dir(dir).expect("a readable source folder").map(|e| e.expect("a folder entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every reference from one top-level module to another:
/// (from, to) -> places ("file: path").
fn import_graph(
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> BTreeMap<(String, String), Vec<String>> {
    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let path = module_path(&src, &file);
        // The crate root and the binary are above every module.
        let Some(from) = path.first().filter(|m| modules.contains(*m)) else { continue };
        let code = strip(&fs::read_to_string(&file).expect("a readable source file"));
        let rel = file.strip_prefix(ROOT).unwrap_or(&file).display().to_string();
        for (to, text) in references(&path, &code, reexports) {
            if &to != from && modules.contains(&to) {
                let places = graph.entry((from.clone(), to)).or_default();
                let place = format!("{rel}: {text}");
                if !places.contains(&place) {
                    places.push(place);
                }
            }
        }
    }
    graph
}

#[test]
fn the_parser_sees_every_form_of_reference() {
    let reexports = BTreeMap::from([("Error".to_string(), "error".to_string())]);
    let code = strip(
        r#"
        use crate::{a::X, b, c::{d::Y, e}};
        use super::super::f::Z;
        // use crate::commented;
        /* crate::blocked:: */
        fn g<'a>(x: &'a str) -> crate::Error { let _ = "crate::quoted"; let _ = '{'; crate::h::call(super::super::i::J) }
        mod tests { use super::super::super::k; use super::*; }
        "#,
    );
    let here = vec!["m".to_string(), "n".to_string()];
    let found: BTreeSet<String> = references(&here, &code, &reexports).into_iter().map(|(m, _)| m).collect();
    let want: BTreeSet<String> = ["a", "b", "c", "f", "error", "h", "i", "k"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, want);
}

#[test]
fn modules_import_only_lower_layers() {
    let (modules, reexports) = crate_root();
    let layers = documented_layers(&modules);
    assert!(layers.len() > 1, "no layers found in docs/design.md's \"The layers\" list");

    let mut level: BTreeMap<String, usize> = BTreeMap::new();
    for (n, layer) in layers.iter().enumerate() {
        assert!(!layer.is_empty(), "item {} of docs/design.md's layers names no module before its \": \"", n + 1);
        for m in layer {
            assert!(level.insert(m.clone(), n).is_none(), "docs/design.md puts `{m}` in two layers");
        }
    }
    let mut wrong = Vec::new();
    for m in modules.iter().filter(|m| !level.contains_key(*m)) {
        wrong.push(format!("{m} is declared in src/lib.rs but in no layer of docs/design.md"));
    }

    for ((from, to), places) in &import_graph(&modules, &reexports) {
        let (Some(&above), Some(&below)) = (level.get(from), level.get(to)) else { continue };
        if below >= above {
            let how = if below == above { "its own layer" } else { "a layer above" };
            wrong.push(format!(
                "{from} (layer {}) imports {to} ({how}, layer {}):\n    {}",
                above + 1,
                below + 1,
                places.join("\n    ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{} breaks of the layers of docs/design.md:\n{}", wrong.len(), wrong.join("\n"));
}
