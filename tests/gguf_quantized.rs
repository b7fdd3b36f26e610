//! GGUF quantized types kept quantized (`OpenOptions::keep_quantized`) and dequantized into
//! `F16`/`BF16` (`OpenOptions::dequantize_to`), against llama.cpp's Python reference: files
//! written by `gguf`'s `GGUFWriter` (blocks made by `gguf.quants.quantize` where it quantizes
//! the type, random blocks with finite scales otherwise), values compared bit for bit with
//! `gguf.quants.dequantize` (and its `f32` values cast by numpy and `ml_dtypes`).
//!
//! The Python side needs `gguf`, `numpy` and `ml_dtypes` (`.ci/run` installs them); without
//! them these tests say "skipped" and pass, except in CI.

#![cfg(feature = "gguf")]

mod common;

use std::path::Path;

use burn::tensor::{DType, Device, Tensor, TensorData};
use burnpack::interop::gguf::{GgufSource, LlamaCppConvention};
use burnpack::interop::{OpenOptions, open_any_with};
use burnpack::source::{SourceErrorKind, TensorSource, assert_source_contract};
use burnpack::{LoadOptions, PackModule};

/// The types kept quantized, and the quantized types dequantized even so (no exact scheme).
const KEPT: [&str; 18] = [
    "Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS", "Q3_K", "Q6_K", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
    "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
];
const DEQUANTIZED: [&str; 5] = ["Q4_1", "Q5_1", "Q2_K", "Q4_K", "Q5_K"];

/// Writes `q.gguf`: a `[4, 512]` tensor `<type>.weight` of each type (GGUF's `[out, in]` of a
/// linear layer), and `<type>.f32`, `.f16`, `.bf16`: the reference's values and their casts.
const WRITER: &str = r#"
import numpy as np, gguf, ml_dtypes
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import quantize, dequantize
from gguf.constants import GGML_QUANT_SIZES
rng = np.random.default_rng(52)
KEPT = KEPT_LIST
OTHER = OTHER_LIST
# Where each type's f16 scales are in a block (for random blocks).
scales = {"Q4_0": [0], "Q5_0": [0], "IQ4_NL": [0], "IQ4_XS": [0], "Q3_K": [108], "Q6_K": [208],
          "TQ1_0": [52], "TQ2_0": [64], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q2_K": [80, 82],
          "Q4_K": [0, 2], "Q5_K": [0, 2], "Q8_0": [0], "IQ2_XXS": [0], "IQ2_XS": [0],
          "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ1_S": [0]}
w = GGUFWriter("q.gguf", "llama")
rows, cols = 4, 512
for name in KEPT + OTHER:
    t = T[name]
    block, size = GGML_QUANT_SIZES[t]
    try:
        raw = quantize(rng.standard_normal((rows, cols)).astype(np.float32) * 3, t)
        how = "quantized"
    except NotImplementedError:
        raw = rng.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
        blocks = raw.reshape(-1, size)
        for at in scales.get(name, []):
            d = rng.uniform(0.1, 2, len(blocks)) * rng.choice([-1, 1], len(blocks))
            blocks[:, at:at + 2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
        if name == "IQ1_M":  # the f16 scale: the top nibbles of the 4 u16 of scales
            bits = rng.uniform(-2, 2, len(blocks)).astype(np.float16).view(np.uint16)
            for k in range(4):
                high = ((bits >> (4 * k)) & 0xF).astype(np.uint8) << 4
                blocks[:, 49 + 2 * k] = (blocks[:, 49 + 2 * k] & 0x0F) | high
        how = "random"
    assert raw.shape == (rows, cols // block * size), name
    w.add_tensor(name.lower() + ".weight", raw, raw_dtype=t)
    ref = dequantize(raw, t)
    assert ref.dtype == np.float32 and ref.shape == (rows, cols) and np.isfinite(ref).all(), name
    ref.astype("<f4").tofile(name + ".f32")
    ref.astype("<f2").tofile(name + ".f16")
    ref.astype(ml_dtypes.bfloat16).tofile(name + ".bf16")
    print(name, how)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
"#;

fn written(dir: &Path) -> Option<std::path::PathBuf> {
    let list = |l: &[&str]| format!("{l:?}");
    let script = WRITER
        .replace("KEPT_LIST", &list(&KEPT))
        .replace("OTHER_LIST", &list(&DEQUANTIZED));
    common::python("gguf, numpy, ml_dtypes", &script, dir)?;
    Some(dir.join("q.gguf"))
}

fn reference(dir: &Path, name: &str, ext: &str) -> Vec<u8> {
    std::fs::read(dir.join(format!("{name}.{ext}"))).unwrap()
}

/// `[rows, cols]` `f32` values, little-endian, transposed.
fn transposed(bytes: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    for r in 0..rows {
        for c in 0..cols {
            let (from, to) = (4 * (r * cols + c), 4 * (c * rows + r));
            out[to..to + 4].copy_from_slice(&bytes[from..from + 4]);
        }
    }
    out
}

/// `got` and `expected` (little-endian `f32`, or 2-byte floats) equal bit for bit, or a
/// failure naming `what`, how many values differ and the first.
#[track_caller]
fn assert_bits(got: &[u8], expected: &[u8], width: usize, what: &str) {
    assert_bits_but(got, expected, width, what, false);
}

/// Burn 0.22's ndarray backend dequantizes a block whose scale is zero with the scale 0.1
/// (`burn-ndarray`'s `SymmetricQuantization::init` calls `valid_scale`), where the reference
/// (and flex) give zeros: on ndarray, values the reference gives as `±0` may differ, no other.
#[track_caller]
fn assert_dequantized(got: &[u8], expected: &[u8], device: &Device, what: &str) {
    let ndarray = format!("{device:?}").contains("NdArray");
    assert_bits_but(got, expected, 4, what, ndarray);
}

#[track_caller]
fn assert_bits_but(got: &[u8], expected: &[u8], width: usize, what: &str, zeros: bool) {
    assert_eq!(got.len(), expected.len(), "{what}: lengths");
    let zero = |i: usize| {
        zeros && expected[i * 4..i * 4 + 4] == [0; 4]
            || zeros && expected[i * 4..i * 4 + 4] == [0, 0, 0, 0x80]
    };
    let differ: Vec<usize> = (0..got.len() / width)
        .filter(|i| got[i * width..(i + 1) * width] != expected[i * width..(i + 1) * width])
        .filter(|&i| !zero(i))
        .collect();
    if let Some(&first) = differ.first() {
        let at = |b: &[u8]| b[first * width..(first + 1) * width].to_vec();
        panic!(
            "{what}: {} of {} values differ, the first at {first}: {:?} for {:?}",
            differ.len(),
            got.len() / width,
            at(got),
            at(expected)
        );
    }
}

#[allow(deprecated)] // ndarray: still one of Burn 0.22's CPU backends, tested beside flex
fn devices() -> [Device; 2] {
    [Device::flex(), Device::ndarray()]
}

fn dequantized(
    bytes: burn::tensor::Bytes,
    shape: &[usize],
    dtype: DType,
    device: &Device,
) -> Vec<u8> {
    let data = TensorData::from_bytes(bytes, shape.to_vec(), dtype);
    Tensor::<2>::from_data(data, (device, dtype))
        .dequantize()
        .into_data()
        .as_bytes()
        .to_vec()
}

#[test]
fn every_kept_type_is_a_burn_quantized_tensor_that_dequantizes_to_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = written(dir.path()) else {
        return;
    };
    let options = OpenOptions::new().keep_quantized(true);
    let source = GgufSource::open_with(&path, &options).unwrap();
    assert_source_contract(&source);
    // The registry opens it the same way.
    let any = open_any_with(&path, &options).unwrap();
    for name in KEPT {
        let info = source
            .tensor(&format!("{}.weight", name.to_lowercase()))
            .unwrap();
        let DType::QFloat(scheme) = info.dtype() else {
            panic!("{name}: {:?}", info.dtype());
        };
        assert_eq!(info.shape(), &[4, 512], "{name}");
        let bytes = source.read(info).unwrap();
        assert_eq!(
            bytes.len(),
            burn::tensor::quantization::quantized_data_len(
                &scheme,
                &burn::tensor::Shape::from(info.shape().to_vec())
            ),
            "{name}"
        );
        let other = any.as_tensor_source();
        let same = other.tensor(info.name()).unwrap();
        assert_eq!(same.dtype(), info.dtype(), "{name}");
        assert_eq!(&other.read(same).unwrap()[..], &bytes[..], "{name}");
        let expected = reference(dir.path(), name, "f32");
        for device in devices() {
            assert_dequantized(
                &dequantized(bytes.clone(), info.shape(), info.dtype(), &device),
                &expected,
                &device,
                &format!("{name} on {device:?}: Burn's dequantization"),
            );
        }
    }
    // Types with a per-block offset stay dequantized.
    for name in DEQUANTIZED {
        let info = source
            .tensor(&format!("{}.weight", name.to_lowercase()))
            .unwrap();
        assert_eq!(info.dtype(), DType::F32, "{name}");
        assert_eq!(
            source.read(info).unwrap().to_vec(),
            reference(dir.path(), name, "f32"),
            "{name}"
        );
    }
}

#[test]
fn dequantize_to_f16_and_bf16_rounds_the_references_values_as_numpy_does() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = written(dir.path()) else {
        return;
    };
    for (dtype, ext) in [
        (DType::F16, "f16"),
        (DType::BF16, "bf16"),
        (DType::F32, "f32"),
    ] {
        for keep in [false, true] {
            let options = OpenOptions::new().keep_quantized(keep).dequantize_to(dtype);
            let source = GgufSource::open_with(&path, &options).unwrap();
            assert_source_contract(&source);
            for name in KEPT.iter().chain(&DEQUANTIZED) {
                let info = source
                    .tensor(&format!("{}.weight", name.to_lowercase()))
                    .unwrap();
                if keep && KEPT.contains(name) {
                    assert!(matches!(info.dtype(), DType::QFloat(_)), "{name}");
                    continue;
                }
                assert_eq!(info.dtype(), dtype, "{name}");
                assert_bits(
                    &source.read(info).unwrap(),
                    &reference(dir.path(), name, ext),
                    dtype.size(),
                    &format!("{name} into {dtype:?}"),
                );
            }
        }
    }
    // Any other dtype is refused, naming the file and the dtype.
    for dtype in [DType::I32, DType::F64, DType::U8] {
        let err = GgufSource::open_with(&path, &OpenOptions::new().dequantize_to(dtype))
            .err()
            .unwrap();
        assert_eq!(err.kind(), SourceErrorKind::Unsupported, "{err}");
        let message = err.to_string();
        assert!(
            message.contains("q.gguf") && message.contains(&format!("{dtype:?}")),
            "{message}"
        );
    }
}

mod model {
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Device;

    /// One linear layer (`[in, out]` = `[512, 4]`) per type of the file.
    #[derive(Module, Debug)]
    pub struct Layers {
        pub q8_0: Linear,
        pub q4_0: Linear,
        pub q5_0: Linear,
        pub iq4_nl: Linear,
        pub iq4_xs: Linear,
        pub q3_k: Linear,
        pub q6_k: Linear,
        pub tq1_0: Linear,
        pub tq2_0: Linear,
        pub mxfp4: Linear,
        pub nvfp4: Linear,
        pub iq2_xxs: Linear,
        pub iq2_xs: Linear,
        pub iq2_s: Linear,
        pub iq3_xxs: Linear,
        pub iq3_s: Linear,
        pub iq1_s: Linear,
        pub iq1_m: Linear,
        pub q4_1: Linear,
        pub q5_1: Linear,
        pub q2_k: Linear,
        pub q4_k: Linear,
        pub q5_k: Linear,
    }

    impl Layers {
        pub fn new(device: &Device) -> Self {
            let l = || LinearConfig::new(512, 4).with_bias(false).init(device);
            Self {
                q8_0: l(),
                q4_0: l(),
                q5_0: l(),
                iq4_nl: l(),
                iq4_xs: l(),
                q3_k: l(),
                q6_k: l(),
                tq1_0: l(),
                tq2_0: l(),
                mxfp4: l(),
                nvfp4: l(),
                iq2_xxs: l(),
                iq2_xs: l(),
                iq2_s: l(),
                iq3_xxs: l(),
                iq3_s: l(),
                iq1_s: l(),
                iq1_m: l(),
                q4_1: l(),
                q5_1: l(),
                q2_k: l(),
                q4_k: l(),
                q5_k: l(),
            }
        }

        /// The weights, in the order of `KEPT` then `DEQUANTIZED`.
        pub fn weights(&self) -> Vec<burn::tensor::Tensor<2>> {
            [
                &self.q8_0,
                &self.q4_0,
                &self.q5_0,
                &self.iq4_nl,
                &self.iq4_xs,
                &self.q3_k,
                &self.q6_k,
                &self.tq1_0,
                &self.tq2_0,
                &self.mxfp4,
                &self.nvfp4,
                &self.iq2_xxs,
                &self.iq2_xs,
                &self.iq2_s,
                &self.iq3_xxs,
                &self.iq3_s,
                &self.iq1_s,
                &self.iq1_m,
                &self.q4_1,
                &self.q5_1,
                &self.q2_k,
                &self.q4_k,
                &self.q5_k,
            ]
            .iter()
            .map(|l| l.weight.val())
            .collect()
        }
    }
}

/// Loaded into `Linear` layers through llama.cpp's convention (`[out, in]` stored, `[in, out]`
/// held), the kept weights are transposed exactly on the host: still quantized, and Burn
/// dequantizes them to the reference's values transposed, on flex and ndarray.
#[test]
fn kept_weights_load_into_linear_layers_transposed_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = written(dir.path()) else {
        return;
    };
    let source = GgufSource::open_with(&path, &OpenOptions::new().keep_quantized(true)).unwrap();
    let options = LoadOptions::new().convention(LlamaCppConvention::new());
    for device in devices() {
        let layers = model::Layers::new(&device)
            .load_from_source(&source, &options)
            .unwrap();
        for (name, weight) in KEPT.iter().chain(&DEQUANTIZED).zip(layers.weights()) {
            assert_eq!(weight.dims(), [512, 4], "{name}");
            let expected = transposed(&reference(dir.path(), name, "f32"), 4, 512);
            let values = if KEPT.contains(name) {
                assert!(
                    matches!(weight.dtype(), DType::QFloat(_)),
                    "{name} on {device:?}"
                );
                weight.dequantize()
            } else {
                weight
            };
            assert_dequantized(
                values.into_data().as_bytes(),
                &expected,
                &device,
                &format!("{name} on {device:?}"),
            );
        }
    }
}

/// `bpk convert --keep-quantized` keeps every kept type as a Burn quantized tensor of the pack
/// (read back identical), `inspect`, `verify` and `diff` read it, and `--dequantize-to`
/// dequantizes into the dtype asked for.
#[cfg(feature = "cli")]
#[test]
fn bpk_converts_kept_quantized_and_dequantized_to_a_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = written(dir.path()) else {
        return;
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let pack = dir.path().join("kept.bpk");
    let (code, _, err) = common::bpk(&["convert", &s(&path), &s(&pack), "--keep-quantized"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = common::bpk(&["inspect", &s(&pack)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("qfloat"), "{out}");
    let (code, out, err) = common::bpk(&["verify", &s(&pack)]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = common::bpk(&["diff", &s(&path), &s(&pack)]);
    assert_eq!(code, 0, "{out}{err}");
    let gguf = GgufSource::open_with(&path, &OpenOptions::new().keep_quantized(true)).unwrap();
    let reader = burnpack::read::Reader::open(&pack).unwrap();
    for info in gguf.tensors() {
        let stored = reader.tensor(info.name()).unwrap();
        assert_eq!(stored.dtype(), info.dtype(), "{}", info.name());
        assert_eq!(
            &TensorSource::read(&reader, stored).unwrap()[..],
            &gguf.read(info).unwrap()[..],
            "{}",
            info.name()
        );
    }
    // Into bf16: the types not kept are the reference's values cast.
    let half = dir.path().join("half.bpk");
    let (code, _, err) = common::bpk(&[
        "convert",
        &s(&path),
        &s(&half),
        "--keep-quantized",
        "--dequantize-to",
        "bf16",
    ]);
    assert_eq!(code, 0, "{err}");
    let reader = burnpack::read::Reader::open(&half).unwrap();
    for name in DEQUANTIZED {
        let stored = reader
            .tensor(&format!("{}.weight", name.to_lowercase()))
            .unwrap();
        assert_eq!(stored.dtype(), DType::BF16, "{name}");
        assert_bits(
            &TensorSource::read(&reader, stored).unwrap(),
            &reference(dir.path(), name, "bf16"),
            2,
            name,
        );
    }
    let (code, _, err) = common::bpk(&[
        "convert",
        &s(&path),
        &s(&dir.path().join("x.bpk")),
        "--dequantize-to",
        "i32",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// A range of a dequantized tensor reads and dequantizes only the blocks that cover it: rows,
/// and byte ranges that start and end inside blocks, equal the reference's window, in every
/// dtype it dequantizes into.
#[test]
fn ranges_of_dequantized_tensors_are_the_reference_s_windows() {
    use burnpack::source::TensorSourceExt;
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = written(dir.path()) else {
        return;
    };
    for (dtype, ext) in [(DType::F32, "f32"), (DType::F16, "f16")] {
        let options = OpenOptions::new().dequantize_to(dtype);
        let source = GgufSource::open_with(&path, &options).unwrap();
        for name in KEPT.iter().chain(&DEQUANTIZED) {
            let tensor = format!("{}.weight", name.to_lowercase());
            let expected = reference(dir.path(), name, ext);
            let width = dtype.size();
            // Rows 1..3 of [4, 512].
            let rows = source.tensor_rows(&tensor, 1..3).unwrap();
            assert_eq!(rows.shape().to_vec(), [2, 512], "{name}");
            assert_bits(
                rows.as_bytes(),
                &expected[512 * width..3 * 512 * width],
                width,
                name,
            );
            // Ranges inside blocks, across blocks, and the last values.
            let info = source.tensor(&tensor).unwrap();
            let len = info.len();
            let w = width as u64;
            for (a, b) in [
                (3 * w, 9 * w),
                (30 * w, 70 * w),
                (250 * w, 300 * w),
                (len - 3 * w, len),
            ] {
                let got = source.read_range(info, a..b).unwrap();
                assert_bits(
                    &got,
                    &expected[a as usize..b as usize],
                    width,
                    &format!("{name} {a}..{b}"),
                );
            }
        }
    }
}
