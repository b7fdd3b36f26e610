//! Records of Burn 0.14-0.21, read from files Burn 0.21 and Burn 0.16 themselves wrote:
//! `tests/data/legacy/` holds a zoo of modules recorded with every self-describing recorder
//! (named MessagePack, gzipped or not, pretty JSON, JSON gzipped; full and half precision), a
//! bincode file, quantized linears, burn-train runs, every LR scheduler's record, and beside
//! them the values Burn 0.21 loads back from them; `0.16/` holds the zoo as Burn 0.16 wrote it.
//! Regenerate with
//! `cargo run --release --manifest-path tools/legacy-fixtures/Cargo.toml -- tests/data/legacy`
//! and `cargo run --release --manifest-path tools/legacy-fixtures-0.16/Cargo.toml --
//! tests/data/legacy/0.16`.
#![allow(deprecated)] // ndarray: deprecated in Burn 0.22, still a backend users load onto

mod common;

use std::path::{Path, PathBuf};

use burn::module::{Module, Param, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig,
};
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};
use burnpack::format::Limits;
use burnpack::interop::burn_record::{LegacyError, LegacySource, RecordFormat};
use burnpack::source::{CopyReason, OpenOptions, TensorSource};
use burnpack::{LoadOptions, ModuleError, PackModule};

#[derive(Module, Debug)]
enum Head {
    Projection(Linear),
    Norm(LayerNorm),
}

#[derive(Module, Debug)]
struct Block {
    linear: Linear,
    norm: LayerNorm,
}

/// The generator's module, declared with Burn 0.22.
#[derive(Module, Debug)]
struct Zoo {
    linear: Linear,
    conv: Conv2d,
    batch_norm: BatchNorm,
    embedding: Embedding,
    blocks: Vec<Block>,
    head: Head,
    absent: Option<Linear>,
    present: Option<Linear>,
    counts: Param<Tensor<1, Int>>,
    mask: Param<Tensor<2, Bool>>,
}

impl Zoo {
    fn new(device: &Device) -> Self {
        Self {
            linear: LinearConfig::new(3, 4).init(device),
            conv: Conv2dConfig::new([2, 3], [3, 3]).init(device),
            batch_norm: BatchNormConfig::new(3).init(device),
            embedding: EmbeddingConfig::new(5, 2).init(device),
            blocks: (0..2)
                .map(|_| Block {
                    linear: LinearConfig::new(2, 2).init(device),
                    norm: LayerNormConfig::new(2).init(device),
                })
                .collect(),
            head: Head::Projection(LinearConfig::new(2, 1).with_bias(false).init(device)),
            absent: None,
            present: Some(LinearConfig::new(1, 2).init(device)),
            counts: Param::initialized(
                ParamId::new(),
                Tensor::from_data(TensorData::new(vec![0i64; 3], [3]), device),
            ),
            mask: Param::initialized(
                ParamId::new(),
                Tensor::from_data(TensorData::new(vec![false; 4], [2, 2]), device),
            ),
        }
    }
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/legacy")
        .join(name)
}

/// One tensor as Burn 0.21 loaded it.
struct Expected {
    path: String,
    id: u64,
    dtype: String,
    shape: Vec<usize>,
    values: Vec<f64>,
}

fn expected(name: &str) -> Vec<Expected> {
    let text = std::fs::read_to_string(data(name)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(
        json["burn"] == "0.21.0" || json["burn"] == "0.16.1",
        "{name}"
    );
    json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Expected {
            // Burn 0.16's visitor tells no paths: its tensors are found by id.
            path: t["path"].as_str().unwrap_or_default().to_string(),
            id: t["id"].as_str().unwrap().parse().unwrap(),
            dtype: t["dtype"].as_str().unwrap().to_string(),
            shape: serde_json::from_value(t["shape"].clone()).unwrap(),
            // Compared as f32: every value was an f32, f16 or a small integer, and JSON's
            // decimal text round-trips those exactly where f64s may differ in the last digit.
            values: serde_json::from_value::<Vec<f64>>(t["values"].clone())
                .unwrap()
                .into_iter()
                .map(|v| f64::from(v as f32))
                .collect(),
        })
        .collect()
}

/// The values of `bytes` as f64, read as `dtype`.
fn values(bytes: &[u8], dtype: DType) -> Vec<f64> {
    as_f32(
        TensorData::from_bytes_vec(bytes.to_vec(), [bytes.len() / dtype.size().max(1)], dtype)
            .convert::<f64>()
            .iter::<f64>()
            .collect(),
    )
}

/// The values of `info` as `source` reads them (booleans as 0 and 1).
fn read_values(source: &LegacySource, info: &burnpack::format::TensorInfo) -> Vec<f64> {
    let bytes = source.read(info).unwrap();
    match info.dtype() {
        DType::Bool(_) => bytes.iter().map(|&b| f64::from(b)).collect(),
        dtype => values(&bytes, dtype),
    }
}

/// `values` rounded to f32, as the expected values are compared.
fn as_f32(values: Vec<f64>) -> Vec<f64> {
    values.into_iter().map(|v| f64::from(v as f32)).collect()
}

fn check_source(file: &str, expected_file: &str, format: RecordFormat) {
    let source = LegacySource::open(data(file)).unwrap();
    assert_eq!(source.format(), format);
    let meta = source.record_metadata();
    assert_eq!(meta.version, "0.21.0", "{file}");
    let expected = expected(expected_file);
    assert_eq!(source.tensors().len(), expected.len(), "{file}");
    for want in &expected {
        let info = source
            .tensors()
            .iter()
            .find(|t| t.name() == want.path)
            .unwrap_or_else(|| panic!("{file}: no tensor '{}'", want.path));
        // Burn 0.21 converts ints to its backend's type when it loads (the expected values
        // were read back on NdArray: I64); the file holds the precision settings' type.
        if want.dtype.starts_with('F') {
            // Floats are stored in the precision settings' type (Burn 0.21 converts them to
            // its backend's, f32 here, when it loads).
            let stored = if meta.float.ends_with("f16") {
                "F16"
            } else {
                "F32"
            };
            assert_eq!(
                format!("{:?}", info.dtype()),
                stored,
                "{file}: {}",
                want.path
            );
        } else if want.dtype.starts_with('I') {
            assert!(
                matches!(info.dtype(), DType::I64 | DType::I32 | DType::I16),
                "{file}: {}",
                want.path
            );
        } else {
            assert_eq!(
                format!("{:?}", info.dtype()),
                want.dtype,
                "{file}: {}",
                want.path
            );
        }
        assert_eq!(info.shape(), want.shape, "{file}: {}", want.path);
        assert_eq!(info.param_id(), Some(want.id), "{file}: {}", want.path);
        assert_eq!(
            read_values(&source, info),
            want.values,
            "{file}: {}",
            want.path
        );
    }
}

#[test]
fn every_tensor_of_every_recorder_matches_what_burn_0_21_loads() {
    check_source("zoo.mpk", "zoo.expected.json", RecordFormat::NamedMpk);
    check_source("zoo.mpk.gz", "zoo.expected.json", RecordFormat::NamedMpkGz);
    check_source("zoo.json", "zoo.expected.json", RecordFormat::Json);
    check_source("zoo.json.gz", "zoo.expected.json", RecordFormat::JsonGz);
    check_source(
        "zoo-half.mpk",
        "zoo-half.expected.json",
        RecordFormat::NamedMpk,
    );
}

#[test]
fn a_burn_0_21_model_loads_into_the_same_model_under_burn_0_22_in_one_call() {
    for device in [Device::flex(), Device::ndarray()] {
        for (file, expected_file) in [
            ("zoo.mpk", "zoo.expected.json"),
            ("zoo.mpk.gz", "zoo.expected.json"),
            ("zoo.json", "zoo.expected.json"),
            ("zoo.json.gz", "zoo.expected.json"),
        ] {
            let source = LegacySource::open(data(file)).unwrap();
            let (model, report) = Zoo::new(&device)
                .load_from_source_with_report(&source, &LoadOptions::new())
                .unwrap_or_else(|e| panic!("{file} on {device:?}: {e}"));
            let held = common::held::held(&model);
            let expected = expected(expected_file);
            assert_eq!(held.len(), expected.len());
            for want in &expected {
                let (_, id, _, values) = held
                    .iter()
                    .find(|(path, ..)| *path == want.path)
                    .unwrap_or_else(|| panic!("{file}: the model has no '{}'", want.path));
                assert_eq!(*values, want.values, "{file} on {device:?}: {}", want.path);
                // BatchNorm's running statistics keep their own ids in Burn 0.22 (whatever a
                // loader gives them), as they do when Burn loads its own files.
                if !want.path.contains("running_") {
                    assert_eq!(*id, want.id, "{file} on {device:?}: {}", want.path);
                }
            }
            assert_eq!(report.loaded(), expected.len());
            if file.contains("json") {
                assert!(
                    report
                        .copied()
                        .iter()
                        .all(|c| c.reason == CopyReason::Decoded { format: "JSON" }),
                    "{report}"
                );
            }
        }
    }
}

#[test]
fn half_precision_records_load_as_f16_or_cast_for_ndarray() {
    let source = LegacySource::open(data("zoo-half.mpk")).unwrap();
    assert!(
        source.record_metadata().float.ends_with("f16"),
        "{:?}",
        source.record_metadata()
    );
    let expected = expected("zoo-half.expected.json");
    // flex holds F16 as stored.
    let model = Zoo::new(&Device::flex())
        .load_from_source(&source, &LoadOptions::new())
        .unwrap();
    assert_eq!(model.linear.weight.val().dtype(), DType::F16);
    let weight = as_f32(
        model
            .linear
            .weight
            .val()
            .into_data()
            .convert::<f64>()
            .iter::<f64>()
            .collect(),
    );
    let want = expected.iter().find(|t| t.path == "linear.weight").unwrap();
    assert_eq!(weight, want.values);
    // ndarray has no F16: a clear error naming the parameters, or a cast.
    let err = Zoo::new(&Device::ndarray())
        .load_from_source(&source, &LoadOptions::new())
        .unwrap_err();
    assert!(matches!(err, ModuleError::Mismatch { .. }), "{err}");
    assert!(err.to_string().contains("linear.weight"), "{err}");
    let model = Zoo::new(&Device::ndarray())
        .load_from_source(
            &source,
            &LoadOptions::new().dtype(burnpack::module::DTypePolicy::CastFloatsTo(DType::F32)),
        )
        .unwrap();
    assert_eq!(model.linear.weight.val().dtype(), DType::F32);
}

#[test]
fn mismatches_are_reported_as_for_packs() {
    let source = LegacySource::open(data("zoo.mpk")).unwrap();
    #[derive(Module, Debug)]
    struct Smaller {
        linear: Linear,
        extra: Linear,
    }
    let device = Device::flex();
    let err = Smaller {
        linear: LinearConfig::new(3, 4).init(&device),
        extra: LinearConfig::new(2, 2).init(&device),
    }
    .load_from_source(&source, &LoadOptions::new())
    .unwrap_err();
    let ModuleError::Mismatch { file, mismatch } = err else {
        panic!("not a mismatch");
    };
    assert!(file.ends_with("zoo.mpk"));
    let mut missing = mismatch.missing.clone();
    missing.sort();
    assert_eq!(missing, ["extra.bias", "extra.weight"]);
    assert!(mismatch.unused.contains(&"conv.weight".to_string()));
    // Partial and filtered loads take what they are told to.
    let model = Smaller {
        linear: LinearConfig::new(3, 4).init(&device),
        extra: LinearConfig::new(2, 2).init(&device),
    }
    .load_from_source(
        &source,
        &LoadOptions::new()
            .allow_partial(true)
            .allow_unused(true)
            .rename(r"^blocks\.0\.linear\.", "extra.")
            .unwrap(),
    )
    .unwrap();
    let want = expected("zoo.expected.json");
    let bias = want
        .iter()
        .find(|t| t.path == "blocks.0.linear.bias")
        .unwrap();
    let got = as_f32(
        model
            .extra
            .bias
            .unwrap()
            .val()
            .into_data()
            .convert::<f64>()
            .iter::<f64>()
            .collect(),
    );
    assert_eq!(got, bias.values);
}

#[test]
fn bincode_records_are_refused_with_what_to_do() {
    let err = LegacySource::open(data("zoo.bin")).unwrap_err();
    assert!(matches!(err, LegacyError::Bincode { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("zoo.bin") && text.contains("NamedMpkFileRecorder"),
        "{text}"
    );
    // A `.bin` is a bincode record only when its bytes fit one; a gzipped one is told by its
    // content through the registry.
    let dir = tempfile::tempdir().unwrap();
    let noise = write(dir.path(), "noise.bin", &[0x42; 64]);
    let err = LegacySource::open(&noise).unwrap_err();
    assert!(!matches!(err, LegacyError::Bincode { .. }), "{err}");
    assert!(err.to_string().contains("not a valid Burn record"), "{err}");
    let record = std::fs::read(data("zoo.bin")).unwrap();
    let gz = write(dir.path(), "zoo.bin.gz", &gzip(&record));
    for err in [
        LegacySource::open(&gz).unwrap_err(),
        burnpack::interop::open_any(&gz).unwrap_err(),
    ] {
        assert!(matches!(err, LegacyError::Bincode { .. }), "{err}");
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Opening `bytes` as `name` fails with an `Invalid` or `Tensor` error naming the file and
/// saying `what`.
fn refused(name: &str, bytes: &[u8], what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), name, bytes);
    let err = LegacySource::open(&path).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            LegacyError::Invalid { .. } | LegacyError::Tensor { .. }
        ),
        "{name}: {text}"
    );
    assert!(text.contains(name), "{text}");
    assert!(
        text.contains(what),
        "{name}: '{text}' does not say '{what}'"
    );
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn damaged_and_foreign_files_are_clear_errors() {
    let mpk = std::fs::read(data("zoo.mpk")).unwrap();
    let json = std::fs::read_to_string(data("zoo.json")).unwrap();
    // Truncated at every tenth byte: an error, never a panic.
    for cut in (0..mpk.len()).step_by(10) {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "cut.mpk", &mpk[..cut]);
        assert!(LegacySource::open(&path).is_err(), "cut at {cut}");
    }
    // Every single byte changed: an error or a table, never a panic.
    for at in 0..mpk.len() {
        let mut damaged = mpk.clone();
        damaged[at] ^= 0x5a;
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "flip.mpk", &damaged);
        let _ = LegacySource::open(&path);
    }
    refused("empty.mpk", b"", "empty");
    refused("other.json", br#"{"a": 1}"#, "no BurnRecord metadata");
    refused("text.mpk", b"hello, world", "not a valid Burn record");
    // A tensor whose bytes do not fill its shape.
    let short = json.replacen(
        "\"shape\": [\n            3,\n            4",
        "\"shape\": [\n            3,\n            5",
        1,
    );
    assert_ne!(short, json, "the fixture's first shape moved");
    refused("short.json", short.as_bytes(), "linear.weight");
    // A dtype Burn does not have.
    let odd = json.replacen("\"dtype\": \"F32\"", "\"dtype\": \"F8\"", 1);
    refused("odd.json", odd.as_bytes(), "F8");
    // Nesting past the limit.
    let deep = format!("{}{}", "[".repeat(4000), "]".repeat(4000));
    refused("deep.json", deep.as_bytes(), "not a valid Burn record");
    // A gzip bomb: refused at the limit, not decompressed whole.
    let dir = tempfile::tempdir().unwrap();
    let bomb = write(dir.path(), "bomb.mpk.gz", &gzip(&vec![0u8; 8 << 20]));
    let err = LegacySource::open_with(
        &bomb,
        &OpenOptions::new().limits(Limits::default().with_max_file_size(1 << 20)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("file-size limit"), "{err}");
    // A gzip stream cut short is truncated (cannot be read: `bpk` exits 3); one whose
    // compressed bytes or CRC-32 were damaged was read and found damaged (`bpk` exits 1).
    // Neither is an I/O failure.
    let whole = gzip(&mpk);
    let cut = write(dir.path(), "cut.mpk.gz", &whole[..whole.len() - 10]);
    let mut flipped = whole.clone();
    flipped[whole.len() / 2] ^= 0xff;
    let flipped = write(dir.path(), "flipped.mpk.gz", &flipped);
    let mut crc = whole.clone();
    let at = whole.len() - 8;
    crc[at] ^= 1;
    let crc = write(dir.path(), "crc.mpk.gz", &crc);
    use burnpack::read::SourceErrorKind::{Damaged, Truncated};
    for (path, kind) in [(cut, Truncated), (flipped, Damaged), (crc, Damaged)] {
        let err = LegacySource::open(&path).unwrap_err();
        assert_eq!(err.kind(), kind, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&path.display().to_string()) && text.contains("gzip"),
            "{text}"
        );
    }
    // The format is told by the content, whatever the name: as the registry tells it.
    for (name, bytes) in [
        ("model.weights", mpk.clone()),
        ("model.bin", gzip(&mpk)),
        ("model.mpk", json.as_bytes().to_vec()),
    ] {
        let other = write(dir.path(), name, &bytes);
        let source = LegacySource::open(&other).unwrap();
        assert_eq!(source.tensors().len(), expected("zoo.expected.json").len());
        let by_registry = burnpack::interop::open_any(&other).unwrap();
        assert_eq!(by_registry.tensors().len(), source.tensors().len());
    }
}

#[test]
fn a_converted_record_is_a_pack_that_burn_0_22_loads() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    for file in ["zoo.mpk", "zoo.mpk.gz", "zoo.json", "zoo.json.gz"] {
        let source = LegacySource::open(data(file)).unwrap();
        let pack = dir.path().join("zoo.bpk");
        source.to_writer().unwrap().write_to_file(&pack).unwrap();
        // Through this crate, and through Burn's own loader.
        let ours = Zoo::new(&device).load_pack(&pack).unwrap();
        let burns = Zoo::new(&device).try_load_file(&pack).unwrap();
        let expected = expected("zoo.expected.json");
        for model in [ours, burns] {
            let held = common::held::held(&model);
            for want in &expected {
                let (_, _, _, values) = held.iter().find(|(p, ..)| *p == want.path).unwrap();
                assert_eq!(*values, want.values, "{file}: {}", want.path);
            }
        }
        let reader = burnpack::Reader::open(&pack).unwrap();
        assert_eq!(reader.metadata()["burn.record.version"], "0.21.0");
        assert!(reader.metadata()["burn.record.format"].contains("Recorder"));
    }
}

#[test]
fn named_messagepack_tensors_are_windows_of_the_mapping_where_aligned() {
    let source = LegacySource::open(data("zoo.mpk")).unwrap();
    let (_, report) = Zoo::new(&Device::flex())
        .load_from_source_with_report(&source, &LoadOptions::new())
        .unwrap();
    // MessagePack puts a tensor's bytes wherever the encoding ends: each is either a view or
    // a copy that says it was unaligned, and the counts add up.
    for copied in report.copied() {
        assert!(
            matches!(copied.reason, CopyReason::Unaligned { .. }),
            "{}: {}",
            copied.path,
            copied.reason
        );
    }
    assert_eq!(report.views() + report.copied().len(), report.loaded());
    for info in source.tensors() {
        let aligned = source.copy_reason(info).is_none();
        let bytes = source.read(info).unwrap();
        assert_eq!(bytes.len() as u64, info.len());
        if aligned {
            assert_eq!(
                bytes.as_ptr() as usize % burnpack::format::element_align(info.dtype()),
                0
            );
        }
    }
}

mod train {
    //! burn-train 0.21 checkpoints (`tests/data/legacy/train-*`: model, optimizer and
    //! scheduler records of epoch 1, after 4 steps, as burn-train's `FileCheckpointer`s write
    //! them) resume under Burn 0.22 after the migration to the same parameters Burn 0.21
    //! reaches by resuming from them (`expected.json`, 4 more steps).

    use super::*;
    use burn::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
    use burn::lr_scheduler::exponential::ExponentialLrSchedulerConfig;
    use burn::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
    use burn::optim::momentum::MomentumConfig;
    use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, SgdConfig};
    use burnpack::checkpoint::Checkpoint;
    use burnpack::interop::burn_record::{
        SchedulerKind, burn_train_epochs, import_legacy_burn_train,
    };

    #[derive(Module, Debug)]
    struct Mlp {
        a: Linear,
        b: Linear,
    }

    /// The generator's batches.
    fn batch(step: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
        let xs: Vec<f32> = (0..12)
            .map(|i| ((i * 5 + step * 3) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let ys: Vec<f32> = xs
            .chunks(3)
            .map(|r| r[0] - 2.0 * r[1] + r[2] * r[0])
            .collect();
        (
            Tensor::from_data(TensorData::new(xs, [4, 3]), device),
            Tensor::from_data(TensorData::new(ys, [4, 1]), device),
        )
    }

    /// Migrates `dir`, resumes with `optim` and `sched` (fresh, of the run's kinds) for the
    /// steps Burn 0.21 ran after the checkpoint, and compares with where Burn 0.21 got.
    fn resume(dir: &str, kind: SchedulerKind, optim: ModuleOptimizer, sched: ModuleLrScheduler) {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("ckpt.bpk");
        assert_eq!(burn_train_epochs(data(dir)).unwrap(), [1]);
        import_legacy_burn_train(data(dir), 1, kind, &out).unwrap();
        let ckpt = Checkpoint::open(&out).unwrap();
        assert!(ckpt.has_optimizer() && ckpt.has_scheduler());
        assert_eq!(ckpt.progress().epoch, 1);
        let device = Device::flex().autodiff();
        let mut model = ckpt
            .load_model(Mlp {
                a: LinearConfig::new(3, 4).init(&device),
                b: LinearConfig::new(4, 1).init(&device),
            })
            .unwrap();
        let mut optim = ckpt.load_optimizer(optim).unwrap();
        let mut sched = sched.load_record(ckpt.scheduler_record().unwrap());
        for step in 4..8 {
            let (x, y) = batch(step, &device);
            let loss = (model.b.forward(model.a.forward(x)) - y)
                .powf_scalar(2.0)
                .mean();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(sched.step(), model, grads);
        }
        let held = common::held::held(&model);
        let text = std::fs::read_to_string(data(dir).join("expected.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        for want in json["tensors"].as_array().unwrap() {
            let path = want["path"].as_str().unwrap();
            let values: Vec<f64> = serde_json::from_value(want["values"].clone()).unwrap();
            let (_, _, _, got) = held.iter().find(|(p, ..)| p == path).unwrap();
            for (g, w) in got.iter().zip(&values) {
                assert!(
                    (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                    "{dir}: {path}: {got:?} vs Burn 0.21's {values:?}"
                );
            }
        }
    }

    #[test]
    fn adam_with_an_exponential_schedule_resumes_to_burn_0_21s_values() {
        let exponential = ExponentialLrSchedulerConfig::new(0.05, 0.9).init().unwrap();
        resume(
            "train-adam",
            SchedulerKind::Exponential,
            AdamConfig::new().init(),
            exponential,
        );
    }

    #[test]
    fn adamw_with_a_cosine_schedule_resumes_to_burn_0_21s_values() {
        let cosine = CosineAnnealingLrSchedulerConfig::new(0.05, 10)
            .init()
            .unwrap();
        resume(
            "train-adamw",
            SchedulerKind::Cosine,
            AdamWConfig::new().init(),
            cosine,
        );
    }

    /// Every scheduler kind: a record Burn 0.21 wrote after 3 steps, migrated, gives under
    /// Burn 0.22 the next 4 learning rates Burn 0.21 gives (`tests/data/legacy/schedulers`).
    #[test]
    fn every_scheduler_kind_resumes_to_burn_0_21s_learning_rates() {
        use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
        use burn::lr_scheduler::noam::NoamLrSchedulerConfig;
        use burn::lr_scheduler::step::StepLrSchedulerConfig;
        let dir = data("schedulers");
        let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
        let kinds: [(&str, SchedulerKind, ModuleLrScheduler); 5] = [
            (
                "exponential",
                SchedulerKind::Exponential,
                ExponentialLrSchedulerConfig::new(0.05, 0.9).init().unwrap(),
            ),
            (
                "cosine",
                SchedulerKind::Cosine,
                CosineAnnealingLrSchedulerConfig::new(0.05, 10)
                    .init()
                    .unwrap(),
            ),
            (
                "linear",
                SchedulerKind::Linear,
                LinearLrSchedulerConfig::new(0.05, 0.01, 10).init().unwrap(),
            ),
            (
                "step",
                SchedulerKind::Step,
                StepLrSchedulerConfig::new(0.05, 2).init().unwrap(),
            ),
            (
                "noam",
                SchedulerKind::Noam,
                NoamLrSchedulerConfig::new(0.5)
                    .with_warmup_steps(5)
                    .with_model_size(64)
                    .init()
                    .unwrap(),
            ),
        ];
        for (name, kind, fresh) in kinds {
            let source = LegacySource::open(dir.join(format!("{name}.mpk.gz"))).unwrap();
            let pack = source.scheduler_writer(kind).unwrap().into_bytes().unwrap();
            let record = burn::lr_scheduler::LrSchedulerRecord::from_bytes(pack).unwrap();
            let mut sched = fresh.load_record(record);
            let got: Vec<f64> = (0..4).map(|_| sched.step().base()).collect();
            let want: Vec<f64> = serde_json::from_value(expected[name].clone()).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs(),
                    "{name}: {got:?} vs Burn 0.21's {want:?}"
                );
            }
            // An exponential record (a float) read as a cosine one (an iteration) is refused.
            if name == "exponential" {
                let err = source.scheduler_writer(SchedulerKind::Cosine).unwrap_err();
                assert!(err.to_string().contains("another type"), "{err}");
            }
        }
    }

    #[test]
    fn sgd_with_momentum_resumes_to_burn_0_21s_values() {
        let sgd = SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .init();
        let exponential = ExponentialLrSchedulerConfig::new(0.05, 0.9).init().unwrap();
        resume("train-sgd", SchedulerKind::Exponential, sgd, exponential);
    }
}

/// A MessagePack record whose tensor bytes are arrays of numbers rather than `bin` (as a
/// writer without `serde_bytes` leaves them): decoded, every tensor, with the reason.
#[test]
fn messagepack_bytes_written_as_arrays_are_decoded() {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("zoo.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arrays.mpk");
    std::fs::write(&path, rmp_serde::to_vec_named(&json).unwrap()).unwrap();
    let source = LegacySource::open(&path).unwrap();
    let expected = expected("zoo.expected.json");
    assert_eq!(source.tensors().len(), expected.len());
    for want in &expected {
        let info = source
            .tensors()
            .iter()
            .find(|t| t.name() == want.path)
            .unwrap();
        assert_eq!(
            source.copy_reason(info),
            Some(CopyReason::Decoded {
                format: "MessagePack arrays"
            })
        );
        assert_eq!(read_values(&source, info), want.values, "{}", want.path);
    }
}

/// A decompressed record is this source's own memory: every tensor is moved to an aligned
/// place in it once, and then loads as a view (no copy beyond the decompression).
#[test]
fn gzipped_records_load_every_tensor_as_a_view_of_the_decompressed_file() {
    let source = LegacySource::open(data("zoo.mpk.gz")).unwrap();
    for info in source.tensors() {
        assert_eq!(source.copy_reason(info), None, "{}", info.name());
    }
    let (_, report) = Zoo::new(&Device::flex())
        .load_from_source_with_report(&source, &LoadOptions::new())
        .unwrap();
    assert!(report.copied().is_empty(), "{report}");
    assert_eq!(report.views(), report.loaded());
}

/// The generator's quantized module, declared with Burn 0.22.
#[derive(Module, Debug)]
struct Quant {
    tensor: Linear,
    block: Linear,
    odd: Linear,
}

impl Quant {
    fn new(device: &Device) -> Self {
        Self {
            tensor: LinearConfig::new(4, 8).init(device),
            block: LinearConfig::new(4, 32).with_bias(false).init(device),
            odd: LinearConfig::new(3, 5).init(device),
        }
    }
}

#[test]
fn quantized_records_of_burn_0_21_load_quantized_and_dequantize_to_what_burn_0_21_reads() {
    use burn::tensor::quantization::{QuantScheme, QuantStore, QuantValue, ScaleDtype};
    let source = LegacySource::open(data("quant.mpk")).unwrap();
    let expected = expected("quant.expected.json");
    assert_eq!(source.tensors().len(), expected.len());
    // Burn 0.21's schemes, as Burn 0.22 reads the same bytes (`Native`: one byte a value; the
    // f16 scales `odd` asked for were written as f32 by Burn 0.21's ndarray).
    let native = QuantScheme::default().with_store(QuantStore::Native);
    let schemes = [
        ("tensor.weight", native),
        (
            "block.weight",
            native
                .with_value(QuantValue::Q8S)
                .per_block([16], ScaleDtype::F32),
        ),
        ("odd.weight", native.with_value(QuantValue::Q8S)),
    ];
    for (path, scheme) in schemes {
        let info = source.tensors().iter().find(|t| t.name() == path).unwrap();
        assert_eq!(info.dtype(), DType::QFloat(scheme), "{path}");
    }
    // Straight from the record, and from the pack `bpk convert` writes of it (through this
    // crate and through Burn 0.22's own loader).
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("quant.bpk");
    source.to_writer().unwrap().write_to_file(&pack).unwrap();
    for (device, how) in [
        (Device::flex(), "record"),
        (Device::ndarray(), "record"),
        (Device::flex(), "pack"),
        (Device::flex(), "pack, Burn's loader"),
    ] {
        let model = match how {
            "record" => {
                let (model, report) = Quant::new(&device)
                    .load_from_source_with_report(&source, &LoadOptions::new())
                    .unwrap_or_else(|e| panic!("{device:?}: {e}"));
                assert_eq!(report.loaded(), expected.len());
                model
            }
            "pack" => Quant::new(&device).load_pack(&pack).unwrap(),
            _ => Quant::new(&device).try_load_file(&pack).unwrap(),
        };
        let params = [
            ("tensor.weight", model.tensor.weight.val()),
            ("block.weight", model.block.weight.val()),
            ("odd.weight", model.odd.weight.val()),
        ];
        for (path, tensor) in params {
            let want = expected.iter().find(|t| t.path == path).unwrap();
            assert!(want.dtype.starts_with("QFloat"), "{}", want.dtype);
            assert!(
                matches!(tensor.dtype(), DType::QFloat(_)),
                "{path}: {:?}",
                tensor.dtype()
            );
            assert_eq!(tensor.shape().to_vec(), want.shape, "{path}");
            let got = as_f32(
                tensor
                    .dequantize()
                    .into_data()
                    .convert::<f64>()
                    .iter::<f64>()
                    .collect(),
            );
            assert_eq!(got, want.values, "{path} on {device:?} from the {how}");
        }
        let bias = model.odd.bias.as_ref().unwrap().val();
        let want = expected.iter().find(|t| t.path == "odd.bias").unwrap();
        assert_eq!(
            as_f32(
                bias.dequantize()
                    .into_data()
                    .convert::<f64>()
                    .iter::<f64>()
                    .collect()
            ),
            want.values
        );
    }
}

#[test]
fn quantized_tensors_whose_scheme_or_bytes_do_not_fit_are_errors_naming_them() {
    let bytes = std::fs::read(data("quant.mpk")).unwrap();
    let replace = |from: &[u8], to: &[u8]| {
        let mut out = bytes.clone();
        let at = out.windows(from.len()).position(|w| w == from).unwrap();
        out[at..at + from.len()].copy_from_slice(to);
        out
    };
    // A value type no Burn has and a mode Burn 0.22 does not know.
    refused("quant-value.mpk", &replace(b"Q8F", b"Q9F"), "values are");
    refused(
        "quant-mode.mpk",
        &replace(b"Symmetric", b"Asymmetri"),
        "mode is",
    );
    // A shape of 36 values over the 32 bytes of values that `tensor.weight` has.
    refused(
        "quant-shape.mpk",
        &replace(b"\xa5shape\x92\x04\x08", b"\xa5shape\x92\x04\x09"),
        "bytes for a quantized tensor of shape [4, 9]",
    );
}

/// Files Burn 0.16.1 wrote (`tools/legacy-fixtures-0.16`: the same module in Burn 0.16's API,
/// `Bool` tensors without a store, ids of Burn 0.16): every tensor, found by the id Burn 0.16
/// gave it, holds what Burn 0.16 loads back, and the module loads in one strict call.
#[test]
fn records_written_by_burn_0_16_load_into_the_same_model_under_burn_0_22() {
    for (file, expected_file) in [
        ("0.16/zoo.mpk", "0.16/zoo.expected.json"),
        ("0.16/zoo.mpk.gz", "0.16/zoo.expected.json"),
        ("0.16/zoo.json", "0.16/zoo.expected.json"),
        ("0.16/zoo-half.mpk", "0.16/zoo-half.expected.json"),
    ] {
        let source = LegacySource::open(data(file)).unwrap();
        assert_eq!(source.record_metadata().version, "0.16.1", "{file}");
        let expected = expected(expected_file);
        assert_eq!(source.tensors().len(), expected.len(), "{file}");
        for info in source.tensors() {
            let want = expected
                .iter()
                .find(|w| Some(w.id) == info.param_id())
                .unwrap_or_else(|| panic!("{file}: '{}' has no id Burn 0.16 gave", info.name()));
            assert_eq!(
                info.shape(),
                want.shape.as_slice(),
                "{file}: {}",
                info.name()
            );
            assert_eq!(
                as_f32(read_values(&source, info)),
                want.values,
                "{file}: {}",
                info.name()
            );
        }
        let (model, report) = Zoo::new(&Device::flex())
            .load_from_source_with_report(&source, &LoadOptions::new())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(report.loaded(), expected.len(), "{file}");
        let held = common::held::held(&model);
        for (path, _, _, values) in &held {
            let info = source.tensors().iter().find(|t| t.name() == path).unwrap();
            assert_eq!(
                *values,
                as_f32(read_values(&source, info)),
                "{file}: {path}"
            );
        }
        if file.ends_with("zoo.mpk") {
            let mask = source
                .tensors()
                .iter()
                .find(|t| t.name() == "mask")
                .unwrap();
            assert_eq!(mask.dtype(), DType::Bool(burn::tensor::BoolStore::Native));
        }
    }
}

/// A parameter whose value is not a tensor (Burn 0.13's `value`/`shape`, nil, a string, raw
/// bytes, an empty map, a tensor map missing its bytes or with a renamed key) is an error
/// naming the parameter, never a record of one tensor fewer (found by an attack through
/// `bpk`: these loaded with exit 0 and the parameter gone).
#[test]
fn a_parameter_that_is_not_a_tensor_is_refused_never_dropped() {
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("zoo.json")).unwrap()).unwrap();
    let weight = original["item"]["linear"]["weight"]["param"].clone();
    let mut renamed = weight.clone();
    let bytes = renamed.as_object_mut().unwrap().remove("bytes").unwrap();
    let mut without_bytes = renamed.clone();
    renamed
        .as_object_mut()
        .unwrap()
        .insert("bytez".into(), bytes);
    without_bytes.as_object_mut().unwrap().remove("bytez");
    let cases = [
        (
            "old",
            serde_json::json!({"value": [1.0, 2.0], "shape": [1, 2]}),
            "Burn 0.13",
        ),
        ("null", serde_json::Value::Null, "nil"),
        ("string", serde_json::json!("x"), "a string"),
        ("empty", serde_json::json!({}), "a map"),
        ("renamed", renamed, "without its bytes"),
        ("no-bytes", without_bytes, "without its bytes"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, param, says) in cases {
        let mut record = original.clone();
        record["item"]["linear"]["weight"]["param"] = param;
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        let err = LegacySource::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{name}.json"))
                && err.contains("linear.weight")
                && err.contains(says),
            "{name}: {err}"
        );
    }
}

/// A file that is no record (a safetensors file, a pack, a zip) opened as one says that a
/// record is a map and what the file starts with, not that a record has bytes left over.
#[test]
fn a_file_that_is_no_record_says_what_a_record_is() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        (
            "model.safetensors",
            b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ".to_vec(),
        ),
        ("model.zip", b"PK\x03\x04\x14\x00\x00\x00".to_vec()),
        ("model.bpk", b"NRUB\x01\x00\x10\x00\x00\x00".to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let err = LegacySource::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(name) && err.contains("a record is a JSON object or a MessagePack map"),
            "{err}"
        );
        assert!(!err.contains("after the record"), "{err}");
    }
}
