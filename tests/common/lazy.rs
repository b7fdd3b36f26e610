//! Uninitialized parameters: loading fills them without running an initializer, so a test or
//! benchmark measures the load alone. Shared with `benches/gpu.rs` (by path).

use burn::module::{Param, ParamId};
use burn::tensor::{Device, Tensor};

/// `count` uninitialized `[rows, cols]` float parameters on `device`.
pub fn lazy_matrices(
    count: usize,
    rows: usize,
    cols: usize,
    device: &Device,
) -> Vec<Param<Tensor<2>>> {
    (0..count)
        .map(|_| {
            let init = move |d: &Device, _| Tensor::zeros([rows, cols], d);
            Param::uninitialized(
                ParamId::new(),
                init,
                device.clone(),
                false,
                [rows, cols].into(),
            )
        })
        .collect()
}
