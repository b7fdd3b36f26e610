//! Conventions as values: a user-written one, `PytorchConvention` given as a value against
//! `pytorch(true)`, and the options that only apply where this crate opens the file, refused
//! by `load_from_source` instead of being ignored.

mod common;

use std::borrow::Cow;

use burn::module::{Module, Param};
use burn::nn::{BatchNorm, BatchNormConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Bytes, DType, Device, Tensor};
use burnpack::format::{Limits, TensorInfo};
use burnpack::interop::safetensors::{SafetensorsSource, save_safetensors};
use burnpack::module::{LoadOptions, ModuleError, PackModule};
use burnpack::read::Reader;
use burnpack::source::{Convention, DimOrder, ParamPlace, PytorchConvention};
use burnpack::{Entry, Writer};
use common::model::{Perturb, snapshot};

#[derive(Module, Debug)]
struct Inner {
    fc: Linear,
    norm: LayerNorm,
}

impl Inner {
    fn new(device: &Device) -> Self {
        Self {
            fc: LinearConfig::new(3, 2).init(device),
            norm: LayerNormConfig::new(2).init(device),
        }
    }
}

/// A checkpoint that wraps the model under `model.`.
#[derive(Module, Debug)]
struct Wrapped {
    model: Inner,
    step: Param<Tensor<1>>,
}

/// Tensors named `model.<path>`, nothing transposed; `step` is a known extra.
#[derive(Debug)]
struct Prefixed;

impl Convention for Prefixed {
    fn source_name<'n>(&self, name: &'n str) -> Cow<'n, str> {
        Cow::Borrowed(name.strip_prefix("model.").unwrap_or(name))
    }

    fn ignores(&self, name: &str) -> bool {
        name == "step"
    }
}

/// The values of a module by path, without parameter ids.
fn values<M: Module>(m: &M) -> Vec<(String, DType, Vec<usize>, Vec<u8>)> {
    snapshot(m)
        .into_iter()
        .map(|(path, (_, dtype, shape, bytes))| (path, dtype, shape, bytes))
        .collect()
}

#[test]
fn a_user_written_convention_loads_from_safetensors_and_packs() {
    let device = Device::flex();
    let wrapped = Wrapped {
        model: Inner::new(&device).map(&mut Perturb(0.5)),
        step: Param::from_data([7.0], &device),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    save_safetensors(&wrapped, &path, None).unwrap();
    let safetensors = SafetensorsSource::open(&path).unwrap();
    let pack = Reader::from_bytes(wrapped.to_pack_bytes().unwrap()).unwrap();

    for source in [
        &safetensors as &dyn burnpack::source::TensorSource,
        &pack as &dyn burnpack::source::TensorSource,
    ] {
        // Without the convention: nothing matches.
        let err = Inner::new(&device)
            .load_from_source(source, &LoadOptions::new())
            .unwrap_err();
        let ModuleError::Mismatch { mismatch, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(mismatch.missing.len(), 4, "{mismatch:?}");

        let loaded = Inner::new(&device)
            .load_from_source(source, &LoadOptions::new().convention(Prefixed))
            .unwrap();
        assert_eq!(values(&loaded), values(&wrapped.model));
        // Nothing transposed: the `[in, out]` weight is loaded as stored.
        assert_eq!(loaded.fc.weight.val().dims(), [3, 2]);
    }
}

/// Every rank-3 tensor stored with its dimensions reversed (as GGUF lists them).
#[derive(Debug)]
struct Reversing;

impl Convention for Reversing {
    fn dim_order(&self, param: &ParamPlace<'_>, _tensor: &TensorInfo) -> DimOrder {
        if param.rank() == 3 {
            DimOrder::Reversed
        } else {
            DimOrder::AsStored
        }
    }
}

#[derive(Module, Debug)]
struct Cube {
    w: Param<Tensor<3>>,
    b: Param<Tensor<1>>,
}

#[test]
fn a_convention_reverses_the_dimensions_of_any_rank() {
    let stored: Vec<f32> = (0..24u8).map(f32::from).collect();
    let pack = Writer::new(vec![
        Entry::resident(
            "w",
            DType::F32,
            vec![2, 3, 4],
            Bytes::from_elems(stored.clone()),
        ),
        Entry::resident(
            "b",
            DType::F32,
            vec![2],
            Bytes::from_elems(vec![1.0f32, 2.0]),
        ),
    ])
    .into_bytes()
    .unwrap();
    let reader = Reader::from_bytes(pack).unwrap();
    #[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported
    for device in [Device::flex(), Device::ndarray()] {
        let fresh = || Cube {
            w: Param::from_tensor(Tensor::zeros([4, 3, 2], &device)),
            b: Param::from_data([0.0, 0.0], &device),
        };
        let cube = fresh()
            .load_from_source(&reader, &LoadOptions::new().convention(Reversing))
            .unwrap();
        let expected = Tensor::<3>::from_data(
            burn::tensor::TensorData::new(stored.clone(), [2, 3, 4]),
            &device,
        )
        .permute([2, 1, 0]);
        assert_eq!(cube.w.val().dims(), [4, 3, 2]);
        assert_eq!(
            cube.w.val().into_data().try_to_vec::<f32>().unwrap(),
            expected.into_data().try_to_vec::<f32>().unwrap(),
            "{device:?}"
        );
        assert_eq!(
            cube.b.val().into_data().try_to_vec::<f32>().unwrap(),
            [1.0, 2.0]
        );
        // Without it, the shape is wrong, and reported as stored.
        let err = fresh()
            .load_from_source(&reader, &LoadOptions::new())
            .unwrap_err();
        let ModuleError::Mismatch { mismatch, .. } = err else {
            panic!("{err}")
        };
        assert_eq!(mismatch.shapes[0].found, [2, 3, 4]);
    }
}

#[derive(Module, Debug)]
struct Torchy {
    fc: Linear,
    bn: BatchNorm,
    norm: LayerNorm,
}

impl Torchy {
    fn new(device: &Device) -> Self {
        Self {
            fc: LinearConfig::new(3, 2).init(device),
            bn: BatchNormConfig::new(2).init(device),
            norm: LayerNormConfig::new(2).init(device),
        }
    }
}

fn f32s(name: &str, shape: Vec<usize>, values: &[f32]) -> Entry {
    Entry::resident(name, DType::F32, shape, Bytes::from_elems(values.to_vec()))
}

/// A PyTorch state dict of `Torchy`: `[out, in]` weights, norms' `weight` / `bias`,
/// BatchNorm's `num_batches_tracked`.
fn torch_pack(with_norm_bias: bool) -> Reader {
    let mut entries = vec![
        f32s("fc.weight", vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        f32s("fc.bias", vec![2], &[0.5, -0.5]),
        f32s("bn.weight", vec![2], &[1.5, 2.5]),
        f32s("bn.bias", vec![2], &[0.1, 0.2]),
        f32s("bn.running_mean", vec![2], &[0.3, 0.4]),
        f32s("bn.running_var", vec![2], &[0.9, 1.1]),
        Entry::resident(
            "bn.num_batches_tracked",
            DType::I64,
            vec![],
            Bytes::from_elems(vec![12i64]),
        ),
        f32s("norm.weight", vec![2], &[3.0, 4.0]),
    ];
    if with_norm_bias {
        entries.push(f32s("norm.bias", vec![2], &[5.0, 6.0]));
    }
    Reader::from_bytes(Writer::new(entries).into_bytes().unwrap()).unwrap()
}

#[test]
fn pytorch_convention_as_a_value_is_pytorch_true() {
    let by_flag = LoadOptions::new().pytorch(true);
    let by_value = LoadOptions::new().convention(PytorchConvention);
    #[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported
    for device in [Device::flex(), Device::ndarray()] {
        let reader = torch_pack(true);
        let (a, report_a) = Torchy::new(&device)
            .load_from_source_with_report(&reader, &by_flag)
            .unwrap();
        let (b, report_b) = Torchy::new(&device)
            .load_from_source_with_report(&reader, &by_value)
            .unwrap();
        assert_eq!(values(&a), values(&b), "{device:?}");
        assert_eq!(report_a.to_string(), report_b.to_string(), "{device:?}");
        assert_eq!(b.fc.weight.val().dims(), [3, 2]);
        assert_eq!(
            b.fc.weight.val().into_data().try_to_vec::<f32>().unwrap(),
            [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        assert_eq!(
            b.bn.gamma.val().into_data().try_to_vec::<f32>().unwrap(),
            [1.5, 2.5]
        );
        assert_eq!(
            b.norm.gamma.val().into_data().try_to_vec::<f32>().unwrap(),
            [3.0, 4.0]
        );

        // The same problems either way: a norm's missing bias, under Burn's name.
        let reader = torch_pack(false);
        let errors: Vec<String> = [&by_flag, &by_value]
            .into_iter()
            .map(|options| {
                let err = Torchy::new(&device)
                    .load_from_source(&reader, options)
                    .unwrap_err();
                let ModuleError::Mismatch { mismatch, .. } = &err else {
                    panic!("{err}")
                };
                assert_eq!(mismatch.missing, ["norm.beta"]);
                assert!(mismatch.unused.is_empty(), "{mismatch:?}");
                err.to_string()
            })
            .collect();
        assert_eq!(errors[0], errors[1]);
    }
    // `pytorch(false)` removes the convention.
    let reader = torch_pack(true);
    let err = Torchy::new(&Device::flex())
        .load_from_source(&reader, &by_value.clone().pytorch(false))
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = err else {
        panic!("{err}")
    };
    assert!(
        mismatch
            .unused
            .contains(&"bn.num_batches_tracked".to_string())
    );
}

fn tiny_pack() -> Bytes {
    Writer::new(vec![f32s("b", vec![2], &[1.0, 2.0])])
        .into_bytes()
        .unwrap()
}

#[derive(Module, Debug)]
struct Tiny {
    b: Param<Tensor<1>>,
}

fn tiny(device: &Device) -> Tiny {
    Tiny {
        b: Param::from_data([0.0, 0.0], device),
    }
}

/// The error `load_from_source` (and its report variant) gives for `options`.
fn refused(options: &LoadOptions) -> (&'static str, String) {
    let device = Device::flex();
    let reader = Reader::from_bytes(tiny_pack()).unwrap();
    let err = tiny(&device)
        .load_from_source_with_report(&reader, options)
        .unwrap_err();
    let message = err.to_string();
    let ModuleError::Option { option, .. } = err else {
        panic!("{err}")
    };
    let again = tiny(&device)
        .load_from_source(&reader, options)
        .unwrap_err();
    assert_eq!(again.to_string(), message);
    (option, message)
}

#[test]
fn limits_given_to_load_from_source_are_refused() {
    let (option, message) = refused(&LoadOptions::new().limits(Limits::trusted()));
    assert_eq!(option, "limits");
    assert!(message.contains("load_pack"), "{message}");
    assert!(message.contains("when it is opened"), "{message}");
    // Where this crate opens the file, they apply as before.
    let device = Device::flex();
    let loaded = tiny(&device)
        .load_pack_bytes(tiny_pack(), &LoadOptions::new().limits(Limits::trusted()))
        .unwrap();
    assert_eq!(
        loaded.b.val().into_data().try_to_vec::<f32>().unwrap(),
        [1.0, 2.0]
    );
    let small = Limits::default().with_max_tensor_size(4);
    let err = tiny(&device)
        .load_pack_bytes(tiny_pack(), &LoadOptions::new().limits(small))
        .unwrap_err();
    assert!(matches!(err, ModuleError::Read(_)), "{err}");
}

#[test]
fn buffered_given_to_load_from_source_is_refused() {
    for buffered in [true, false] {
        let (option, message) = refused(&LoadOptions::new().buffered(buffered));
        assert_eq!(option, "buffered");
        assert!(message.contains("load_pack"), "{message}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.bpk");
    std::fs::write(&path, &*tiny_pack()).unwrap();
    let loaded = tiny(&Device::flex())
        .load_pack_with(&path, &LoadOptions::new().buffered(true))
        .unwrap();
    assert_eq!(
        loaded.b.val().into_data().try_to_vec::<f32>().unwrap(),
        [1.0, 2.0]
    );
}
