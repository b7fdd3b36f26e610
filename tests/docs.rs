//! The docs against the repository: the paths they name exist, the lists they give are whole
//! (fuzz targets, `bpk` commands, what the tests skip without), and what they tell users to
//! write works for an unpublished crate. (The snippets of README.md and docs/guide.md are
//! compiled and run as doctests: `src/lib.rs`.)

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The user-facing docs.
const DOCS: [&str; 8] = [
    "README.md",
    "CHANGELOG.md",
    "CONTRIBUTING.md",
    "ARCHITECTURE.md",
    "docs/guide.md",
    "docs/format.md",
    "docs/integrity.md",
    "docs/benchmarks.md",
];

/// The names of the files in `dir` with extension `ext`, without it, sorted.
fn stems(dir: &str, ext: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == ext).then(|| path.file_stem()?.to_str().map(str::to_string))?
        })
        .collect();
    names.sort();
    names
}

/// Every backticked token of `text` that looks like a path in the repository (two segments at
/// least, and a file extension or a trailing `/`).
fn paths_in(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            t.trim_end_matches('/').contains('/')
                && !t.contains([' ', '*', '<', '$', ':', '{'])
                && !t.starts_with(['/', '.', '-'])
                && (t.ends_with('/')
                    || Path::new(t).extension().is_some_and(|e| {
                        ["rs", "md", "sh", "py", "toml"].contains(&e.to_str().unwrap())
                    }))
        })
        .collect()
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for doc in DOCS {
        for path in paths_in(&read(doc)) {
            // A path from the root, or (as the docs write module files) under `src/`.
            if !root().join(path).exists() && !root().join("src").join(path).exists() {
                missing.push(format!("{doc}: `{path}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named but not there:\n{}",
        missing.join("\n")
    );
}

#[test]
fn contributing_and_the_fuzz_script_name_every_fuzz_target() {
    let targets = stems("fuzz/fuzz_targets", "rs");
    assert_eq!(targets.len(), 11, "{targets:?}");
    let contributing = read("CONTRIBUTING.md");
    let script = read("scripts/fuzz.sh");
    let defaults = script
        .lines()
        .find(|l| l.contains("|| targets=("))
        .expect("the script's default targets");
    for target in &targets {
        assert!(
            contributing.contains(&format!("`{target}`")),
            "CONTRIBUTING.md does not list the fuzz target `{target}`"
        );
        assert!(
            defaults.split(['(', ')', ' ']).any(|t| t == target),
            "scripts/fuzz.sh does not run `{target}` by default: {defaults}"
        );
    }
}

#[test]
fn the_changelog_lists_every_bpk_command() {
    let changelog = read("CHANGELOG.md");
    let line = changelog
        .lines()
        .find(|l| l.starts_with("- **`bpk`**"))
        .expect("CHANGELOG's bpk line");
    for command in ["inspect", "verify", "diff", "cat", "convert", "migrate"] {
        assert!(
            root().join(format!("src/bin/bpk/{command}.rs")).exists(),
            "{command}"
        );
        assert!(
            line.contains(command),
            "CHANGELOG's bpk line lacks {command}: {line}"
        );
    }
}

#[test]
fn what_the_tests_skip_without_is_said_where_users_look() {
    // Each requirement that `common::skip` reports, in README's troubleshooting and in
    // CONTRIBUTING's table.
    for doc in ["README.md", "CONTRIBUTING.md"] {
        let text = read(doc);
        for need in [
            "BURNPACK_S3_BUCKET",
            "BURNPACK_REAL_SAFETENSORS",
            "Vulkan",
            "BURNPACK_PYTHONPATH",
            "`numpy`",
        ] {
            assert!(
                text.contains(need),
                "{doc} does not say the tests need {need}"
            );
        }
    }
}

#[test]
fn no_doc_tells_users_to_depend_on_an_unpublished_version() {
    let readme = read("README.md");
    assert!(
        readme.contains("not on crates.io"),
        "README no longer says so"
    );
    for doc in DOCS {
        let text = read(doc);
        assert!(
            !text.contains("burnpack = { version"),
            "{doc} tells users to depend on a published version"
        );
    }
}

#[test]
fn docs_name_the_current_api() {
    for file in DOCS.iter().copied().chain(["Cargo.toml"]) {
        let text = read(file);
        for stale in ["read::PackSlice", "`convert::{"] {
            assert!(!text.contains(stale), "{file} names {stale}");
        }
    }
    // The deprecated alias is named only as such (CHANGELOG).
    for file in ["README.md", "docs/guide.md", "Cargo.toml"] {
        assert!(
            !read(file).contains("burnpack::convert`"),
            "{file} names burnpack::convert"
        );
    }
    let readme = read("README.md");
    assert!(
        !readme.contains("WebAssembly and `no_std` are not supported"),
        "README contradicts its own \"Web and embedded\""
    );
    // The guide is a doctest as README is (declared beside the formats, whose features its
    // test command needs: the crate root names no format's feature).
    let lib = read("src/lib.rs");
    let interop = read("src/interop/mod.rs");
    assert!(interop.contains(r#"include_str!("../../docs/guide.md")"#));
    assert!(lib.contains(r#"include_str!("../README.md")"#));
}

#[test]
fn incremental_checkpoints_are_documented_where_users_look() {
    for doc in [
        "docs/guide.md",
        "src/lib.rs",
        "src/checkpoint/mod.rs",
        "CHANGELOG.md",
        "README.md",
    ] {
        let text = read(doc);
        assert!(
            text.contains("incremental") || text.contains("Incremental"),
            "{doc} says nothing of incremental checkpoints"
        );
        assert!(
            text.contains("examples/incremental.rs") || text.contains("--example incremental"),
            "{doc} does not name examples/incremental.rs"
        );
    }
}
