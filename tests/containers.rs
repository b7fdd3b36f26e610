//! Every format's container (`interop::containers()`, one a format folder): it takes its own
//! first bytes, its near-miss hint is what the registry says of them, the file the registry
//! opened is the one the format reads (opened once: the path may name nothing by then), and
//! each source's one constructor shape (`open`, `open_with(path, &OpenOptions)`,
//! `from_bytes(bytes, &OpenOptions)`) agrees with itself and with the registry.

mod common;

use std::path::{Path, PathBuf};

use burn::tensor::Bytes;
use burnpack::interop::burn_record::LegacySource;
use burnpack::interop::gguf::GgufSource;
use burnpack::interop::numpy::NumpySource;
use burnpack::interop::onnx::OnnxSource;
use burnpack::interop::pytorch::PytorchSource;
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::interop::{HEAD, containers, near_miss, open_any, open_bytes_any};
use burnpack::source::{DescribedSource, OpenOptions};
use common::{every_dtype, ours};

fn data(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir)
}

/// A file of the committed fuzz corpora (each written by its format's own writer).
fn corpus(file: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(file),
    )
    .unwrap()
}

/// A small safetensors file.
fn safetensors_bytes() -> Vec<u8> {
    let data: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3], &data).unwrap();
    safetensors::serialize([("w", view)], None).unwrap()
}

/// A small GGUF file: one F32 tensor of 4 values.
fn gguf_bytes() -> Vec<u8> {
    let values: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    common::gguf::file(&[("w", &[4], 0, 0)], &values, &[], 0)
}

/// One file of each format of this build: (the container's name, the file's name, its bytes).
fn samples() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let pt = data("pytorch").join("buffer__buffer.pt");
    vec![
        ("burnpack", "m.bpk", ours(&every_dtype())),
        ("safetensors", "m.safetensors", safetensors_bytes()),
        ("pytorch", "m.pt", std::fs::read(pt).unwrap()),
        ("gguf", "m.gguf", gguf_bytes()),
        // Written by NumPy (`np.save`). Its `.npz` archives are zip files, which the
        // `pytorch` container's sniff takes too: the registry lists `numpy` first
        // (`tests/numpy.rs`).
        (
            "numpy",
            "m.npy",
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/numpy/f32.npy"))
                .unwrap(),
        ),
        // Written by the `onnx` package (`onnx.save_model`).
        ("onnx", "m.onnx", corpus("onnx/model.onnx")),
        (
            "burn-record",
            "m.mpk",
            std::fs::read(data("legacy").join("zoo.mpk")).unwrap(),
        ),
        (
            "burn-record",
            "m.json.gz",
            std::fs::read(data("legacy").join("zoo.json.gz")).unwrap(),
        ),
    ]
}

/// Every tensor of `a` and `b`: the same table, the same bytes.
fn same(a: &dyn DescribedSource, b: &dyn DescribedSource, what: &str) {
    assert_eq!(a.tensors(), b.tensors(), "{what}");
    for info in a.tensors() {
        assert_eq!(
            a.read(info).unwrap().to_vec(),
            b.read(info).unwrap().to_vec(),
            "{what}: {}",
            info.name()
        );
    }
}

#[test]
fn every_format_has_one_container_that_knows_its_first_bytes() {
    let names: Vec<&str> = containers().iter().map(|c| c.name).collect();
    for (name, file, bytes) in samples() {
        let matching: Vec<&str> = containers()
            .iter()
            .filter(|c| (c.sniff)(&bytes[..bytes.len().min(HEAD)], bytes.len() as u64))
            .map(|c| c.name)
            .collect();
        assert_eq!(
            matching,
            [name],
            "{file}: taken by {matching:?} of {names:?}"
        );
        let container = containers().iter().find(|c| c.name == name).unwrap();
        assert_eq!(
            near_miss(&bytes[..bytes.len().min(HEAD)]),
            Some(container.hint),
            "{file}"
        );
    }
}

/// The registry opens a file once and hands that file to its format: a container's
/// `open_file` reads the file it is given, never its path again (here the path names nothing
/// once the file is open: removed, as Unix allows). What opens that way is what the registry,
/// the opener by path and the opener of bytes give.
#[cfg(unix)]
#[test]
fn each_container_reads_the_file_the_registry_opened() {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions::new();
    for (name, file, bytes) in samples() {
        let path = dir.path().join(file);
        std::fs::write(&path, &bytes).unwrap();
        let container = containers().iter().find(|c| c.name == name).unwrap();
        let by_path = (container.open)(&path, &options).unwrap();
        let by_registry = open_any(&path).unwrap();
        same(&*by_path, &*by_registry, file);

        let opened = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let once = (container.open_file)(&path, opened, &options)
            .unwrap_or_else(|e| panic!("{file}: opened again by its path? {e}"));
        same(&*by_path, &*once, file);
        // For a verification too (read with ordinary reads).
        std::fs::write(&path, &bytes).unwrap();
        let opened = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let verified = (container.open_file)(&path, opened, &options.clone().verify(true))
            .unwrap_or_else(|e| panic!("{file}: opened again by its path? {e}"));
        same(&*by_path, &*verified, file);

        let from_bytes =
            (container.from_bytes)(Bytes::from_bytes_vec(bytes.clone()), &options).unwrap();
        same(&*by_path, &*from_bytes, file);
        let any_bytes = open_bytes_any(Bytes::from_bytes_vec(bytes), &options).unwrap();
        same(&*by_path, &*any_bytes, file);
    }
}

/// `open`, `open_with(path, &OpenOptions)` and `from_bytes(bytes, &OpenOptions)` of every
/// source give the same tensors.
#[test]
fn every_source_has_one_constructor_shape() {
    let dir = tempfile::tempdir().unwrap();
    let options = OpenOptions::new();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        (path, Bytes::from_bytes_vec(bytes.to_vec()))
    };

    let (path, bytes) = write("m.safetensors", &safetensors_bytes());
    let open = SafetensorsSource::open(&path).unwrap();
    same(
        &open,
        &SafetensorsSource::open_with(&path, &options).unwrap(),
        "st",
    );
    same(
        &open,
        &SafetensorsSource::from_bytes(bytes, &options).unwrap(),
        "st",
    );

    let pt = std::fs::read(data("pytorch").join("buffer__buffer.pt")).unwrap();
    let (path, bytes) = write("m.pt", &pt);
    let open = PytorchSource::open(&path).unwrap();
    same(
        &open,
        &PytorchSource::open_with(&path, &options).unwrap(),
        "pt",
    );
    same(
        &open,
        &PytorchSource::from_bytes(bytes, &options).unwrap(),
        "pt",
    );

    let (path, bytes) = write("m.gguf", &gguf_bytes());
    let open = GgufSource::open(&path).unwrap();
    same(
        &open,
        &GgufSource::open_with(&path, &options).unwrap(),
        "gguf",
    );
    same(
        &open,
        &GgufSource::from_bytes(bytes, &options).unwrap(),
        "gguf",
    );

    // NumPy (`.npy` and `.npz`, stored and deflated) and ONNX, as their writers wrote them.
    for file in ["f32.npy", "v3.npy", "stored.npz", "deflated.npz"] {
        let (path, bytes) = write(file, &corpus(&format!("numpy/{file}")));
        let open = NumpySource::open(&path).unwrap();
        same(
            &open,
            &NumpySource::open_with(&path, &options).unwrap(),
            file,
        );
        same(
            &open,
            &NumpySource::from_bytes(bytes, &options).unwrap(),
            file,
        );
    }
    let (path, bytes) = write("m.onnx", &corpus("onnx/model.onnx"));
    let open = OnnxSource::open(&path).unwrap();
    same(
        &open,
        &OnnxSource::open_with(&path, &options).unwrap(),
        "onnx",
    );
    same(
        &open,
        &OnnxSource::from_bytes(bytes, &options).unwrap(),
        "onnx",
    );

    // Records are told by their content, never by their name (as the registry tells them).
    for file in ["zoo.mpk", "zoo.mpk.gz", "zoo.json", "zoo.json.gz"] {
        let record = std::fs::read(data("legacy").join(file)).unwrap();
        let (path, bytes) = write("weights", &record);
        let open = LegacySource::open(&path).unwrap();
        same(
            &open,
            &LegacySource::open_with(&path, &options).unwrap(),
            file,
        );
        let from_bytes = LegacySource::from_bytes(bytes, &options).unwrap();
        same(&open, &from_bytes, file);
        assert_eq!(open.format(), from_bytes.format(), "{file}");
        let expected = burnpack::interop::burn_record::RecordFormat::from_path(file).unwrap();
        assert_eq!(open.format(), expected, "{file}: told by content");
    }
}

/// The old forms stay one release, deprecated, and agree with the new ones.
#[test]
#[allow(deprecated)]
fn the_deprecated_constructors_still_open() {
    use burnpack::format::Limits;
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits::default();
    let st = safetensors_bytes();
    let path = dir.path().join("m.safetensors");
    std::fs::write(&path, &st).unwrap();
    let open = SafetensorsSource::open(&path).unwrap();
    same(
        &open,
        &SafetensorsSource::open_with(&path, &limits).unwrap(),
        "st",
    );
    same(
        &open,
        &SafetensorsSource::open_file(&path, &limits).unwrap(),
        "st",
    );
    let bytes = Bytes::from_bytes_vec(st);
    same(
        &open,
        &SafetensorsSource::from_bytes_with(bytes, &limits).unwrap(),
        "st",
    );

    let record = data("legacy").join("zoo.mpk");
    let open = LegacySource::open(&record).unwrap();
    same(
        &open,
        &LegacySource::open_detect(&record, &limits).unwrap(),
        "mpk",
    );
    let bytes = Bytes::from_bytes_vec(std::fs::read(&record).unwrap());
    same(
        &open,
        &LegacySource::from_bytes(bytes, &limits).unwrap(),
        "mpk",
    );

    let options: burnpack::interop::pytorch::PytorchOptions = OpenOptions::new().key("x");
    assert_eq!(options.key_name(), Some("x"));
}

/// `Limits::max_file_size` is every source's, from a path and from bytes alike: a file one
/// byte over it is refused naming the limit, before it is read (it was not applied to
/// safetensors at all, nor to GGUF and uncompressed records from bytes).
#[test]
fn the_file_size_limit_holds_at_every_door() {
    let dir = tempfile::tempdir().unwrap();
    for (format, name, bytes) in samples() {
        // The pack's limit is the pack reader's (its header); a compressed record's is its
        // inflated size: both are checked elsewhere.
        if format == "burnpack" || name.ends_with(".gz") {
            continue;
        }
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let limits = burnpack::format::Limits::default().with_max_file_size(bytes.len() as u64 - 1);
        let options = OpenOptions::new().limits(limits);
        let err = burnpack::interop::open_any_with(&path, &options).unwrap_err();
        assert!(
            err.to_string().contains("file-size limit"),
            "{format}: {err}"
        );
        let err = open_bytes_any(Bytes::from_bytes_vec(bytes.clone()), &options).unwrap_err();
        assert!(
            err.to_string().contains("file-size limit"),
            "{format} bytes: {err}"
        );
        // At the limit, it opens.
        let exact = burnpack::format::Limits::default().with_max_file_size(bytes.len() as u64);
        let options = OpenOptions::new().limits(exact);
        assert!(
            burnpack::interop::open_any_with(&path, &options).is_ok(),
            "{format}"
        );
        assert!(
            open_bytes_any(Bytes::from_bytes_vec(bytes), &options).is_ok(),
            "{format}"
        );
    }
}

/// NumPy and ONNX files at the doors that take packs only: `load_pack`, `Reader::open` and
/// `PackStore` refuse them naming the file and saying what opens them (the registry's hint
/// names the format); the registry, `load_from_source` and `PackStore::from_source` take
/// them.
#[test]
fn numpy_and_onnx_files_at_every_door() {
    use burn::module::Module;
    use burnpack::module::{LoadOptions, PackModule};
    let dir = tempfile::tempdir().unwrap();
    for (file, bytes, hint) in [
        ("m.npy", corpus("numpy/f32.npy"), "NumPy"),
        ("m.npz", corpus("numpy/stored.npz"), "NumPy"),
        ("m.onnx", corpus("onnx/model.onnx"), "ONNX"),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, &bytes).unwrap();
        let model = common::model::Net::new(&burn::tensor::Device::flex());
        let err = model.clone().load_pack(&path).unwrap_err().to_string();
        assert!(
            err.contains(path.to_str().unwrap()) && err.contains("bpk convert"),
            "{file}: {err}"
        );
        let err = burnpack::read::Reader::open(&path).unwrap_err().to_string();
        assert!(err.contains("open_any"), "{file}: {err}");
        let near = near_miss(&bytes[..bytes.len().min(HEAD)]).unwrap();
        assert!(near.contains(hint), "{file}: {near}");
        #[cfg(feature = "store")]
        {
            use burn_store::ModuleSnapshot;
            let mut store = burnpack::store::PackStore::from_file(&path);
            let mut target = model.clone();
            let err = target.load_from(&mut store).unwrap_err().to_string();
            assert!(err.contains(file), "{file}: {err}");
        }
        // The registry opens it, and the loader takes it as any source (names that are not
        // the model's are reported, not guessed).
        let any = open_any(&path).unwrap();
        assert!(!any.as_tensor_source().tensors().is_empty(), "{file}");
        let report = model
            .clone()
            .load_from_source_with_report(
                any.as_tensor_source(),
                &LoadOptions::new().allow_partial(true).allow_unused(true),
            )
            .map(|(_, report)| report);
        assert!(report.is_ok(), "{file}: {report:?}");
        #[cfg(feature = "store")]
        {
            // `PackStore` over the source: a module loads through burn-store from it.
            use burn_store::ModuleSnapshot;
            let mut store = match file {
                "m.onnx" => {
                    burnpack::store::PackStore::from_source(OnnxSource::open(&path).unwrap())
                }
                _ => burnpack::store::PackStore::from_source(NumpySource::open(&path).unwrap()),
            }
            .allow_partial(true);
            let mut target = model.clone();
            let loaded = target.load_from(&mut store);
            assert!(loaded.is_ok(), "{file}: {loaded:?}");
        }
        assert!(Module::num_params(&model) > 0);
    }
}

/// A bool byte flipped from 1 to 2 in a file that keeps checksums is damage (the checksum
/// says so, `bpk` exits 1), not a bool that is no bool (exit 3): the integrity check comes
/// first. Without a checksum, the bool check names the element.
#[test]
fn a_flipped_bool_byte_is_damage_where_a_checksum_can_tell() {
    use burnpack::source::SourceErrorKind;
    let specs: Vec<_> = common::every_dtype()
        .into_iter()
        .filter(|s| {
            matches!(
                s.dtype,
                burn::tensor::DType::Bool(burn::tensor::BoolStore::Native)
            )
        })
        .collect();
    assert!(!specs.is_empty());
    for (checked, mut bytes) in [
        (true, common::ours_checked(&specs)),
        (false, common::ours(&specs)),
    ] {
        let reader =
            burnpack::read::Reader::from_bytes(Bytes::from_bytes_vec(bytes.clone())).unwrap();
        let info = reader.tensors()[0].clone();
        let at = usize::try_from(info.offset()).unwrap()
            + reader
                .read(&info)
                .unwrap()
                .iter()
                .position(|&b| b == 1)
                .unwrap();
        bytes[at] = 2;
        let reader = burnpack::read::Reader::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
        let err = reader
            .read(reader.tensor(info.name()).unwrap())
            .unwrap_err();
        let kind = err.kind();
        if checked {
            assert_eq!(kind, SourceErrorKind::Damaged, "{err}");
        } else {
            assert!(err.to_string().contains("which is no bool value"), "{err}");
            assert_ne!(kind, SourceErrorKind::Damaged, "{err}");
        }
    }
}
