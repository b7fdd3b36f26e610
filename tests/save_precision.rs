//! Save-time precision (`SaveOptions::float_dtype`): a module's float parameters written as
//! F16 / BF16 / F32, bit for bit what Burn's own `Tensor::cast` makes of them, ints, bools and
//! quantized parameters as they are, recorded in the metadata, through every save door
//! (module saves, `PackStore`, checkpoints, `PackCheckpointer`), and read by Burn's
//! `BurnpackStore`.

mod common;

use burn::module::{Module, ModuleVisitor, Param, Quantizer};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::quantization::{Calibration, QuantValue};
use burn::tensor::{Bool, Bytes, DType, Device, FloatDType, Int, Tensor, TensorData};
use burnpack::checkpoint::{Checkpoint, Progress, TrainingState};
use burnpack::format::FLOAT_DTYPE_KEY;
use burnpack::module::{DTypePolicy, LoadOptions, PackModule, SaveOptions};
use burnpack::read::Reader;
use burnpack::write::{Entry, WriteError, Writer};
use common::model::{Net, trained, trained_with};

/// Path -> (dtype, bytes) of a module's parameters, its floats as Burn casts them to `to`
/// (then, with `back`, to that dtype again: what a load into the module's dtype gives).
#[derive(Default)]
struct Cast {
    to: Option<FloatDType>,
    back: Option<FloatDType>,
    path: Vec<String>,
    out: std::collections::BTreeMap<String, (DType, Vec<u8>)>,
}

impl Cast {
    fn record(&mut self, data: TensorData) {
        self.out.insert(
            self.path.join("."),
            (data.dtype(), data.as_bytes().to_vec()),
        );
    }
}

impl ModuleVisitor for Cast {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let mut t = p.val();
        if let Some(to) = self.to {
            t = t.cast(to);
        }
        if let Some(back) = self.back {
            t = t.cast(back);
        }
        self.record(t.into_data());
    }
    fn visit_int<const D: usize>(&mut self, p: &Param<Tensor<D, Int>>) {
        self.record(p.val().into_data());
    }
    fn visit_bool<const D: usize>(&mut self, p: &Param<Tensor<D, Bool>>) {
        self.record(p.val().into_data());
    }
}

fn cast_of<M: Module>(model: &M, to: FloatDType, back: Option<FloatDType>) -> Cast {
    let mut cast = Cast {
        to: Some(to),
        back,
        ..Cast::default()
    };
    model.visit(&mut cast);
    cast
}

fn as_is<M: Module>(model: &M) -> std::collections::BTreeMap<String, (DType, Vec<u8>)> {
    let mut cast = Cast::default();
    model.visit(&mut cast);
    cast.out
}

/// The pack's tensors: name -> (dtype, bytes).
fn stored(reader: &Reader, prefix: &str) -> std::collections::BTreeMap<String, (DType, Vec<u8>)> {
    reader
        .tensors()
        .iter()
        .filter_map(|t| {
            let name = t.name().strip_prefix(prefix)?;
            Some((
                name.to_string(),
                (t.dtype(), reader.read(t).unwrap().to_vec()),
            ))
        })
        .collect()
}

const TARGETS: [(DType, FloatDType, &str); 3] = [
    (DType::F16, FloatDType::F16, "F16"),
    (DType::BF16, FloatDType::BF16, "BF16"),
    (DType::F32, FloatDType::F32, "F32"),
];

#[test]
fn an_f32_model_saved_as_f16_or_bf16_is_burns_own_cast_bit_for_bit_and_loads_back_into_f32() {
    let device = Device::flex();
    let model = trained_with(&device, false);
    let dir = tempfile::tempdir().unwrap();
    for (dtype, float, name) in TARGETS {
        let path = dir.path().join(format!("{name}.bpk"));
        let options = SaveOptions::new().float_dtype(dtype).unwrap();
        model.save_pack_with(&path, &options).unwrap();
        let reader = Reader::open(&path).unwrap();
        assert_eq!(reader.metadata()[FLOAT_DTYPE_KEY], name);
        // The file: every float Burn's cast of it, ints and bools untouched.
        let want = cast_of(&model, float, None).out;
        let got = stored(&reader, "");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (path, (dtype_want, bytes_want)) in &want {
            let (dtype_got, bytes_got) = &got[path];
            assert_eq!(dtype_got, dtype_want, "{path}");
            assert!(bytes_got == bytes_want, "{path}: not Burn's cast to {name}");
        }
        let original = as_is(&model);
        assert_eq!(got["counts"], original["counts"]);
        assert_eq!(got["mask"], original["mask"]);
        // Verified: the checksums are the cast bytes'.
        for info in reader.tensors() {
            reader.verify(info).unwrap();
        }

        // Loaded into an f32 model (the dtype policy casts back): the cast values, in f32.
        let load = LoadOptions::new().dtype(DTypePolicy::CastToModule);
        let back = trained_with(&device, false)
            .load_pack_with(&path, &load)
            .unwrap();
        let want = cast_of(&model, float, Some(FloatDType::F32)).out;
        let got = as_is(&back);
        for (path, (dtype_want, bytes_want)) in &want {
            assert_eq!(&got[path].0, dtype_want, "{path}");
            assert!(
                &got[path].1 == bytes_want,
                "{path}: load of the {name} file"
            );
        }
        if dtype != DType::F32 {
            // Something was rounded, so the test compares something.
            assert_ne!(got, as_is(&model), "{name}");
        }
    }
}

#[test]
fn half_parameters_and_f64_entries_cast_as_burn_casts_them() {
    let device = Device::flex();
    // A net with F16 and BF16 parameters beside its f32 ones: each float goes to the target.
    let model = trained(&device);
    for (dtype, float, name) in TARGETS {
        let options = SaveOptions::new().float_dtype(dtype).unwrap();
        let pack = model.pack_writer(&options).unwrap().into_bytes().unwrap();
        let got = stored(&Reader::from_bytes(pack).unwrap(), "");
        assert_eq!(got, cast_of(&model, float, None).out, "{name}");
    }
    // F64 (values that round differently through f32) straight to each target.
    let values = [
        0.1f64,
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        -1e300,
        3.0e-8,
        f64::NAN,
    ];
    let tensor: Tensor<1> =
        Tensor::from_data(TensorData::new(values.to_vec(), [5]), (&device, DType::F64));
    for (dtype, float, name) in TARGETS {
        let entry = Entry::resident("w", DType::F64, vec![5], Bytes::from_elems(values.to_vec()));
        let pack = Writer::new(vec![entry])
            .float_dtype(dtype)
            .unwrap()
            .into_bytes()
            .unwrap();
        let reader = Reader::from_bytes(pack).unwrap();
        let info = reader.tensor("w").unwrap();
        assert_eq!(info.dtype(), dtype);
        let burn = tensor.clone().cast(float).into_data();
        assert_eq!(
            reader.read(info).unwrap()[..],
            burn.as_bytes()[..],
            "{name}"
        );
    }
}

#[derive(Module, Debug)]
struct Quant {
    linear: Linear,
}

#[derive(Module, Debug)]
struct Mixed {
    quantized: Quant,
    plain: Linear,
}

#[test]
fn quantized_parameters_are_saved_as_they_are() {
    let device = Device::flex();
    let scheme = device
        .settings()
        .quantization
        .scheme
        .with_value(QuantValue::Q8S);
    let model = Mixed {
        quantized: Quant {
            linear: LinearConfig::new(16, 8).init(&device),
        }
        .quantize_weights(&mut Quantizer::new(Calibration::MinMax, scheme)),
        plain: LinearConfig::new(8, 4).init(&device),
    };
    let plain = model
        .pack_writer(&SaveOptions::new())
        .unwrap()
        .into_bytes()
        .unwrap();
    let options = SaveOptions::new().float_dtype(DType::F16).unwrap();
    let half = model.pack_writer(&options).unwrap().into_bytes().unwrap();
    let (plain, half) = (
        stored(&Reader::from_bytes(plain).unwrap(), ""),
        stored(&Reader::from_bytes(half).unwrap(), ""),
    );
    let weight = "quantized.linear.weight";
    assert!(
        matches!(half[weight].0, DType::QFloat(_)),
        "{:?}",
        half[weight].0
    );
    assert_eq!(half[weight], plain[weight]);
    assert_eq!(half["plain.weight"].0, DType::F16);
    let burn = model.plain.weight.val().cast(FloatDType::F16).into_data();
    assert_eq!(half["plain.weight"].1, burn.as_bytes());
}

#[test]
fn other_dtypes_are_refused_with_a_typed_error() {
    for dtype in [DType::F64, DType::I32, DType::U8, DType::I64] {
        let err = SaveOptions::new().float_dtype(dtype).unwrap_err();
        assert!(
            matches!(err, WriteError::FloatDtype { dtype: d } if d == dtype),
            "{err}"
        );
        assert!(err.to_string().contains("F16, BF16 and F32"), "{err}");
        assert!(Writer::new(Vec::new()).float_dtype(dtype).is_err());
    }
}

#[test]
fn burns_burnpack_store_reads_the_cast_file() {
    use burn::store::{BurnpackStore, ModuleSnapshot};
    let device = Device::flex();
    let model = trained_with(&device, false);
    let dir = tempfile::tempdir().unwrap();
    for (dtype, float, name) in TARGETS {
        let path = dir.path().join(format!("{name}.bpk"));
        model
            .save_pack_with(&path, &SaveOptions::new().float_dtype(dtype).unwrap())
            .unwrap();
        let mut loaded = Net::new_with(&device, false);
        let result = loaded
            .load_from(&mut BurnpackStore::from_file(&path))
            .unwrap();
        assert!(
            result.errors.is_empty() && result.missing.is_empty(),
            "{result:?}"
        );
        // Burn reads the cast values (in whichever float dtype its store hands them over).
        let want = cast_of(&model, float, Some(FloatDType::F32)).out;
        let got = cast_of(&loaded, FloatDType::F32, None).out;
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn every_save_door_casts_the_model() {
    let device = Device::flex();
    let model = trained_with(&device, false);
    let want = cast_of(&model, FloatDType::BF16, None).out;
    let options = SaveOptions::new().float_dtype(DType::BF16).unwrap();
    let dir = tempfile::tempdir().unwrap();

    // burn-store's door: `PackStore` with these save options.
    {
        use burn::store::ModuleSnapshot;
        let path = dir.path().join("store.bpk");
        let mut store = burnpack::store::PackStore::from_file(&path).save_options(options.clone());
        model.save_into(&mut store).unwrap();
        let reader = Reader::open(&path).unwrap();
        assert_eq!(stored(&reader, ""), want);
        assert_eq!(reader.metadata()[FLOAT_DTYPE_KEY], "BF16");
    }

    // A checkpoint: the model under `model.` cast, the optimizer's state as it is.
    let optim: burn::optim::ModuleOptimizer = burn::optim::AdamConfig::new().init();
    for incremental in [false, true] {
        let manager = burnpack::checkpoint::CheckpointManager::new(
            dir.path().join(format!("ckpt-{incremental}")),
        )
        .unwrap()
        .incremental(incremental);
        let state = TrainingState::new(&model, Progress::new(1, 5))
            .optimizer(&optim)
            .options(options.clone());
        manager.save(state).unwrap();
        let ckpt: Checkpoint = manager.latest().unwrap().unwrap();
        let reader = ckpt.reader();
        assert_eq!(reader.metadata()[FLOAT_DTYPE_KEY], "BF16");
        let back = ckpt
            .load_model_with(
                trained_with(&device, false),
                &LoadOptions::new().dtype(DTypePolicy::CastToModule),
            )
            .unwrap();
        assert_eq!(
            as_is(&back),
            cast_of(&model, FloatDType::BF16, Some(FloatDType::F32)).out
        );
        assert!(ckpt.has_optimizer());
    }

    // burn-train's door: `PackCheckpointer` with these options; the model part cast.
    {
        use burn::train::checkpoint::Checkpointer;
        let pack = burnpack::train::PackCheckpointer::new(dir.path().join("train"))
            .unwrap()
            .with_options(options.clone());
        Checkpointer::save(&pack, 1, model.clone().into_record()).unwrap();
        Checkpointer::save(&pack, 1, optim.to_record()).unwrap();
        let scheduler =
            burn::lr_scheduler::exponential::ExponentialLrSchedulerConfig::new(0.05, 0.8)
                .init()
                .unwrap();
        Checkpointer::save(&pack, 1, scheduler.to_record()).unwrap();
        let reader = Reader::open(pack.path_for(1)).unwrap();
        assert_eq!(reader.metadata()[FLOAT_DTYPE_KEY], "BF16");
        let model_part: Vec<_> = reader
            .tensors()
            .iter()
            .filter(|t| t.name().starts_with("model."))
            .collect();
        assert!(!model_part.is_empty());
        for t in model_part {
            assert!(
                matches!(
                    t.dtype(),
                    DType::BF16 | DType::I64 | DType::Bool(_) | DType::U8 | DType::I32
                ),
                "{}: {:?}",
                t.name(),
                t.dtype()
            );
        }
    }
}
