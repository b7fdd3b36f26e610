//! Writes the Burn 0.21 record files that burnpack's legacy-record tests read, with Burn 0.21's
//! own recorders, and beside each file the values Burn 0.21 itself loads back from it.
//!
//! ```sh
//! cargo run --release --manifest-path tools/legacy-fixtures/Cargo.toml -- tests/data/legacy
//! ```
//!
//! Outputs (all small): `zoo.mpk`, `zoo.mpk.gz`, `zoo.json`, `zoo.json.gz` (full precision),
//! `zoo-half.mpk` (half precision settings: f16 floats), `zoo.bin` (bincode, which burnpack
//! refuses with an explanation), and `zoo.expected.json` / `zoo-half.expected.json`: every
//! parameter's path (as Burn 0.22 names it), parameter id, dtype, shape and values, read back
//! through `NamedMpkFileRecorder::load` into a fresh module. `quant.mpk` and
//! `quant.expected.json`: quantized linears (per-tensor and per-block schemes) and the values
//! Burn 0.21 dequantizes them to.
//!
//! For burnpack's `legacy` benchmark (`cargo bench --bench legacy`): `big DIR LAYERS` writes
//! `big.mpk` / `big.mpk.gz` of LAYERS square 1024 layers, and `load FILE LAYERS` times Burn
//! 0.21's own recorder loading one of them (one measurement a process). `quant DIR` and
//! `schedulers DIR` write the quantized and the LR scheduler fixtures alone.

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, NdArray};
use burn::lr_scheduler::LrScheduler;
use burn::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::lr_scheduler::exponential::ExponentialLrSchedulerConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig,
};
use burn::prelude::Backend;
use burn::record::{
    BinFileRecorder, FullPrecisionSettings, HalfPrecisionSettings, JsonGzFileRecorder,
    NamedMpkFileRecorder, NamedMpkGzFileRecorder, PrecisionSettings, PrettyJsonFileRecorder,
    Recorder,
};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use serde_json::{Value, json};

type B = NdArray<f32>;
type AB = Autodiff<NdArray<f32>>;

/// A small model trained for the checkpoint fixtures.
#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    a: Linear<B>,
    b: Linear<B>,
}

/// The same batches on every run: inputs of 3 features, one target.
fn batch<B: Backend>(step: usize, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let xs: Vec<f32> = (0..12)
        .map(|i| ((i * 5 + step * 3) % 11) as f32 / 11.0 - 0.5)
        .collect();
    let ys: Vec<f32> = xs.chunks(3).map(|r| r[0] - 2.0 * r[1] + r[2] * r[0]).collect();
    (
        Tensor::from_data(TensorData::new(xs, [4, 3]), device),
        Tensor::from_data(TensorData::new(ys, [4, 1]), device),
    )
}

fn train<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>, S: LrScheduler>(
    mut model: Mlp<B>,
    optim: &mut O,
    sched: &mut S,
    steps: std::ops::Range<usize>,
    device: &B::Device,
) -> Mlp<B> {
    for step in steps {
        let (x, y) = batch::<B>(step, device);
        let out = model.b.forward(model.a.forward(x));
        let loss = (out - y).powf_scalar(2.0).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(sched.step(), model, grads);
    }
    model
}

/// A burn-train 0.21 checkpoint directory (`model-1.mpk.gz`, `optim-1.mpk.gz`,
/// `scheduler-1.mpk.gz`, as its `FileCheckpointer`s write them with the default
/// `NamedMpkGzFileRecorder`) after 4 steps, and the parameters Burn 0.21 reaches by resuming
/// from it for 4 more steps (`expected.json`).
fn checkpoint<O: Optimizer<Mlp<AB>, AB>, S: LrScheduler>(
    dir: &Path,
    mut optim: O,
    mut sched: S,
    resume: impl FnOnce() -> (O, S),
) {
    std::fs::create_dir_all(dir).unwrap();
    let device = Default::default();
    AB::seed(&device, 7);
    let recorder = NamedMpkGzFileRecorder::<FullPrecisionSettings>::new();
    // Lazy parameters: recorded once and loaded back, so the run starts from known values.
    let init = Mlp::<AB> {
        a: LinearConfig::new(3, 4).init(&device),
        b: LinearConfig::new(4, 1).init(&device),
    };
    recorder.record(init.into_record(), dir.join("init")).unwrap();
    let fresh = || Mlp::<AB> {
        a: LinearConfig::new(3, 4).init(&device),
        b: LinearConfig::new(4, 1).init(&device),
    };
    let model = fresh().load_record(recorder.load(dir.join("init"), &device).unwrap());
    std::fs::remove_file(dir.join("init.mpk.gz")).unwrap();
    let model = train(model, &mut optim, &mut sched, 0..4, &device);
    recorder.record(model.clone().into_record(), dir.join("model-1")).unwrap();
    recorder.record(optim.to_record(), dir.join("optim-1")).unwrap();
    recorder.record(sched.to_record::<AB>(), dir.join("scheduler-1")).unwrap();
    // Resumed as burn-train resumes: each record loaded into a fresh value.
    let (optim, sched) = resume();
    let mut optim = optim.load_record(recorder.load(dir.join("optim-1"), &device).unwrap());
    let mut sched = sched.load_record::<AB>(recorder.load(dir.join("scheduler-1"), &device).unwrap());
    let model = fresh().load_record(recorder.load(dir.join("model-1"), &device).unwrap());
    let model = train(model, &mut optim, &mut sched, 4..8, &device);
    let mut expected = Expected::default();
    model.visit(&mut expected);
    std::fs::write(
        dir.join("expected.json"),
        serde_json::to_string_pretty(&json!({ "burn": "0.21.0", "steps": 8, "tensors": expected.tensors })).unwrap(),
    )
    .unwrap();
}

#[derive(Module, Debug)]
enum Head<B: Backend> {
    Projection(Linear<B>),
    Norm(LayerNorm<B>),
}

#[derive(Module, Debug)]
struct Block<B: Backend> {
    linear: Linear<B>,
    norm: LayerNorm<B>,
}

#[derive(Module, Debug)]
struct Zoo<B: Backend> {
    linear: Linear<B>,
    conv: Conv2d<B>,
    batch_norm: BatchNorm<B>,
    embedding: Embedding<B>,
    blocks: Vec<Block<B>>,
    head: Head<B>,
    absent: Option<Linear<B>>,
    present: Option<Linear<B>>,
    counts: Param<Tensor<B, 1, Int>>,
    mask: Param<Tensor<B, 2, Bool>>,
}

impl<B: Backend> Zoo<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            linear: LinearConfig::new(3, 4).init(device),
            conv: Conv2dConfig::new([2, 3], [3, 3]).init(device),
            batch_norm: BatchNormConfig::new(3).init(device),
            embedding: EmbeddingConfig::new(5, 2).init(device),
            blocks: (0..2)
                .map(|_| Block {
                    linear: LinearConfig::new(2, 2).init(device),
                    norm: LayerNormConfig::new(2).init(device),
                })
                .collect(),
            head: Head::Projection(LinearConfig::new(2, 1).with_bias(false).init(device)),
            absent: None,
            present: Some(LinearConfig::new(1, 2).init(device)),
            counts: Param::initialized(ParamId::new(), Tensor::<B, 1, Int>::from_data(
                TensorData::new(vec![3i64, -1, 7], [3]),
                device,
            )),
            mask: Param::initialized(ParamId::new(), Tensor::<B, 2, Bool>::from_data(
                TensorData::new(vec![true, false, false, true], [2, 2]),
                device,
            )),
        }
    }
}

/// Every parameter as Burn 0.22 names it (path segments joined by `.`; `Option` adds none),
/// with its id, dtype, shape and values.
#[derive(Default)]
struct Expected {
    path: Vec<String>,
    tensors: Vec<Value>,
}

impl Expected {
    fn push(&mut self, id: u64, data: TensorData) {
        let values: Vec<f64> = match data.dtype {
            burn::tensor::DType::Bool(_) => data
                .iter::<bool>()
                .map(|b| if b { 1.0 } else { 0.0 })
                .collect(),
            _ => data.iter::<f64>().collect(),
        };
        self.tensors.push(json!({
            "path": self.path.join("."),
            "id": id.to_string(),
            "dtype": format!("{:?}", data.dtype),
            "shape": data.shape.to_vec(),
            "values": values,
        }));
    }
}

impl<B: Backend> ModuleVisitor<B> for Expected {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        // A quantized parameter: its dtype (with the scheme) and the values it dequantizes to.
        if let burn::tensor::DType::QFloat(scheme) = tensor.dtype() {
            let values: Vec<f64> = tensor.dequantize().into_data().iter::<f64>().collect();
            self.tensors.push(json!({
                "path": self.path.join("."),
                "id": param.id.val().to_string(),
                "dtype": format!("{:?}", burn::tensor::DType::QFloat(scheme)),
                "shape": param.val().shape().to_vec(),
                "values": values,
            }));
            return;
        }
        self.push(param.id.val(), tensor.into_data());
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.push(param.id.val(), param.val().into_data());
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.push(param.id.val(), param.val().into_data());
    }
}

/// What Burn 0.21 loads back from `file` into a fresh module.
fn expected<S: PrecisionSettings>(file: &Path) -> Value {
    let device = Default::default();
    let record = NamedMpkFileRecorder::<S>::new()
        .load(file.to_path_buf(), &device)
        .expect("Burn 0.21 loads its own file");
    let module = Zoo::<B>::new(&device).load_record(record);
    let mut expected = Expected::default();
    module.visit(&mut expected);
    json!({ "burn": "0.21.0", "tensors": expected.tensors })
}

/// Quantized linears, each with its own scheme, as Burn 0.21's ndarray backend quantizes (its
/// `Native` store: 8-bit values one byte each, then the scales as f32): per-tensor `Q8F`,
/// per-block `Q8S` (blocks of 16), and per-tensor `Q8S` whose scheme asks for f16 scales (the
/// bytes still hold f32 ones) over rows of 5.
#[derive(Module, Debug)]
struct Quant<B: Backend> {
    tensor: Linear<B>,
    block: Linear<B>,
    odd: Linear<B>,
}

fn quant(device: &burn::backend::ndarray::NdArrayDevice) -> Quant<B> {
    use burn::module::Quantizer;
    use burn::tensor::quantization::{
        Calibration, QuantLevel, QuantParam, QuantScheme, QuantStore, QuantValue,
    };
    let native = QuantScheme::default().with_store(QuantStore::Native);
    let quantizer = |scheme| Quantizer {
        calibration: Calibration::MinMax,
        scheme,
    };
    Quant {
        tensor: LinearConfig::new(4, 8)
            .init(device)
            .quantize_weights(&mut quantizer(native)),
        block: LinearConfig::new(4, 32)
            .with_bias(false)
            .init(device)
            .quantize_weights(&mut quantizer(
                native
                    .with_value(QuantValue::Q8S)
                    .with_level(QuantLevel::block([16])),
            )),
        odd: LinearConfig::new(3, 5).init(device).quantize_weights(&mut quantizer(
            native
                .with_value(QuantValue::Q8S)
                .with_param(QuantParam::F16),
        )),
    }
}

/// `schedulers DIR`: each LR scheduler burn-train 0.21 can record, recorded after 3 steps
/// (`<kind>.mpk.gz`, as burn-train's checkpointer writes it), and the 4 learning rates Burn 0.21
/// gives after resuming from it (`expected.json`).
fn write_schedulers(out: &Path) {
    use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
    use burn::lr_scheduler::noam::NoamLrSchedulerConfig;
    use burn::lr_scheduler::step::StepLrSchedulerConfig;
    fn run<S: LrScheduler>(out: &Path, kind: &str, make: impl Fn() -> S) -> Value {
        let device = Default::default();
        let recorder = NamedMpkGzFileRecorder::<FullPrecisionSettings>::new();
        let mut sched = make();
        for _ in 0..3 {
            sched.step();
        }
        recorder.record(sched.to_record::<B>(), out.join(kind)).unwrap();
        let mut resumed = make().load_record::<B>(recorder.load(out.join(kind), &device).unwrap());
        json!((0..4).map(|_| resumed.step()).collect::<Vec<f64>>())
    }
    std::fs::create_dir_all(out).unwrap();
    let expected = json!({
        "burn": "0.21.0",
        "exponential": run(out, "exponential", || ExponentialLrSchedulerConfig::new(0.05, 0.9).init().unwrap()),
        "cosine": run(out, "cosine", || CosineAnnealingLrSchedulerConfig::new(0.05, 10).init().unwrap()),
        "linear": run(out, "linear", || LinearLrSchedulerConfig::new(0.05, 0.01, 10).init().unwrap()),
        "step": run(out, "step", || StepLrSchedulerConfig::new(0.05, 2).init().unwrap()),
        "noam": run(out, "noam", || NoamLrSchedulerConfig::new(0.5).with_warmup_steps(5).with_model_size(64).init().unwrap()),
    });
    std::fs::write(out.join("expected.json"), serde_json::to_string_pretty(&expected).unwrap()).unwrap();
}

/// `quant DIR`: `quant.mpk` and `quant.expected.json`.
fn write_quant(out: &Path) {
    let device = Default::default();
    B::seed(&device, 18);
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    recorder.record(quant(&device).into_record(), out.join("quant")).unwrap();
    let loaded = quant(&device).load_record(recorder.load(out.join("quant.mpk"), &device).unwrap());
    let mut expected = Expected::default();
    loaded.visit(&mut expected);
    std::fs::write(
        out.join("quant.expected.json"),
        serde_json::to_string_pretty(&json!({ "burn": "0.21.0", "tensors": expected.tensors }))
            .unwrap(),
    )
    .unwrap();
}

/// The benchmark's model: square layers of 1024 (4 MiB of f32 weights each).
#[derive(Module, Debug)]
struct Stack<B: Backend> {
    layers: Vec<Linear<B>>,
}

fn stack(layers: usize, device: &burn::backend::ndarray::NdArrayDevice) -> Stack<B> {
    Stack {
        layers: (0..layers)
            .map(|_| LinearConfig::new(1024, 1024).init(device))
            .collect(),
    }
}

/// `big DIR LAYERS`: `big.mpk` and `big.mpk.gz` of a `Stack` (the same values in both), for
/// burnpack's `legacy` benchmark.
fn big(dir: &Path, layers: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let device = Default::default();
    let mpk = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    mpk.record(stack(layers, &device).into_record(), dir.join("big"))
        .unwrap();
    let model = stack(layers, &device).load_record(mpk.load(dir.join("big"), &device).unwrap());
    NamedMpkGzFileRecorder::<FullPrecisionSettings>::new()
        .record(model.into_record(), dir.join("big"))
        .unwrap();
}

/// CPU time of every thread of this process.
fn cpu_time() -> std::time::Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `load FILE LAYERS`: Burn 0.21's own recorder loads FILE into a fresh `Stack` and every
/// parameter is read back; prints `RESULT wall_ns peak_kib cpu_ns base_kib` as burnpack's
/// benchmark children do.
fn load(file: &Path, layers: usize) {
    let device = Default::default();
    let target = stack(layers, &device);
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (base, cpu, start) = (status_kib("VmRSS:"), cpu_time(), std::time::Instant::now());
    let name = file.to_string_lossy();
    let stem = PathBuf::from(name.trim_end_matches(".gz").trim_end_matches(".mpk"));
    let record = if name.ends_with(".gz") {
        NamedMpkGzFileRecorder::<FullPrecisionSettings>::new().load(stem, &device)
    } else {
        NamedMpkFileRecorder::<FullPrecisionSettings>::new().load(stem, &device)
    }
    .unwrap();
    let model = target.load_record(record);
    let mut sum = 0f64;
    for layer in &model.layers {
        sum += f64::from(layer.weight.val().into_data().as_slice::<f32>().unwrap()[0]);
    }
    let elapsed = start.elapsed();
    std::hint::black_box(sum);
    println!(
        "RESULT {} {} {} {}",
        elapsed.as_nanos(),
        status_kib("VmHWM:"),
        (cpu_time() - cpu).as_nanos(),
        base
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("big") => return big(Path::new(&args[2]), args[3].parse().unwrap()),
        Some("load") => return load(Path::new(&args[2]), args[3].parse().unwrap()),
        Some("quant") => return write_quant(Path::new(&args[2])),
        Some("schedulers") => return write_schedulers(Path::new(&args[2])),
        _ => {}
    }
    let out = PathBuf::from(std::env::args().nth(1).expect("usage: legacy-fixtures OUT_DIR"));
    std::fs::create_dir_all(&out).unwrap();
    let device = Default::default();
    B::seed(&device, 21);
    let file = |name: &str| out.join(name);
    // Burn 0.21 initializes parameters lazily, each clone on its own: the module is recorded
    // once and loaded back, so that every file below holds the same values.
    NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .record(Zoo::<B>::new(&device).into_record(), file("zoo"))
        .unwrap();
    let record = NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .load(file("zoo.mpk"), &device)
        .unwrap();
    let zoo = Zoo::<B>::new(&device).load_record(record);
    // Each recorder adds its own extension to the path it is given.
    NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    NamedMpkGzFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    PrettyJsonFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    JsonGzFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    BinFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    NamedMpkFileRecorder::<HalfPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo-half"))
        .unwrap();
    let write = |name: &str, value: Value| {
        std::fs::write(file(name), serde_json::to_string_pretty(&value).unwrap()).unwrap();
    };
    write(
        "zoo.expected.json",
        expected::<FullPrecisionSettings>(&file("zoo.mpk")),
    );
    write(
        "zoo-half.expected.json",
        expected::<HalfPrecisionSettings>(&file("zoo-half.mpk")),
    );
    write_quant(&out);
    write_schedulers(&out.join("schedulers"));
    // burn-train 0.21 checkpoints: Adam with an exponential schedule, AdamW with a cosine one,
    // SGD with momentum with an exponential one.
    let exponential = || ExponentialLrSchedulerConfig::new(0.05, 0.9).init().unwrap();
    let cosine = || CosineAnnealingLrSchedulerConfig::new(0.05, 10).init().unwrap();
    let adam = || AdamConfig::new().init::<AB, Mlp<AB>>();
    let adamw = || AdamWConfig::new().init::<AB, Mlp<AB>>();
    let sgd = || {
        SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new()))
            .init::<AB, Mlp<AB>>()
    };
    checkpoint(&out.join("train-adam"), adam(), exponential(), || (adam(), exponential()));
    checkpoint(&out.join("train-adamw"), adamw(), cosine(), || (adamw(), cosine()));
    checkpoint(&out.join("train-sgd"), sgd(), exponential(), || (sgd(), exponential()));
    println!("wrote the fixtures to {}", out.display());
}
