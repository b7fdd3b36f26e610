//! `SafetensorsSource`: safetensors files written by the `safetensors` crate and by burn-store,
//! single and sharded with an index JSON, loaded into Burn modules through the module loader;
//! unaligned tensors, every dtype, F16/BF16 into F32 modules, and every error path.

mod common;

use std::path::Path;

use burn::module::{Module, Param};
use burn::tensor::{DType, Device, Tensor};
use burn_store::{ModuleSnapshot, SafetensorsStore};
use burnpack::interop::safetensors::{SafetensorsSource, save_safetensors};
use burnpack::module::{DTypePolicy, LoadOptions, ModuleError, PackModule};
use burnpack::source::{CopyReason, TensorSource};
use common::model::{Net, snapshot, trained_with};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// Writes `tensors` (name, dtype, shape, bytes) as one safetensors file.
fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn values<M: Module>(m: &M) -> Vec<(String, DType, Vec<usize>, Vec<u8>)> {
    snapshot(m)
        .into_iter()
        .map(|(k, (_, d, s, b))| (k, d, s, b))
        .collect()
}

#[test]
fn a_model_saved_by_burn_store_loads_whole_and_sharded() {
    let device = Device::flex();
    let model = trained_with(&device, false);
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("model.safetensors");
    model
        .save_into(&mut SafetensorsStore::from_file(&single))
        .unwrap();

    let source = SafetensorsSource::open(&single).unwrap();
    assert_eq!(source.shards().len(), 1);
    let loaded = Net::new_with(&device, false)
        .load_from_source(&source, &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), values(&model));

    // The same tensors split over three shards with an index, as Hugging Face lays them out.
    let names: Vec<String> = source
        .tensors()
        .iter()
        .map(|t| t.name().to_string())
        .collect();
    let mut weight_map = serde_json::Map::new();
    for (k, chunk) in names.chunks(names.len().div_ceil(3)).enumerate() {
        let file = format!("model-{:05}-of-00003.safetensors", k + 1);
        let tensors: Vec<_> = chunk
            .iter()
            .map(|name| {
                let info = source.tensor(name).unwrap();
                let dtype = match info.dtype() {
                    DType::F32 => Dtype::F32,
                    DType::I64 => Dtype::I64,
                    DType::I32 => Dtype::I32,
                    DType::Bool(_) => Dtype::BOOL,
                    other => panic!("{other:?}"),
                };
                (
                    name.as_str(),
                    dtype,
                    info.shape().to_vec(),
                    source.read(info).unwrap().to_vec(),
                )
            })
            .collect();
        write(&dir.path().join(&file), &tensors);
        for name in chunk {
            weight_map.insert(name.clone(), file.clone().into());
        }
    }
    let index = dir.path().join("model.safetensors.index.json");
    let json = serde_json::json!({"metadata": {"total_size": 1234}, "weight_map": weight_map});
    std::fs::write(&index, json.to_string()).unwrap();
    let sharded = SafetensorsSource::open(&index).unwrap();
    assert_eq!(sharded.shards().len(), 3);
    assert_eq!(sharded.metadata()["total_size"], "1234");
    let info = sharded.tensor(&names[names.len() - 1]).unwrap();
    assert!(
        sharded
            .shard_of(info)
            .ends_with("model-00003-of-00003.safetensors")
    );
    let loaded = Net::new_with(&device, false)
        .load_from_source(&sharded, &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), values(&model));
}

#[derive(Module, Debug)]
struct Pair {
    small: Param<Tensor<1>>,
    big: Param<Tensor<2>>,
}

#[test]
fn unaligned_tensors_are_copied_aligned_tensors_are_not() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.safetensors");
    // The `safetensors` crate orders tensors to keep them aligned; other writers do not. A
    // hand-made file: a 3-byte tensor first puts the next one at an odd offset.
    let big: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
    let mut data = vec![1u8, 2, 3];
    data.extend(big.iter().flat_map(|v| v.to_le_bytes()));
    data.push(9); // one more byte puts `small` back on a multiple of 4
    data.extend([7.0f32, 8.0].iter().flat_map(|v| v.to_le_bytes()));
    let mut header = serde_json::json!({
        "a_pad": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
        "big": {"dtype": "F32", "shape": [3, 4], "data_offsets": [3, 51]},
        "b_pad": {"dtype": "U8", "shape": [1], "data_offsets": [51, 52]},
        "small": {"dtype": "F32", "shape": [2], "data_offsets": [52, 60]},
    })
    .to_string();
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend(&data);
    std::fs::write(&path, file).unwrap();
    let source = SafetensorsSource::open(&path).unwrap();
    let unaligned: Vec<&str> = source.unaligned().map(|t| t.name()).collect();
    assert!(unaligned.contains(&"big"), "{unaligned:?}");
    assert!(!unaligned.contains(&"a_pad") && !unaligned.contains(&"small"));
    let fresh = || Pair {
        small: Param::from_data([0.0f32; 2], &device),
        big: Param::from_data([[0.0f32; 4]; 3], &device),
    };
    let (pair, report) = fresh()
        .load_from_source_with_report(&source, &LoadOptions::new().allow_unused(true))
        .unwrap();
    // The load reports the copy, which tensor and why.
    assert_eq!((report.loaded(), report.views()), (2, 1), "{report}");
    assert_eq!(report.copied().len(), 1);
    assert_eq!(report.copied()[0].path, "big");
    let header_end = 8 + header.len() as u64;
    assert_eq!(
        report.copied()[0].reason,
        CopyReason::Unaligned {
            offset: header_end + 3,
            align: 4
        }
    );
    assert_eq!(
        report.summary(),
        "2 tensors loaded: 1 views, 1 copied (1 unaligned); 2 unused"
    );
    assert_eq!(pair.big.val().into_data().try_to_vec::<f32>().unwrap(), big);

    assert_eq!(
        pair.small.val().into_data().try_to_vec::<f32>().unwrap(),
        [7.0, 8.0]
    );
}

#[test]
fn every_dtype_reads_back_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.safetensors");
    let dtypes = [
        (Dtype::BOOL, DType::Bool(burn::tensor::BoolStore::Native), 1),
        (Dtype::U8, DType::U8, 1),
        (Dtype::I8, DType::I8, 1),
        (Dtype::I16, DType::I16, 2),
        (Dtype::U16, DType::U16, 2),
        (Dtype::F16, DType::F16, 2),
        (Dtype::BF16, DType::BF16, 2),
        (Dtype::I32, DType::I32, 4),
        (Dtype::U32, DType::U32, 4),
        (Dtype::F32, DType::F32, 4),
        (Dtype::F64, DType::F64, 8),
        (Dtype::I64, DType::I64, 8),
        (Dtype::U64, DType::U64, 8),
    ];
    let names: Vec<String> = (0..dtypes.len()).map(|i| format!("t{i:02}")).collect();
    let tensors: Vec<_> = dtypes
        .iter()
        .enumerate()
        .map(|(i, (st, _, size))| {
            let bytes = if *st == Dtype::BOOL {
                vec![1, 0, 1]
            } else {
                common::pattern(i as u64, 3 * size)
            };
            (names[i].as_str(), *st, vec![3], bytes)
        })
        .collect();
    write(&path, &tensors);
    let source = SafetensorsSource::open(&path).unwrap();
    for ((name, _, shape, bytes), (_, dtype, _)) in tensors.iter().zip(&dtypes) {
        let info = source.tensor(name).unwrap();
        assert_eq!((info.dtype(), info.shape()), (*dtype, &shape[..]), "{name}");
        assert_eq!(&source.read(info).unwrap()[..], &bytes[..], "{name}");
    }
}

#[derive(Module, Debug)]
struct Halves {
    h: Param<Tensor<1>>,
    b: Param<Tensor<1>>,
}

#[test]
fn f16_and_bf16_weights_load_into_f32_modules_when_asked() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.safetensors");
    let h: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| burn::tensor::f16::from_f32(*v).to_le_bytes())
        .collect();
    let b: Vec<u8> = [0.25f32, 4.0]
        .iter()
        .flat_map(|v| burn::tensor::bf16::from_f32(*v).to_le_bytes())
        .collect();
    write(
        &path,
        &[
            ("h", Dtype::F16, vec![2], h),
            ("b", Dtype::BF16, vec![2], b),
        ],
    );
    let source = SafetensorsSource::open(&path).unwrap();
    let fresh = || Halves {
        h: Param::from_data([0.0f32; 2], &device),
        b: Param::from_data([0.0f32; 2], &device),
    };
    let (cast, report) = fresh()
        .load_from_source_with_report(
            &source,
            &LoadOptions::new().dtype(DTypePolicy::CastToModule),
        )
        .unwrap();
    // Both were cast, so both were copied, and the report says from what.
    let reasons: Vec<(&str, CopyReason)> = report
        .copied()
        .iter()
        .map(|c| (c.path.as_str(), c.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "h",
                CopyReason::Cast {
                    from: DType::F16,
                    to: DType::F32
                }
            ),
            (
                "b",
                CopyReason::Cast {
                    from: DType::BF16,
                    to: DType::F32
                }
            ),
        ]
    );
    assert_eq!(
        report.summary(),
        "2 tensors loaded: 0 views, 2 copied (1 cast from F16 to F32, 1 cast from BF16 to F32); \
         2 cast"
    );
    assert_eq!(cast.h.val().dtype(), DType::F32);
    assert_eq!(
        cast.h.val().into_data().try_to_vec::<f32>().unwrap(),
        [1.5, -2.0]
    );
    assert_eq!(
        cast.b.val().into_data().try_to_vec::<f32>().unwrap(),
        [0.25, 4.0]
    );
    // As stored (the default), the parameters take the file's dtypes.
    let (kept, report) = fresh()
        .load_from_source_with_report(&source, &LoadOptions::new())
        .unwrap();
    assert_eq!((report.loaded(), report.views()), (2, 2), "{report}");
    assert_eq!(
        (kept.h.val().dtype(), kept.b.val().dtype()),
        (DType::F16, DType::BF16)
    );
}

fn message(err: impl std::fmt::Display) -> String {
    err.to_string()
}

#[test]
fn bad_files_and_indexes_are_errors_naming_the_file() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one = [0.5f32, 1.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>();
    write(
        &d.join("a.safetensors"),
        &[("h", Dtype::F32, vec![2], one.clone())],
    );
    write(
        &d.join("b.safetensors"),
        &[("b", Dtype::F32, vec![2], one.clone())],
    );

    // A damaged header.
    let mut bytes = std::fs::read(d.join("a.safetensors")).unwrap();
    bytes[9] = b'!';
    std::fs::write(d.join("bad.safetensors"), &bytes).unwrap();
    let m = message(SafetensorsSource::open(d.join("bad.safetensors")).unwrap_err());
    assert!(m.contains("bad.safetensors"), "{m}");
    // Truncated data.
    let full = std::fs::read(d.join("a.safetensors")).unwrap();
    std::fs::write(d.join("short.safetensors"), &full[..full.len() - 1]).unwrap();
    let m = message(SafetensorsSource::open(d.join("short.safetensors")).unwrap_err());
    assert!(m.contains("short.safetensors"), "{m}");
    // A missing file.
    let m = message(SafetensorsSource::open(d.join("none.safetensors")).unwrap_err());
    assert!(m.contains("none.safetensors"), "{m}");

    let index = |name: &str, map: serde_json::Value| {
        let path = d.join(name);
        std::fs::write(&path, serde_json::json!({"weight_map": map}).to_string()).unwrap();
        message(SafetensorsSource::open(&path).unwrap_err())
    };
    let m = index(
        "i1.json",
        serde_json::json!({"h": "a.safetensors", "b": "missing.safetensors"}),
    );
    assert!(m.contains("missing.safetensors"), "{m}");
    let m = index(
        "i2.json",
        serde_json::json!({"h": "b.safetensors", "b": "a.safetensors"}),
    );
    assert!(
        m.contains("i2.json") && m.contains("does not hold it"),
        "{m}"
    );
    // An index of one shard is fine.
    std::fs::write(
        d.join("i3.json"),
        serde_json::json!({"weight_map": {"h": "a.safetensors"}}).to_string(),
    )
    .unwrap();
    assert_eq!(
        SafetensorsSource::open(d.join("i3.json"))
            .unwrap()
            .tensors()
            .len(),
        1
    );
    let m = index("i4.json", serde_json::json!({"h": "../a.safetensors"}));
    assert!(m.contains("not a file name"), "{m}");
    std::fs::write(d.join("i5.json"), "{not json").unwrap();
    let m = message(SafetensorsSource::open(d.join("i5.json")).unwrap_err());
    assert!(
        m.contains("i5.json") && m.contains("not a safetensors index"),
        "{m}"
    );
    // A shard holding a tensor the index does not list.
    write(
        &d.join("c.safetensors"),
        &[
            ("h", Dtype::F32, vec![2], one.clone()),
            ("extra", Dtype::F32, vec![2], one.clone()),
        ],
    );
    let m = index("i6.json", serde_json::json!({"h": "c.safetensors"}));
    assert!(m.contains("'extra'") && m.contains("weight_map"), "{m}");
    // The same tensor in two shards.
    let m = index(
        "i7.json",
        serde_json::json!({"h": "a.safetensors", "b": "b.safetensors", "extra": "c.safetensors"}),
    );
    assert!(m.contains("'h'") && m.contains("c.safetensors"), "{m}");

    // A module parameter the file lacks: the loader's error lists it, naming the file.
    let source = SafetensorsSource::open(d.join("a.safetensors")).unwrap();
    let err = Halves {
        h: Param::from_data([0.0f32; 2], &device),
        b: Param::from_data([0.0f32; 2], &device),
    }
    .load_from_source(&source, &LoadOptions::new())
    .unwrap_err();
    assert!(matches!(err, ModuleError::Mismatch { .. }));
    let m = err.to_string();
    assert!(m.contains("a.safetensors") && m.contains('b'), "{m}");
}

#[test]
fn modules_saved_as_safetensors_load_back_whole_and_sharded() {
    let device = Device::flex();
    let model = trained_with(&device, false);
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("net.safetensors");
    let written = save_safetensors(&model, &single, None).unwrap();
    assert_eq!(written, std::slice::from_ref(&single));
    // The safetensors crate reads it, and burn-store's SafetensorsStore loads it.
    let bytes = std::fs::read(&single).unwrap();
    let parsed = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(parsed.len(), snapshot(&model).len());
    let mut by_burn = Net::new_with(&device, false);
    by_burn
        .load_from(&mut SafetensorsStore::from_file(&single))
        .unwrap();
    assert_eq!(values(&by_burn), values(&model));

    // Sharded at 256 bytes: several shards and the index, which load back.
    let written =
        save_safetensors(&model, dir.path().join("sharded.safetensors"), Some(256)).unwrap();
    assert!(written.len() > 3, "{written:?}");
    let index = written.last().unwrap();
    assert!(index.ends_with("sharded.safetensors.index.json"));
    assert!(written[0].ends_with(format!(
        "sharded-00001-of-{:05}.safetensors",
        written.len() - 1
    )));
    let source = SafetensorsSource::open(index).unwrap();
    assert_eq!(source.shards().len(), written.len() - 1);
    let loaded = Net::new_with(&device, false)
        .load_from_source(&source, &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), values(&model));
    // Nothing else was left in the directory (no scratch files).
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1 + written.len()
    );
}

#[derive(Module, Debug)]
struct Viewed {
    t: Param<Tensor<2>>,
}

#[test]
fn parameters_read_back_from_the_device_are_written_too() {
    // A transposed view is not contiguous storage: its entry is produced (read back) when
    // the safetensors writer reaches it.
    let device = Device::flex();
    let t = Tensor::<2>::from_data([[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]], &device).transpose();
    let model = Viewed {
        t: Param::from_tensor(t),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("viewed.safetensors");
    save_safetensors(&model, &path, None).unwrap();
    let source = SafetensorsSource::open(&path).unwrap();
    let info = source.tensor("t").unwrap();
    assert_eq!(info.shape(), [3, 2]);
    let values: Vec<f32> = source
        .read(info)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(values, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
}

#[derive(Module, Debug)]
struct Torchy {
    fc: Vec<burn::nn::Linear>,
    norm: burn::nn::LayerNorm,
    emb: burn::nn::Embedding,
}

impl Torchy {
    fn new(device: &Device) -> Self {
        use burn::nn::{EmbeddingConfig, LayerNormConfig, LinearConfig};
        Self {
            fc: vec![
                LinearConfig::new(6, 4).init(device),
                LinearConfig::new(4, 3).with_bias(false).init(device),
            ],
            norm: LayerNormConfig::new(3).init(device),
            emb: EmbeddingConfig::new(5, 3).init(device),
        }
    }
}

#[test]
fn pytorch_conventions_match_burn_stores_adapter() {
    use burn_store::{BurnToPyTorchAdapter, PyTorchToBurnAdapter};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torch.safetensors");
    let device = Device::flex();
    // A "PyTorch" file: Burn's own adapter writes Linear weights [out, in] and the norm's
    // gamma/beta as weight/bias.
    let original = Torchy::new(&device).map(&mut common::model::Perturb(0.25));
    original
        .save_into(&mut SafetensorsStore::from_file(&path).with_to_adapter(BurnToPyTorchAdapter))
        .unwrap();
    let source = SafetensorsSource::open(&path).unwrap();
    assert_eq!(source.tensor("fc.0.weight").unwrap().shape(), [4, 6]);
    assert!(source.tensor("norm.weight").is_some());

    let mut reference = Torchy::new(&device);
    let result = reference
        .load_from(&mut SafetensorsStore::from_file(&path).with_from_adapter(PyTorchToBurnAdapter))
        .unwrap();
    assert!(result.is_success(), "{result:?}");

    #[allow(deprecated)]
    for device in [Device::flex(), Device::ndarray()] {
        let (ours, report) = Torchy::new(&device)
            .load_from_source_with_report(&source, &LoadOptions::new().pytorch(true))
            .unwrap();
        assert_eq!(values(&ours), values(&reference), "{device:?}");
        assert_eq!(values(&ours), values(&original), "{device:?}");
        // The transposed weight computes what the reference computes (up to the summation
        // order a strided matmul takes).
        let x = Tensor::<2>::from_data([[0.5f32, -1.0, 2.0, 0.0, 1.5, -0.5]], &device);
        let y: Vec<f32> = ours.fc[0].forward(x.clone()).into_data().to_vec().unwrap();
        let x_ref = Tensor::<2>::from_data([[0.5f32, -1.0, 2.0, 0.0, 1.5, -0.5]], &Device::flex());
        let y_ref: Vec<f32> = reference.fc[0].forward(x_ref).into_data().to_vec().unwrap();
        assert!(
            y.iter()
                .zip(&y_ref)
                .all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0)),
            "{device:?}: {y:?} vs {y_ref:?}"
        );
        // Transposes are views on flex; ndarray copies them and the report says so.
        assert_eq!(report.loaded(), 6, "{report}");
        let transposed: Vec<&str> = report
            .copied()
            .iter()
            .filter(|c| c.reason == CopyReason::Transposed)
            .map(|c| c.path.as_str())
            .collect();
        if device == Device::flex() {
            assert_eq!(report.views(), 6, "{report}");
        } else {
            assert_eq!(transposed, ["fc.0.weight", "fc.1.weight"], "{report}");
        }
    }

    // Without the option the file does not fit: transposed shapes and PyTorch's norm names.
    let err = Torchy::new(&device)
        .load_from_source(&source, &LoadOptions::new())
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(mismatch.shapes.len(), 2, "{mismatch:?}");
    assert_eq!(mismatch.missing, ["norm.gamma", "norm.beta"]);

    // A shape that is wrong either way is reported as Burn would hold it.
    let wrong = dir.path().join("wrong.safetensors");
    write(&wrong, &[("weight", Dtype::F32, vec![3, 2], vec![0; 24])]);
    let linear: burn::nn::Linear = burn::nn::LinearConfig::new(3, 2)
        .with_bias(false)
        .init(&device);
    let err = linear
        .load_from_source(
            &SafetensorsSource::open(&wrong).unwrap(),
            &LoadOptions::new().pytorch(true),
        )
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(mismatch.shapes[0].expected, [3, 2]);
    assert_eq!(mismatch.shapes[0].found, [2, 3]);

    // `LinearLayout::Col` already loads PyTorch's `[out, in]` (Burn 0.22's own load mapper
    // transposes it): without the option it computes what the `Row` layout computes with it.
    let col: burn::nn::Linear = burn::nn::LinearConfig::new(3, 2)
        .with_layout(burn::nn::LinearLayout::Col)
        .init(&device);
    let row: burn::nn::Linear = burn::nn::LinearConfig::new(3, 2).init(&device);
    let weights = dir.path().join("col.safetensors");
    let w: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b: Vec<u8> = [0.5f32, -0.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write(
        &weights,
        &[
            ("weight", Dtype::F32, vec![2, 3], w),
            ("bias", Dtype::F32, vec![2], b),
        ],
    );
    let source = SafetensorsSource::open(&weights).unwrap();
    let col = col.load_from_source(&source, &LoadOptions::new()).unwrap();
    let row = row
        .load_from_source(&source, &LoadOptions::new().pytorch(true))
        .unwrap();
    let x = Tensor::<2>::from_data([[1.0f32, -2.0, 0.5]], &device);
    let y_col: Vec<f32> = col.forward(x.clone()).into_data().try_to_vec().unwrap();
    let y_row: Vec<f32> = row.forward(x).into_data().try_to_vec().unwrap();
    // PyTorch: y = x W^T + b = [1*0 - 2*1 + 0.5*2 + 0.5, 1*3 - 2*4 + 0.5*5 - 0.5]
    assert_eq!(y_row, [-0.5, -3.0]);
    assert_eq!(y_col, y_row);
}

/// A `BOOL` byte other than 0 or 1 (a Rust `bool` cannot hold it) is refused when read,
/// naming the tensor and the element, as NumPy's and ONNX's are; 0 and 1 read back.
#[test]
fn bool_bytes_other_than_zero_and_one_are_refused_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.safetensors");
    write(
        &path,
        &[
            ("bad", Dtype::BOOL, vec![3], vec![0, 1, 2]),
            ("good", Dtype::BOOL, vec![2], vec![1, 0]),
        ],
    );
    let source = SafetensorsSource::open(&path).unwrap();
    let err = source
        .read(source.tensor("bad").unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'bad'") && err.contains("element 2 holds the byte 2"),
        "{err}"
    );
    assert_eq!(
        &source.read(source.tensor("good").unwrap()).unwrap()[..],
        &[1, 0]
    );
}
