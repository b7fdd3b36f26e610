//! Hostile input: every malformed file gives a typed error naming the file and the tensor,
//! never a panic; random truncations and byte flips of a valid file never panic.

mod common;

use burn::tensor::{Bytes, DType};
use burnpack::format::{Descriptor, FormatError, Header, Limits, Metadata, data_start};
use burnpack::read::{ReadMode, ReadOptions, Reader};
use burnpack::source::ReadError;
use common::{Spec, every_dtype, ours, pattern};

/// A file from raw metadata with `data_len` bytes of data section.
fn file_with(meta: &Metadata, data_len: usize) -> Vec<u8> {
    let cbor = meta.encode().unwrap();
    raw_file(1, &cbor, data_len)
}

fn raw_file(version: u16, cbor: &[u8], data_len: usize) -> Vec<u8> {
    let mut header = Header::new(cbor.len() as u32);
    header.version = version;
    let mut out = header.to_bytes().to_vec();
    out.extend_from_slice(cbor);
    out.resize(data_start(cbor.len() as u32) as usize + data_len, 0);
    out
}

fn one(name: &str, dtype: DType, shape: Vec<u64>, offsets: (u64, u64)) -> Metadata {
    Metadata {
        tensors: vec![(
            name.to_string(),
            Descriptor {
                dtype,
                shape,
                data_offsets: offsets,
                param_id: None,
            },
        )],
        ..Metadata::default()
    }
}

fn two(a: (&str, (u64, u64)), b: (&str, (u64, u64))) -> Metadata {
    let d = |o: (u64, u64)| Descriptor {
        dtype: DType::U8,
        shape: vec![o.1 - o.0],
        data_offsets: o,
        param_id: None,
    };
    Metadata {
        tensors: vec![(a.0.to_string(), d(a.1)), (b.0.to_string(), d(b.1))],
        ..Metadata::default()
    }
}

/// CBOR text string header + bytes.
fn cbor_text(s: &str) -> Vec<u8> {
    assert!(s.len() < 24);
    let mut v = vec![0x60 | s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

/// Opens `bytes` from memory and from a file in both modes; all must fail the same way.
fn reject(
    label: &str,
    bytes: &[u8],
    limits: Limits,
    check: impl Fn(&FormatError) -> bool,
    tensor: Option<&str>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{label}.bpk"));
    std::fs::write(&path, bytes).unwrap();
    let options = ReadOptions::new().limits(limits);
    let results = [
        (
            "<memory>".to_string(),
            options.from_bytes(Bytes::from_bytes_vec(bytes.to_vec())),
        ),
        (path.display().to_string(), options.open(&path)),
        (
            path.display().to_string(),
            options.mode(ReadMode::Buffered).open(&path),
        ),
    ];
    for (file, result) in results {
        match result {
            Err(ReadError::Invalid { file: f, source }) => {
                assert_eq!(f, file, "{label}");
                assert!(check(&source), "{label}: unexpected error {source:?}");
                let message = ReadError::Invalid { file: f, source }.to_string();
                assert!(
                    message.contains(&file),
                    "{label}: '{message}' does not name the file"
                );
                if let Some(t) = tensor {
                    assert!(
                        message.contains(&format!("'{t}'")),
                        "{label}: '{message}' does not name '{t}'"
                    );
                }
            }
            Err(other) => panic!("{label}: expected an invalid-file error, got {other}"),
            Ok(_) => panic!("{label}: malformed file was accepted"),
        }
    }
}

#[test]
fn malformed_headers() {
    let d = Limits::default();
    reject(
        "empty",
        &[],
        d,
        |e| matches!(e, FormatError::Truncated { what: "header", .. }),
        None,
    );
    reject(
        "short",
        b"NRUB\x01",
        d,
        |e| matches!(e, FormatError::Truncated { .. }),
        None,
    );
    // Shorter than the header is truncated, whatever the bytes: zeros (a file cut short) are
    // not "bad magic number 0x00000000", nor is a short text.
    for short in [&[0u8; 4][..], &[0u8; 9], b"JUNK", b"abcdefghi"] {
        reject(
            &format!("short {short:?}"),
            short,
            d,
            |e| {
                matches!(
                    e,
                    FormatError::Truncated {
                        what: "header",
                        needed: 10,
                        ..
                    }
                ) && e.to_string().contains("truncated")
            },
            None,
        );
    }
    let mut magic = ours(&[]);
    magic[0] = b'X';
    reject(
        "magic",
        &magic,
        d,
        |e| matches!(e, FormatError::BadMagic { .. }),
        None,
    );
    let empty_meta = Metadata::default().encode().unwrap();
    reject(
        "newer",
        &raw_file(2, &empty_meta, 0),
        d,
        |e| matches!(e, FormatError::UnsupportedVersion { found: 2 }),
        None,
    );
    reject(
        "zero",
        &raw_file(0, &empty_meta, 0),
        d,
        |e| matches!(e, FormatError::UnsupportedVersion { found: 0 }),
        None,
    );

    // A metadata size above the limit is refused before anything is allocated for it.
    let mut huge = ours(&[]);
    huge[6..10].copy_from_slice(&(200u32 << 20).to_le_bytes());
    reject(
        "meta-limit",
        &huge,
        d,
        |e| {
            matches!(
                e,
                FormatError::LimitExceeded {
                    what: "metadata size",
                    ..
                }
            )
        },
        None,
    );
    // Within the limit but past the end of the file.
    let mut past = ours(&[]);
    past[6..10].copy_from_slice(&4096u32.to_le_bytes());
    reject(
        "meta-past-end",
        &past,
        d,
        |e| {
            matches!(
                e,
                FormatError::Truncated {
                    what: "metadata",
                    ..
                }
            )
        },
        None,
    );
    // Whole file above the file-size limit.
    reject(
        "file-limit",
        &ours(&every_dtype()),
        d.with_max_file_size(100),
        |e| {
            matches!(
                e,
                FormatError::LimitExceeded {
                    what: "file size",
                    ..
                }
            )
        },
        None,
    );
}

#[test]
fn malformed_metadata() {
    let d = Limits::default();
    reject(
        "garbage",
        &raw_file(1, &[0xFF, 0x00, 0x13], 0),
        d,
        |e| matches!(e, FormatError::Metadata { .. }),
        None,
    );
    // A map without `tensors`.
    let mut no_tensors = vec![0xA1];
    no_tensors.extend(cbor_text("metadata"));
    no_tensors.push(0xA0);
    reject(
        "no-tensors",
        &raw_file(1, &no_tensors, 0),
        d,
        |e| matches!(e, FormatError::Metadata { reason } if reason.contains("tensors")),
        None,
    );
    // Nesting deeper than the recursion limit, in an ignored key.
    let mut deep = vec![0xA2];
    deep.extend(cbor_text("tensors"));
    deep.push(0xA0);
    deep.extend(cbor_text("x"));
    deep.extend(std::iter::repeat_n(0x81, 500));
    deep.push(0x00);
    reject(
        "deep",
        &raw_file(1, &deep, 0),
        d,
        |e| matches!(e, FormatError::Metadata { .. }),
        None,
    );
    // A tensor map claiming 2^32 - 1 entries in five bytes: refused before any entry is read.
    let mut count = vec![0xA1];
    count.extend(cbor_text("tensors"));
    count.extend([0xBA, 0xFF, 0xFF, 0xFF, 0xFF]);
    reject(
        "count-claim",
        &raw_file(1, &count, 0),
        d,
        |e| {
            matches!(
                e,
                FormatError::LimitExceeded {
                    what: "tensor count",
                    size: 4_294_967_295,
                    ..
                }
            )
        },
        None,
    );
    // Real entries above a lowered limit.
    let three = ours(&[
        Spec::new("a", DType::U8, &[1], None),
        Spec::new("b", DType::U8, &[1], None),
        Spec::new("c", DType::U8, &[1], None),
    ]);
    reject(
        "count",
        &three,
        d.with_max_tensor_count(2),
        |e| {
            matches!(
                e,
                FormatError::LimitExceeded {
                    what: "tensor count",
                    ..
                }
            )
        },
        None,
    );
    // An indefinite-length map is counted as it is read.
    let mut indefinite = vec![0xA1];
    indefinite.extend(cbor_text("tensors"));
    indefinite.push(0xBF);
    for name in ["a", "b", "c"] {
        indefinite.extend(cbor_text(name));
        indefinite.extend(
            Metadata {
                tensors: vec![(
                    "x".into(),
                    Descriptor {
                        dtype: DType::U8,
                        shape: vec![0],
                        data_offsets: (0, 0),
                        param_id: None,
                    },
                )],
                ..Metadata::default()
            }
            .encode()
            .unwrap()[10..]
                .iter(),
        );
    }
    indefinite.push(0xFF);
    reject(
        "indefinite",
        &raw_file(1, &indefinite, 0),
        d.with_max_tensor_count(2),
        |e| {
            matches!(
                e,
                FormatError::LimitExceeded { .. } | FormatError::Metadata { .. }
            )
        },
        None,
    );
    // Wrong value types and an unknown dtype.
    let mut wrong = vec![0xA1];
    wrong.extend(cbor_text("tensors"));
    wrong.push(0x05);
    reject(
        "tensors-not-map",
        &raw_file(1, &wrong, 0),
        d,
        |e| matches!(e, FormatError::Metadata { .. }),
        None,
    );
    let mut dtype = one("w", DType::U8, vec![1], (0, 1)).encode().unwrap();
    let pos = dtype.windows(2).position(|w| w == b"U8").unwrap();
    dtype[pos + 1] = b'9';
    reject(
        "dtype",
        &raw_file(1, &dtype, 1),
        d,
        |e| matches!(e, FormatError::Metadata { .. }),
        None,
    );
}

#[test]
fn malformed_tensors() {
    let d = Limits::default();
    let f = |m: Metadata, len| file_with(&m, len);
    reject(
        "overflow",
        &f(one("w", DType::U8, vec![10], (u64::MAX - 9, u64::MAX)), 0),
        d,
        |e| matches!(e, FormatError::OffsetOverflow { .. }),
        Some("w"),
    );
    reject(
        "end<start",
        &f(one("w", DType::U8, vec![0], (8, 4)), 8),
        d,
        |e| {
            matches!(
                e,
                FormatError::EndBeforeStart {
                    start: 8,
                    end: 4,
                    ..
                }
            )
        },
        Some("w"),
    );
    reject(
        "past-end",
        &f(one("w", DType::U8, vec![64], (0, 64)), 63),
        d,
        |e| matches!(e, FormatError::PastEnd { .. }),
        Some("w"),
    );
    reject(
        "length",
        &f(one("w", DType::F32, vec![2, 3], (0, 16)), 16),
        d,
        |e| {
            matches!(
                e,
                FormatError::LengthMismatch {
                    actual: 16,
                    expected: 24,
                    ..
                }
            )
        },
        Some("w"),
    );
    reject(
        "shape-overflow",
        &f(one("w", DType::F64, vec![u64::MAX, 2], (0, 0)), 0),
        d,
        |e| matches!(e, FormatError::ShapeOverflow { .. }),
        Some("w"),
    );
    reject(
        "too-large",
        &f(one("w", DType::U8, vec![512], (0, 512)), 512),
        d.with_max_tensor_size(511),
        |e| {
            matches!(
                e,
                FormatError::LimitExceeded {
                    what: "tensor size",
                    ..
                }
            )
        },
        None,
    );
    reject(
        "overlap",
        &f(two(("a", (0, 256)), ("b", (128, 384))), 384),
        d,
        |e| matches!(e, FormatError::Overlap { .. }),
        Some("b"),
    );
    reject(
        "contained",
        &f(two(("a", (0, 1024)), ("b", (256, 260))), 1024),
        d,
        |e| matches!(e, FormatError::Overlap { .. }),
        Some("a"),
    );
    reject(
        "duplicate",
        &f(two(("same", (0, 4)), ("same", (256, 260))), 260),
        d,
        |e| matches!(e, FormatError::DuplicateKey { map: "tensors", .. }),
        Some("same"),
    );
    let dup_meta = Metadata {
        metadata: vec![("k".into(), "1".into()), ("k".into(), "2".into())],
        ..Metadata::default()
    };
    reject(
        "duplicate-metadata",
        &f(dup_meta, 0),
        d,
        |e| {
            matches!(
                e,
                FormatError::DuplicateKey {
                    map: "metadata",
                    ..
                }
            )
        },
        Some("k"),
    );
}

#[test]
fn raised_limits_accept_what_defaults_refuse() {
    let bytes = ours(&[Spec::new("big", DType::U8, &[4096], None)]);
    let small = Limits::default().with_max_tensor_size(1024);
    assert!(
        ReadOptions::new()
            .limits(small)
            .from_bytes(Bytes::from_bytes_vec(bytes.clone()))
            .is_err()
    );
    let reader = ReadOptions::new()
        .limits(Limits::trusted())
        .from_bytes(Bytes::from_bytes_vec(bytes))
        .unwrap();
    assert_eq!(reader.tensor("big").unwrap().len(), 4096);
}

#[test]
fn unaligned_tensors_from_other_writers_load_by_copying() {
    // Another writer packed an f32 tensor at data offset 2, an f64 at 12: legal, not aligned.
    let values: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let doubles: Vec<u8> = [3.25f64].iter().flat_map(|v| v.to_le_bytes()).collect();
    let meta = Metadata {
        tensors: vec![
            (
                "f".into(),
                Descriptor {
                    dtype: DType::F32,
                    shape: vec![2],
                    data_offsets: (2, 10),
                    param_id: None,
                },
            ),
            (
                "d".into(),
                Descriptor {
                    dtype: DType::F64,
                    shape: vec![1],
                    data_offsets: (12, 20),
                    param_id: Some(3),
                },
            ),
        ],
        ..Metadata::default()
    };
    let mut file = file_with(&meta, 20);
    let start = file.len() - 20;
    file[start + 2..start + 10].copy_from_slice(&values);
    file[start + 12..start + 20].copy_from_slice(&doubles);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unaligned.bpk");
    std::fs::write(&path, &file).unwrap();
    for reader in [
        Reader::open(&path).unwrap(),
        Reader::from_bytes(Bytes::from_bytes_vec(file.clone())).unwrap(),
    ] {
        let unaligned: Vec<_> = reader.unaligned().map(|t| t.name().to_string()).collect();
        assert_eq!(unaligned, ["d", "f"]);
        for (name, expected) in [("f", &values), ("d", &doubles)] {
            let info = reader.tensor(name).unwrap();
            assert!(!info.is_aligned());
            let bytes = reader.bytes(name).unwrap();
            assert_eq!(&bytes[..], &expected[..]);
            assert_eq!(bytes.as_ptr() as usize % 8, 0, "the copy is aligned");
        }
    }
}

#[test]
fn missing_tensor_and_missing_file_name_what_was_asked() {
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(ours(&[]))).unwrap();
    let err = reader.bytes("nope").unwrap_err();
    assert!(matches!(err, ReadError::NotFound { .. }));
    assert!(err.to_string().contains("'nope'"));
    let err = Reader::open("/definitely/not/here.bpk").unwrap_err();
    assert!(matches!(err, ReadError::Io { .. }));
    assert!(err.to_string().contains("/definitely/not/here.bpk"));
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Reader::open(dir.path()).unwrap_err(),
        ReadError::Io { .. } | ReadError::Invalid { .. }
    ));
}

/// Reads every tensor of whatever opened; a corrupt file may open (a flipped data byte is
/// undetectable without checksums) but must never panic.
fn exercise(bytes: Vec<u8>) -> bool {
    match Reader::from_bytes(Bytes::from_bytes_vec(bytes)) {
        Ok(reader) => {
            for info in reader.tensors() {
                match reader.read(info) {
                    Ok(data) => assert_eq!(data.len() as u64, info.len()),
                    // A flipped byte of a bool tensor is no bool value: refused by name,
                    // never handed on as a `bool`.
                    Err(e @ ReadError::Unsupported { .. }) => {
                        assert!(matches!(info.dtype(), burn::tensor::DType::Bool(_)), "{e}");
                        assert!(e.to_string().contains("no bool value"), "{e}");
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

#[test]
fn random_truncations_are_errors() {
    let valid = ours(&every_dtype());
    let cuts = pattern(99, 400);
    for (i, c) in cuts.chunks(2).enumerate() {
        let cut = (usize::from(c[0]) << 8 | usize::from(c[1])) % valid.len();
        assert!(
            !exercise(valid[..cut].to_vec()),
            "truncation #{i} at {cut} was accepted"
        );
    }
    for cut in 0..=64.min(valid.len() - 1) {
        assert!(!exercise(valid[..cut].to_vec()));
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let valid = ours(&every_dtype());
    let data_start = Reader::from_bytes(Bytes::from_bytes_vec(valid.clone()))
        .unwrap()
        .layout()
        .data_start() as usize;
    let noise = pattern(4242, 3 * 4000);
    let mut rejected = 0;
    for (i, r) in noise.chunks(3).enumerate() {
        let mut bytes = valid.clone();
        // Most flips land in the header and metadata, where they matter.
        let span = if i % 4 == 0 { bytes.len() } else { data_start };
        let at = (usize::from(r[0]) << 8 | usize::from(r[1])) % span;
        bytes[at] ^= r[2] | 1;
        if !exercise(bytes) {
            rejected += 1;
        }
    }
    assert!(
        rejected > 1000,
        "only {rejected} of 4000 corruptions were detected"
    );
}

#[test]
fn errors_a_newcomer_meets_say_what_to_do() {
    use burn::module::{Module, Param};
    use burn::tensor::{Device, Tensor};
    use burnpack::module::PackModule;
    #[derive(Module, Debug)]
    struct M {
        w: Param<Tensor<1>>,
    }
    let device = Device::flex();
    let model = || M {
        w: Param::from_data([1.0, 2.0], &device),
    };
    let dir = tempfile::tempdir().unwrap();

    // A directory, in both read modes.
    for mode in [ReadMode::Mmap, ReadMode::Buffered] {
        let err = ReadOptions::new().mode(mode).open(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("is a directory"), "{message}");
        assert!(!message.contains("No such device"), "{message}");
    }
    let err = model().load_pack(dir.path()).unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");

    // A missing parent directory: the error names the user's path, not a scratch file.
    let path = dir.path().join("missing/model.bpk");
    let err = model().save_pack(&path).unwrap_err().to_string();
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(!err.contains(".bpk-tmp"), "{err}");
    assert!(err.contains("is not there"), "{err}");

    // A safetensors file given to the pack loader.
    let st = dir.path().join("model.safetensors");
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data).unwrap();
    safetensors::serialize_to_file([("w", view)], None, &st).unwrap();
    let err = model().load_pack(&st).unwrap_err().to_string();
    assert!(err.contains(st.to_str().unwrap()), "{err}");
    // The pack reader knows no other format: it says what to do with one (its name is the
    // registry's, `interop::near_miss`).
    assert!(err.contains("bpk inspect"), "{err}");
    assert!(err.contains("bpk convert"), "{err}");
    let head = std::fs::read(&st).unwrap();
    let hint = burnpack::interop::near_miss(&head[..64]).unwrap();
    assert!(hint.contains("looks like a safetensors file"), "{hint}");

    // A PyTorch zip archive and a JSON index.
    for (name, bytes, hint) in [
        (
            "model.pt",
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00".to_vec(),
            "open_any",
        ),
        ("index.json", br#"{"weight_map": {}}"#.to_vec(), "JSON"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = Reader::open(&path).unwrap_err().to_string();
        assert!(err.contains(hint), "{err}");
    }
}
