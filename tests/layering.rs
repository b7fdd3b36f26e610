//! The layering of `src/`, read from the code: no circle between the files of a folder (each
//! file's `super::` references, a name its folder's `mod.rs` re-exports counted as the file it
//! comes from). ARCHITECTURE.md states the graph; a circle this finds is a design change made
//! there first, never an exception here. (The edges between folders, `crate::...`, and where
//! a format may be named are issue 50's next step.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file's text without its comments (line comments, doc comments included).
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `text` names `word` right after `super::` (alone, or inside `super::{...}`).
fn refers(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut rest = text;
    while let Some(at) = rest.find("super::") {
        rest = &rest[at + "super::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(|c: char| !is_ident(c))
                .filter(|n| !n.is_empty())
                .collect()
        } else {
            vec![rest.split(|c: char| !is_ident(c)).next().unwrap_or("")]
        };
        if names.contains(&word) {
            return true;
        }
    }
    false
}

/// The names `mod.rs` re-exports, with the file each comes from (`pub use file::{A, B};`).
fn reexports(module: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in module.split(';') {
        let statement = statement.trim();
        let Some(rest) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let Some((file, names)) = rest.split_once("::") else {
            continue;
        };
        for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() && name != "self" {
                out.entry(name.to_string())
                    .or_insert_with(|| file.to_string());
            }
        }
    }
    out
}

/// The circles between the files of `dir`, each as its files in order.
fn circles(dir: &Path) -> Vec<Vec<String>> {
    let files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".rs")?;
            (stem != "mod").then(|| stem.to_string())
        })
        .collect();
    let module = dir.join("mod.rs");
    let reexported = if module.exists() {
        reexports(&code(&module))
    } else {
        BTreeMap::new()
    };
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for file in &files {
        let text = code(&dir.join(format!("{file}.rs")));
        let to = edges.entry(file).or_default();
        for other in &files {
            if other != file && refers(&text, other) {
                to.insert(other);
            }
        }
        for (name, from) in &reexported {
            if from != file && files.contains(from) && refers(&text, name) {
                to.insert(files.iter().find(|f| *f == from).unwrap());
            }
        }
    }
    let mut found = Vec::new();
    for start in &files {
        let mut stack = vec![vec![start.as_str()]];
        while let Some(path) = stack.pop() {
            for next in &edges[path.last().unwrap()] {
                if next == start {
                    let mut circle: Vec<String> = path.iter().map(ToString::to_string).collect();
                    circle.push(start.clone());
                    found.push(circle);
                } else if !path.contains(next) && *next > start.as_str() {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push(longer);
                }
            }
        }
    }
    found
}

#[test]
fn no_circle_between_the_files_of_a_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs: Vec<PathBuf> = vec![root];
    let mut all = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            }
        }
        for circle in circles(&dir) {
            all.push(format!("{}: {}", dir.display(), circle.join(" -> ")));
        }
    }
    assert!(all.is_empty(), "circles between files:\n{}", all.join("\n"));
}

/// The check finds what it is for: a folder with a circle, one without.
#[test]
fn the_check_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("mod.rs", "mod a;\nmod b;\nmod c;\npub use c::Thing;\n");
    write(
        "a.rs",
        "use super::b::X;\n// super::c in a comment is no edge\n",
    );
    write("b.rs", "use super::{Thing, y};\n");
    write("c.rs", "pub struct Thing;\n");
    assert!(circles(dir.path()).is_empty());
    write("c.rs", "use super::a::Z;\npub struct Thing;\n");
    let found = circles(dir.path());
    assert_eq!(found, [vec!["a", "b", "c", "a"]], "{found:?}");
}
