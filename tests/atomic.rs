//! File safety: an atomic write either replaces the destination whole or leaves it exactly as
//! it was, with no scratch file left, whatever fails; overwrite and in-place modes.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use burn::tensor::{Bytes, DType};
use burnpack::{Entry, WriteError, WriteMode, Writer, read::Reader};
use common::{Spec, every_dtype, ours_checked as ours};

fn dir_listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes `entries` over an existing good file and checks the failure left it untouched.
fn fails_cleanly(entries: Vec<Entry>, check: impl Fn(&WriteError) -> bool, tensor: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    let good = ours(&every_dtype());
    std::fs::write(&path, &good).unwrap();
    let err = Writer::new(entries)
        .threads(2)
        .write_to_file(&path)
        .unwrap_err();
    assert!(check(&err), "unexpected error: {err:?}");
    assert!(
        err.to_string().contains(&format!("'{tensor}'")),
        "'{err}' does not name '{tensor}'"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        good,
        "the previous file changed"
    );
    assert_eq!(
        dir_listing(dir.path()),
        ["model.bpk"],
        "a scratch file was left behind"
    );
}

fn good_entries() -> Vec<Entry> {
    every_dtype().iter().map(Spec::deferred_entry).collect()
}

#[test]
fn failing_provider_leaves_the_previous_file() {
    let mut entries = good_entries();
    entries.insert(
        3,
        Entry::deferred("broken", DType::F32, vec![4], 16, || {
            Err("device lost".into())
        }),
    );
    fails_cleanly(
        entries,
        |e| matches!(e, WriteError::Provider { tensor, .. } if tensor == "broken"),
        "broken",
    );
}

#[test]
fn panicking_provider_leaves_the_previous_file() {
    let mut entries = good_entries();
    entries.push(Entry::deferred("panics", DType::U8, vec![1], 1, || {
        panic!("boom in provider")
    }));
    fails_cleanly(
        entries,
        |e| matches!(e, WriteError::ProviderPanicked { message, .. } if message.contains("boom")),
        "panics",
    );
}

#[test]
fn provider_returning_the_wrong_length_is_refused() {
    let mut entries = good_entries();
    entries.push(Entry::deferred("liar", DType::U8, vec![8], 8, || {
        Ok(Bytes::from_bytes_vec(vec![0; 7]))
    }));
    fails_cleanly(
        entries,
        |e| {
            matches!(
                e,
                WriteError::ProviderLength {
                    declared: 8,
                    produced: 7,
                    ..
                }
            )
        },
        "liar",
    );
}

#[test]
fn invalid_entries_are_refused_before_writing() {
    let mut dup = good_entries();
    dup.push(Entry::resident(
        "empty",
        DType::F32,
        vec![0, 5],
        Bytes::from_bytes_vec(vec![]),
    ));
    fails_cleanly(
        dup,
        |e| matches!(e, WriteError::DuplicateName { .. }),
        "empty",
    );
    let mut wrong = good_entries();
    wrong.push(Entry::resident(
        "short",
        DType::F64,
        vec![2],
        Bytes::from_bytes_vec(vec![0; 15]),
    ));
    fails_cleanly(
        wrong,
        |e| {
            matches!(
                e,
                WriteError::LengthMismatch {
                    len: 15,
                    expected: 16,
                    ..
                }
            )
        },
        "short",
    );
}

#[test]
fn successful_write_replaces_whole_and_keeps_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    std::fs::write(&path, b"old contents").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    Writer::new(good_entries()).write_to_file(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), ours(&every_dtype()));
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert_eq!(dir_listing(dir.path()), ["model.bpk"]);
}

#[test]
fn overwrite_false_refuses_existing_files_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    std::fs::write(&path, b"keep me").unwrap();
    for mode in [WriteMode::Atomic, WriteMode::InPlace] {
        let err = Writer::new(good_entries())
            .mode(mode)
            .overwrite(false)
            .write_to_file(&path)
            .unwrap_err();
        assert!(matches!(err, WriteError::AlreadyExists { .. }), "{err}");
        assert!(err.to_string().contains("model.bpk"));
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }
    assert_eq!(dir_listing(dir.path()), ["model.bpk"]);
    let fresh = dir.path().join("fresh.bpk");
    Writer::new(good_entries())
        .overwrite(false)
        .write_to_file(&fresh)
        .unwrap();
    assert_eq!(std::fs::read(&fresh).unwrap(), ours(&every_dtype()));
}

#[test]
fn in_place_writes_over_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    std::fs::write(&path, vec![0xEEu8; 1 << 16]).unwrap();
    let inode = std::fs::metadata(&path).unwrap().ino();
    Writer::new(good_entries())
        .mode(WriteMode::InPlace)
        .write_to_file(&path)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "in-place must keep the inode"
    );
    // Stale bytes of the old, longer file are gone: gaps are zero and the length is exact.
    assert_eq!(std::fs::read(&path).unwrap(), ours(&every_dtype()));
}

#[test]
fn a_mapped_reader_keeps_the_old_contents_across_an_atomic_replace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    let old = [Spec::new("w", DType::F32, &[64], Some(1))];
    Writer::new(old.iter().map(Spec::entry).collect())
        .write_to_file(&path)
        .unwrap();
    let reader = Reader::open(&path).unwrap();
    let view = reader.bytes("w").unwrap();

    let mut new = old[0].clone();
    new.data.iter_mut().for_each(|b| *b = !*b);
    Writer::new(vec![new.entry()]).write_to_file(&path).unwrap();

    assert_eq!(&view[..], &old[0].data[..]);
    assert_eq!(&reader.bytes("w").unwrap()[..], &old[0].data[..]);
    assert_eq!(
        &Reader::open(&path).unwrap().bytes("w").unwrap()[..],
        &new.data[..]
    );
}

#[test]
fn io_errors_name_the_file() {
    let err = Writer::new(good_entries())
        .write_to_file("/no/such/dir/model.bpk")
        .unwrap_err();
    assert!(matches!(err, WriteError::Io { .. }), "{err}");
    assert!(err.to_string().contains("/no/such/dir/"), "{err}");
}
