//! A file tensor must be of its parameter's kind (float, int, bool) before any backend sees
//! it; a backend that still refuses data keeps the user's stderr clean; quantized parameters
//! (which flex holds although `supports_dtype` says no) round trip on flex and ndarray, and
//! with Burn's `BurnpackStore` in both directions.

use std::process::Command;

use burn::module::{Module, Param, ParamId, Quantizer};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::quantization::{Calibration, QuantValue};
use burn::tensor::{Bool, Bytes, DType, Device, Int, Tensor};
use burnpack::module::{DTypePolicy, LoadOptions, ModuleError, PackModule};
use burnpack::source::TensorKind;
use burnpack::{Entry, Writer};

#[derive(Module, Debug)]
struct Kinds {
    f: Param<Tensor<1>>,
    i: Param<Tensor<1, Int>>,
    b: Param<Tensor<1, Bool>>,
}

impl Kinds {
    fn new(device: &Device) -> Self {
        Self {
            f: Param::from_data([0.5f32, 1.5, 2.5], device),
            i: Param::initialized(ParamId::new(), Tensor::from_data([1i32, 2, 3], device)),
            b: Param::initialized(
                ParamId::new(),
                Tensor::from_data([true, false, true], device),
            ),
        }
    }
}

#[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported and tested
fn devices() -> [Device; 2] {
    [Device::flex(), Device::ndarray()]
}

/// A pack whose `f` holds integers, `i` floats and `b` floats: every parameter of the wrong
/// kind, each with its file's exact byte length.
fn swapped_kinds() -> Bytes {
    let entry = |name: &str, dtype: DType, bytes: Vec<u8>| {
        Entry::resident(name, dtype, vec![3], Bytes::from_bytes_vec(bytes))
    };
    let ints: Vec<u8> = [7i32, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    let floats: Vec<u8> = [1.0f32, 0.0, 1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    Writer::new(vec![
        entry("f", DType::I32, ints),
        entry("i", DType::F32, floats.clone()),
        entry("b", DType::F32, floats),
    ])
    .into_bytes()
    .unwrap()
}

#[test]
fn a_tensor_of_another_kind_is_a_mismatch_naming_both_kinds_without_a_cast_hint() {
    for device in devices() {
        for policy in [
            DTypePolicy::AsStored,
            DTypePolicy::CastToModule,
            DTypePolicy::CastFloatsTo(DType::F32),
        ] {
            let err = Kinds::new(&device)
                .load_pack_bytes(swapped_kinds(), &LoadOptions::new().dtype(policy))
                .unwrap_err();
            let ModuleError::Mismatch { mismatch, .. } = &err else {
                panic!("{err}")
            };
            let kinds: Vec<_> = mismatch
                .kinds
                .iter()
                .map(|k| (k.path.as_str(), k.expected, k.found))
                .collect();
            assert_eq!(
                kinds,
                [
                    ("f", TensorKind::Float, DType::I32),
                    ("i", TensorKind::Int, DType::F32),
                    ("b", TensorKind::Bool, DType::F32),
                ],
                "{policy:?} on {device:?}"
            );
            assert!(mismatch.failed.is_empty(), "{err}");
            let message = err.to_string();
            assert!(
                message
                    .contains("f (the module has a float parameter, the file a int tensor of I32)"),
                "{message}"
            );
            assert!(
                !message.contains("Cast"),
                "no cast resolves a kind: {message}"
            );
        }
    }
}

#[test]
fn a_cast_policy_to_another_kind_is_refused_before_the_backend() {
    let device = Device::flex();
    let pack = Kinds::new(&device).to_pack_bytes().unwrap();
    let err = Kinds::new(&device)
        .load_pack_bytes(
            pack,
            &LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::I64)),
        )
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(mismatch.failed.len(), 1, "{err}");
    assert_eq!(mismatch.failed[0].0, "f");
    assert!(mismatch.failed[0].1.contains("cannot be cast"), "{err}");
}

/// Child side: a kind mismatch on each CPU backend and a save whose provider panics; the
/// parent checks that nothing reached stderr.
#[test]
fn quiet_child() {
    if std::env::var_os("BURNPACK_QUIET_CHILD").is_none() {
        return;
    }
    for device in devices() {
        let err = Kinds::new(&device)
            .load_pack_bytes(swapped_kinds(), &LoadOptions::new())
            .unwrap_err();
        println!("LOAD: {err}");
    }
    let entry = Entry::deferred("w", DType::U8, vec![1], 1, || panic!("provider exploded"));
    let err = Writer::new(vec![entry]).into_bytes().unwrap_err();
    println!("SAVE: {err}");
}

#[test]
fn refused_loads_and_panicking_providers_keep_stderr_clean() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["quiet_child", "--exact", "--test-threads=1", "--nocapture"])
        .env("BURNPACK_QUIET_CHILD", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.matches("LOAD: ").count(), 2, "{stdout}");
    assert!(stdout.contains("provider exploded"), "{stdout}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}

#[derive(Module, Debug)]
struct Quant {
    linear: Linear,
}

fn quantized(device: &Device) -> Quant {
    let scheme = device
        .settings()
        .quantization
        .scheme
        .with_value(QuantValue::Q8S);
    Quant {
        linear: LinearConfig::new(16, 8).init(device),
    }
    .quantize_weights(&mut Quantizer::new(Calibration::MinMax, scheme))
}

/// Each parameter's dtype and exact bytes (quantized: packed values, then scales).
fn values(model: &Quant) -> Vec<(DType, Vec<u8>)> {
    let pair = |data: burn::tensor::TensorData| (data.dtype(), data.as_bytes().to_vec());
    let bias = model.linear.bias.as_ref().unwrap().val();
    vec![
        pair(model.linear.weight.val().into_data()),
        pair(bias.into_data()),
    ]
}

#[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported and tested
#[test]
fn quantized_parameters_round_trip_on_flex_and_ndarray_and_with_burns_store() {
    use burn_store::{BurnpackStore, ModuleSnapshot};
    let dir = tempfile::tempdir().unwrap();
    for device in devices() {
        let model = quantized(&device);
        let expected = values(&model);
        assert!(
            matches!(expected[0].0, DType::QFloat(_)),
            "{:?}",
            expected[0].0
        );

        let ours = dir.path().join("ours.bpk");
        model.save_pack(&ours).unwrap();
        let theirs = dir.path().join("theirs.bpk");
        model
            .save_into(&mut BurnpackStore::from_file(&theirs).overwrite(true))
            .unwrap();
        let fresh = || Quant {
            linear: LinearConfig::new(16, 8).init(&device),
        };
        for file in [&ours, &theirs] {
            let loaded = fresh()
                .load_pack(file)
                .unwrap_or_else(|e| panic!("{} on {device:?}: {e}", file.display()));
            assert_eq!(
                values(&loaded),
                expected,
                "{} on {device:?}",
                file.display()
            );
            assert_eq!(loaded.linear.weight.id, model.linear.weight.id);
        }
        // Burn loads what this crate wrote.
        let mut burns = fresh();
        let result = burns.load_from(&mut BurnpackStore::from_file(&ours));
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(values(&burns), expected, "Burn reading ours on {device:?}");
    }
}
