//! `bpk convert --dtype`, `--filter` and `--rename` through the binary: floats cast bit for bit
//! as Burn's `Tensor::cast` casts them (ints, bools untouched), names filtered and renamed as
//! `LoadOptions` spells it, for packs, safetensors (one file and shards) and NumPy `.npz`
//! inputs written by numpy itself; bad patterns, dtypes and colliding renames refused as usage
//! errors (exit 2) naming what is wrong.
#![cfg(all(feature = "cli", feature = "safetensors"))]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::{Bytes, DType, Device, FloatDType, Tensor, TensorData};
use burnpack::format::FLOAT_DTYPE_KEY;
use burnpack::read::Reader;
use burnpack::write::{Entry, Writer};
use common::bpk;

/// Burn's own cast of `bytes` (`dtype`, little-endian) to `to`, as bytes.
fn burn_cast(bytes: &[u8], dtype: DType, to: FloatDType) -> Vec<u8> {
    let n = bytes.len() / dtype.size();
    let data = TensorData::from_bytes_vec(bytes.to_vec(), [n], dtype);
    let tensor: Tensor<1> = Tensor::from_data(data, (&Device::flex(), dtype));
    tensor.cast(to).into_data().as_bytes().to_vec()
}

/// Values that round differently in each half type, ties and out-of-range ones among them.
fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (i as f32 + seed) * 0.1731 - 1.0 + f32::EPSILON * (i as f32) * 4096.0)
        .chain([1.0 + 2f32.powi(-11), 70000.0, -1e-9])
        .take(n)
        .collect()
}

/// A pack of floats (f32, f64), ints and bools under `encoder.` and `decoder.`.
fn pack(path: &Path) -> BTreeMap<String, (DType, Vec<u8>)> {
    let f64s: Vec<f64> = values(6, 0.3)
        .iter()
        .map(|&v| f64::from(v) + 1e-12)
        .collect();
    let entries = vec![
        Entry::resident(
            "encoder.w",
            DType::F32,
            vec![3, 4],
            Bytes::from_elems(values(12, 0.0)),
        )
        .with_param_id(11),
        Entry::resident("encoder.b", DType::F64, vec![6], Bytes::from_elems(f64s)),
        Entry::resident(
            "decoder.w",
            DType::F32,
            vec![4, 2],
            Bytes::from_elems(values(8, 5.0)),
        ),
        Entry::resident(
            "steps",
            DType::I64,
            vec![2],
            Bytes::from_elems(vec![3i64, -9]),
        ),
        Entry::resident(
            "mask",
            DType::U8,
            vec![3],
            Bytes::from_bytes_vec(vec![1, 0, 1]),
        ),
    ];
    Writer::new(entries)
        .metadata("model", "toy")
        .write_to_file(path)
        .unwrap();
    tensors_of_pack(path)
}

fn tensors_of_pack(path: &Path) -> BTreeMap<String, (DType, Vec<u8>)> {
    let reader = Reader::open(path).unwrap();
    reader
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                (t.dtype(), reader.read(t).unwrap().to_vec()),
            )
        })
        .collect()
}

fn tensors_of_safetensors(path: &Path) -> BTreeMap<String, (DType, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(name, view)| {
            let dtype = match view.dtype() {
                safetensors::Dtype::F16 => DType::F16,
                safetensors::Dtype::BF16 => DType::BF16,
                safetensors::Dtype::F32 => DType::F32,
                safetensors::Dtype::F64 => DType::F64,
                safetensors::Dtype::I64 => DType::I64,
                safetensors::Dtype::U8 => DType::U8,
                other => panic!("{name}: {other:?}"),
            };
            (name, (dtype, view.data().to_vec()))
        })
        .collect()
}

/// `original` as `--dtype` `to` makes it: floats Burn's cast, the rest as they are.
fn cast_all(
    original: &BTreeMap<String, (DType, Vec<u8>)>,
    to: FloatDType,
) -> BTreeMap<String, (DType, Vec<u8>)> {
    original
        .iter()
        .map(|(name, (dtype, bytes))| {
            let cast = match dtype {
                DType::F64 | DType::F32 | DType::F16 | DType::BF16 => {
                    (DType::from(to), burn_cast(bytes, *dtype, to))
                }
                _ => (*dtype, bytes.clone()),
            };
            (name.clone(), cast)
        })
        .collect()
}

fn run(args: &[&str]) -> (i32, String, String) {
    bpk(args)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn dtype_casts_every_float_as_burn_does_to_packs_and_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bpk");
    let original = pack(&input);
    for (flag, to) in [
        ("f16", FloatDType::F16),
        ("bf16", FloatDType::BF16),
        ("f32", FloatDType::F32),
    ] {
        let want = cast_all(&original, to);
        // To a pack (the same format: not a copy, since it changes what it writes).
        let out = dir.path().join(format!("{flag}.bpk"));
        let (code, stdout, stderr) = run(&["convert", s(&input), s(&out), "--dtype", flag]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert_eq!(tensors_of_pack(&out), want, "{flag}");
        let reader = Reader::open(&out).unwrap();
        assert_eq!(
            reader.metadata()[FLOAT_DTYPE_KEY],
            format!("{:?}", DType::from(to))
        );
        assert_eq!(reader.metadata()["model"], "toy");
        assert_eq!(reader.tensor("encoder.w").unwrap().param_id(), Some(11));
        // Verified sound (checksums of the cast bytes), the key shown by inspect.
        let (code, stdout, stderr) = run(&["verify", s(&out)]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        let (code, stdout, stderr) = run(&["inspect", s(&out)]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(FLOAT_DTYPE_KEY), "{stdout}");
        // To safetensors.
        let out = dir.path().join(format!("{flag}.safetensors"));
        let (code, stdout, stderr) = run(&["convert", s(&input), s(&out), "--dtype", flag]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        let got = tensors_of_safetensors(&out);
        assert_eq!(got, want, "{flag}");
    }
    // Something was rounded: the comparison compares something.
    assert_ne!(cast_all(&original, FloatDType::F16), original);
}

#[test]
fn dtype_reaches_every_shard_of_a_sharded_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bpk");
    let original = pack(&input);
    let out = dir.path().join("model.safetensors");
    let (code, stdout, stderr) = run(&[
        "convert",
        s(&input),
        s(&out),
        "--dtype",
        "bf16",
        "--shard-size",
        "40",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let mut got = BTreeMap::new();
    let mut shards = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("model-") && name.ends_with(".safetensors") {
            shards += 1;
            got.extend(tensors_of_safetensors(&path));
        }
    }
    assert!(shards > 1, "{shards} shards");
    assert_eq!(got, cast_all(&original, FloatDType::BF16));
}

#[test]
fn filter_and_renames_pick_and_rename_as_load_options_spell_them() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bpk");
    let original = pack(&input);
    let out = dir.path().join("enc.bpk");
    // Renames first, in order, then the filter on the new names (as `LoadOptions` filters
    // module paths after its renames).
    let (code, stdout, stderr) = run(&[
        "convert",
        s(&input),
        s(&out),
        "--rename",
        r"^encoder\.=enc.",
        "--rename",
        r"^enc\.(\w+)$=enc.$1.x",
        "--filter",
        r"^enc\.",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let got = tensors_of_pack(&out);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["enc.b.x", "enc.w.x"]);
    assert_eq!(got["enc.w.x"], original["encoder.w"]);
    assert_eq!(got["enc.b.x"], original["encoder.b"]);
    let reader = Reader::open(&out).unwrap();
    assert_eq!(reader.tensor("enc.w.x").unwrap().param_id(), Some(11));
    assert!(!reader.metadata().contains_key(FLOAT_DTYPE_KEY));

    // With a dtype, to safetensors.
    let out = dir.path().join("dec.safetensors");
    let (code, stdout, stderr) = run(&[
        "convert",
        s(&input),
        s(&out),
        "--filter",
        "^dec",
        "--dtype",
        "f16",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let got = tensors_of_safetensors(&out);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["decoder.w"]);
    assert_eq!(
        got["decoder.w"],
        cast_all(&original, FloatDType::F16)["decoder.w"]
    );
}

#[test]
fn bad_patterns_dtypes_and_colliding_renames_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bpk");
    pack(&input);
    let out = dir.path().join("out.bpk");
    let cases: [(&[&str], &[&str]); 6] = [
        (&["--filter", "(enc"], &["--filter", "(enc"]),
        (&["--rename", "(x=y"], &["--rename", "(x=y"]),
        (&["--rename", "no-equals-sign"], &["FROM=TO"]),
        (&["--dtype", "f64"], &["f64", "f16"]),
        (
            &["--rename", r"^(encoder|decoder)\.w$=w"],
            &["'encoder.w'", "'decoder.w'", "'w'"],
        ),
        (&["--filter", "^nothing"], &["^nothing", "keeps none"]),
    ];
    for (args, said) in cases {
        let mut all = vec!["convert", s(&input), s(&out)];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = run(&all);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        for word in said {
            assert!(stderr.contains(word), "{args:?}: {stderr}");
        }
        assert!(!out.exists(), "{args:?}");
        assert_eq!(common::scratch_files(dir.path()), 0, "{args:?}");
    }
    // Without an edit, a pack to a pack is still no conversion.
    let (code, _, stderr) = run(&["convert", s(&input), s(&out)]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn numpy_files_convert_with_dtype_filter_and_rename() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np
rng = np.random.default_rng(7)
np.savez("model.npz",
    **{"layer.weight": rng.standard_normal((5, 3)).astype("<f4"),
       "layer.bias": rng.standard_normal(5).astype("<f8") * 1e-3,
       "layer.index": np.arange(4, dtype="<i8"),
       "other.weight": np.float32([1.0 + 2**-11, 65520.0, -0.1])})
"#;
    if common::python("numpy", script, dir.path()).is_none() {
        return;
    }
    let input = dir.path().join("model.npz");
    // The arrays as numpy wrote them, read back by the library's NumPy source.
    let source = burnpack::interop::open_any(&input).unwrap();
    let original: BTreeMap<String, (DType, Vec<u8>)> = source
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                (t.dtype(), source.read(t).unwrap().to_vec()),
            )
        })
        .collect();
    assert_eq!(original["layer.bias"].0, DType::F64);
    for (flag, to, ext) in [
        ("bf16", FloatDType::BF16, "bpk"),
        ("f16", FloatDType::F16, "safetensors"),
    ] {
        let out = dir.path().join(format!("{flag}.{ext}"));
        let (code, stdout, stderr) = run(&[
            "convert",
            s(&input),
            s(&out),
            "--dtype",
            flag,
            "--filter",
            r"^model\.",
            "--rename",
            r"^layer\.=model.",
        ]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        let got = if ext == "bpk" {
            tensors_of_pack(&out)
        } else {
            tensors_of_safetensors(&out)
        };
        let want: BTreeMap<String, (DType, Vec<u8>)> = cast_all(&original, to)
            .into_iter()
            .filter_map(|(name, v)| Some((format!("model.{}", name.strip_prefix("layer.")?), v)))
            .collect();
        assert_eq!(got, want, "{flag}");
        assert_eq!(got["model.index"].0, DType::I64);
    }
}
