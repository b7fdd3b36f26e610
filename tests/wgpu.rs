//! wgpu: loading from a mapped file onto the device, saving from the device, cross-device
//! round trips. Runs with `--features wgpu`; CI installs Mesa's software Vulkan driver
//! (lavapipe). Without an adapter the tests fail in CI and are skipped, with the reason
//! printed, elsewhere.
#![cfg(feature = "wgpu")]

mod common;

use burn::module::{Module, Param, ParamId};
use burn::tensor::{Bool, DType, Device, DeviceKind, Int, Tensor, TensorData};
use burnpack::module::{DTypePolicy, LoadOptions, ModuleError, PackModule};
use burnpack::read::Reader;
use common::Spec;

fn gpu() -> Option<Device> {
    let device = Device::wgpu(DeviceKind::DefaultDevice);
    let probe = std::panic::catch_unwind(|| {
        Tensor::<1>::from_data([1.0f32, 2.0], &device)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    });
    match probe {
        Ok(v) if v == [1.0, 2.0] => Some(device),
        other => {
            let reason = format!(
                "no usable wgpu adapter ({:?})",
                other.map_err(|_| "panicked")
            );
            common::skip(&format!("the wgpu tests: {reason}"));
            None
        }
    }
}

#[derive(Module, Debug)]
struct Mixed {
    floats: Param<Tensor<2>>,
    halves: Option<Param<Tensor<1>>>,
    ints: Param<Tensor<1, Int>>,
    flags: Param<Tensor<1, Bool>>,
}

/// A model on `device` holding what `target` supports.
fn mixed(device: &Device, target: &Device, scale: f32) -> Mixed {
    let half = target.supports_dtype(DType::F16).then(|| {
        Param::initialized(
            ParamId::new(),
            Tensor::from_data([0.5f32 * scale, -1.5, 2.25], (device, DType::F16)),
        )
    });
    Mixed {
        floats: Param::from_data([[1.0f32 * scale, -2.0], [3.5, 4.25]], device),
        halves: half,
        ints: Param::initialized(
            ParamId::new(),
            Tensor::from_data([7i32, -3, 11], (device, DType::I32)),
        ),
        flags: Param::initialized(
            ParamId::new(),
            Tensor::from_data([true, false, true], device),
        ),
    }
}

#[test]
fn loads_from_the_mapping_onto_the_device_with_the_files_values() {
    let Some(gpu) = gpu() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    mixed(&Device::flex(), &gpu, 1.0).save_pack(&path).unwrap();
    let loaded = mixed(&gpu, &gpu, 0.0).load_pack(&path).unwrap();
    let reader = Reader::open(&path).unwrap();
    let check = |name: &str, data: burn::tensor::TensorData, device: Device| {
        let info = reader.tensor(name).unwrap();
        assert_eq!(data.dtype(), info.dtype(), "{name}");
        assert_eq!(data.as_bytes(), &reader.read(info).unwrap()[..], "{name}");
        assert_eq!(device, gpu, "{name} is on the GPU");
    };
    check(
        "floats",
        loaded.floats.val().into_data(),
        loaded.floats.val().device(),
    );
    check(
        "ints",
        loaded.ints.val().into_data(),
        loaded.ints.val().device(),
    );
    if let Some(h) = &loaded.halves {
        check("halves", h.val().into_data(), h.val().device());
    }
    let flags = loaded
        .flags
        .val()
        .into_data()
        .convert::<bool>()
        .try_to_vec::<bool>()
        .unwrap();
    assert_eq!(flags, [true, false, true]);
    assert_eq!(
        loaded.floats.id,
        Mixed::load_pack(mixed(&gpu, &gpu, 0.0), &path)
            .unwrap()
            .floats
            .id
    );
}

#[test]
fn saving_from_the_device_writes_the_device_values() {
    let Some(gpu) = gpu() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.bpk");
    let model = mixed(&gpu, &gpu, 3.0);
    model.save_pack(&path).unwrap();
    let reader = Reader::open(&path).unwrap();
    assert_eq!(reader.verify_all().unwrap(), reader.tensors().len());
    assert_eq!(
        &reader.bytes("floats").unwrap()[..],
        model.floats.val().into_data().as_bytes()
    );
    assert_eq!(
        &reader.bytes("ints").unwrap()[..],
        model.ints.val().into_data().as_bytes()
    );
    assert_eq!(
        reader.tensor("floats").unwrap().param_id(),
        Some(model.floats.id.val())
    );
}

#[test]
fn flex_to_wgpu_to_ndarray_round_trips_are_byte_identical() {
    let Some(gpu) = gpu() else { return };
    #[derive(Module, Debug)]
    struct Plain {
        a: burn::nn::Linear,
        b: burn::nn::Linear,
    }
    let plain = |d: &Device| Plain {
        a: burn::nn::LinearConfig::new(8, 16).init(d),
        b: burn::nn::LinearConfig::new(16, 4).init(d),
    };
    let dir = tempfile::tempdir().unwrap();
    let (on_flex, on_gpu, on_ndarray) = (
        dir.path().join("flex.bpk"),
        dir.path().join("gpu.bpk"),
        dir.path().join("ndarray.bpk"),
    );
    plain(&Device::flex()).save_pack(&on_flex).unwrap();
    plain(&gpu)
        .load_pack(&on_flex)
        .unwrap()
        .save_pack(&on_gpu)
        .unwrap();
    #[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported and tested
    let ndarray = Device::ndarray();
    plain(&ndarray)
        .load_pack(&on_gpu)
        .unwrap()
        .save_pack(&on_ndarray)
        .unwrap();
    let bytes = |p: &std::path::Path| std::fs::read(p).unwrap();
    assert_eq!(bytes(&on_flex), bytes(&on_gpu));
    assert_eq!(bytes(&on_gpu), bytes(&on_ndarray));
}

/// One rank-2 parameter per spec, grouped by tensor kind, named `floats.N`, `ints.N`,
/// `bools.N` in spec order.
#[derive(Module, Debug)]
struct Kinds {
    floats: Vec<Param<Tensor<2>>>,
    ints: Vec<Param<Tensor<2, Int>>>,
    bools: Vec<Param<Tensor<2, Bool>>>,
}

/// Whether `dtype` belongs in a float tensor (quantized ones included).
fn is_float(dtype: DType) -> bool {
    dtype.is_float() || matches!(dtype, DType::QFloat(_))
}

/// Renames every spec after the `Kinds` field its tensor kind belongs to.
fn by_kind(specs: Vec<Spec>) -> Vec<Spec> {
    let mut counts = [0usize; 3];
    specs
        .into_iter()
        .map(|mut spec| {
            let (k, field) = match spec.dtype {
                DType::Bool(_) => (2, "bools"),
                d if is_float(d) => (0, "floats"),
                _ => (1, "ints"),
            };
            spec.name = format!("{field}.{}", counts[k]);
            counts[k] += 1;
            spec
        })
        .collect()
}

/// A `Kinds` on `device` with zero-filled parameters shaped like `specs`.
fn kinds(specs: &[Spec], device: &Device) -> Kinds {
    let shape = |s: &Spec| [s.shape[0], s.shape[1]];
    let of = |field: &'static str| specs.iter().filter(move |s| s.name.starts_with(field));
    Kinds {
        floats: of("floats.")
            .map(|s| Param::initialized(ParamId::new(), Tensor::zeros(shape(s), device)))
            .collect(),
        ints: of("ints.")
            .map(|s| Param::initialized(ParamId::new(), Tensor::zeros(shape(s), device)))
            .collect(),
        bools: of("bools.")
            .map(|s| {
                Param::initialized(
                    ParamId::new(),
                    Tensor::<2, Int>::zeros(shape(s), device).bool(),
                )
            })
            .collect(),
    }
}

fn write(specs: &[Spec], path: &std::path::Path) {
    burnpack::Writer::new(specs.iter().map(Spec::entry).collect())
        .write_to_file(path)
        .unwrap();
}

/// A float parameter's values as the device holds them. A quantized tensor is dequantized
/// on the device first: Burn 0.22.1's wgpu `q_into_data` trips a debug assertion in cubecl's
/// `Bytes::reserve` ("capacity must be a multiple of alignment") when reading the packed
/// bytes back, so its values are compared instead of its bytes.
fn read_back(tensor: &Tensor<2>) -> TensorData {
    match tensor.dtype() {
        DType::QFloat(_) => tensor.clone().dequantize().into_data(),
        _ => tensor.clone().into_data(),
    }
}

/// The f32 values of a `common::qfloat()` spec (Q8F, symmetric, one tensor-wide scale):
/// packed i8 values, then the f32 scale.
fn dequantized(spec: &Spec) -> Vec<u8> {
    let (values, scale) = spec.data.split_at(spec.data.len() - 4);
    let scale = f32::from_le_bytes(scale.try_into().unwrap());
    values
        .iter()
        .flat_map(|&q| (f32::from(q as i8) * scale).to_le_bytes())
        .collect()
}

/// Whether Burn itself, without this crate, builds `spec` on `device`: `supports_dtype` can
/// say yes to a dtype the backend's `from_data` refuses (Flex32 on wgpu in Burn 0.22).
fn burn_takes(spec: &Spec, device: &Device) -> bool {
    // Burn's own input is aligned, as a mapped window is.
    let data = || TensorData::from_bytes(aligned(&spec.data), spec.shape.clone(), spec.dtype);
    let options = (device, spec.dtype);
    device.supports_dtype(spec.dtype)
        && std::panic::catch_unwind(|| {
            if is_float(spec.dtype) {
                read_back(&Tensor::<2>::from_data(data(), options));
            } else {
                Tensor::<2, Int>::from_data(data(), options).into_data();
            }
        })
        .is_ok()
}

/// `data` copied into memory aligned to the largest power of two (up to 8) dividing its length.
fn aligned(data: &[u8]) -> burn::tensor::Bytes {
    use burn::tensor::Bytes;
    match data.len() {
        n if n % 8 == 0 => Bytes::from_elems(bytemuck::pod_collect_to_vec::<u8, u64>(data)),
        n if n % 4 == 0 => Bytes::from_elems(bytemuck::pod_collect_to_vec::<u8, u32>(data)),
        n if n % 2 == 0 => Bytes::from_elems(bytemuck::pod_collect_to_vec::<u8, u16>(data)),
        _ => Bytes::from_elems(data.to_vec()),
    }
}

/// Every rank-2 tensor of `common::every_dtype` (all of Burn's dtypes, a quantized one and an
/// empty one), split by whether `device` can hold its dtype. Booleans always count as held:
/// they take the device's storage.
fn split_by_support(device: &Device) -> (Vec<Spec>, Vec<Spec>) {
    let specs = common::every_dtype()
        .into_iter()
        .filter(|s| s.shape.len() == 2)
        .collect::<Vec<_>>();
    let (held, not): (Vec<_>, Vec<_>) = specs
        .into_iter()
        .partition(|s| s.dtype.is_bool() || burn_takes(s, device));
    (by_kind(held), by_kind(not))
}

#[test]
fn every_dtype_the_device_holds_loads_with_the_files_bytes() {
    let Some(gpu) = gpu() else { return };
    let (held, _) = split_by_support(&gpu);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dtypes.bpk");
    write(&held, &path);
    let loaded = kinds(&held, &gpu).load_pack(&path).unwrap();
    let named = |field: &str, data: Vec<TensorData>| {
        data.into_iter()
            .enumerate()
            .map(|(i, d)| (format!("{field}.{i}"), d))
            .collect::<Vec<_>>()
    };
    let mut data = named(
        "floats",
        loaded.floats.iter().map(|p| read_back(&p.val())).collect(),
    );
    data.extend(named(
        "ints",
        loaded.ints.iter().map(|p| p.val().into_data()).collect(),
    ));
    data.extend(named(
        "bools",
        loaded.bools.iter().map(|p| p.val().into_data()).collect(),
    ));
    assert_eq!(data.len(), held.len());
    let mut seen = Vec::new();
    for (name, data) in data {
        let spec = held.iter().find(|s| s.name == name).unwrap();
        let expected = match spec.dtype {
            // Compared by value: see `read_back`.
            DType::QFloat(_) => dequantized(spec),
            _ => spec.data.clone(),
        };
        // Booleans may have taken the device's storage: compare them in the file's.
        let data = if spec.dtype.is_bool() {
            data.convert_dtype(spec.dtype)
        } else {
            data
        };
        if !matches!(spec.dtype, DType::QFloat(_)) {
            assert_eq!(data.dtype(), spec.dtype, "{name}");
        }
        assert_eq!(data.as_bytes(), &expected[..], "{name} ({:?})", spec.dtype);
        seen.push(spec.dtype);
    }
    eprintln!("{:?} held and loaded exactly: {seen:?}", gpu);
    // At least the dtypes every wgpu adapter has.
    for dtype in [DType::F32, DType::I32, DType::U32] {
        assert!(seen.contains(&dtype), "{dtype:?} was not covered");
    }
}

/// A pack of the tensors `device` cannot hold (`split_by_support`), in a temporary
/// directory; `None`, with a line saying so, if it holds them all.
fn refused_pack(device: &Device) -> Option<(tempfile::TempDir, std::path::PathBuf, Vec<Spec>)> {
    let (_, not) = split_by_support(device);
    if not.is_empty() {
        eprintln!("{device:?} holds every dtype: nothing is refused");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refused.bpk");
    write(&not, &path);
    Some((dir, path, not))
}

#[test]
fn every_dtype_the_device_cannot_hold_is_named_in_one_error() {
    let Some(gpu) = gpu() else { return };
    let Some((_dir, path, not)) = refused_pack(&gpu) else {
        return;
    };
    let err = kinds(&not, &gpu).load_pack(&path).unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}")
    };
    let mut failed: Vec<&str> = mismatch.failed.iter().map(|(p, _)| p.as_str()).collect();
    failed.sort_unstable();
    let mut expected: Vec<&str> = not.iter().map(|s| s.name.as_str()).collect();
    expected.sort_unstable();
    assert_eq!(failed, expected, "{err}");
    for spec in &not {
        assert!(
            err.to_string()
                .contains(&format!("{:?} is not supported", spec.dtype)),
            "{} ({:?}): {err}",
            spec.name,
            spec.dtype
        );
    }
    eprintln!("refused as expected: {err}");
}

#[test]
fn refused_dtypes_load_under_the_documented_cast_policies() {
    let Some(gpu) = gpu() else { return };
    let Some((_dir, path, not)) = refused_pack(&gpu) else {
        return;
    };
    // Floats go to F32 (`CastFloatsTo`), integers to the module's own dtype (`CastToModule`
    // casts floats too: the module's floats are F32 here).
    for (policy, with_ints) in [
        (DTypePolicy::CastFloatsTo(DType::F32), false),
        (DTypePolicy::CastToModule, true),
    ] {
        let model = kinds(&not, &gpu);
        let ints_dtype = model.ints.first().map(|p| p.val().dtype());
        let options = LoadOptions::new().dtype(policy).allow_partial(!with_ints);
        let options = match with_ints {
            true => options,
            // Integers are not cast by `CastFloatsTo`: leave them out.
            false => options.filter(|name: &str| name.starts_with("floats.")),
        };
        let loaded = model.load_pack_with(&path, &options).unwrap();
        let mut checked = 0;
        for (i, p) in loaded.floats.iter().enumerate() {
            let spec = not
                .iter()
                .find(|s| s.name == format!("floats.{i}"))
                .unwrap();
            let file =
                TensorData::from_bytes_vec(spec.data.clone(), spec.shape.clone(), spec.dtype);
            assert_eq!(
                p.val().into_data(),
                file.convert_dtype(DType::F32),
                "{}",
                spec.name
            );
            checked += 1;
        }
        if with_ints {
            for (i, p) in loaded.ints.iter().enumerate() {
                let spec = not.iter().find(|s| s.name == format!("ints.{i}")).unwrap();
                let file =
                    TensorData::from_bytes_vec(spec.data.clone(), spec.shape.clone(), spec.dtype);
                let dtype = ints_dtype.unwrap();
                assert_eq!(
                    p.val().into_data(),
                    file.convert_dtype(dtype),
                    "{}",
                    spec.name
                );
                checked += 1;
            }
        }
        assert!(checked > 0);
        eprintln!("{policy:?}: {checked} refused tensors loaded by cast");
    }
}

#[derive(Module, Debug)]
struct QuantLinear {
    linear: burn::nn::Linear,
}

#[test]
fn a_quantized_linear_loads_onto_the_device_as_a_module_parameter() {
    let Some(gpu) = gpu() else { return };
    // Burn's default scheme (Q8F, symmetric, packed into u32 words, one scale), which wgpu
    // holds and dequantizes. (Flex quantizes into the native store, which Burn 0.22's wgpu
    // holds but cannot dequantize: "Q8F is not supported for native quantization".)
    let mut data = common::pattern(11, 12);
    data.extend_from_slice(&0.25f32.to_le_bytes());
    let spec = Spec::with_data("linear.weight", common::qfloat(), &[3, 4], Some(5), data);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.bpk");
    write(std::slice::from_ref(&spec), &path);

    let loaded = QuantLinear {
        linear: burn::nn::LinearConfig::new(3, 4)
            .with_bias(false)
            .init(&gpu),
    }
    .load_pack(&path)
    .unwrap();
    let weight = loaded.linear.weight.val();
    assert_eq!(weight.dtype(), spec.dtype);
    assert_eq!(
        read_back(&weight).into_bytes().to_vec(),
        dequantized(&spec),
        "values dequantized on the device"
    );
    assert_eq!(loaded.linear.weight.id, ParamId::from(5));
}
