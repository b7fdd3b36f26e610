//! Test models covering every kind of parameter Burn has, and helpers to compare modules.
#![allow(dead_code)]

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig,
};
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};

#[derive(Module, Debug)]
pub struct Block {
    pub linear: Linear,
    pub norm: LayerNorm,
}

#[derive(Module, Debug)]
pub enum Head {
    Dense(Linear),
    Conv(Conv2d),
}

/// A nested struct with `Vec`s, an enum, `Option`al params, the common layers, BatchNorm
/// running statistics, int, bool, F16 and BF16 parameters.
#[derive(Module, Debug)]
pub struct Net {
    pub embed: Embedding,
    pub blocks: Vec<Block>,
    pub conv: Conv2d,
    pub bn: BatchNorm,
    pub head: Head,
    pub extra: Option<Linear>,
    pub absent: Option<Linear>,
    pub counts: Param<Tensor<1, Int>>,
    pub mask: Param<Tensor<2, Bool>>,
    pub half: Param<Tensor<2>>,
    pub bhalf: Param<Tensor<1>>,
}

impl Net {
    /// A freshly initialized (lazy) net, with F16/BF16 parameters where the device has them.
    pub fn new(device: &Device) -> Self {
        Self::new_with(
            device,
            device.supports_dtype(DType::F16) && device.supports_dtype(DType::BF16),
        )
    }

    /// A fresh net whose `half` / `bhalf` parameters are F16 / BF16 when `half`, else F32.
    pub fn new_with(device: &Device, half: bool) -> Self {
        let (f16, bf16) = if half {
            (DType::F16, DType::BF16)
        } else {
            (DType::F32, DType::F32)
        };
        Self {
            embed: EmbeddingConfig::new(10, 4).init(device),
            blocks: (0..2)
                .map(|_| Block {
                    linear: LinearConfig::new(4, 4).init(device),
                    norm: LayerNormConfig::new(4).init(device),
                })
                .collect(),
            conv: Conv2dConfig::new([2, 3], [3, 3]).init(device),
            bn: BatchNormConfig::new(3).init(device),
            head: Head::Dense(LinearConfig::new(4, 2).init(device)),
            extra: Some(LinearConfig::new(2, 3).init(device)),
            absent: None,
            counts: Param::initialized(ParamId::new(), Tensor::from_data([3i64, -1, 7], device)),
            mask: Param::initialized(
                ParamId::new(),
                Tensor::from_data([[true, false], [false, true]], device),
            ),
            half: Param::initialized(
                ParamId::new(),
                Tensor::from_data([[0.5f32, -1.25], [2.0, 3.5]], (device, f16)),
            ),
            bhalf: Param::initialized(
                ParamId::new(),
                Tensor::from_data([1.5f32, -2.0, 0.25], (device, bf16)),
            ),
        }
    }
}

/// Adds a different offset to every float parameter (running statistics included) and flips
/// int and bool values, so a loaded module can only equal the saved one if loading worked.
pub struct Perturb(pub f32);

impl ModuleMapper for Perturb {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        self.0 += 0.125;
        let offset = self.0;
        param.map(|t| t.add_scalar(offset))
    }
    fn map_int<const D: usize>(&mut self, param: Param<Tensor<D, Int>>) -> Param<Tensor<D, Int>> {
        param.map(|t| t.add_scalar(10))
    }
    fn map_bool<const D: usize>(
        &mut self,
        param: Param<Tensor<D, Bool>>,
    ) -> Param<Tensor<D, Bool>> {
        param.map(|t| t.bool_not())
    }
}

/// What a module holds: path → (param id, dtype, shape, bytes).
pub type Snapshot = BTreeMap<String, (u64, DType, Vec<usize>, Vec<u8>)>;

#[derive(Default)]
struct Snap {
    path: Vec<String>,
    out: Snapshot,
}

impl Snap {
    fn record(&mut self, id: ParamId, data: TensorData) {
        self.out.insert(
            self.path.join("."),
            (
                id.val(),
                data.dtype(),
                data.shape().to_vec(),
                data.as_bytes().to_vec(),
            ),
        );
    }
}

impl ModuleVisitor for Snap {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        self.record(p.id, p.val().into_data());
    }
    fn visit_int<const D: usize>(&mut self, p: &Param<Tensor<D, Int>>) {
        self.record(p.id, p.val().into_data());
    }
    fn visit_bool<const D: usize>(&mut self, p: &Param<Tensor<D, Bool>>) {
        self.record(p.id, p.val().into_data());
    }
}

pub fn snapshot<M: Module>(module: &M) -> Snapshot {
    let mut snap = Snap::default();
    module.visit(&mut snap);
    snap.out
}

/// A trained-looking net: initialized, then perturbed everywhere.
pub fn trained(device: &Device) -> Net {
    Net::new(device).map(&mut Perturb(0.0))
}

/// [`trained`], choosing whether half-precision parameters are used.
pub fn trained_with(device: &Device, half: bool) -> Net {
    Net::new_with(device, half).map(&mut Perturb(0.0))
}
