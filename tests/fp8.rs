//! Safetensors files holding FP8 tensors (`F8_E4M3`, `F8_E5M2`), written by the `safetensors`
//! crate: the file opens, every tensor is listed (the FP8 ones as withheld, with their dtype),
//! the other tensors load (with a filter or `allow_partial`), and only a load or a conversion
//! that wants an FP8 tensor is refused, by an error naming the file, the tensor and its dtype.
//! Then the same files through `bpk inspect`, `verify` and `convert`.

use std::path::Path;

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};
use burnpack::interop::safetensors::{SafetensorsSource, safetensors_to_burnpack};
use burnpack::module::{LoadOptions, ModuleError, PackModule};
use burnpack::source::TensorSource;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

#[derive(Module, Debug)]
struct Pair {
    a: Param<Tensor<1>>,
    b: Param<Tensor<2>>,
}

fn pair(device: &Device) -> Pair {
    Pair {
        a: Param::from_data([0.0, 0.0], device),
        b: Param::from_data([[7.0, 7.0], [7.0, 7.0]], device),
    }
}

fn floats(t: &Tensor<1>) -> Vec<f32> {
    t.clone().into_data().try_to_vec::<f32>().unwrap()
}

/// A file with `a` (F32 [2]), `b` (F8_E4M3 [2, 2]) and `c` (F8_E5M2 [3]).
fn write_fp8(path: &Path) {
    let a: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b = vec![0x38u8, 0x40, 0x44, 0x48];
    let c = vec![0x3cu8, 0x40, 0x42];
    let views = [
        ("a", TensorView::new(Dtype::F32, vec![2], &a).unwrap()),
        (
            "b",
            TensorView::new(Dtype::F8_E4M3, vec![2, 2], &b).unwrap(),
        ),
        ("c", TensorView::new(Dtype::F8_E5M2, vec![3], &c).unwrap()),
    ];
    safetensors::serialize_to_file(views, None, path).unwrap();
}

#[test]
fn a_file_with_fp8_tensors_opens_and_lists_them_withheld() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fp8.safetensors");
    write_fp8(&path);
    let source = SafetensorsSource::open(&path).unwrap();
    let names: Vec<&str> = source.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["a"]);
    let withheld: Vec<(&str, &str, &[usize])> = source
        .withheld()
        .iter()
        .map(|w| (w.name.as_str(), w.dtype.as_str(), w.shape.as_slice()))
        .collect();
    assert_eq!(
        withheld,
        [("b", "F8_E4M3", &[2, 2][..]), ("c", "F8_E5M2", &[3][..])]
    );
    assert!(
        source.withheld()[0]
            .reason
            .contains("FP8 is not loadable yet")
    );
    // The same from bytes in memory.
    let bytes = burn::tensor::Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
    let memory =
        SafetensorsSource::from_bytes(bytes, &burnpack::source::OpenOptions::new()).unwrap();
    assert_eq!(memory.withheld().len(), 2);
}

#[test]
fn a_load_that_wants_an_fp8_tensor_is_refused_naming_file_tensor_and_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fp8.safetensors");
    write_fp8(&path);
    let source = SafetensorsSource::open(&path).unwrap();
    let device = Device::flex();
    // Strict: `b` is wanted (refused by name), `c` is unused.
    let err = pair(&device)
        .load_from_source(&source, &LoadOptions::new())
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(mismatch.unloadable.len(), 1, "{err}");
    assert!(mismatch.missing.is_empty(), "{err}");
    assert_eq!(mismatch.unused, ["c"], "{err}");
    let text = err.to_string();
    for needle in [
        path.display().to_string().as_str(),
        "tensor 'b'",
        "F8_E4M3",
        "FP8 is not loadable yet",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
}

#[test]
fn the_other_tensors_load_with_a_filter_or_allow_partial() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fp8.safetensors");
    write_fp8(&path);
    let source = SafetensorsSource::open(&path).unwrap();
    let device = Device::flex();

    // A filter that leaves the FP8 tensors out: `a` loads, `b` keeps its value.
    let filtered = LoadOptions::new().filter(|name| name == "a");
    let loaded = pair(&device).load_from_source(&source, &filtered).unwrap();
    assert_eq!(floats(&loaded.a.val()), [1.5, -2.0]);
    assert_eq!(
        loaded.b.val().into_data().try_to_vec::<f32>().unwrap(),
        [7.0; 4]
    );

    // allow_partial (and allow_unused for `c`): the FP8 parameter is left as it is.
    let partial = LoadOptions::new().allow_partial(true).allow_unused(true);
    let loaded = pair(&device).load_from_source(&source, &partial).unwrap();
    assert_eq!(floats(&loaded.a.val()), [1.5, -2.0]);
    assert_eq!(
        loaded.b.val().into_data().try_to_vec::<f32>().unwrap(),
        [7.0; 4]
    );
}

#[test]
fn a_conversion_of_a_file_with_fp8_is_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fp8.safetensors");
    write_fp8(&path);
    let out = dir.path().join("fp8.bpk");
    let err = safetensors_to_burnpack(&path, &out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor 'b'") && err.contains("F8_E4M3") && err.contains("FP8"),
        "{err}"
    );
    assert!(!out.exists(), "a partial pack was written");
    // Through any source's writer too (what `bpk convert` uses).
    let source = SafetensorsSource::open(&path).unwrap();
    let err = burnpack::Writer::from_source(&source)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tensor 'b'"), "{err}");
}

#[test]
fn a_sharded_index_routes_fp8_tensors_like_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<u8> = [3.0f32, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let b = vec![0x38u8; 4];
    let one = dir.path().join("model-00001-of-00002.safetensors");
    let two = dir.path().join("model-00002-of-00002.safetensors");
    safetensors::serialize_to_file(
        [("a", TensorView::new(Dtype::F32, vec![2], &a).unwrap())],
        None,
        &one,
    )
    .unwrap();
    safetensors::serialize_to_file(
        [(
            "b",
            TensorView::new(Dtype::F8_E4M3, vec![2, 2], &b).unwrap(),
        )],
        None,
        &two,
    )
    .unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    let write_index = |b_shard: &str| {
        let json = serde_json::json!({
            "metadata": {},
            "weight_map": {"a": "model-00001-of-00002.safetensors", "b": b_shard},
        });
        std::fs::write(&index, json.to_string()).unwrap();
    };
    write_index("model-00002-of-00002.safetensors");
    let source = SafetensorsSource::open(&index).unwrap();
    assert_eq!(source.tensors().len(), 1);
    assert_eq!(source.withheld()[0].name, "b");
    let partial = LoadOptions::new().allow_partial(true);
    let loaded = pair(&Device::flex())
        .load_from_source(&source, &partial)
        .unwrap();
    assert_eq!(floats(&loaded.a.val()), [3.0, 4.0]);
    // An index that routes the FP8 tensor to the wrong shard is still refused.
    write_index("model-00001-of-00002.safetensors");
    let err = SafetensorsSource::open(&index).unwrap_err().to_string();
    assert!(err.contains("'b'"), "{err}");
}

/// burn-store's `load_from` through `PackStore` over the source: the FP8 tensor a parameter
/// wants is named with why, not only reported missing; `allow_partial` loads the others.
#[cfg(feature = "store")]
#[test]
fn pack_store_names_the_fp8_tensor_a_parameter_wants() {
    use burn_store::ModuleSnapshot;
    use burnpack::store::PackStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fp8.safetensors");
    write_fp8(&path);
    let device = Device::flex();
    let store = || PackStore::from_source(SafetensorsSource::open(&path).unwrap());
    let err = pair(&device)
        .load_from(&mut store().allow_partial(false))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor 'b'")
            && err.contains("F8_E4M3")
            && err.contains("FP8 is not loadable yet"),
        "{err}"
    );
    let mut model = pair(&device);
    model.load_from(&mut store().allow_partial(true)).unwrap();
    assert_eq!(floats(&model.a.val()), [1.5, -2.0]);
}

/// The same files through the real `bpk`.
#[cfg(feature = "cli")]
mod bpk {
    use assert_cmd::Command;

    fn run(args: &[&str]) -> (i32, String, String) {
        let out = Command::cargo_bin("bpk")
            .unwrap()
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn inspect_lists_every_tensor_the_fp8_ones_with_their_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fp8.safetensors");
        super::write_fp8(&path);
        let file = path.to_str().unwrap();
        let (code, out, err) = run(&["inspect", file]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("not loadable: b F8_E4M3 [2, 2]"), "{out}");
        assert!(out.contains("not loadable: c F8_E5M2 [3]"), "{out}");
        assert!(out.contains("FP8 is not loadable yet"), "{out}");
        let (code, out, err) = run(&["inspect", "--json", file]);
        assert_eq!(code, 0, "{out}{err}");
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["tensors"].as_array().unwrap().len(), 1);
        let withheld = json["not_loadable"].as_array().unwrap();
        assert_eq!(withheld.len(), 2, "{out}");
        assert!(
            withheld[0].as_str().unwrap().starts_with("b F8_E4M3"),
            "{out}"
        );
    }

    #[test]
    fn verify_checks_the_others_and_names_the_fp8_ones_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fp8.safetensors");
        super::write_fp8(&path);
        let (code, out, err) = run(&["verify", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("OK"), "{out}");
        assert!(out.contains("note: not loadable: b F8_E4M3"), "{out}");
    }

    #[test]
    fn convert_refuses_the_file_naming_the_fp8_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fp8.safetensors");
        super::write_fp8(&path);
        let out_path = dir.path().join("fp8.bpk");
        let (code, out, err) = run(&[
            "convert",
            path.to_str().unwrap(),
            out_path.to_str().unwrap(),
        ]);
        assert_ne!(code, 0, "{out}{err}");
        assert!(err.contains("'b'") && err.contains("F8_E4M3"), "{err}");
        assert!(!out_path.exists());
    }

    /// `diff` compares FP8 tensors too: by their bytes as stored where both files hold one
    /// of the same dtype and shape, by dtype against a tensor of another one.
    #[test]
    fn diff_compares_fp8_tensors_as_stored() {
        use safetensors::Dtype;
        use safetensors::tensor::TensorView;
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, b: &[u8], dtype: Dtype| {
            let path = dir.path().join(name);
            let a = [0u8; 8];
            let views = [
                ("a", TensorView::new(Dtype::F32, vec![2], &a).unwrap()),
                ("b", TensorView::new(dtype, vec![2, 2], b).unwrap()),
            ];
            safetensors::serialize_to_file(views, None, &path).unwrap();
            path.to_str().unwrap().to_string()
        };
        let one = write("one.safetensors", &[0x38, 0x40, 0x44, 0x48], Dtype::F8_E4M3);
        let same = write(
            "same.safetensors",
            &[0x38, 0x40, 0x44, 0x48],
            Dtype::F8_E4M3,
        );
        let other = write(
            "other.safetensors",
            &[0x38, 0x40, 0x44, 0x49],
            Dtype::F8_E4M3,
        );
        let e5m2 = write(
            "e5m2.safetensors",
            &[0x38, 0x40, 0x44, 0x48],
            Dtype::F8_E5M2,
        );
        let (code, out, err) = run(&["diff", &one, &same]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("2 tensors with identical values"), "{out}");
        let (code, out, err) = run(&["diff", &one, &other]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains("b: bytes differ"), "{out}");
        let (code, out, err) = run(&["diff", &one, &e5m2]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains("F8_E4M3") && out.contains("F8_E5M2"), "{out}");
        assert!(out.contains("1 in dtype or shape"), "{out}");
    }
}
