//! What the burn-train tests share: a batch of rows (4 inputs, 2 targets), its batcher and
//! loaders, the autodiff device, and the two learner steps of a regression model.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::tensor::{Device, Tensor, TensorData};

#[derive(Clone, Debug)]
pub struct Batch {
    pub x: Tensor<2>,
    pub y: Tensor<2>,
}

pub struct Rows;

impl Batcher<([f32; 4], [f32; 2]), Batch> for Rows {
    fn batch(&self, items: Vec<([f32; 4], [f32; 2])>, device: &Device) -> Batch {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|(x, _)| *x).collect();
        let y: Vec<f32> = items.iter().flat_map(|(_, y)| *y).collect();
        Batch {
            x: Tensor::from_data(TensorData::new(x, [n, 4]), device),
            y: Tensor::from_data(TensorData::new(y, [n, 2]), device),
        }
    }
}

pub type Loader = Arc<dyn DataLoader<Batch>>;

/// The same 16 rows for training (batches of 4) and validation (batches of 8).
pub fn loaders() -> (Loader, Loader) {
    let rows: Vec<([f32; 4], [f32; 2])> = (0..16)
        .map(|i| {
            let t = i as f32 * 0.25;
            ([t, t.sin(), t.cos(), 1.0 - t], [t.sin() * t.cos(), 0.5 * t])
        })
        .collect();
    let train = DataLoaderBuilder::new(Rows)
        .batch_size(4)
        .build(InMemDataset::new(rows.clone()));
    let valid = DataLoaderBuilder::new(Rows)
        .batch_size(8)
        .build(InMemDataset::new(rows));
    (train, valid)
}

pub fn device() -> Device {
    Device::flex().autodiff()
}

/// `TrainStep` and `InferenceStep` for a model with
/// `fn regression(&self, batch: Batch) -> RegressionOutput`.
#[macro_export]
macro_rules! regression_steps {
    ($model:ty) => {
        impl burn::train::TrainStep for $model {
            type Input = common::train::Batch;
            type Output = burn::train::RegressionOutput;

            fn step(
                &self,
                batch: common::train::Batch,
            ) -> burn::train::TrainOutput<burn::train::RegressionOutput> {
                let out = self.regression(batch);
                burn::train::TrainOutput::new(self, out.loss.backward(), out)
            }
        }

        impl burn::train::InferenceStep for $model {
            type Input = common::train::Batch;
            type Output = burn::train::RegressionOutput;

            fn step(&self, batch: common::train::Batch) -> burn::train::RegressionOutput {
                self.regression(batch)
            }
        }
    };
}

/// The names of the files in `dir`, sorted.
pub fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
