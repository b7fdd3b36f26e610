//! Writes the Burn 0.16 record files that burnpack's legacy-record tests read, with Burn
//! 0.16's own recorders, and beside them the values Burn 0.16 itself loads back.
//!
//! ```sh
//! cargo run --release --manifest-path tools/legacy-fixtures-0.16/Cargo.toml -- tests/data/legacy/0.16
//! ```
//!
//! Outputs: `zoo.mpk`, `zoo.mpk.gz`, `zoo.json` (full precision), `zoo-half.mpk` (f16) and
//! `zoo.expected.json` / `zoo-half.expected.json`: every parameter's id, dtype, shape and
//! values, read back through `NamedMpkFileRecorder::load` into a
//! fresh module. The module is the 0.21 generator's (`tools/legacy-fixtures`) in Burn 0.16's
//! API: a Burn 0.16 file differs from a 0.21 one where the versions differ (a `Bool` dtype
//! without its store, Burn 0.16's `BatchNorm` and `Embedding` records), not in the model.

use std::path::Path;

use burn::backend::NdArray;
use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig,
};
use burn::prelude::Backend;
use burn::record::{
    FullPrecisionSettings, HalfPrecisionSettings, NamedMpkFileRecorder, NamedMpkGzFileRecorder,
    PrecisionSettings, PrettyJsonFileRecorder, Recorder,
};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use serde_json::{json, Value};

type B = NdArray<f32>;

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
    batch_norm: BatchNorm<B, 0>,
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
            counts: Param::initialized(
                ParamId::new(),
                Tensor::<B, 1, Int>::from_data(TensorData::new(vec![3i64, -1, 7], [3]), device),
            ),
            mask: Param::initialized(
                ParamId::new(),
                Tensor::<B, 2, Bool>::from_data(
                    TensorData::new(vec![true, false, false, true], [2, 2]),
                    device,
                ),
            ),
        }
    }
}

/// Every parameter with its id, dtype, shape and values (Burn 0.16's visitor tells no paths:
/// the tests find each tensor by its id, which the file keeps).
#[derive(Default)]
struct Expected {
    tensors: Vec<Value>,
}

impl Expected {
    fn push(&mut self, id: u64, data: TensorData) {
        let values: Vec<f64> = match data.dtype {
            burn::tensor::DType::Bool => data
                .iter::<bool>()
                .map(|b| if b { 1.0 } else { 0.0 })
                .collect(),
            _ => data.iter::<f64>().collect(),
        };
        self.tensors.push(json!({
            "id": id.to_string(),
            "dtype": format!("{:?}", data.dtype),
            "shape": data.shape.clone(),
            "values": values,
        }));
    }
}

impl<B: Backend> ModuleVisitor<B> for Expected {
    fn visit_float<const D: usize>(&mut self, id: ParamId, tensor: &Tensor<B, D>) {
        self.push(id.val(), tensor.to_data());
    }
    fn visit_int<const D: usize>(&mut self, id: ParamId, tensor: &Tensor<B, D, Int>) {
        self.push(id.val(), tensor.to_data());
    }
    fn visit_bool<const D: usize>(&mut self, id: ParamId, tensor: &Tensor<B, D, Bool>) {
        self.push(id.val(), tensor.to_data());
    }
}

/// What Burn 0.16 loads back from `file` into a fresh module.
fn expected<S: PrecisionSettings>(file: &Path) -> Value {
    let device = Default::default();
    let record = NamedMpkFileRecorder::<S>::new()
        .load(file.to_path_buf(), &device)
        .expect("Burn 0.16 loads its own file");
    let module = Zoo::<B>::new(&device).load_record(record);
    let mut expected = Expected::default();
    module.visit(&mut expected);
    json!({ "burn": "0.16.1", "tensors": expected.tensors })
}

fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: OUT_DIR"));
    std::fs::create_dir_all(&out).unwrap();
    let device = Default::default();
    B::seed(16);
    let file = |name: &str| out.join(name);
    // Lazy parameters: recorded once and loaded back, so that every file holds the same values.
    NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .record(Zoo::<B>::new(&device).into_record(), file("zoo"))
        .unwrap();
    let record = NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .load(file("zoo.mpk"), &device)
        .unwrap();
    let zoo = Zoo::<B>::new(&device).load_record(record);
    NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    NamedMpkGzFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    PrettyJsonFileRecorder::<FullPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo"))
        .unwrap();
    NamedMpkFileRecorder::<HalfPrecisionSettings>::new()
        .record(zoo.clone().into_record(), file("zoo-half"))
        .unwrap();
    let write = |name: &str, value: Value| {
        std::fs::write(file(name), serde_json::to_string_pretty(&value).unwrap()).unwrap();
    };
    write("zoo.expected.json", expected::<FullPrecisionSettings>(&file("zoo.mpk")));
    write("zoo-half.expected.json", expected::<HalfPrecisionSettings>(&file("zoo-half.mpk")));
    println!("wrote the fixtures to {}", out.display());
}
