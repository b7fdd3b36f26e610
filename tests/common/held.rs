//! What a loaded module holds, parameter by parameter: its dotted path (as Burn 0.22 names
//! it), id, dtype and values (floats rounded to f32, booleans as 0 and 1), for comparing a load
//! with what another reader reads.

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::tensor::{Bool, DType, Int, Tensor, TensorData};

/// One parameter: path, id, dtype, values.
pub type HeldParam = (String, u64, DType, Vec<f64>);

/// Every parameter of `module`, in visit order.
pub fn held<M: Module>(module: &M) -> Vec<HeldParam> {
    let mut held = Held::default();
    module.visit(&mut held);
    held.params
}

#[derive(Default)]
struct Held {
    path: Vec<String>,
    params: Vec<HeldParam>,
}

impl Held {
    fn push(&mut self, id: ParamId, data: TensorData) {
        let dtype = data.dtype();
        let values = match dtype {
            DType::Bool(_) => data
                .iter::<bool>()
                .map(|b| f64::from(u8::from(b)))
                .collect(),
            _ => data
                .convert::<f64>()
                .iter::<f64>()
                .map(|v| f64::from(v as f32))
                .collect(),
        };
        self.params
            .push((self.path.join("."), id.val(), dtype, values));
    }
}

impl ModuleVisitor for Held {
    fn enter_module(&mut self, name: &str, _: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.push(param.id, param.val().into_data());
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, Int>>) {
        self.push(param.id, param.val().into_data());
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, Bool>>) {
        self.push(param.id, param.val().into_data());
    }
}
