//! Safetensors files holding FP8 tensors, written by the `safetensors` crate, against
//! references computed by numpy with `ml_dtypes`: every bit pattern of every 8-bit float
//! decoded into `f32` bit for bit (NaN as NaN), the `weight_scale_inv` / `weight_scale`
//! conventions folded in, `keep_quantized` as Burn `QFloat` `E4M3` / `E5M2` in Burn's layout
//! (refused by name on flex and ndarray, which Burn 0.22 does not dequantize FP8 on), a
//! `Linear` loaded and run, and the doors: `open_any`, `load_from_source`, `PackStore`,
//! `bpk inspect / verify / convert / diff`. `F4` / `F6` tensors are still withheld by name.

mod common;

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::quantization::{QuantValue, QuantizedBytes};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burnpack::interop::safetensors::{SafetensorsSource, safetensors_to_burnpack};
use burnpack::module::{LoadOptions, ModuleError, PackModule};
use burnpack::source::{OpenOptions, TensorSource};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// Each 8-bit float dtype of safetensors with its `ml_dtypes` name.
const FORMATS: [(Dtype, &str); 5] = [
    (Dtype::F8_E4M3, "float8_e4m3fn"),
    (Dtype::F8_E5M2, "float8_e5m2"),
    (Dtype::F8_E4M3FNUZ, "float8_e4m3fnuz"),
    (Dtype::F8_E5M2FNUZ, "float8_e5m2fnuz"),
    (Dtype::F8_E8M0, "float8_e8m0fnu"),
];

fn python(script: &str, dir: &Path) -> Option<()> {
    common::python("numpy, ml_dtypes", script, dir)
}

fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, data)| {
            (*name, TensorView::new(*dtype, shape.clone(), data).unwrap())
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn le_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Equal bit for bit, or both NaN.
#[track_caller]
fn assert_same(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
            "{what}[{i}]: {g:e} ({:#010x}) != {e:e} ({:#010x})",
            g.to_bits(),
            e.to_bits()
        );
    }
}

fn all_bytes() -> Vec<u8> {
    (0..=255u8).collect()
}

#[derive(Module, Debug)]
struct One {
    w: Param<Tensor<2>>,
}

/// The 256 bytes as every FP8 dtype, each file with its `ml_dtypes` reference.
fn every_pattern(dir: &Path) -> Option<Vec<(Dtype, std::path::PathBuf, Vec<f32>)>> {
    let names: Vec<&str> = FORMATS.iter().map(|(_, n)| *n).collect();
    let script = format!(
        "import numpy as np, ml_dtypes\n\
         b = np.arange(256, dtype=np.uint8)\n\
         for n in {names:?}:\n    \
             b.view(getattr(ml_dtypes, n)).astype(np.float32).astype('<f4').tofile(n + '.bin')\n"
    );
    python(&script, dir)?;
    Some(
        FORMATS
            .iter()
            .map(|(dtype, name)| {
                let path = dir.join(format!("{name}.safetensors"));
                write(&path, &[("w", *dtype, vec![16, 16], all_bytes())]);
                let reference = le_f32(&std::fs::read(dir.join(format!("{name}.bin"))).unwrap());
                (*dtype, path, reference)
            })
            .collect(),
    )
}

#[test]
fn every_fp8_bit_pattern_decodes_into_f32_as_ml_dtypes_does() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cases) = every_pattern(dir.path()) else {
        return;
    };
    for (dtype, path, reference) in cases {
        let source = SafetensorsSource::open(&path).unwrap();
        assert!(source.withheld().is_empty());
        let info = source.tensor("w").unwrap();
        assert_eq!(info.dtype(), DType::F32, "{dtype:?}");
        assert_eq!(info.shape(), [16, 16]);
        let bytes = source.read(info).unwrap();
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[..]);
        assert_same(&got, &reference, &format!("{dtype:?}"));
        assert!(
            source
                .copy_reason(info)
                .unwrap()
                .to_string()
                .contains("F8_")
        );
        // Decoded, not unaligned (whatever offset the header leaves the bytes at).
        assert_eq!(source.unaligned().count(), 0);
        // Into a Burn parameter on flex and ndarray, by every door that loads a module.
        #[allow(deprecated)] // ndarray: still one of Burn 0.22's CPU backends, tested beside flex
        for device in [Device::flex(), Device::ndarray()] {
            let one = One {
                w: Param::from_tensor(Tensor::zeros([16, 16], &device)),
            };
            let loaded = one.load_from_source(&source, &LoadOptions::new()).unwrap();
            let got = loaded.w.val().into_data().try_to_vec::<f32>().unwrap();
            assert_same(&got, &reference, &format!("{dtype:?} on {device:?}"));
        }
        let any = burnpack::interop::open_any(&path).unwrap();
        let tensors = any.as_tensor_source();
        let bytes = tensors.read(tensors.tensors().first().unwrap()).unwrap();
        assert_same(
            &bytemuck::pod_collect_to_vec::<u8, f32>(&bytes[..]),
            &reference,
            "open_any",
        );
    }
}

#[test]
fn kept_e4m3_and_e5m2_are_qfloat_tensors_of_the_file_bytes_and_a_unit_scale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fp8.safetensors");
    let f32s = f32_bytes(&[1.5, -2.0]);
    write(
        &path,
        &[
            ("a", Dtype::F32, vec![2], f32s.clone()),
            ("e4m3", Dtype::F8_E4M3, vec![16, 16], all_bytes()),
            ("e5m2", Dtype::F8_E5M2, vec![256], all_bytes()),
            ("fnuz", Dtype::F8_E4M3FNUZ, vec![2], vec![0x40, 0x80]),
        ],
    );
    let keep = OpenOptions::new().keep_quantized(true);
    let source = SafetensorsSource::open_with(&path, &keep).unwrap();
    for (name, value, shape) in [
        ("e4m3", QuantValue::E4M3, vec![16, 16]),
        ("e5m2", QuantValue::E5M2, vec![256]),
    ] {
        let info = source.tensor(name).unwrap();
        let DType::QFloat(scheme) = info.dtype() else {
            panic!("{name}: {:?}", info.dtype());
        };
        assert_eq!(scheme.value, value);
        assert!(scheme.block_size().is_none());
        let bytes = source.read(info).unwrap();
        assert_eq!(
            bytes.len(),
            burn::tensor::quantization::quantized_data_len(&scheme, &shape.clone().into())
        );
        // Burn's own reading of the layout: the values are the file's bytes, the scale 1.
        let (values, scales) = QuantizedBytes {
            bytes: burn::tensor::Bytes::from_bytes_vec(bytes.to_vec()),
            scheme,
            shape: shape.into(),
        }
        .into_vec_i8();
        assert_eq!(bytemuck::cast_slice::<i8, u8>(&values), all_bytes());
        assert_eq!(scales.block, [1.0]);
    }
    // FNUZ has no Burn value: decoded even when kept; plain tensors as they are.
    assert_eq!(source.tensor("fnuz").unwrap().dtype(), DType::F32);
    assert_eq!(source.tensor("a").unwrap().dtype(), DType::F32);
    // Burn 0.22's flex reads FP8 bytes as integers and ndarray refuses them: a load onto
    // them is refused by name, not loaded wrong.
    #[allow(deprecated)] // ndarray: still one of Burn 0.22's CPU backends, tested beside flex
    for device in [Device::flex(), Device::ndarray()] {
        let one = One {
            w: Param::from_tensor(Tensor::zeros([16, 16], &device)),
        };
        let options = LoadOptions::new()
            .allow_unused(true)
            .rename("e4m3", "w")
            .unwrap();
        let err = one.load_from_source(&source, &options).unwrap_err();
        let ModuleError::Mismatch { mismatch, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(mismatch.failed.len(), 1, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("E4M3") && text.contains("keep_quantized"),
            "{text}"
        );
    }
}

/// DeepSeek-V3's convention: `X.weight` F8_E4M3 `[out, in]` and `X.weight_scale_inv` F32
/// `[ceil(out/128), ceil(in/128)]`, value = fp8 × the scale of its 128 × 128 block.
#[test]
fn weight_scale_inv_is_folded_block_by_block() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.safetensors");
    // A matrix the blocks divide, one they do not, and a scale of the wrong grid (left alone).
    let cases = [("even", 256usize, 384usize), ("ragged", 200, 300)];
    let mut tensors = Vec::new();
    for (i, (name, rows, cols)) in cases.iter().enumerate() {
        let raw = common::pattern(i as u64 + 1, rows * cols);
        let grid = [rows.div_ceil(128), cols.div_ceil(128)];
        let scales: Vec<f32> = (0..grid[0] * grid[1])
            .map(|k| 0.001 * (k as f32 + 1.0) + 1.0 / 3.0)
            .collect();
        std::fs::write(dir.path().join(format!("{name}.raw")), &raw).unwrap();
        std::fs::write(dir.path().join(format!("{name}.scale")), f32_bytes(&scales)).unwrap();
        tensors.push((
            format!("{name}.weight"),
            Dtype::F8_E4M3,
            vec![*rows, *cols],
            raw,
        ));
        tensors.push((
            format!("{name}.weight_scale_inv"),
            Dtype::F32,
            grid.to_vec(),
            f32_bytes(&scales),
        ));
    }
    // A scale of the wrong grid: refused naming both (unscaled, the values would be wrong).
    let odd = dir.path().join("odd.safetensors");
    write(
        &odd,
        &[
            ("odd.weight", Dtype::F8_E4M3, vec![2, 2], vec![0x38; 4]),
            (
                "odd.weight_scale_inv",
                Dtype::F32,
                vec![2],
                f32_bytes(&[2.0, 2.0]),
            ),
        ],
    );
    let err = SafetensorsSource::open(&odd).unwrap_err().to_string();
    assert!(
        err.contains("odd.safetensors")
            && err.contains("'odd.weight_scale_inv'")
            && err.contains("odd.weight"),
        "{err}"
    );
    // Both conventions beside one weight: ambiguous, refused.
    let both = dir.path().join("both.safetensors");
    write(
        &both,
        &[
            ("w", Dtype::F8_E4M3, vec![2, 2], vec![0x38; 4]),
            ("w_scale_inv", Dtype::F32, vec![1, 1], f32_bytes(&[2.0])),
            ("w_scale", Dtype::F32, vec![], f32_bytes(&[2.0])),
        ],
    );
    let err = SafetensorsSource::open(&both).unwrap_err().to_string();
    assert!(err.contains("ambiguous"), "{err}");
    // A BF16 scale (compressed-tensors exports) is folded as its f32 value.
    let bf = dir.path().join("bf16.safetensors");
    write(
        &bf,
        &[
            ("w", Dtype::F8_E4M3, vec![2, 2], vec![0x38; 4]),
            (
                "w_scale",
                Dtype::BF16,
                vec![],
                burn::tensor::bf16::from_f32(2.0).to_le_bytes().to_vec(),
            ),
        ],
    );
    let source = SafetensorsSource::open(&bf).unwrap();
    assert_eq!(source.tensors().len(), 1);
    let got: Vec<f32> =
        bytemuck::pod_collect_to_vec(&source.read(source.tensor("w").unwrap()).unwrap()[..]);
    assert_eq!(got, [2.0; 4]);
    let named: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.clone(), b.clone()))
        .collect();
    write(&path, &named);
    let script = "import numpy as np, ml_dtypes\n\
        np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype('<f4').tofile('table.bin')\n\
        for name, rows, cols in [('even', 256, 384), ('ragged', 200, 300)]:\n    \
            w = np.fromfile(name + '.raw', dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(rows, cols)\n    \
            s = np.fromfile(name + '.scale', dtype='<f4').reshape((rows + 127) // 128, (cols + 127) // 128)\n    \
            full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:rows, :cols]\n    \
            (w * full).astype('<f4').tofile(name + '.ref')\n";
    if python(script, dir.path()).is_none() {
        return;
    }
    let reference =
        |name: &str| le_f32(&std::fs::read(dir.path().join(format!("{name}.ref"))).unwrap());
    for keep in [false, true] {
        let options = OpenOptions::new().keep_quantized(keep);
        let source = SafetensorsSource::open_with(&path, &options).unwrap();
        let names: Vec<&str> = source.tensors().iter().map(|t| t.name()).collect();
        // The paired scales are consumed.
        assert_eq!(names, ["even.weight", "ragged.weight"]);
        // Into a pack (what `bpk convert` writes): every tensor as listed, read back the same,
        // the per-block QFloat with its scheme.
        let pack = burnpack::Writer::from_source(&source)
            .unwrap()
            .into_bytes()
            .unwrap();
        let reader = burnpack::read::Reader::from_bytes(pack).unwrap();
        for info in source.tensors() {
            let stored = reader.tensor(info.name()).unwrap();
            assert_eq!(stored.dtype(), info.dtype(), "{}", info.name());
            assert_eq!(
                &reader.bytes(info.name()).unwrap()[..],
                &source.read(info).unwrap()[..]
            );
        }
        for (name, rows, cols) in cases {
            let info = source.tensor(&format!("{name}.weight")).unwrap();
            let bytes = source.read(info).unwrap();
            match info.dtype() {
                DType::QFloat(scheme) => {
                    assert!(keep && name == "even", "{name}: {scheme:?}");
                    assert_eq!(scheme.value, QuantValue::E4M3);
                    assert_eq!(scheme.block_size().unwrap().as_slice(), [128, 128]);
                    let raw = std::fs::read(dir.path().join(format!("{name}.raw"))).unwrap();
                    let scales = std::fs::read(dir.path().join(format!("{name}.scale"))).unwrap();
                    let (values, decoded) = QuantizedBytes {
                        bytes: burn::tensor::Bytes::from_bytes_vec(bytes.to_vec()),
                        scheme,
                        shape: vec![rows, cols].into(),
                    }
                    .into_vec_i8();
                    assert_eq!(bytemuck::cast_slice::<i8, u8>(&values), raw);
                    assert_eq!(decoded.block, le_f32(&scales));
                    // Burn's dequantization is value × block scale (cubecl decodes the
                    // value as E4M3): applied on the host with ml_dtypes' decoding of the
                    // values, it is the reference.
                    let table = le_f32(&std::fs::read(dir.path().join("table.bin")).unwrap());
                    let grid_cols = cols / 128;
                    let host: Vec<f32> = values
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| {
                            let block = (i / cols / 128) * grid_cols + (i % cols) / 128;
                            table[usize::from(v as u8)] * decoded.block[block]
                        })
                        .collect();
                    assert_same(&host, &reference(name), name);
                }
                dtype => {
                    assert_eq!(dtype, DType::F32);
                    assert!(!keep || name == "ragged", "{name} kept: {keep}");
                    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[..]);
                    assert_same(&got, &reference(name), name);
                }
            }
        }
    }
}

/// compressed-tensors / vLLM: `X.weight_scale` F32, one per tensor (`[]`, `[1]`) or per row
/// (`[out, 1]`).
#[test]
fn weight_scale_per_tensor_and_per_row_is_folded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ct.safetensors");
    let raw = common::pattern(9, 6 * 10);
    let rows: Vec<f32> = (0..6).map(|r| 0.1 + r as f32 / 7.0).collect();
    std::fs::write(dir.path().join("w.raw"), &raw).unwrap();
    std::fs::write(dir.path().join("rows.bin"), f32_bytes(&rows)).unwrap();
    write(
        &path,
        &[
            ("scalar.weight", Dtype::F8_E5M2, vec![6, 10], raw.clone()),
            ("scalar.weight_scale", Dtype::F32, vec![], f32_bytes(&[0.3])),
            ("one.weight", Dtype::F8_E4M3, vec![60], raw.clone()),
            ("one.weight_scale", Dtype::F32, vec![1], f32_bytes(&[0.7])),
            ("row.weight", Dtype::F8_E4M3, vec![6, 10], raw.clone()),
            ("row.weight_scale", Dtype::F32, vec![6, 1], f32_bytes(&rows)),
        ],
    );
    let script = "import numpy as np, ml_dtypes\n\
        raw = np.fromfile('w.raw', dtype=np.uint8)\n\
        e4 = raw.view(ml_dtypes.float8_e4m3fn).astype(np.float32)\n\
        e5 = raw.view(ml_dtypes.float8_e5m2).astype(np.float32)\n\
        (e5 * np.float32(0.3)).astype('<f4').tofile('scalar.ref')\n\
        (e4 * np.float32(0.7)).astype('<f4').tofile('one.ref')\n\
        rows = np.fromfile('rows.bin', dtype='<f4').reshape(6, 1)\n\
        (e4.reshape(6, 10) * rows).astype('<f4').tofile('row.ref')\n";
    if python(script, dir.path()).is_none() {
        return;
    }
    for keep in [false, true] {
        let options = OpenOptions::new().keep_quantized(keep);
        let source = SafetensorsSource::open_with(&path, &options).unwrap();
        let names: Vec<&str> = source.tensors().iter().map(|t| t.name()).collect();
        assert_eq!(names, ["one.weight", "row.weight", "scalar.weight"]);
        for name in ["scalar", "one", "row"] {
            let info = source.tensor(&format!("{name}.weight")).unwrap();
            let bytes = source.read(info).unwrap();
            let reference = le_f32(&std::fs::read(dir.path().join(format!("{name}.ref"))).unwrap());
            if let DType::QFloat(scheme) = info.dtype() {
                assert!(keep && name != "row", "{name}");
                assert!(scheme.block_size().is_none());
                let scale = if name == "scalar" { 0.3f32 } else { 0.7 };
                let n = raw.len();
                assert_eq!(&bytes[..n], &raw[..]);
                assert_eq!(bytes[n..], scale.to_ne_bytes());
            } else {
                assert!(!keep || name == "row", "{name}");
                let got: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[..]);
                assert_same(&got, &reference, name);
            }
        }
    }
}

#[derive(Module, Debug)]
struct Net {
    fc: Linear,
}

/// A DeepSeek-style FP8 `Linear` (`fc.weight` `[out, in]` with its `weight_scale_inv`)
/// loaded strictly with the PyTorch convention: its forward pass is that of a `Linear` built
/// from the reference weights.
#[test]
fn an_fp8_linear_loads_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("linear.safetensors");
    // Finite E4M3 values only (no NaN: 0x7F, 0xFF).
    let raw: Vec<u8> = common::pattern(3, 4 * 3)
        .into_iter()
        .map(|b| if b & 0x7F == 0x7F { 0x3A } else { b & 0xBF })
        .collect();
    let bias = [0.5f32, -1.0, 0.25, 2.0];
    write(
        &path,
        &[
            ("fc.weight", Dtype::F8_E4M3, vec![4, 3], raw.clone()),
            (
                "fc.weight_scale_inv",
                Dtype::F32,
                vec![1, 1],
                f32_bytes(&[0.5]),
            ),
            ("fc.bias", Dtype::F32, vec![4], f32_bytes(&bias)),
        ],
    );
    std::fs::write(dir.path().join("w.raw"), &raw).unwrap();
    let script = "import numpy as np, ml_dtypes\n\
        w = np.fromfile('w.raw', dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)\n\
        (w * np.float32(0.5)).astype('<f4').tofile('w.ref')\n";
    if python(script, dir.path()).is_none() {
        return;
    }
    let weight = le_f32(&std::fs::read(dir.path().join("w.ref")).unwrap());
    // Burn's Linear holds `[in, out]`.
    let transposed: Vec<f32> = (0..3)
        .flat_map(|i| (0..4).map(move |o| (i, o)))
        .map(|(i, o)| weight[o * 3 + i])
        .collect();
    let source = SafetensorsSource::open(&path).unwrap();
    #[allow(deprecated)] // ndarray: still one of Burn 0.22's CPU backends, tested beside flex
    for device in [Device::flex(), Device::ndarray()] {
        let net = Net {
            fc: LinearConfig::new(3, 4).init(&device),
        };
        let loaded = net
            .load_from_source(&source, &LoadOptions::new().pytorch(true))
            .unwrap();
        let mut expected = Net {
            fc: LinearConfig::new(3, 4).init(&device),
        };
        expected.fc.weight = Param::from_data(TensorData::new(transposed.clone(), [3, 4]), &device);
        expected.fc.bias = Some(Param::from_data(
            TensorData::new(bias.to_vec(), [4]),
            &device,
        ));
        let x = Tensor::<2>::from_data([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], &device);
        let got = loaded.fc.forward(x.clone()).into_data();
        let want = expected.fc.forward(x).into_data();
        got.assert_approx_eq::<f32>(&want, burn::tensor::Tolerance::absolute(1e-6));
        assert_same(
            &loaded
                .fc
                .weight
                .val()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap(),
            &transposed,
            "weight",
        );
    }
}

/// burn-store's `load_from` through `PackStore` over the source: FP8 loads decoded.
#[cfg(feature = "store")]
#[test]
fn pack_store_loads_fp8_decoded() {
    use burn_store::ModuleSnapshot;
    use burnpack::store::PackStore;
    let dir = tempfile::tempdir().unwrap();
    let Some(cases) = every_pattern(dir.path()) else {
        return;
    };
    let (_, path, reference) = &cases[0];
    let device = Device::flex();
    let mut one = One {
        w: Param::from_tensor(Tensor::zeros([16, 16], &device)),
    };
    let mut store = PackStore::from_source(SafetensorsSource::open(path).unwrap());
    one.load_from(&mut store).unwrap();
    assert_same(
        &one.w.val().into_data().try_to_vec::<f32>().unwrap(),
        reference,
        "PackStore",
    );
}

/// `F4` and `F6` tensors are still withheld: listed, refused by name, the others load.
#[test]
fn f4_and_f6_tensors_are_withheld_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f6.safetensors");
    write(
        &path,
        &[
            ("a", Dtype::F32, vec![2], f32_bytes(&[1.5, -2.0])),
            ("b", Dtype::F6_E2M3, vec![4], vec![0; 3]),
        ],
    );
    let source = SafetensorsSource::open(&path).unwrap();
    assert_eq!(source.tensors().len(), 1);
    assert_eq!(source.withheld()[0].name, "b");
    assert_eq!(source.withheld()[0].dtype, "F6_E2M3");
    #[derive(Module, Debug)]
    struct Pair {
        a: Param<Tensor<1>>,
        b: Param<Tensor<1>>,
    }
    let device = Device::flex();
    let pair = Pair {
        a: Param::from_data([0.0, 0.0], &device),
        b: Param::from_data([0.0; 4], &device),
    };
    let err = pair
        .load_from_source(&source, &LoadOptions::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor 'b'") && err.contains("F6_E2M3"),
        "{err}"
    );
    let err = safetensors_to_burnpack(&path, dir.path().join("f6.bpk"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("tensor 'b'"), "{err}");
}

/// The same files through the real `bpk`.
#[cfg(feature = "cli")]
mod bpk {
    use super::*;
    use common::bpk as run;

    #[test]
    fn inspect_verify_and_convert_decode_fp8_and_keep_it_with_keep_quantized() {
        let dir = tempfile::tempdir().unwrap();
        let Some(cases) = every_pattern(dir.path()) else {
            return;
        };
        let (_, path, reference) = &cases[0];
        let file = path.to_str().unwrap();
        let (code, out, err) = run(&["inspect", file]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("f32") && !out.contains("not loadable"),
            "{out}"
        );
        let (code, out, err) = run(&["verify", file]);
        assert_eq!(code, 0, "{out}{err}");
        // Converted: decoded into f32.
        let pack = dir.path().join("w.bpk");
        let (code, out, err) = run(&["convert", file, pack.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        let reader = burnpack::read::Reader::open(&pack).unwrap();
        assert_eq!(reader.tensor("w").unwrap().dtype(), DType::F32);
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&reader.bytes("w").unwrap()[..]);
        assert_same(&got, reference, "converted");
        // Kept: a pack of the QFloat, read back identical.
        let kept = dir.path().join("kept.bpk");
        let (code, out, err) = run(&["convert", "--keep-quantized", file, kept.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        let reader = burnpack::read::Reader::open(&kept).unwrap();
        let source =
            SafetensorsSource::open_with(path, &OpenOptions::new().keep_quantized(true)).unwrap();
        let info = source.tensor("w").unwrap();
        assert_eq!(reader.tensor("w").unwrap().dtype(), info.dtype());
        assert_eq!(
            &reader.bytes("w").unwrap()[..],
            &source.read(info).unwrap()[..]
        );
        let (code, out, err) = run(&["verify", kept.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        // `diff` of the file against its pack: the same values.
        let (code, out, err) = run(&["diff", file, pack.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        // A kept pack (E4M3 and E5M2) is checked by bpk's own decoding: `diff` against the
        // source compares values (NaN equal to NaN), `cat` prints them.
        for (_, path, _) in &cases[..2] {
            let file = path.to_str().unwrap();
            let kept = dir.path().join("kept2.bpk");
            let (code, out, err) =
                run(&["convert", "--keep-quantized", file, kept.to_str().unwrap()]);
            assert_eq!(code, 0, "{out}{err}");
            let (code, out, err) = run(&["diff", file, kept.to_str().unwrap()]);
            assert_eq!(code, 0, "{file}: {out}{err}");
            let (code, out, err) = run(&["cat", kept.to_str().unwrap(), "w", "--rows", "3..4"]);
            assert_eq!(code, 0, "{out}{err}");
            assert!(out.contains("dequantized"), "{out}");
            std::fs::remove_file(&kept).unwrap();
        }
    }

    #[test]
    fn inspect_names_folded_scales_and_diff_sees_a_changed_value() {
        let dir = tempfile::tempdir().unwrap();
        let write_one = |name: &str, last: u8| {
            let path = dir.path().join(name);
            write(
                &path,
                &[
                    (
                        "x.weight",
                        Dtype::F8_E4M3,
                        vec![2, 2],
                        vec![0x38, 0x40, 0x44, last],
                    ),
                    (
                        "x.weight_scale_inv",
                        Dtype::F32,
                        vec![1, 1],
                        f32_bytes(&[2.0]),
                    ),
                ],
            );
            path.to_str().unwrap().to_string()
        };
        let one = write_one("one.safetensors", 0x48);
        let same = write_one("same.safetensors", 0x48);
        let other = write_one("other.safetensors", 0x49);
        let (code, out, err) = run(&["inspect", &one]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("FP8 scales folded into their weights: x.weight_scale_inv -> x.weight"),
            "{out}"
        );
        let (code, out, err) = run(&["diff", &one, &same]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, out, err) = run(&["diff", &one, &other]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains("x.weight"), "{out}");
    }
}

/// With `dequantize_to(F16 | BF16)`, every FP8 bit pattern decodes as `ml_dtypes` decodes it
/// into `f32` and numpy rounds that to `float16` / `bfloat16` (to nearest even); any other
/// dtype is refused at open naming the file.
#[test]
fn dequantize_to_half_rounds_every_pattern_as_numpy_does() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<&str> = FORMATS.iter().map(|(_, n)| *n).collect();
    let script = format!(
        "import numpy as np, ml_dtypes\n\
         b = np.arange(256, dtype=np.uint8)\n\
         for n in {names:?}:\n    \
             f = b.view(getattr(ml_dtypes, n)).astype(np.float32)\n    \
             f.astype('<f2').tofile(n + '.f16')\n    \
             f.astype(ml_dtypes.bfloat16).tofile(n + '.bf16')\n"
    );
    if python(&script, dir.path()).is_none() {
        return;
    }
    for (dtype, name) in FORMATS {
        let path = dir.path().join(format!("{name}.safetensors"));
        write(&path, &[("w", dtype, vec![16, 16], all_bytes())]);
        for (to, ext) in [(DType::F16, "f16"), (DType::BF16, "bf16")] {
            let options = OpenOptions::new().dequantize_to(to);
            let source = SafetensorsSource::open_with(&path, &options).unwrap();
            let info = source.tensor("w").unwrap();
            assert_eq!(info.dtype(), to, "{name}");
            let got = source.read(info).unwrap();
            let expected = std::fs::read(dir.path().join(format!("{name}.{ext}"))).unwrap();
            let (got, expected): (Vec<u16>, Vec<u16>) = (
                bytemuck::pod_collect_to_vec(&got[..]),
                bytemuck::pod_collect_to_vec(&expected[..]),
            );
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                let nan = |v: u16| match to {
                    DType::F16 => burn::tensor::f16::from_bits(v).is_nan(),
                    _ => burn::tensor::bf16::from_bits(v).is_nan(),
                };
                assert!(
                    g == e || (nan(*g) && nan(*e)),
                    "{name} as {to:?}, byte {i}: {g:#x} != {e:#x}"
                );
            }
        }
    }
    let path = dir.path().join("float8_e4m3fn.safetensors");
    let err = SafetensorsSource::open_with(&path, &OpenOptions::new().dequantize_to(DType::I32))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("float8_e4m3fn.safetensors") && err.contains("I32"),
        "{err}"
    );
}

/// A range of rows of an FP8 tensor is the window of its decoded (and scaled) values, never
/// the stored bytes read as the listed dtype.
#[test]
fn rows_of_an_fp8_tensor_are_decoded() {
    use burnpack::source::TensorSourceExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.safetensors");
    write(
        &path,
        &[
            ("a", Dtype::F8_E4M3, vec![16, 16], all_bytes()),
            ("b", Dtype::F32, vec![4], f32_bytes(&[7.0; 4])),
        ],
    );
    for options in [
        OpenOptions::new(),
        OpenOptions::new().dequantize_to(DType::F16),
    ] {
        let source = SafetensorsSource::open_with(&path, &options).unwrap();
        let whole = source.tensor_data("a").unwrap();
        let rows = source.tensor_rows("a", 3..5).unwrap();
        assert_eq!(rows.shape().to_vec(), [2, 16]);
        let width = whole.dtype().size();
        assert_eq!(
            rows.as_bytes(),
            &whole.as_bytes()[3 * 16 * width..5 * 16 * width]
        );
    }
}

/// A scale tensor in another shard than its FP8 weight is refused naming both (pairing sees one
/// shard at a time; the weight alone would be off by its scale).
#[test]
fn a_scale_in_another_shard_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("a.safetensors"),
        &[("w", Dtype::F8_E4M3, vec![2, 2], vec![0x38; 4])],
    );
    write(
        &dir.path().join("b.safetensors"),
        &[("w_scale", Dtype::F32, vec![], f32_bytes(&[2.0]))],
    );
    let index = dir.path().join("m.safetensors.index.json");
    std::fs::write(
        &index,
        r#"{"metadata": {}, "weight_map": {"w": "a.safetensors", "w_scale": "b.safetensors"}}"#,
    )
    .unwrap();
    let err = SafetensorsSource::open(&index).unwrap_err().to_string();
    assert!(
        err.contains("'w_scale'") && err.contains("another shard") && err.contains("'w'"),
        "{err}"
    );
}
