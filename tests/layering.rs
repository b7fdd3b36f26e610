//! The layering of `src/`, read from the code (comments are not code; string literals are not
//! paths, but a format named in a message is still named):
//!
//! - no circle between the files of a folder (each file's `super::` references, a name its
//!   folder's `mod.rs` re-exports counted as the file it comes from);
//! - every `crate::...` edge between rooms (the top-level modules of `src/`: `use`, `pub use`
//!   and paths inside expressions, `super::` chains resolved) is one the graph in
//!   ARCHITECTURE.md's fenced `layering` block allows, and there is no circle between rooms;
//!   test code (`#[cfg(test)]` items and the files they declare) may reach up, to check a
//!   room with the rooms above it;
//! - a format (`safetensors`, `pytorch`, `gguf`, `numpy`, `burn_record` with its feature `legacy`) is
//!   named only in its folder and in the registry (`interop/registry.rs`, `interop/outputs.rs`,
//!   `interop/mod.rs`, the fuzz bodies of `interop/fuzz.rs`, the deprecated `src/convert.rs`,
//!   and `lib.rs`'s module lines and doctest gates); `bpk` names none;
//! - crate code uses an item's one real path: no root alias (`crate::Writer`) and no
//!   `#[doc(hidden)]` compatibility re-export (`crate::read::TensorSource`); `bpk` likewise
//!   with `burnpack::`;
//! - every `unsafe` block, `unsafe fn` and `unsafe impl` has its `// SAFETY:` comment (an
//!   `unsafe fn` may have a `# Safety` doc section instead), as
//!   `clippy::undocumented_unsafe_blocks` would say where clippy runs;
//! - the platform is chosen once per file: in `src/platform/`, an OS `cfg` is only on the
//!   `mod` and `use` lines of `platform.rs`.
//!
//! ARCHITECTURE.md states the graph; an edge or a circle this finds is a design change made
//! there first, never an exception here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms of `src/` and the folders of the formats, with each format's feature.
const FORMATS: [(&str, &str); 6] = [
    ("safetensors", "safetensors"),
    ("pytorch", "pytorch"),
    ("gguf", "gguf"),
    ("numpy", "numpy"),
    ("onnx", "onnx"),
    ("burn_record", "legacy"),
];

/// Files that may name every format: the registry, the declarations of the format folders,
/// the fuzz targets' bodies (ARCHITECTURE.md's recipe for a format puts each there) and the
/// deprecated alias of `interop::safetensors`. (`lib.rs`: its module lines and doctest gates.)
const REGISTRY: [&str; 5] = [
    "interop/registry.rs",
    "interop/outputs.rs",
    "interop/mod.rs",
    "interop/fuzz.rs",
    "convert.rs",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Two views of a file's text, byte for byte the same length and lines as the file: `text`
/// with its comments blanked (doc comments included), `code` with its string and character
/// literals blanked as well (their quotes kept).
struct Views {
    text: String,
    code: String,
}

fn views(raw: &str) -> Views {
    let b = raw.as_bytes();
    let mut text = b.to_vec();
    let mut code = b.to_vec();
    let blank = |v: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut v[from..to] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut text, i, end);
            blank(&mut code, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut text, i, j);
            blank(&mut code, i, j);
            i = j;
        } else if (b[i] == b'r' || b[i..].starts_with(b"br")) && (i == 0 || !ident(b[i - 1])) && {
            let at = i + if b[i] == b'b' { 2 } else { 1 };
            let hashes = b[at..].iter().take_while(|&&c| c == b'#').count();
            b.get(at + hashes) == Some(&b'"')
        } {
            let at = i + if b[i] == b'b' { 2 } else { 1 };
            let hashes = b[at..].iter().take_while(|&&c| c == b'#').count();
            let open = at + hashes + 1;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let end = (open..b.len())
                .find(|&j| b[j..].starts_with(&close))
                .unwrap_or(b.len());
            blank(&mut code, open, end);
            i = (end + close.len()).min(b.len());
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut code, i + 1, j.min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}', 'é'), or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                (i + 3..b.len()).find(|&j| b[j] == b'\'')
            } else {
                let width = raw[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + 1 + width)
            };
            match end {
                Some(end) => {
                    blank(&mut code, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    Views {
        text: String::from_utf8(text).unwrap(),
        code: String::from_utf8(code).unwrap(),
    }
}

/// A file's code: its comments (doc comments included) and string literals blanked.
fn code(path: &Path) -> String {
    views(&std::fs::read_to_string(path).unwrap()).code
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
    find_circles(&edges)
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

/// A token of code: an identifier (or keyword), `::`, or one other character; with its byte
/// offset.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    at: usize,
}

fn tokens(code: &str) -> Vec<Token> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            out.push(Token {
                text: code[start..i].to_string(),
                at: start,
            });
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if b[i..].starts_with(b"::") {
            out.push(Token {
                text: "::".into(),
                at: i,
            });
            i += 2;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else {
            out.push(Token {
                text: (c as char).to_string(),
                at: i,
            });
            i += 1;
        }
    }
    out
}

fn is_ident(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The paths of a path or `use` tree starting at `t[i]` (after its leading `crate::`), each
/// with the index of its last token: `a::b::{c, d::{e as f, self}}` is `a::b::c`, `a::b::d::e`,
/// `a::b::d`.
fn tree(t: &[Token], mut i: usize) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    match t.get(i).map(|x| x.text.as_str()) {
        Some("{") => {
            i += 1;
            let mut depth = 0;
            let start = i;
            // Each item of the group, split at top-level commas.
            let mut items = vec![start];
            while i < t.len() {
                match t[i].text.as_str() {
                    "{" => depth += 1,
                    "}" if depth == 0 => break,
                    "}" => depth -= 1,
                    "," if depth == 0 => items.push(i + 1),
                    _ => {}
                }
                i += 1;
            }
            for item in items {
                out.extend(tree(t, item));
            }
        }
        Some(seg) if is_ident(seg) && seg != "self" => {
            let more = t.get(i + 1).is_some_and(|x| x.text == "::")
                && t.get(i + 2)
                    .is_some_and(|x| is_ident(&x.text) || x.text == "{");
            if more {
                for (mut rest, end) in tree(t, i + 2) {
                    rest.insert(0, seg.to_string());
                    out.push((rest, end));
                }
            } else {
                out.push((vec![seg.to_string()], i));
            }
        }
        _ => out.push((Vec::new(), i)),
    }
    out
}

/// One file of `src/`.
struct File {
    /// Its path under `src/`, with `/`.
    rel: String,
    /// The room it is in (`lib` for `lib.rs`, `bin` for `bin/`).
    room: String,
    /// Its module path (`["interop", "gguf", "source"]`; `bin/bpk/` files: their own crate's).
    module: Vec<String>,
    raw: String,
    views: Views,
    tokens: Vec<Token>,
    /// Byte ranges of `#[cfg(test)]` items, and of inline modules with their names.
    tests: Vec<(usize, usize)>,
    inline: Vec<(usize, usize, String)>,
    /// Whether the whole file is test code (declared by a `#[cfg(test)] mod x;`).
    test_file: bool,
}

impl File {
    fn line(&self, at: usize) -> usize {
        self.raw[..at].matches('\n').count() + 1
    }

    fn in_test(&self, at: usize) -> bool {
        self.test_file || self.tests.iter().any(|&(a, b)| a <= at && at <= b)
    }

    /// The module path at byte `at` (the file's, and the inline modules around it).
    fn module_at(&self, at: usize) -> Vec<String> {
        let mut path = self.module.clone();
        for (a, b, name) in &self.inline {
            if *a <= at && at <= *b {
                path.push(name.clone());
            }
        }
        path
    }

    /// The absolute paths this file names through `crate::` / `$crate::` / `super::` (and,
    /// for `bin/`, `burnpack::`), each with its byte offset.
    fn paths(&self) -> Vec<(Vec<String>, usize)> {
        let t = &self.tokens;
        let mut out = Vec::new();
        for i in 0..t.len() {
            let after_path = i > 0 && t[i - 1].text == "::";
            if after_path || t.get(i + 1).is_none_or(|x| x.text != "::") {
                continue;
            }
            let (base, next) = match t[i].text.as_str() {
                "crate" if self.room != "bin" => (Vec::new(), i + 2),
                "burnpack" if self.room == "bin" => (Vec::new(), i + 2),
                "super" if self.room != "bin" => {
                    let mut module = self.module_at(t[i].at);
                    let mut j = i;
                    while t.get(j).is_some_and(|x| x.text == "super")
                        && t.get(j + 1).is_some_and(|x| x.text == "::")
                    {
                        module.pop();
                        j += 2;
                    }
                    (module, j)
                }
                _ => continue,
            };
            for (rest, _) in tree(t, next) {
                let mut path = base.clone();
                path.extend(rest);
                if !path.is_empty() {
                    out.push((path, t[i].at));
                }
            }
        }
        out
    }

    /// The `#[doc(hidden)] pub use` re-exports of this file: their public paths.
    fn hidden_reexports(&self) -> Vec<Vec<String>> {
        let t = &self.tokens;
        let mut out = Vec::new();
        for i in 0..t.len() {
            let hidden = ["#", "[", "doc", "(", "hidden", ")", "]"]
                .iter()
                .enumerate()
                .all(|(k, s)| t.get(i + k).is_some_and(|x| x.text == *s));
            if !hidden {
                continue;
            }
            let mut j = skip_attributes(t, i);
            if t.get(j).is_some_and(|x| x.text == "pub")
                && t.get(j + 1).is_some_and(|x| x.text == "use")
            {
                j += 2;
                let module = self.module_at(t[i].at);
                out.extend(leaves(t, j).into_iter().map(|name| {
                    let mut path = module.clone();
                    path.push(name);
                    path
                }));
            }
        }
        out
    }
}

/// The index of the first token after the attributes that start at `t[i]`.
fn skip_attributes(t: &[Token], mut i: usize) -> usize {
    while t.get(i).is_some_and(|x| x.text == "#") && t.get(i + 1).is_some_and(|x| x.text == "[") {
        i = close(t, i + 1) + 1;
    }
    i
}

/// The index of the bracket closing the one at `t[i]`.
fn close(t: &[Token], i: usize) -> usize {
    let (open, shut) = match t[i].text.as_str() {
        "[" => ("[", "]"),
        "(" => ("(", ")"),
        _ => ("{", "}"),
    };
    let mut depth = 0;
    for (j, x) in t.iter().enumerate().skip(i) {
        if x.text == open {
            depth += 1;
        } else if x.text == shut {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    t.len() - 1
}

/// The names a `use` tree at `t[i]` brings in (the last segment of each path, or its `as`
/// name), up to its `;`.
fn leaves(t: &[Token], i: usize) -> Vec<String> {
    let end = (i..t.len()).find(|&j| t[j].text == ";").unwrap_or(t.len());
    let mut out = Vec::new();
    for j in i..end {
        let x = &t[j].text;
        if !is_ident(x) || x == "self" || x == "crate" || x == "super" || x == "as" {
            continue;
        }
        let next = t.get(j + 1).map_or("", |x| x.text.as_str());
        let prev = t.get(j.wrapping_sub(1)).map_or("", |x| x.text.as_str());
        if next == "::" || next == "as" {
            continue;
        }
        if prev == "as" || next == "," || next == "}" || next == ";" {
            out.push(x.clone());
        }
    }
    out
}

/// Every `.rs` file of `src/`, read.
fn files() -> Vec<File> {
    files_in(&src())
}

/// Every `.rs` file under `root` (a `src/`), read.
fn files_in(root: &Path) -> Vec<File> {
    let root = root.to_path_buf();
    let mut paths = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    let mut files: Vec<File> = paths
        .iter()
        .map(|path| {
            let rel = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let raw = std::fs::read_to_string(path).unwrap();
            let views = views(&raw);
            let tokens = tokens(&views.code);
            let parts: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
            let room = match parts[0] {
                "lib" => "lib",
                "convert" => "interop",
                other => other,
            }
            .to_string();
            let mut module: Vec<String> = if room == "bin" {
                parts[2..].iter().map(ToString::to_string).collect()
            } else {
                parts.iter().map(ToString::to_string).collect()
            };
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let (tests, inline) = regions(&tokens);
            File {
                rel,
                room,
                module,
                raw,
                views,
                tokens,
                tests,
                inline,
                test_file: false,
            }
        })
        .collect();
    // Files declared by a `#[cfg(test)] mod x;` (and what they declare) are test code.
    let mut test_files = BTreeSet::new();
    loop {
        let before = test_files.len();
        for file in &files {
            let t = &file.tokens;
            for i in 0..t.len() {
                if t[i].text == "mod"
                    && t.get(i + 2).is_some_and(|x| x.text == ";")
                    && (file.in_test(t[i].at) || test_files.contains(&file.rel))
                {
                    let dir = match file.rel.rsplit_once('/') {
                        Some((dir, name)) if ["mod.rs", "lib.rs", "main.rs"].contains(&name) => {
                            dir.to_string()
                        }
                        Some(_) => file.rel.trim_end_matches(".rs").to_string(),
                        None if file.rel == "lib.rs" => String::new(),
                        None => file.rel.trim_end_matches(".rs").to_string(),
                    };
                    let name = &t[i + 1].text;
                    let join = |tail: &str| {
                        if dir.is_empty() {
                            tail.to_string()
                        } else {
                            format!("{dir}/{tail}")
                        }
                    };
                    test_files.insert(join(&format!("{name}.rs")));
                    test_files.insert(join(&format!("{name}/mod.rs")));
                }
            }
        }
        if test_files.len() == before {
            break;
        }
    }
    for file in &mut files {
        file.test_file = test_files.contains(&file.rel);
    }
    files
}

/// The byte ranges of `#[cfg(test)]` items (`cfg(all(test, ...))` too), and of inline
/// modules with their names.
fn regions(t: &[Token]) -> (Vec<(usize, usize)>, Vec<(usize, usize, String)>) {
    let mut tests = Vec::new();
    let mut inline = Vec::new();
    for i in 0..t.len() {
        if t[i].text == "#"
            && t.get(i + 1).is_some_and(|x| x.text == "[")
            && t.get(i + 2).is_some_and(|x| x.text == "cfg")
        {
            let end = close(t, i + 1);
            let words: Vec<&str> = t[i + 2..end].iter().map(|x| x.text.as_str()).collect();
            if words.contains(&"test") && !words.contains(&"not") {
                // The item: up to its `;` or its body's closing brace.
                let mut j = skip_attributes(t, i);
                while j < t.len() && t[j].text != ";" && t[j].text != "{" {
                    j += 1;
                }
                let last = if j < t.len() && t[j].text == "{" {
                    close(t, j)
                } else {
                    j.min(t.len() - 1)
                };
                tests.push((t[i].at, t[last].at));
            }
        }
        if t[i].text == "mod"
            && t.get(i + 1).is_some_and(|x| is_ident(&x.text))
            && t.get(i + 2).is_some_and(|x| x.text == "{")
        {
            inline.push((t[i + 2].at, t[close(t, i + 2)].at, t[i + 1].text.clone()));
        }
    }
    (tests, inline)
}

/// The intended graph: ARCHITECTURE.md's fenced `layering` block, one line a room
/// (`room -> lower, rooms`), each room with every room it may use (those listed, and what they
/// may use).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    graph_of(&std::fs::read_to_string(path).unwrap())
}

/// The graph of a document's `layering` block (see [`graph`]).
fn graph_of(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let block = doc
        .split("```layering\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md states the graph in a fenced `layering` block");
    let direct: BTreeMap<String, BTreeSet<String>> = block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (room, lower) = line
                .split_once("->")
                .unwrap_or_else(|| panic!("not `room -> rooms`: {line}"));
            let lower = lower
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(ToString::to_string)
                .collect();
            (room.trim().to_string(), lower)
        })
        .collect();
    for (room, lower) in &direct {
        for other in lower {
            assert!(
                direct.contains_key(other),
                "ARCHITECTURE.md: {room} -> {other}, a room with no line of its own"
            );
        }
    }
    let found = find_circles(&direct);
    assert!(
        found.is_empty(),
        "ARCHITECTURE.md's graph has circles: {found:?}"
    );
    direct
        .keys()
        .map(|room| {
            let mut reach = BTreeSet::new();
            let mut stack: Vec<&String> = direct[room].iter().collect();
            while let Some(next) = stack.pop() {
                if reach.insert(next.clone()) {
                    stack.extend(direct[next].iter());
                }
            }
            (room.clone(), reach)
        })
        .collect()
}

/// The circles of a directed graph, each as its nodes in order (the first node repeated at the
/// end), each found once (from its least node).
fn find_circles<S: AsRef<str> + Ord>(edges: &BTreeMap<S, BTreeSet<S>>) -> Vec<Vec<String>> {
    let empty = BTreeSet::new();
    let mut found = Vec::new();
    for start in edges.keys() {
        let start = start.as_ref();
        let mut stack = vec![vec![start]];
        while let Some(path) = stack.pop() {
            let last = *path.last().unwrap();
            let next_of = edges
                .iter()
                .find(|(k, _)| k.as_ref() == last)
                .map_or(&empty, |(_, v)| v);
            for next in next_of {
                let next = next.as_ref();
                if next == start {
                    let mut circle: Vec<String> = path.iter().map(ToString::to_string).collect();
                    circle.push(start.to_string());
                    found.push(circle);
                } else if !path.contains(&next) && next > start {
                    let mut longer = path.clone();
                    longer.push(next);
                    stack.push(longer);
                }
            }
        }
    }
    found
}

/// The names `lib.rs` re-exports at the crate root (`pub use module::{A, B};`), each with the
/// room it comes from.
fn root_aliases(files: &[File]) -> BTreeMap<String, String> {
    let lib = files.iter().find(|f| f.rel == "lib.rs").unwrap();
    let t = &lib.tokens;
    let mut out = BTreeMap::new();
    for i in 0..t.len() {
        if t[i].text == "pub" && t.get(i + 1).is_some_and(|x| x.text == "use") {
            let rooms: Vec<String> = tree(t, i + 2)
                .into_iter()
                .map(|(path, _)| path.first().cloned().unwrap_or_default())
                .collect();
            for (name, room) in leaves(t, i + 2).into_iter().zip(rooms) {
                out.insert(name, room);
            }
        }
    }
    out
}

/// What is wrong with the rooms of `files` against `graph`: each line names the file and the
/// line. (a) an edge the graph does not allow, (b) a circle between rooms, (c) a format named
/// outside its folder and the registry, (d) a root alias or a hidden compatibility path.
fn layering_faults(files: &[File], graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut faults = Vec::new();
    let rooms: BTreeSet<&str> = files
        .iter()
        .map(|f| f.room.as_str())
        .filter(|r| *r != "lib")
        .collect();
    for room in &rooms {
        if !graph.contains_key(*room) {
            faults.push(format!(
                "src/{room}: a room that ARCHITECTURE.md's `layering` block does not list"
            ));
        }
    }
    let aliases = root_aliases(files);
    let hidden: BTreeSet<Vec<String>> = files.iter().flat_map(File::hidden_reexports).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // (c), one line of a file once: what it names.
    let mut formats: BTreeMap<(String, usize), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let where_ = |at: usize| format!("src/{}:{}", file.rel, file.line(at));
        for (path, at) in file.paths() {
            let named = path.join("::");
            // (d) the one real path.
            if file.rel != "lib.rs" && aliases.contains_key(&path[0]) {
                faults.push(format!(
                    "{}: `{named}` is a root alias; use the item's module path",
                    where_(at)
                ));
            }
            if let Some(h) = hidden.iter().find(|h| path.starts_with(h)) {
                faults.push(format!(
                    "{}: `{named}` is a hidden compatibility path (`{}`); use the real one",
                    where_(at),
                    h.join("::")
                ));
            }
            // (c) a format's folder named outside it.
            if path.len() >= 2 && path[0] == "interop" {
                if let Some((folder, _)) = FORMATS.iter().find(|(f, _)| path[1] == *f) {
                    let own = file.rel.starts_with(&format!("interop/{folder}/"));
                    if !own && !REGISTRY.contains(&file.rel.as_str()) && file.rel != "lib.rs" {
                        formats
                            .entry((file.rel.clone(), file.line(at)))
                            .or_default()
                            .insert(format!("`{named}`"));
                    }
                }
            }
            // (a) the edge between rooms.
            if file.room == "bin" || file.room == "lib" || file.in_test(at) {
                continue;
            }
            let target = if rooms.contains(path[0].as_str()) {
                path[0].clone()
            } else if let Some(room) = aliases.get(&path[0]) {
                room.clone() // a root alias (also (d) above) is an edge to where it comes from
            } else {
                continue; // a root item or a macro
            };
            let target = if target == "convert" {
                "interop".to_string()
            } else {
                target
            };
            if target == file.room {
                continue;
            }
            edges
                .entry(file.room.clone())
                .or_default()
                .insert(target.clone());
            if graph
                .get(&file.room)
                .is_some_and(|allowed| !allowed.contains(&target))
            {
                faults.push(format!(
                    "{}: {} -> {target} (`{named}`), an edge ARCHITECTURE.md's graph does not \
                     allow",
                    where_(at),
                    file.room
                ));
            }
        }
        for (line, what) in format_names(file) {
            formats
                .entry((file.rel.clone(), line))
                .or_default()
                .insert(what);
        }
    }
    for ((rel, line), what) in formats {
        // A path's text is also found as text: say the longest.
        let what: Vec<&String> = what
            .iter()
            .filter(|w| {
                !what
                    .iter()
                    .any(|o| o != *w && o.starts_with(w.trim_end_matches('`')))
            })
            .collect();
        let what: Vec<&str> = what.iter().map(|w| w.as_str()).collect();
        faults.push(format!(
            "src/{rel}:{line}: names a format outside its folder and the registry: {}",
            what.join(", ")
        ));
    }
    // (b) no circle between rooms.
    for circle in find_circles(&edges) {
        faults.push(format!("a circle between rooms: {}", circle.join(" -> ")));
    }
    faults
}

/// (c), the rest: a format's folder named in a message, its feature gate, or its crate,
/// outside its folder and the registry.
fn format_names(file: &File) -> Vec<(usize, String)> {
    let mut faults = Vec::new();
    if REGISTRY.contains(&file.rel.as_str()) {
        return faults;
    }
    let text = &file.views.text;
    for (folder, feature) in FORMATS {
        if file.rel.starts_with(&format!("interop/{folder}/")) {
            continue;
        }
        let mut named = Vec::new();
        for (at, _) in text.match_indices(&format!("interop::{folder}")) {
            named.push((at, format!("`interop::{folder}`")));
        }
        let mut rest = 0;
        while let Some(found) = text[rest..].find("feature") {
            let at = rest + found;
            rest = at + 1;
            let tail = text[at + "feature".len()..].trim_start();
            let Some(tail) = tail.strip_prefix('=') else {
                continue;
            };
            if tail.trim_start().starts_with(&format!("\"{feature}\"")) {
                named.push((at, format!("the gate `feature = \"{feature}\"`")));
            }
        }
        if folder == "safetensors" {
            // The `safetensors` crate, at the start of a path.
            let t = &file.tokens;
            for i in 0..t.len() {
                if t[i].text == "safetensors"
                    && t.get(i + 1).is_some_and(|x| x.text == "::")
                    && (i == 0 || t[i - 1].text != "::")
                {
                    named.push((t[i].at, "the `safetensors` crate".to_string()));
                }
            }
        }
        for (at, what) in named {
            if file.rel == "lib.rs" && lib_may_gate(file, at) {
                continue;
            }
            faults.push((file.line(at), what));
        }
    }
    faults
}

/// Whether the format gate at byte `at` of `lib.rs` is on a module line or a doctest item.
fn lib_may_gate(file: &File, at: usize) -> bool {
    let t = &file.tokens;
    let Some(attr) = t.iter().rposition(|x| x.text == "#" && x.at < at) else {
        return false;
    };
    let end = close(t, attr + 1);
    let words: Vec<&str> = t[attr..end].iter().map(|x| x.text.as_str()).collect();
    let mut item = skip_attributes(t, attr);
    if t.get(item).is_some_and(|x| x.text == "pub") {
        item += 1;
    }
    words.contains(&"doctest") || t.get(item).is_some_and(|x| x.text == "mod")
}

/// Every `unsafe` block, `unsafe fn` and `unsafe impl` without its `// SAFETY:` comment (or,
/// for an `unsafe fn`, a `# Safety` doc section): the comment lines right above the line,
/// above the statement the line continues, or at the line's end.
fn undocumented_unsafe(file: &File) -> Vec<String> {
    let lines: Vec<&str> = file.raw.lines().collect();
    let mut faults = Vec::new();
    let t = &file.tokens;
    for i in 0..t.len() {
        if t[i].text != "unsafe" {
            continue;
        }
        let what = match t.get(i + 1).map(|x| x.text.as_str()) {
            Some("{") => "block",
            Some("fn") => "fn",
            Some("impl") => "impl",
            _ => continue,
        };
        let line = file.line(t[i].at) - 1;
        let says = |l: &str| l.contains("SAFETY:") || (what == "fn" && l.contains("# Safety"));
        let own = lines[line];
        let mut ok = own.find("//").is_some_and(|c| says(&own[c..]));
        let mut n = line;
        while !ok && n > 0 {
            n -= 1;
            let above = lines[n].trim();
            if above.starts_with("//") {
                // The comment block right above.
                let mut k = n;
                loop {
                    if says(lines[k]) {
                        ok = true;
                        break;
                    }
                    if k == 0 || !lines[k - 1].trim().starts_with("//") {
                        break;
                    }
                    k -= 1;
                }
                break;
            }
            let continues = !above.is_empty()
                && (above.starts_with("#[")
                    || !(above.ends_with(';') || above.ends_with('{') || above.ends_with('}')));
            if !continues {
                break;
            }
        }
        if !ok {
            faults.push(format!(
                "src/{}:{}: `unsafe {what}` without a `// SAFETY:` comment{}",
                file.rel,
                line + 1,
                if what == "fn" {
                    " or a `# Safety` doc section"
                } else {
                    ""
                }
            ));
        }
    }
    faults
}

/// An OS `cfg` in `src/platform/` anywhere but on a `mod` or `use` line of `platform.rs`.
fn platform_cfgs(file: &File) -> Vec<String> {
    const OS: [&str; 6] = [
        "unix",
        "windows",
        "target_os",
        "target_family",
        "target_arch",
        "target_env",
    ];
    let mut faults = Vec::new();
    if !(file.rel.starts_with("platform/") || file.rel == "platform.rs") {
        return faults;
    }
    let t = &file.tokens;
    for i in 0..t.len() {
        if !matches!(t[i].text.as_str(), "cfg" | "cfg_attr") {
            continue;
        }
        let Some(open) = (i + 1..t.len().min(i + 3)).find(|&j| t[j].text == "(") else {
            continue;
        };
        let end = close(t, open);
        if !t[open..end].iter().any(|x| OS.contains(&x.text.as_str())) {
            continue;
        }
        let attr_end = (end..t.len()).find(|&j| t[j].text == "]").unwrap_or(end);
        let mut item = skip_attributes(t, attr_end + 1);
        if t.get(item).is_some_and(|x| x.text == "pub") {
            item += 1;
            if t.get(item).is_some_and(|x| x.text == "(") {
                item = close(t, item) + 1;
            }
        }
        let on_mod_line = matches!(file.rel.as_str(), "platform.rs" | "platform/mod.rs")
            && t[i - 1].text == "["
            && t.get(item)
                .is_some_and(|x| x.text == "mod" || x.text == "use");
        if !on_mod_line {
            faults.push(format!(
                "src/{}:{}: an OS `cfg` inside the platform's code: choose the OS once, on the \
                 `mod` lines of platform.rs",
                file.rel,
                file.line(t[i].at)
            ));
        }
    }
    faults
}

#[test]
fn nothing_imports_upward_and_formats_stay_in_their_folders() {
    let files = files();
    let faults = layering_faults(&files, &graph());
    assert!(
        faults.is_empty(),
        "the layering of src/:\n{}",
        faults.join("\n")
    );
}

#[test]
fn every_unsafe_says_why_it_is_sound() {
    let faults: Vec<String> = files().iter().flat_map(undocumented_unsafe).collect();
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn the_platform_is_chosen_once_per_file() {
    let faults: Vec<String> = files().iter().flat_map(platform_cfgs).collect();
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

/// The checks find what they are for, in a `src/` made for it: an upward edge, a circle
/// between rooms, a format named outside its folder (a path, a gate, a message), a root alias,
/// a hidden compatibility path, an `unsafe` without its comment, an OS `cfg` in a platform
/// function; and nothing in test code, comments, the registry or a format's own folder.
#[test]
fn the_checks_find_what_they_are_for() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let graph = graph_of(
        "text\n```layering\nformat ->\nsource -> format\nread -> source\nwrite -> source\n\
         interop -> read, write\nplatform ->\n```\n",
    );
    write(
        "lib.rs",
        "pub mod format;\npub mod source;\npub mod read;\npub mod write;\n\
         #[cfg(feature = \"gguf\")]\npub mod interop;\nmod platform;\n\
         pub use write::Writer;\n",
    );
    write("format/mod.rs", "pub struct Header;\n");
    write(
        "source/mod.rs",
        "use crate::format::Header;\n// use crate::write::Writer; a comment is no edge\n\
         pub fn f() -> &'static str { \"crate::write::Writer in a string is no edge\" }\n",
    );
    write(
        "read/mod.rs",
        "#[doc(hidden)]\npub use crate::source::f as old;\n\
         pub fn g() { let _ = crate::source::f(); }\n",
    );
    write(
        "write/mod.rs",
        "pub struct Writer;\n#[cfg(test)]\nmod tests {\n    use crate::read::g;\n}\n",
    );
    write(
        "interop/mod.rs",
        "pub mod gguf;\n#[cfg(feature = \"gguf\")]\npub use gguf::Source;\n",
    );
    write(
        "interop/gguf/mod.rs",
        "pub struct Source;\nuse super::super::read::g;\n",
    );
    write("platform.rs", "#[cfg(unix)]\nmod unix;\n");
    write(
        "platform/unix.rs",
        "// SAFETY: a comment of its own.\npub fn ok() { unsafe { f() } }\n",
    );
    let files = files_in(dir.path());
    let faults = layering_faults(&files, &graph);
    assert!(faults.is_empty(), "{faults:#?}");
    assert!(files.iter().all(|f| undocumented_unsafe(f).is_empty()));
    assert!(files.iter().all(|f| platform_cfgs(f).is_empty()));

    write(
        "source/mod.rs",
        "use crate::format::Header;\npub fn f() {\n    let _ = crate::write::Writer;\n}\n",
    );
    write(
        "read/mod.rs",
        "#[doc(hidden)]\npub use crate::source::f as old;\n\
         pub fn g() -> crate::Writer { crate::interop::gguf::Source; todo!() }\n\
         #[cfg(feature = \"gguf\")]\npub fn h() { \"see interop::gguf\"; }\n",
    );
    write(
        "write/mod.rs",
        "pub struct Writer;\nfn w() { crate::read::old(); }\n",
    );
    write(
        "platform/unix.rs",
        "pub fn bad() {\n    let x = 1;\n    unsafe { f() }\n    #[cfg(target_os = \"linux\")]\n    \
         g();\n}\n",
    );
    let files = files_in(dir.path());
    let faults = layering_faults(&files, &graph).join("\n");
    for expected in [
        "src/source/mod.rs:3: source -> write (`write::Writer`), an edge",
        "src/write/mod.rs:2: write -> read (`read::old`), an edge",
        "src/write/mod.rs:2: `read::old` is a hidden compatibility path",
        "src/read/mod.rs:3: `Writer` is a root alias",
        "src/read/mod.rs:3: names a format outside its folder and the registry: \
         `interop::gguf::Source`",
        "src/read/mod.rs:4: names a format outside its folder and the registry: the gate \
         `feature = \"gguf\"`",
        "src/read/mod.rs:5: names a format outside its folder and the registry: `interop::gguf`",
        "a circle between rooms: read -> write -> read",
    ] {
        assert!(faults.contains(expected), "{expected}\nnot in:\n{faults}");
    }
    let unix = files.iter().find(|f| f.rel == "platform/unix.rs").unwrap();
    assert_eq!(
        undocumented_unsafe(unix),
        ["src/platform/unix.rs:3: `unsafe block` without a `// SAFETY:` comment"]
    );
    assert_eq!(platform_cfgs(unix).len(), 1, "{:?}", platform_cfgs(unix));
}
