//! Every source of every format keeps one contract (`burnpack::source::assert_source_contract`):
//! sorted unique names, every tensor readable with its declared length, "not mine" answered
//! as an error, `copy_reason` honest, checksums checked where the format has them. Run here
//! over files each format's own writer wrote (Burn's `burn-pack`, this crate, the
//! `safetensors` crate, `torch.save`, Burn 0.21's recorders), opened from a path, from bytes
//! and through the container registry; hostile files meet the same contract in
//! `tests/fuzz_corpus.rs`, through the fuzz targets' bodies.

mod common;

use std::path::{Path, PathBuf};

use burn::tensor::{Bytes, DType};
use burnpack::interop::burn_record::LegacySource;
use burnpack::interop::pytorch::PytorchSource;
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::interop::{OpenOptions, open_any, open_bytes_any};
use burnpack::read::Reader;
use burnpack::source::{SourceErrorKind, TensorSource, assert_source_contract};
use common::{every_dtype, ours, ours_checked};

fn data(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir)
}

/// The contract for `source`, and for the same file through the registry (from its path and
/// from its bytes), which must see the same table.
fn holds(path: &Path, source: &dyn TensorSource) {
    assert_source_contract(source);
    let any = open_any(path).unwrap_or_else(|e| panic!("{}: the registry: {e}", path.display()));
    assert_source_contract(any.as_tensor_source());
    assert_eq!(any.as_tensor_source().tensors(), source.tensors());
    if path.extension().is_none_or(|e| e != "json") {
        let bytes = Bytes::from_bytes_vec(std::fs::read(path).unwrap());
        let any = open_bytes_any(bytes, &OpenOptions::new()).unwrap();
        assert_source_contract(any.as_tensor_source());
        assert_eq!(
            any.as_tensor_source().tensors().len(),
            source.tensors().len()
        );
    }
}

/// Tensors of every dtype safetensors has too.
fn safetensors_dtypes() -> Vec<common::Spec> {
    every_dtype()
        .into_iter()
        .filter(|s| !matches!(s.dtype, DType::QFloat(_) | DType::Bool(_) | DType::Flex32))
        .collect()
}

#[test]
fn packs_of_this_crate_and_of_burn_keep_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("burn-identical.bpk", ours(&every_dtype())),
        ("checksums.bpk", ours_checked(&every_dtype())),
        ("empty.bpk", ours(&[])),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        holds(&path, &Reader::open(&path).unwrap());
        holds(&path, &Reader::open_buffered(&path).unwrap());
    }
}

#[test]
fn safetensors_files_and_shards_keep_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    // Written by hand: `u8` first, so that the f32 tensor after it is unaligned (the
    // `safetensors` crate itself orders tensors so that this does not happen; other writers
    // do not).
    let mut header =
        br#"{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F32","shape":[3],"data_offsets":[3,15]}}"#
            .to_vec();
    while !(8 + header.len()).is_multiple_of(8) {
        header.push(b' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header);
    file.extend([1u8, 2, 3]);
    file.extend([1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()));
    let path = dir.path().join("m.safetensors");
    std::fs::write(&path, &file).unwrap();
    let source = SafetensorsSource::open(&path).unwrap();
    assert!(
        source.unaligned().count() > 0,
        "an unaligned tensor is exercised"
    );
    holds(&path, &source);
    let pack = dir.path().join("m.bpk");
    std::fs::write(&pack, ours(&safetensors_dtypes())).unwrap();
    let written = burnpack::interop::safetensors::burnpack_to_safetensors_sharded(
        &pack,
        dir.path().join("s.safetensors"),
        Some(64),
    )
    .unwrap();
    let index = written.last().unwrap();
    assert!(written.len() > 2, "shards and an index");
    holds(index, &SafetensorsSource::open(index).unwrap());
}

#[test]
fn torch_save_files_keep_the_contract() {
    let mut checked = 0;
    for entry in std::fs::read_dir(data("pytorch")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pt") {
            continue;
        }
        // Files without a state dict at a place the reader looks are refused (and say so).
        let Ok(source) = PytorchSource::open(&path) else {
            continue;
        };
        holds(&path, &source);
        let bytes = Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
        let from_bytes = PytorchSource::from_bytes(bytes, &OpenOptions::new()).unwrap();
        assert_source_contract(&from_bytes);
        assert_eq!(from_bytes.tensors(), source.tensors());
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} torch.save files checked");
}

#[test]
fn burn_records_keep_the_contract() {
    for name in [
        "zoo.mpk",
        "zoo.mpk.gz",
        "zoo.json",
        "zoo.json.gz",
        "zoo-half.mpk",
        "quant.mpk",
    ] {
        let path = data("legacy").join(name);
        let source = LegacySource::open(&path).unwrap();
        holds(&path, &source);
        let bytes = Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
        let from_bytes = LegacySource::from_bytes(bytes, &OpenOptions::new()).unwrap();
        assert_eq!(from_bytes.tensors(), source.tensors(), "{name}");
        assert_eq!(
            from_bytes.format(),
            source.format(),
            "{name}: told by content"
        );
    }
}

#[test]
fn every_source_answers_a_tensor_of_another_source_as_not_mine() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("m.bpk");
    std::fs::write(&pack, ours(&every_dtype())).unwrap();
    let st = dir.path().join("m.safetensors");
    let plain = safetensors_dtypes();
    let plain_pack = dir.path().join("plain.bpk");
    std::fs::write(&plain_pack, ours(&plain)).unwrap();
    burnpack::interop::safetensors::burnpack_to_safetensors(&plain_pack, &st).unwrap();
    let record = data("legacy").join("zoo.mpk");
    let torch = data("pytorch").join("linear__linear.pt");
    let sources: Vec<Box<dyn burnpack::source::DescribedSource>> = [&pack, &st, &record, &torch]
        .into_iter()
        .map(|p| open_any(p).unwrap())
        .collect();
    for a in &sources {
        for b in &sources {
            if std::ptr::eq(a, b) {
                continue;
            }
            let (a, b) = (a.as_tensor_source(), b.as_tensor_source());
            for info in b.tensors() {
                // A tensor of the same name, place and kind could be both sources' own.
                if a.tensor(info.name()) == Some(info) {
                    continue;
                }
                let err = a.read(info).expect_err("a foreign tensor was read");
                assert!(
                    matches!(
                        err,
                        burnpack::ReadError::NotMine { .. } | burnpack::ReadError::NotFound { .. }
                    ),
                    "{}: {err}",
                    a.file()
                );
            }
        }
    }
}

#[test]
fn unknown_and_unreadable_inputs_are_one_error_with_a_kind() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"just some text\n").unwrap();
    let err = open_any(&text).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::UnknownFormat);
    assert!(
        err.to_string()
            .contains("not a file bpk reads (it starts with \"just some text\\n\")"),
        "{err}"
    );
    let keras = dir.path().join("model.h5");
    std::fs::write(&keras, b"\x89HDF\r\n\x1a\nrest").unwrap();
    let err = open_any(&keras).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::UnknownFormat);
    assert!(err.to_string().contains("HDF5"), "{err}");
    let missing = open_any(dir.path().join("missing.pt")).unwrap_err();
    assert_eq!(missing.kind(), SourceErrorKind::Io);
    assert!(missing.to_string().contains("missing.pt"));
    assert_eq!(
        open_any(dir.path()).unwrap_err().kind(),
        SourceErrorKind::Io
    );
    let bincode = open_any(data("legacy").join("zoo.bin")).unwrap_err();
    assert_eq!(bincode.kind(), SourceErrorKind::Unsupported);
    // The same file is the same error from a path and from bytes.
    let err =
        open_bytes_any(Bytes::from_bytes_vec(b"just".to_vec()), &OpenOptions::new()).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::UnknownFormat);
    assert!(err.to_string().starts_with("<memory>"), "{err}");
    // A truncated pack can be told from a damaged one.
    let pack = dir.path().join("cut.bpk");
    let bytes = ours_checked(&every_dtype());
    std::fs::write(&pack, &bytes[..bytes.len() - 1]).unwrap();
    let err = open_any(&pack).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Truncated, "{err}");
    assert!(err.tensor().is_some(), "{err}");
}

#[test]
fn formats_are_told_by_content_not_by_name() {
    let dir = tempfile::tempdir().unwrap();
    // A pack named .safetensors, a record named .pt, a torch.save file named .bin.
    let cases = [
        ("pack.safetensors", ours(&every_dtype()), "burnpack"),
        (
            "record.pt",
            std::fs::read(data("legacy").join("zoo.json.gz")).unwrap(),
            "burn-record",
        ),
        (
            "weights.bin",
            std::fs::read(data("pytorch").join("linear__linear.pt")).unwrap(),
            "pytorch",
        ),
    ];
    for (name, bytes, format) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let source = open_any(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(source.describe().format, format, "{name}");
        assert_source_contract(source.as_tensor_source());
    }
}

#[test]
fn gguf_files_keep_the_contract() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf");
    let mut checked = 0;
    for entry in std::fs::read_dir(corpus).unwrap() {
        let path = entry.unwrap().path();
        let source = burnpack::interop::gguf::GgufSource::open(&path).unwrap();
        holds(&path, &source);
        checked += 1;
    }
    assert!(checked >= 3);
}

/// `.npy` and `.npz` files NumPy wrote (`fuzz/corpus/numpy`: versions 1-3, big-endian,
/// Fortran order, `np.savez`, `np.savez_compressed`), mapped and read for a verification.
#[cfg(feature = "numpy")]
#[test]
fn numpy_files_keep_the_contract() {
    use burnpack::interop::numpy::NumpySource;
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/numpy");
    let mut checked = 0;
    for entry in std::fs::read_dir(corpus).unwrap() {
        let path = entry.unwrap().path();
        holds(&path, &NumpySource::open(&path).unwrap());
        let verified = NumpySource::open_with(&path, &OpenOptions::new().verify(true)).unwrap();
        assert_source_contract(&verified);
        checked += 1;
    }
    assert!(checked >= 6);
}

#[cfg(feature = "onnx")]
#[test]
fn onnx_files_keep_the_contract() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/onnx");
    // Written by the `onnx` package: initializers in the model, and in external data (which
    // bytes in memory cannot reach: through the registry by path only).
    let path = corpus.join("model.onnx");
    holds(
        &path,
        &burnpack::interop::onnx::OnnxSource::open(&path).unwrap(),
    );
    let path = corpus.join("ext.onnx");
    let source = burnpack::interop::onnx::OnnxSource::open(&path).unwrap();
    assert_source_contract(&source);
    let any = open_any(&path).unwrap();
    assert_source_contract(any.as_tensor_source());
    assert_eq!(any.as_tensor_source().tensors(), source.tensors());
}
