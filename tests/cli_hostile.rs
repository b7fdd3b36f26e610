//! Hostile files through the real `bpk` binary (issue 49, point 2): names that print wider
//! than a format width can pad, GGUF metadata arrays whose text would be many times the file,
//! conversions that hold the whole model or write what `bpk` cannot read or what means
//! something else, and errors that name the wrong file. Memory is bounded with a limit on the
//! child's data segment (`RLIMIT_DATA`: the heap and private mappings, not the mapped input).
#![cfg(feature = "cli")]

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use burn::tensor::{Bytes, DType};
use burnpack::{Entry, Writer, read::Reader};
use common::gguf::{file, key, string};

/// Runs `bpk args`, with its data segment limited to `data_limit` bytes when given and
/// `RAYON_NUM_THREADS` set when `threads` is: (exit code, stdout, stderr). A child killed
/// for want of memory has no exit code: -1, with the signal in stderr.
fn bpk(args: &[&str], data_limit: Option<u64>, threads: Option<usize>) -> (i32, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bpk"));
    command.args(args);
    if let Some(threads) = threads {
        command.env("RAYON_NUM_THREADS", threads.to_string());
    }
    #[cfg(target_os = "linux")]
    if let Some(limit) = data_limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: only `setrlimit` runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = data_limit;
    let out = command.output().unwrap();
    let mut err = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.code().is_none() {
        err.push_str(&format!(" [killed: {:?}]", out.status));
    }
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A name of 14,000 control characters: 70,000 characters once escaped (`\u{1}`), past
/// `u16::MAX`, the widest a format width pads.
fn hostile_name() -> String {
    "\u{1}".repeat(14_000)
}

/// `bpk inspect` of a file whose tensor name prints wider than 65,535 characters, in three
/// formats: no panic, every line bounded, the name cut with a marker; `--json` has it whole.
#[test]
fn names_wider_than_a_format_width_are_cut_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let name = hostile_name();
    let data = 1.0f32.to_le_bytes();
    // safetensors, by the safetensors crate.
    let st = dir.path().join("wide.safetensors");
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &data).unwrap();
    safetensors::serialize_to_file([(name.as_str(), view)], None, &st).unwrap();
    // A pack, with a metadata key as wide.
    let pack = dir.path().join("wide.bpk");
    Writer::new(vec![Entry::resident(
        name.clone(),
        DType::F32,
        vec![1],
        Bytes::from_bytes_vec(data.to_vec()),
    )])
    .metadata(name.clone(), "v")
    .write_to_file(&pack)
    .unwrap();
    // GGUF, with a metadata key as wide.
    let gguf = dir.path().join("wide.gguf");
    let kv = key(&name, 8, &string("llama"));
    std::fs::write(&gguf, file(&[(name.as_str(), &[1], 0, 0)], &data, &kv, 1)).unwrap();
    for path in [&st, &pack, &gguf] {
        let (code, out, err) = bpk(&["inspect", s(path)], None, None);
        assert_eq!(code, 0, "{}: {err}", path.display());
        assert!(!err.contains("panicked"), "{err}");
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(
            widest < 400,
            "{}: a line of {widest} characters",
            path.display()
        );
        assert!(out.contains("... (+"), "{out}");
        assert!(!out.contains('\u{1}'), "control characters printed raw");
        let (code, out, _) = bpk(&["inspect", s(path), "--json"], None, None);
        assert_eq!(code, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["tensors"][0]["name"], name.as_str());
    }
}

/// A GGUF v3 file (sparse on disk) whose one metadata entry, `big`, is a u8 array of `items`
/// zeros, with one f32 tensor `w` = [1.0].
fn gguf_with_array(path: &Path, items: u64) {
    let mut head = b"GGUF".to_vec();
    head.extend(3u32.to_le_bytes());
    head.extend(1u64.to_le_bytes()); // tensors
    head.extend(1u64.to_le_bytes()); // metadata entries
    head.extend(3u64.to_le_bytes());
    head.extend(b"big");
    head.extend(9u32.to_le_bytes()); // array
    head.extend(0u32.to_le_bytes()); // of u8
    head.extend(items.to_le_bytes());
    let mut tail = 1u64.to_le_bytes().to_vec();
    tail.extend(b"w");
    tail.extend(1u32.to_le_bytes());
    tail.extend(1u64.to_le_bytes());
    tail.extend(0u32.to_le_bytes()); // f32
    tail.extend(0u64.to_le_bytes());
    let end = head.len() as u64 + items + tail.len() as u64;
    tail.resize(tail.len() + (end.next_multiple_of(32) - end) as usize, 0);
    tail.extend(1.0f32.to_le_bytes());
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&head).unwrap();
    f.seek(SeekFrom::Current(items as i64)).unwrap(); // the zeros: a hole
    f.write_all(&tail).unwrap();
}

/// The data segment a `bpk` command gets in the memory tests: far below what a string per
/// array item took (about 60 bytes per item: 1.2 GB for 20 M items).
const DATA_LIMIT: u64 = 400 << 20;

/// A GGUF metadata array of 20 M items (20 MB in the file) goes through every command under
/// a data limit of 400 MiB (a string per item took 1.2 GB), printed abridged with its length
/// and a hash; a conversion keeps it whole and the pack verifies.
#[cfg(target_os = "linux")]
#[test]
fn long_gguf_arrays_are_bounded_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let items = 20_000_000u64;
    let gguf = dir.path().join("array.gguf");
    gguf_with_array(&gguf, items);
    let limit = Some(DATA_LIMIT);
    for args in [
        vec!["inspect", s(&gguf)],
        vec!["inspect", s(&gguf), "--json"],
        vec!["verify", s(&gguf)],
    ] {
        let (code, out, err) = bpk(&args, limit, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.len() < 8 << 10,
            "{args:?}: {} bytes of output",
            out.len()
        );
        if args[0] == "inspect" {
            assert!(out.contains("20000000 items, xxh3 "), "{out}");
        }
    }
    let pack = dir.path().join("array.bpk");
    let (code, _, err) = bpk(&["convert", s(&gguf), s(&pack)], limit, None);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = bpk(&["verify", s(&pack)], limit, None);
    assert_eq!(code, 0, "{out}{err}");
    let reader = Reader::open(&pack).unwrap();
    let text = &reader.metadata()["big"];
    assert_eq!(text.len() as u64, 3 * items - 2 + 2); // "[0, 0, ..., 0]"
    let (code, out, err) = bpk(&["diff", s(&gguf), s(&pack)], limit, None);
    assert!(code == 0 || code == 1, "{out}{err}");
    assert!(out.len() < 8 << 10, "diff: {} bytes of output", out.len());
}
