//! Tensors by name from any source (issue 52, point 3): `TensorSourceExt` (host data, whole,
//! cast, or rows read on their own) and `LoadTensor` (onto a device), over packs, safetensors,
//! incremental checkpoints, object storage and a source with only the default range read.

mod common;

use std::ops::Range;

use burn::tensor::quantization::QuantScheme;
use burn::tensor::{Bytes, DType, Device, Float, Int, Tensor, TensorData};
use burnpack::format::TensorInfo;
use burnpack::module::{LoadTensor, ModuleError};
use burnpack::read::Reader;
use burnpack::source::{ReadError, TensorSource, TensorSourceExt};
use burnpack::write::{Entry, Writer};

/// `[rows, cols]` f32 values `i * 0.5`.
fn matrix(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| i as f32 * 0.5).collect()
}

fn pack(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("m.bpk");
    Writer::new(vec![
        Entry::resident("w", DType::F32, vec![8, 3], Bytes::from_elems(matrix(8, 3))),
        Entry::resident(
            "h",
            DType::BF16,
            vec![2, 2],
            Bytes::from_elems(
                [1.5f32, -2.0, 3.25, 4.0]
                    .map(burn::tensor::bf16::from_f32)
                    .to_vec(),
            ),
        ),
        Entry::resident(
            "i",
            DType::I64,
            vec![4],
            Bytes::from_elems(vec![1i64, -2, 3, -4]),
        ),
        Entry::resident("s", DType::F64, vec![], Bytes::from_elems(vec![2.5f64])),
    ])
    .write_to_file(&path)
    .unwrap();
    path
}

#[test]
fn a_packs_tensors_come_by_name_as_views_of_its_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let reader = Reader::open(pack(dir.path())).unwrap();
    let info = reader.tensor("w").unwrap();
    let whole = reader.read(info).unwrap();
    let data = reader.tensor_data("w").unwrap();
    assert_eq!(data.dtype(), DType::F32);
    assert_eq!(data.shape().to_vec(), [8, 3]);
    assert_eq!(data.try_to_vec::<f32>().unwrap(), matrix(8, 3));
    // Zero-copy: the same window of the mapping as a plain read.
    assert_eq!(data.bytes().as_ptr(), whole.as_ptr());

    // Rows: a window of the mapping at the rows' offset, nothing copied.
    let rows = reader.tensor_rows("w", 2..5).unwrap();
    assert_eq!(rows.shape().to_vec(), [3, 3]);
    assert_eq!(rows.try_to_vec::<f32>().unwrap(), matrix(8, 3)[6..15]);
    assert_eq!(rows.bytes().as_ptr(), whole[2 * 12..].as_ptr());
    assert_eq!(
        reader.tensor_rows("w", 8..8).unwrap().shape().to_vec(),
        [0, 3]
    );

    // A cast, and the stored dtype kept.
    let half = reader.tensor_data_as("w", DType::F16).unwrap();
    assert_eq!(half.dtype(), DType::F16);
    assert_eq!(
        half.try_cast(DType::F32)
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap(),
        matrix(8, 3)
    );
    assert_eq!(reader.tensor_data("h").unwrap().dtype(), DType::BF16);
    let ints = reader.tensor_rows_as("i", 1..3, DType::I32).unwrap();
    assert_eq!(ints.try_to_vec::<i32>().unwrap(), [-2, 3]);
    assert_eq!(
        reader
            .tensor_data("s")
            .unwrap()
            .try_to_vec::<f64>()
            .unwrap(),
        [2.5]
    );
}

#[test]
fn what_cannot_be_had_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = pack(dir.path());
    let reader = Reader::open(&path).unwrap();
    let err = reader.tensor_data("nope").unwrap_err();
    assert!(matches!(err, ReadError::NotFound { ref tensor, .. } if tensor == "nope"));
    assert!(err.to_string().contains(&path.display().to_string()));
    for (name, rows, what) in [
        ("w", 5..9, "rows 5..9 asked of 8"),
        ("w", 4..2, "rows 4..2"),
        ("s", 0..1, "a scalar has no rows"),
    ] {
        let err = reader.tensor_rows(name, rows).unwrap_err().to_string();
        assert!(
            err.contains(what) && err.contains(&format!("'{name}'")),
            "{err}"
        );
    }
    let info = reader.tensor("w").unwrap();
    assert!(reader.read_range(info, 90..97).is_err());
    assert!(reader.read_range(info, 0..96).is_ok());
    // Another source's row is not this one's.
    let other = TensorInfo::external("w".into(), DType::F32, vec![8, 3], 0, 96);
    assert!(matches!(
        reader.read_range(&other, 0..4),
        Err(ReadError::NotMine { .. })
    ));
}

#[test]
fn tensors_load_onto_a_device_with_rank_kind_and_dtype_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = pack(dir.path());
    let reader = Reader::open(&path).unwrap();
    let device = Device::flex();
    let w: Tensor<2> = reader.load_tensor("w", &device).unwrap();
    assert_eq!(w.dims(), [8, 3]);
    assert_eq!(w.into_data().try_to_vec::<f32>().unwrap(), matrix(8, 3));
    let h: Tensor<2> = reader.load_tensor("h", &device).unwrap();
    assert_eq!(h.dtype(), DType::BF16, "BF16 stays BF16");
    let half: Tensor<2> = reader.load_tensor_as("w", &device, DType::F16).unwrap();
    assert_eq!(half.dtype(), DType::F16);
    let i: Tensor<1, Int> = reader.load_tensor("i", &device).unwrap();
    assert_eq!(i.into_data().try_to_vec::<i64>().unwrap(), [1, -2, 3, -4]);

    let err = reader.load_tensor::<3, Float>("w", &device).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ModuleError::Mismatch { .. }));
    for part in [
        &path.display().to_string(),
        "'w'",
        "rank 2",
        "rank 3",
        "[8, 3]",
    ] {
        assert!(text.contains(part), "{text} lacks {part}");
    }
    let err = reader.load_tensor::<1, Float>("i", &device).unwrap_err();
    assert!(err.to_string().contains("not a float tensor"), "{err}");
    let err = reader
        .load_tensor_as::<2, Float>("w", &device, DType::I32)
        .unwrap_err();
    assert!(err.to_string().contains("not cast to I32"), "{err}");
    assert!(matches!(
        reader.load_tensor::<2, Float>("nope", &device),
        Err(ModuleError::Read(ReadError::NotFound { .. }))
    ));
}

#[test]
fn quantized_tensors_come_back_quantized_and_dequantize_on_a_device() {
    let device = Device::flex();
    let values: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) / 7.0).collect();
    let float = Tensor::<2>::from_data(TensorData::new(values, [2, 32]), &device);
    let quantized = float.quantize_dynamic(&QuantScheme::default());
    let data = quantized.clone().into_data();
    let (bytes, shape, dtype) = data.into_parts();
    let pack = Writer::new(vec![Entry::resident("q", dtype, shape.to_vec(), bytes)])
        .into_bytes()
        .unwrap();
    let reader = Reader::from_bytes(pack).unwrap();
    let got = reader.tensor_data("q").unwrap();
    assert!(matches!(got.dtype(), DType::QFloat(_)));
    assert!(
        reader
            .tensor_rows("q", 0..1)
            .unwrap_err()
            .to_string()
            .contains("quantized")
    );
    assert!(
        reader.tensor_data_as("q", DType::F32).is_err(),
        "no host dequantization"
    );
    let kept: Tensor<2> = reader.load_tensor("q", &device).unwrap();
    assert_eq!(kept.dtype(), dtype);
    let deq: Tensor<2> = reader.load_tensor_as("q", &device, DType::F32).unwrap();
    assert_eq!(deq.dtype(), DType::F32);
    assert_eq!(
        deq.into_data().try_to_vec::<f32>().unwrap(),
        quantized
            .dequantize()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    );
}

/// A source that only reads whole tensors (the trait's default `read_range`), counting the
/// bytes it hands out.
struct WholeOnly {
    inner: Reader,
    read: std::cell::Cell<u64>,
}

impl TensorSource for WholeOnly {
    fn file(&self) -> &str {
        self.inner.file()
    }
    fn tensors(&self) -> &[TensorInfo] {
        self.inner.tensors()
    }
    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let bytes = TensorSource::read(&self.inner, info)?;
        self.read.set(self.read.get() + bytes.len() as u64);
        Ok(bytes)
    }
}

#[test]
fn the_default_range_read_is_the_window_of_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let source = WholeOnly {
        inner: Reader::open(pack(dir.path())).unwrap(),
        read: std::cell::Cell::new(0),
    };
    for rows in [0..8, 1..2, 3..8, 4..4] {
        let want = source.inner.tensor_rows("w", rows.clone()).unwrap();
        let got = source.tensor_rows("w", rows.clone()).unwrap();
        assert_eq!(got.shape(), want.shape());
        assert_eq!(got.as_bytes(), want.as_bytes(), "{rows:?}");
    }
    assert_eq!(
        source.read.get(),
        4 * 96,
        "whole tensors, read by the default"
    );
    assert!(source.tensor_rows("w", 7..9).is_err());
}

#[test]
fn safetensors_rows_are_windows_of_the_mapping() {
    use safetensors::tensor::TensorView;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let values: Vec<u8> = matrix(6, 4).iter().flat_map(|v| v.to_le_bytes()).collect();
    let ints: Vec<u8> = [7i32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = [
        (
            "a",
            TensorView::new(safetensors::Dtype::F32, vec![6, 4], &values).unwrap(),
        ),
        (
            "b",
            TensorView::new(safetensors::Dtype::I32, vec![3], &ints).unwrap(),
        ),
    ];
    safetensors::serialize_to_file(views, None, &path).unwrap();
    let source = burnpack::interop::open_any(&path).unwrap();
    let source = source.as_tensor_source();
    let info = source.tensor("a").unwrap();
    let whole = source.read(info).unwrap();
    let rows = source.tensor_rows("a", 4..6).unwrap();
    assert_eq!(rows.try_to_vec::<f32>().unwrap(), matrix(6, 4)[16..24]);
    assert_eq!(rows.bytes().as_ptr(), whole[4 * 16..].as_ptr());
    assert_eq!(
        source
            .tensor_data("b")
            .unwrap()
            .try_to_vec::<i32>()
            .unwrap(),
        [7, 8, 9]
    );
    assert_eq!(
        source
            .tensor_rows("b", 1..2)
            .unwrap()
            .try_to_vec::<i32>()
            .unwrap(),
        [8]
    );
    let device = Device::flex();
    let a: Tensor<2> = source.load_tensor("a", &device).unwrap();
    assert_eq!(a.into_data().try_to_vec::<f32>().unwrap(), matrix(6, 4));
}

#[test]
fn an_incremental_checkpoints_tensors_come_from_its_data_files() {
    use burn::module::{Module, Param};
    use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
    #[derive(Module, Debug)]
    struct Two {
        frozen: Param<Tensor<2>>,
        trained: Param<Tensor<1>>,
    }
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let manager = CheckpointManager::new(dir.path())
        .unwrap()
        .incremental(true);
    let frozen = Tensor::<2>::from_data(TensorData::new(matrix(16, 4), [16, 4]), &device);
    let mut model = Two {
        frozen: Param::from_tensor(frozen),
        trained: Param::from_data([1.0f32, 2.0], &device),
    };
    manager
        .save(TrainingState::new(&model, Progress::new(0, 1)))
        .unwrap();
    model.trained = Param::from_data([3.0f32, 4.0], &device);
    manager
        .save(TrainingState::new(&model, Progress::new(0, 2)))
        .unwrap();
    let ckpt = manager.latest().unwrap().unwrap();
    let chain = ckpt.chain().expect("incremental");
    let name = chain
        .tensors()
        .iter()
        .map(TensorInfo::name)
        .find(|n| n.ends_with("frozen"))
        .unwrap()
        .to_string();
    let rows = chain.tensor_rows(&name, 10..12).unwrap();
    assert_eq!(rows.try_to_vec::<f32>().unwrap(), matrix(16, 4)[40..48]);
    let all: Tensor<2> = chain.load_tensor(&name, &device).unwrap();
    assert_eq!(all.into_data().try_to_vec::<f32>().unwrap(), matrix(16, 4));
    let trained = chain
        .tensors()
        .iter()
        .map(TensorInfo::name)
        .find(|n| n.ends_with("trained"))
        .unwrap()
        .to_string();
    assert_eq!(
        chain
            .tensor_data(&trained)
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap(),
        [3.0, 4.0]
    );
}

#[cfg(feature = "object-store")]
#[test]
fn object_storage_fetches_only_the_rows_asked() {
    use burnpack::interop::object_store::{
        Bucket, ObjectLocation, ObjectSource, UploadOptions, upload,
    };
    use std::sync::Arc;
    let store = Arc::new(::object_store::memory::InMemory::new());
    let location = ObjectLocation::new(store as Arc<dyn Bucket>, "m.bpk");
    let big = matrix(1024, 64);
    let writer = Writer::new(vec![
        Entry::resident(
            "big",
            DType::F32,
            vec![1024, 64],
            Bytes::from_elems(big.clone()),
        ),
        Entry::resident(
            "small",
            DType::F32,
            vec![2],
            Bytes::from_elems(vec![1.0f32, 2.0]),
        ),
    ]);
    upload(writer, &location, &UploadOptions::new()).unwrap();
    let source = ObjectSource::open(&location).unwrap();
    let (before, requests) = (source.fetched_bytes(), source.requests());
    let rows: Range<usize> = 100..103;
    let got = source.tensor_rows("big", rows.clone()).unwrap();
    assert_eq!(got.try_to_vec::<f32>().unwrap(), big[100 * 64..103 * 64]);
    assert_eq!(
        source.fetched_bytes() - before,
        3 * 64 * 4,
        "only the rows' bytes"
    );
    assert_eq!(source.requests() - requests, 1, "one ranged request");
    let device = Device::flex();
    let small: Tensor<1> = source.load_tensor("small", &device).unwrap();
    assert_eq!(small.into_data().try_to_vec::<f32>().unwrap(), [1.0, 2.0]);
}

/// NumPy (C order, Fortran order, big-endian, in an `.npz`), GGUF (plain and Q8_0) and ONNX
/// (`raw_data` and typed fields) written by their own writers: rows equal the whole's rows,
/// and where the format stores them as Burn holds them they are windows of the mapping.
#[test]
fn foreign_rows_are_windows_where_the_file_lays_them_out_as_burn_does() {
    const WRITER: &str = r#"
import numpy as np, gguf, onnx
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import quantize
from onnx import helper, numpy_helper, TensorProto
a = (np.arange(60, dtype=np.float32) / 8).reshape(6, 10)
np.save("c.npy", a)
np.save("f.npy", np.asfortranarray(a))
np.save("be.npy", a.astype(">f4"))
np.savez_compressed("z.npz", array=a)
w = GGUFWriter("m.gguf", "llama")
w.add_tensor("plain", a)
w.add_tensor("q8", quantize(np.linspace(-1, 1, 6 * 32, dtype=np.float32).reshape(6, 32), T.Q8_0), raw_dtype=T.Q8_0)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
raw = numpy_helper.from_array(a, "raw")
typed = helper.make_tensor("typed", TensorProto.FLOAT, a.shape, a.flatten().tolist(), raw=False)
graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("raw", TensorProto.FLOAT, [6, 10])], [raw, typed])
onnx.save(helper.make_model(graph), "m.onnx")
"#;
    let dir = tempfile::tempdir().unwrap();
    let Some(()) = common::python("numpy, gguf, onnx", WRITER, dir.path()) else {
        return;
    };
    for (file, name, window) in [
        ("c.npy", "array", true),
        ("f.npy", "array", false),
        ("be.npy", "array", false),
        ("z.npz", "array", false),
        ("m.gguf", "plain", true),
        ("m.gguf", "q8", false),
        ("m.onnx", "raw", true),
        ("m.onnx", "typed", false),
    ] {
        let source = burnpack::interop::open_any(dir.path().join(file)).unwrap();
        let source = source.as_tensor_source();
        let info = source.tensor(name).unwrap();
        let whole = source.read(info).unwrap();
        let rows = source.tensor_rows(name, 2..5).unwrap();
        let row = info.len() as usize / info.shape()[0];
        assert_eq!(rows.shape()[0], 3, "{file} {name}");
        assert_eq!(rows.as_bytes(), &whole[2 * row..5 * row], "{file} {name}");
        // A view where the whole is one (ONNX's `raw_data` can sit unaligned in the protobuf:
        // then both are copies, the rows' of their bytes only).
        if window && source.copy_reason(info).is_none() {
            assert_eq!(
                rows.bytes().as_ptr(),
                whole[2 * row..].as_ptr(),
                "{file} {name}"
            );
        }
    }
}
