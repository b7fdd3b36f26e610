//! `bpk` names no format (issue 50): its files reach every format through the library's
//! registry (`burnpack::interop::open_any_with`, `output_for`, `migration`), so no file of
//! `src/bin/bpk/` names a format's folder (`interop::safetensors`, ...) or its feature gate.

use std::path::Path;

/// The folders of `src/interop/` that hold a format (the registry's files are not one).
const FORMAT_FOLDERS: &[&str] = &[
    "safetensors",
    "burn_record",
    "gguf",
    "pytorch",
    "numpy",
    "onnx",
    "object_store",
];

/// The features that gate a format.
const FORMAT_FEATURES: &[&str] = &[
    "safetensors",
    "legacy",
    "pytorch",
    "gguf",
    "numpy",
    "onnx",
    "object-store",
];

/// A file's text without its comments (line comments, doc comments included).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What in `text` names a format: a path through a format's folder (`interop::gguf`,
/// `gguf::GgufSource`, `interop::{gguf, ...}`) or a format's feature gate.
fn names_a_format(text: &str) -> Vec<String> {
    let text = code(text);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for folder in FORMAT_FOLDERS {
        let mut rest = text.as_str();
        while let Some(at) = rest.find(folder) {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + folder.len()..];
            let whole = !before.is_some_and(is_ident) && !after.starts_with(is_ident);
            // A path segment: `::folder`, `folder::`, or a name in `interop::{...}`.
            let in_path = rest[..at].trim_end().ends_with("::")
                || after.starts_with("::")
                || rest[..at].trim_end().ends_with('{') && rest[..at].contains("interop::");
            if whole && in_path {
                found.push(format!("the path `{folder}`"));
            }
            rest = after;
        }
    }
    for feature in FORMAT_FEATURES {
        let compact: String = text.split_whitespace().collect();
        if compact.contains(&format!("feature=\"{feature}\"")) {
            found.push(format!("the feature gate `{feature}`"));
        }
    }
    found
}

#[test]
fn no_file_of_bpk_names_a_format() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/bpk");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            for what in names_a_format(&std::fs::read_to_string(&path).unwrap()) {
                found.push(format!("{}: {what}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "bpk names formats (reach them through burnpack::interop's registry):\n{}",
        found.join("\n")
    );
}

/// The scan finds what bpk used to say (before the registry's output side), and passes what
/// it says now.
#[test]
fn the_scan_finds_a_format_named() {
    for named in [
        "use burnpack::interop::safetensors::{ConvertError, writer_to_safetensors};",
        "use burnpack::interop::burn_record::burn_train_epochs;",
        "scheduler: burnpack::interop::burn_record::SchedulerKind,",
        "use burnpack::interop::{gguf, open_any};",
        "use gguf::GgufSource;",
        "#[cfg(feature = \"object-store\")]\nfn upload() {}",
        "#[cfg(not(feature = \"legacy\"))]",
    ] {
        assert!(!names_a_format(named).is_empty(), "not found in: {named}");
    }
    for clean in [
        "use burnpack::interop::{OutputError, output_for};",
        "// interop::safetensors in a comment",
        "after_help = \"bpk convert model.bpk model.safetensors --shard-size 5000000000\"",
        "#[cfg(feature = \"cli\")]",
        "let my_gguf_count = 1;",
    ] {
        assert!(names_a_format(clean).is_empty(), "found in: {clean}");
    }
}
