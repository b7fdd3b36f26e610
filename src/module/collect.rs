//! Save side: walk a module and turn each parameter into a deferred [`Entry`].

use burn::module::{ModuleVisitor, Param, Parameter};
use burn::tensor::{Bool, Int, Tensor, kind::Basic};

use super::host;
use crate::write::{Entry, WriteError};

/// Collects a module's parameters as entries, with Burn's names (field path joined by `.`),
/// `ParamId`s, dtypes and shapes. Nothing is read from the device here: each entry holds a
/// handle to the (save-mapped) tensor and reads it only when the writer reaches its slot.
#[derive(Default)]
pub(crate) struct Collector {
    path: Vec<String>,
    pub(crate) entries: Vec<Entry>,
    /// The first parameter that could not be collected.
    pub(crate) failure: Option<WriteError>,
}

impl Collector {
    fn collect<const D: usize, K: Basic + 'static>(&mut self, param: &Param<Tensor<D, K>>)
    where
        Tensor<D, K>: Parameter + Send,
    {
        let name = self.path.join(".");
        // What `param.transform_for_save().val()` gives (the save mapper applied to the
        // effective value), without the temporary `Param` it builds: that costs an aligned
        // allocation per parameter, most of a small tensor's save time.
        let (_, _, mapper) = param.clone().consume();
        let tensor = mapper.on_save(param.val());
        let dtype = tensor.dtype();
        let shape = tensor.dims().to_vec();
        let id = param.id.val();
        let entry = match crate::format::byte_len_of(dtype, shape.iter().map(|&d| d as u64)) {
            // On flex and ndarray the bytes are borrowed now (an `Arc` of the parameter's own
            // storage: nothing is copied, and no tensor handle is kept per entry).
            Some(len) => match host::borrow(tensor, len) {
                Ok(lent) => Entry::lent(name, dtype, shape, lent),
                Err(tensor) => Entry::deferred(name, dtype, shape, len, move || host::read(tensor)),
            },
            // Quantized data's packed length is only known once produced: read it now.
            None => match host::read(tensor) {
                Ok(bytes) => Entry::resident(name, dtype, shape, bytes),
                Err(source) => {
                    self.failure.get_or_insert(WriteError::Provider {
                        tensor: name,
                        source,
                    });
                    return;
                }
            },
        };
        self.entries.push(entry.with_param_id(id));
    }
}

impl ModuleVisitor for Collector {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.collect(param);
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, Int>>) {
        self.collect(param);
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, Bool>>) {
        self.collect(param);
    }
}
