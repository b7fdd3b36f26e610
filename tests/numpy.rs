//! NumPy `.npy` and `.npz` files written by `numpy` itself (`np.save`, `np.savez`,
//! `np.savez_compressed`, `numpy.lib.format.write_array` for versions 2.0 and 3.0), read here:
//! every dtype with a Burn equivalent in both byte orders, C and Fortran order, every value
//! compared with what `np.load` reads back; a small model's weights in PyTorch's names loaded
//! into a Burn module with the same forward pass; hostile files refused by name.
//!
//! The Python side needs `numpy` (`.ci/run` installs it, pinned, into a folder it names in
//! `BURNPACK_PYTHONPATH`); without it these tests say "skipped" and pass, except in CI.

mod common;

use std::path::{Path, PathBuf};

use burn::tensor::{BoolStore, Bytes, DType};
use burnpack::interop::numpy::NumpySource;
use burnpack::interop::{OpenOptions, open_any, open_bytes_any};
use burnpack::source::{CopyReason, ReadError, SourceErrorKind, TensorSource};
use burnpack::source::{DescribedSource, assert_source_contract};

/// Runs `script` with `python3` and its packages in `dir` (see `common::python`).
fn python(script: &str, dir: &Path) -> Option<()> {
    common::python("numpy", script, dir)
}

/// Writes, in `dir`, one `.npy` per dtype, byte order, layout and version, and `all.npz` /
/// `compressed.npz` holding all of them; for each array `<name>.ref`: what `np.load` reads
/// back from the file, as little-endian C-order bytes; and `names.txt`, the array names.
const WRITER: &str = r#"
import numpy as np
from numpy.lib import format as fmt
rng = np.random.default_rng(11)
arrays = {}
for kind in ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"]:
    orders = ["|"] if kind in ("i1", "u1", "b1") else ["<", ">"]
    for order in orders:
        dt = np.dtype(order + kind)
        if kind == "b1":
            a = rng.integers(0, 2, (3, 4, 5)).astype(bool)
        elif kind[0] == "f":
            a = rng.standard_normal((3, 4, 5)).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, (3, 4, 5), dtype=dt.newbyteorder("="), endpoint=True).astype(dt)
        name = ("be_" if order == ">" else "") + kind
        arrays[name] = a
        arrays[name + "_fortran"] = np.asfortranarray(a)
arrays["scalar"] = np.array(3.5, dtype="<f8")
arrays["empty"] = np.zeros((0, 3), dtype="<f4")
arrays["vector"] = np.arange(7, dtype=">i2")
arrays["column"] = np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4))
for name, a in arrays.items():
    np.save(name + ".npy", a)
    back = np.load(name + ".npy")
    assert back.dtype == a.dtype and back.flags.f_contiguous == a.flags.f_contiguous or a.ndim < 2
    np.ascontiguousarray(back.astype(back.dtype.newbyteorder("<"))).tofile(name + ".ref")
for version in [(1, 0), (2, 0), (3, 0)]:
    with open("v%d.npy" % version[0], "wb") as f:
        fmt.write_array(f, arrays["f4"], version=version)
np.savez("all.npz", **arrays)
np.savez_compressed("compressed.npz", **arrays)
for path in ["all.npz", "compressed.npz"]:
    with np.load(path) as z:
        for name in arrays:
            assert np.array_equal(z[name], arrays[name])
open("names.txt", "w").write("\n".join(arrays))
"#;

fn written(dir: &Path) -> Option<Vec<String>> {
    python(WRITER, dir)?;
    let names = std::fs::read_to_string(dir.join("names.txt")).unwrap();
    Some(names.lines().map(str::to_string).collect())
}

fn burn_dtype(name: &str) -> DType {
    let kind = name.trim_start_matches("be_").trim_end_matches("_fortran");
    match kind {
        "f2" => DType::F16,
        "f4" | "empty" | "column" => DType::F32,
        "f8" | "scalar" => DType::F64,
        "i1" => DType::I8,
        "i2" | "vector" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool(BoolStore::Native),
        other => panic!("{other}"),
    }
}

/// Every array `np.save` wrote reads as `np.load` reads it back, through the source, the
/// registry (path and bytes), with the contract kept; copies are reported for what is not
/// stored as Burn lays it out.
#[test]
fn every_dtype_byte_order_and_layout_reads_as_numpy_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some(names) = written(dir.path()) else {
        return;
    };
    for name in &names {
        let path = dir.path().join(format!("{name}.npy"));
        let want = std::fs::read(dir.path().join(format!("{name}.ref"))).unwrap();
        let source = NumpySource::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_source_contract(&source);
        assert!(!source.is_npz());
        let info = source.tensor("array").unwrap_or_else(|| panic!("{name}"));
        assert_eq!(info.dtype(), burn_dtype(name), "{name}");
        assert_eq!(&source.read(info).unwrap()[..], &want[..], "{name}");
        let reason = source.copy_reason(info);
        if name.ends_with("_fortran") || name == "column" {
            assert_eq!(reason, Some(CopyReason::Strided), "{name}");
            assert!(source.is_fortran(info));
        } else if name.starts_with("be_") || name == "vector" {
            assert!(
                matches!(reason, Some(CopyReason::Decoded { .. })),
                "{name}: {reason:?}"
            );
        } else {
            // np.save aligns the data to 64 bytes: a window of the mapping.
            assert_eq!(reason, None, "{name}");
        }
        let any = open_any(&path).unwrap();
        assert_eq!(any.describe().format, "numpy");
        assert_eq!(any.as_tensor_source().tensors(), source.tensors());
        let bytes = Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
        let any = open_bytes_any(bytes, &OpenOptions::new()).unwrap();
        let info = any.as_tensor_source().tensor("array").unwrap();
        assert_eq!(&any.as_tensor_source().read(info).unwrap()[..], &want[..]);
    }
    for version in 1..=3 {
        let path = dir.path().join(format!("v{version}.npy"));
        let source = NumpySource::open(&path).unwrap();
        let info = source.tensor("array").unwrap();
        let want = std::fs::read(dir.path().join("f4.ref")).unwrap();
        assert_eq!(&source.read(info).unwrap()[..], &want[..], "v{version}");
        assert!(
            source.describe().lines[0].contains(&format!("{version}.0")),
            "{:?}",
            source.describe().lines
        );
    }
}

/// `np.savez` (stored: windows where aligned, CRC-32 checked) and `np.savez_compressed`
/// (inflated, CRC-32 checked on every read) hold every array under its name.
#[test]
fn savez_and_savez_compressed_hold_every_array_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some(names) = written(dir.path()) else {
        return;
    };
    for (file, deflated) in [("all.npz", false), ("compressed.npz", true)] {
        let path = dir.path().join(file);
        for verify in [false, true] {
            let source = NumpySource::open_with(&path, &OpenOptions::new().verify(verify)).unwrap();
            assert_source_contract(&source);
            assert!(source.is_npz());
            assert_eq!(source.tensors().len(), names.len());
            for name in &names {
                let want = std::fs::read(dir.path().join(format!("{name}.ref"))).unwrap();
                let info = source
                    .tensor(name)
                    .unwrap_or_else(|| panic!("{file}: {name}"));
                let got = source.read(info).unwrap();
                assert_eq!(&got[..], &want[..], "{file}: {name}");
                assert!(source.check(info, &got).unwrap(), "{file}: {name}");
                if deflated {
                    assert_eq!(
                        source.copy_reason(info),
                        Some(CopyReason::Decoded { format: "deflate" })
                    );
                }
            }
        }
        let about = open_any(&path).unwrap().describe();
        assert_eq!(about.format, "numpy");
        assert!(about.summary.contains(".npz"), "{}", about.summary);
    }
}

/// A small MLP's weights, saved by NumPy under PyTorch's names (`fc1.weight` `[out, in]`),
/// load into a Burn module with the PyTorch conventions and give NumPy's forward pass.
#[test]
fn a_models_weights_in_an_npz_load_into_a_burn_module() {
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{Device, Tensor, activation::relu};
    use burnpack::{LoadOptions, PackModule};

    #[derive(Module, Debug)]
    struct Mlp {
        fc1: Linear,
        fc2: Linear,
    }

    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np
rng = np.random.default_rng(3)
w1 = rng.standard_normal((8, 4)).astype("<f4"); b1 = rng.standard_normal(8).astype("<f4")
w2 = rng.standard_normal((3, 8)).astype(">f4"); b2 = rng.standard_normal(3).astype("<f4")
x = rng.standard_normal((2, 4)).astype("<f4")
y = np.maximum(x @ w1.T + b1, 0) @ w2.T.astype("<f4") + b2
for name, f in [("model.npz", np.savez), ("model_compressed.npz", np.savez_compressed)]:
    f(name, **{"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": np.asfortranarray(w2), "fc2.bias": b2})
x.astype("<f4").tofile("x.bin"); y.astype("<f4").tofile("y.bin")
"#;
    if python(script, dir.path()).is_none() {
        return;
    }
    let floats = |name: &str| -> Vec<f32> {
        std::fs::read(dir.path().join(name))
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (x, want) = (floats("x.bin"), floats("y.bin"));
    for file in ["model.npz", "model_compressed.npz"] {
        let source = NumpySource::open(dir.path().join(file)).unwrap();
        let device = Device::flex();
        let model = Mlp {
            fc1: LinearConfig::new(4, 8).init(&device),
            fc2: LinearConfig::new(8, 3).init(&device),
        }
        .load_from_source(&source, &LoadOptions::new().pytorch(true))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let input =
            Tensor::<2>::from_data(burn::tensor::TensorData::new(x.clone(), [2, 4]), &device);
        let y = model.fc2.forward(relu(model.fc1.forward(input)));
        let got = y.into_data().try_to_vec::<f32>().unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{file} {i}: {a} vs {b}"
            );
        }
    }
}

fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.as_bytes().to_vec();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend(u16::try_from(header.len()).unwrap().to_le_bytes());
    out.extend(header);
    out.extend(data);
    out
}

fn refused(bytes: Vec<u8>) -> burnpack::source::SourceError {
    NumpySource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new()).unwrap_err()
}

/// Hostile `.npy` headers: Python expressions, unknown keys, object arrays, huge shapes, cut
/// data; each refused with what is wrong, before anything is allocated for it.
#[test]
fn hostile_npy_headers_are_refused_by_name() {
    for (dict, data, says) in [
        (
            "{'descr': '<f4', 'fortran_order': __import__('os').system('x'), 'shape': (1,), }",
            &[0u8; 4][..],
            "True or False",
        ),
        (
            "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
            &[0; 8],
            "object array",
        ),
        (
            "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }",
            &[0; 16],
            "complex",
        ),
        (
            "{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }",
            &[0; 12],
            "strings",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'evil': 1, }",
            &[0; 4],
            "'evil'",
        ),
        (
            "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }",
            &[0; 8],
            "needs",
        ),
        (
            "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
            &[0; 8],
            "at most 20 digits",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[0; 4],
            "needs 8 bytes",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
            &[0; 8],
            "after the array",
        ),
    ] {
        let err = refused(npy(dict, data)).to_string();
        assert!(
            err.contains(says) && err.contains("<memory>"),
            "{dict}: {err}"
        );
    }
    // A header length past the limit is refused before it is read.
    let mut huge = b"\x93NUMPY\x02\x00".to_vec();
    huge.extend(u32::MAX.to_le_bytes());
    let err = refused(huge);
    assert!(err.to_string().contains("over the limit"), "{err}");
    let err = refused(b"\x93NUMPY\x09\x00\x10\x00".to_vec());
    assert_eq!(err.kind(), SourceErrorKind::Unsupported);
    assert!(err.to_string().contains("version 9.0"), "{err}");
}

/// Hostile `.npz` archives: a zip bomb (a deflated member past `max_inflation`), two members
/// of one name, a member that is no `.npy`, a damaged stored member (its CRC-32) and a
/// damaged deflated one; each refused naming the file and the member.
#[test]
fn hostile_npz_archives_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np, zipfile, warnings
np.savez_compressed("bomb.npz", zeros=np.zeros(16 << 20, dtype=np.uint8))
np.savez("stored.npz", w=np.arange(64, dtype="<f4"))
np.savez_compressed("deflated.npz", w=np.arange(64, dtype="<f4"))
warnings.simplefilter("ignore")
with zipfile.ZipFile("twice.npz", "w") as z:
    z.write("stored.npz", "w.npy"); z.write("stored.npz", "w.npy")
np.save("w.npy", np.arange(4, dtype="<f4"))
with zipfile.ZipFile("other.npz", "w") as z:
    z.write("w.npy"); z.writestr("notes.txt", b"hi")
"#;
    if python(script, dir.path()).is_none() {
        return;
    }
    let path = |n: &str| dir.path().join(n);
    let open = |n: &str| NumpySource::open(path(n));
    let err = open("bomb.npz").unwrap_err();
    assert_eq!(err.tensor(), Some("zeros"));
    assert!(err.to_string().contains("inflation limit"), "{err}");
    // Within a larger bound it reads.
    let limits = burnpack::format::Limits::default().with_max_inflation(1 << 20);
    let bomb =
        NumpySource::open_with(path("bomb.npz"), &OpenOptions::new().limits(limits)).unwrap();
    let info = bomb.tensor("zeros").unwrap();
    assert!(bomb.read(info).unwrap().iter().all(|&b| b == 0));
    let err = open("twice.npz").unwrap_err().to_string();
    assert!(
        err.contains("same name") && err.contains("twice.npz"),
        "{err}"
    );
    let err = open("other.npz").unwrap_err().to_string();
    assert!(
        err.contains("'notes.txt'") && err.contains("not a .npy"),
        "{err}"
    );
    // A damaged byte of the array: the stored member's CRC-32 names it (the table still
    // opens: the header is intact).
    let mut bytes = std::fs::read(path("stored.npz")).unwrap();
    let source =
        NumpySource::from_bytes(Bytes::from_bytes_vec(bytes.clone()), &OpenOptions::new()).unwrap();
    let at = usize::try_from(source.tensor("w").unwrap().offset()).unwrap() + 5;
    bytes[at] ^= 0x40;
    std::fs::write(path("damaged.npz"), &bytes).unwrap();
    let source = open("damaged.npz").unwrap();
    let info = source.tensor("w").unwrap();
    let got = source.read(info).unwrap();
    match source.check(info, &got) {
        Err(ReadError::Checksum { tensor, .. }) => assert_eq!(tensor, "w"),
        other => panic!("{other:?}"),
    }
    #[cfg(feature = "cli")]
    {
        let (code, out, err) = common::bpk(&["verify", path("damaged.npz").to_str().unwrap()]);
        assert_ne!(code, 0, "{out}");
        assert!(format!("{out}{err}").contains("'w'"), "{out} {err}");
    }
    // A damaged deflated member: inflated and checked as the file is opened, the error
    // names it.
    let mut bytes = std::fs::read(path("deflated.npz")).unwrap();
    let (_, inside) = (0..bytes.len())
        .find_map(|i| bytes[i..].starts_with(b"w.npy").then_some((i, i + 5)))
        .unwrap();
    bytes[inside + 20] ^= 0x55;
    let err =
        NumpySource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new()).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Damaged, "{err}");
    assert_eq!(err.tensor(), Some("w"), "{err}");
}

/// `bpk inspect / verify / convert / diff` on files NumPy wrote, through the registry (bpk
/// has no code of its own for NumPy).
#[cfg(feature = "cli")]
#[test]
fn numpy_files_through_every_bpk_command() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/numpy");
    let dir = tempfile::tempdir().unwrap();
    for name in ["f32.npy", "big-fortran.npy", "stored.npz", "deflated.npz"] {
        let file = corpus.join(name);
        let f = file.to_str().unwrap();
        let (code, out, err) = common::bpk(&["inspect", f]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            out.contains("NumPy") && out.contains("stored types:"),
            "{out}"
        );
        let (code, out, _) = common::bpk(&["inspect", f, "--json"]);
        assert_eq!(code, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["format"], "numpy");
        let (code, out, err) = common::bpk(&["verify", f]);
        assert_eq!(code, 0, "{name}: {out} {err}");
        assert!(out.contains("OK"), "{out}");
        let pack = dir.path().join(format!("{name}.bpk"));
        let st = dir.path().join(format!("{name}.safetensors"));
        let (code, _, err) = common::bpk(&["convert", f, pack.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
        let (code, _, err) = common::bpk(&["convert", f, st.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
        let (_, out, _) = common::bpk(&["diff", f, pack.to_str().unwrap()]);
        assert!(out.contains("0 differ in values"), "{name}: {out}");
        let (_, out, _) = common::bpk(&["diff", f, st.to_str().unwrap()]);
        assert!(out.contains("0 differ in values"), "{name}: {out}");
    }
}

/// The registry tells an `.npz` from a `torch.save` archive (both zip files) by its first
/// member, also when that member's name is long, from a path and from bytes.
#[test]
fn the_registry_tells_an_npz_with_long_names_from_a_torch_save_file() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np
np.savez("long.npz", **{"encoder.layers.0.self_attention.query_projection.weight": np.ones((2, 2), "<f4")})
"#;
    if python(script, dir.path()).is_none() {
        return;
    }
    let path = dir.path().join("long.npz");
    assert_eq!(open_any(&path).unwrap().describe().format, "numpy");
    let bytes = Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
    let any = open_bytes_any(bytes, &OpenOptions::new()).unwrap();
    assert_eq!(any.describe().format, "numpy");
    let name = "encoder.layers.0.self_attention.query_projection.weight";
    let info = any.as_tensor_source().tensor(name).unwrap();
    assert_eq!(info.shape(), &[2, 2]);
}

/// An `.npz` through every door of the registry: the file-size limit from a path and from
/// bytes, the file the registry opened (never its path again), local headers that disagree
/// with the central directory, and an encrypted member.
#[test]
fn an_npz_at_every_door_of_the_registry() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/numpy");
    let dir = tempfile::tempdir().unwrap();
    for name in ["stored.npz", "deflated.npz", "f32.npy"] {
        let bytes = std::fs::read(corpus.join(name)).unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let limits = burnpack::format::Limits::default().with_max_file_size(bytes.len() as u64 - 1);
        let options = OpenOptions::new().limits(limits);
        let err = burnpack::interop::open_any_with(&path, &options).unwrap_err();
        assert!(err.to_string().contains("file-size limit"), "{name}: {err}");
        let err = open_bytes_any(Bytes::from_bytes_vec(bytes.clone()), &options).unwrap_err();
        assert!(err.to_string().contains("file-size limit"), "{name}: {err}");
        let by_path = NumpySource::open(&path).unwrap();
        let any = open_any(&path).unwrap();
        assert_eq!(any.as_tensor_source().tensors(), by_path.tensors());
        for info in by_path.tensors() {
            assert_eq!(
                any.as_tensor_source().read(info).unwrap().to_vec(),
                by_path.read(info).unwrap().to_vec()
            );
        }
    }
    // The local header of the first member renamed: it disagrees with the central directory.
    let mut bytes = std::fs::read(corpus.join("stored.npz")).unwrap();
    assert_eq!(&bytes[..4], b"PK\x03\x04");
    bytes[30] ^= 0x01;
    let err =
        NumpySource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new()).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Invalid, "{err}");
    // The central directory's entry of a member marked encrypted (general purpose bit 0).
    let mut bytes = std::fs::read(corpus.join("stored.npz")).unwrap();
    let central = (0..bytes.len())
        .find(|&i| bytes[i..].starts_with(b"PK\x01\x02"))
        .unwrap();
    bytes[central + 8] |= 1;
    let err =
        NumpySource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new()).unwrap_err();
    assert!(err.to_string().contains("encrypt"), "{err}");
}

/// Many small deflated members, each within the inflation bound, are bounded together: the
/// archive's deflated members may inflate to `max_inflation` times what they take in the
/// file, plus 1 MiB, all of them, and the refusal names where it went over, before anything
/// is inflated (memory stays bounded by the file).
#[test]
fn deflated_members_are_bounded_together() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np
np.savez_compressed("slack.npz", **{f"m{i}": np.zeros(1 << 20, dtype=np.uint8) for i in range(64)})
np.savez_compressed("fine.npz", **{f"m{i}": np.arange(1000, dtype="<f4") for i in range(64)})
np.savez("empty.npz")
"#;
    if python(script, dir.path()).is_none() {
        return;
    }
    let err = NumpySource::open(dir.path().join("slack.npz")).unwrap_err();
    // A limit, not damage: `bpk` exits 3.
    assert_ne!(err.kind(), SourceErrorKind::Damaged, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("inflation limit") && text.contains("deflated members say"),
        "{text}"
    );
    // Within a bound raised for the file, it reads; an honest archive is far below it.
    let limits = burnpack::format::Limits::default().with_max_inflation(1 << 12);
    let slack = NumpySource::open_with(
        dir.path().join("slack.npz"),
        &OpenOptions::new().limits(limits),
    )
    .unwrap();
    assert_eq!(slack.tensors().len(), 64);
    assert_eq!(
        NumpySource::open(dir.path().join("fine.npz"))
            .unwrap()
            .tensors()
            .len(),
        64
    );
    // `np.savez` of no array writes an archive with no member: an `.npz` of no tensor, at
    // every door (the registry tells it by content too).
    let empty = NumpySource::open(dir.path().join("empty.npz")).unwrap();
    assert!(empty.is_npz() && empty.tensors().is_empty());
    let any = burnpack::interop::open_any(dir.path().join("empty.npz")).unwrap();
    assert_eq!(any.describe().format, "numpy");
}

/// A `b1` array's bytes must be 0 or 1 (what NumPy's own bools are): another byte is refused
/// naming the tensor and the element, not handed on to be read as a Rust `bool`.
#[test]
fn bool_arrays_hold_only_zero_and_one() {
    let bad = npy(
        "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
        &[0, 1, 2],
    );
    let source = NumpySource::from_bytes(Bytes::from_bytes_vec(bad), &OpenOptions::new()).unwrap();
    let err = source
        .read(source.tensor("array").unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'array'") && err.contains("element 2 holds the byte 2"),
        "{err}"
    );
    let good = npy(
        "{'descr': '|b1', 'fortran_order': True, 'shape': (2, 2), }",
        &[0, 1, 1, 0],
    );
    let source = NumpySource::from_bytes(Bytes::from_bytes_vec(good), &OpenOptions::new()).unwrap();
    assert_eq!(
        &source.read(source.tensor("array").unwrap()).unwrap()[..],
        &[0, 1, 1, 0]
    );
}

/// A shape with a zero holds no bytes, but its other dimensions must still be addressable
/// (numpy refuses `(0, 2**64 - 1, 2**64 - 1)`; strides of such a shape overflow).
#[test]
fn zero_size_shapes_with_unaddressable_dimensions_are_refused() {
    let huge = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 18446744073709551615, 18446744073709551615), }",
        &[],
    );
    let err = refused(huge).to_string();
    assert!(err.contains("too large to address"), "{err}");
    let fine = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1024, 1024), }",
        &[],
    );
    let source = NumpySource::from_bytes(Bytes::from_bytes_vec(fine), &OpenOptions::new()).unwrap();
    assert_eq!(source.tensor("array").unwrap().shape(), &[0, 1024, 1024]);
}

/// The inflation bound holds for the archive whatever the order of its members, and a flipped
/// bool byte in a stored member is damage (its CRC-32 says so) before it is no bool.
#[test]
fn the_inflation_bound_is_the_archives_and_bool_damage_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np, zipfile, io
def member(z, name, arr, method):
    buf = io.BytesIO(); np.save(buf, arr)
    z.writestr(zipfile.ZipInfo(name + ".npy"), buf.getvalue(), compress_type=method)
big = np.zeros(3 << 20, dtype=np.uint8)
rand = np.random.default_rng(1).integers(0, 255, 1 << 16, dtype=np.uint8)
for order, path in [((("a", big), ("b", rand)), "ab.npz"), ((("b", rand), ("a", big)), "ba.npz")]:
    with zipfile.ZipFile(path, "w") as z:
        for name, arr in order:
            member(z, name, arr, zipfile.ZIP_DEFLATED)
np.savez("b.npz", b=np.array([True, False, True, True]))
"#;
    if python(script, dir.path()).is_none() {
        return;
    }
    // Each order: the same verdict.
    let verdicts: Vec<bool> = ["ab.npz", "ba.npz"]
        .iter()
        .map(|f| NumpySource::open(dir.path().join(f)).is_ok())
        .collect();
    assert_eq!(verdicts[0], verdicts[1], "{verdicts:?}");
    let mut bytes = std::fs::read(dir.path().join("b.npz")).unwrap();
    let source =
        NumpySource::from_bytes(Bytes::from_bytes_vec(bytes.clone()), &OpenOptions::new()).unwrap();
    let at = usize::try_from(source.tensor("b").unwrap().offset()).unwrap();
    assert_eq!(bytes[at], 1);
    bytes[at] = 2;
    let source =
        NumpySource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new()).unwrap();
    let err = source.read(source.tensor("b").unwrap()).unwrap_err();
    assert!(matches!(err, ReadError::Checksum { .. }), "{err}");
}
