//! [`PackCheckpointer`]'s incremental mode: an epoch's three records, once all have arrived,
//! hashed per tensor and saved as an incremental checkpoint (a manifest, and the tensors no
//! kept epoch holds in a new data file) through the checkpoint manager; burn-train's strategy
//! deletes epochs, and each delete collects the data files no kept epoch names.

use std::collections::BTreeMap;

use super::{PackCheckpointer, Part, epoch_head, prefix};
use crate::checkpoint::{CheckpointError, PreparedState, absorb_reader};
use crate::read::Reader;

impl PackCheckpointer {
    /// Turns incremental checkpoints on or off (off by default). Each epoch's checkpoint is
    /// then a small manifest (`ckpt-00000000000000000007.bpk` for epoch 7) and the tensors no
    /// kept epoch holds already go to a new data file (`data-00000000000000000007-<nonce>.bpk`)
    /// in the same directory: every tensor of the three records is hashed (XXH3-128, with its
    /// dtype and shape), and one whose bytes a kept epoch holds is referred to there. A frozen
    /// base under trained adapters is written once; each later epoch writes the adapters and
    /// the optimizer's state. When burn-train's checkpointing strategy (`KeepLastN`, a metric)
    /// deletes an epoch, its manifest goes, then every data file no remaining manifest names:
    /// a kept epoch never loses a byte it refers to. The checkpoints open, load and verify
    /// through [`Checkpoint`](crate::checkpoint::Checkpoint),
    /// [`CheckpointManager`](crate::checkpoint::CheckpointManager), `load_pack` and `bpk` (see
    /// [`CheckpointManager::incremental`](crate::checkpoint::Manager::incremental));
    /// `bpk convert` turns one into a self-contained pack.
    ///
    /// Set it before cloning the checkpointer for `with_custom_checkpointers` (the three
    /// clones must agree). Off, every epoch's file stands alone; turn it on for fine-tuning,
    /// where most bytes do not change between epochs.
    ///
    /// ```
    /// use burn::lr_scheduler::{LrScheduler, constant::ConstantLr};
    /// use burn::module::{Module, Param};
    /// use burn::optim::{ModuleOptimizer, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn::train::checkpoint::Checkpointer;
    /// use burnpack::checkpoint::Checkpoint;
    /// use burnpack::train::PackCheckpointer;
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let pack = PackCheckpointer::new(dir.path()).unwrap().incremental(true);
    /// assert!(pack.is_incremental());
    /// let model = Tiny { w: Param::from_data([1.0, 2.0], &Device::flex()) };
    /// let optim: ModuleOptimizer = SgdConfig::new().init();
    /// for epoch in [1, 2] {
    ///     pack.save(epoch, model.clone().into_record()).unwrap();
    ///     pack.save(epoch, optim.to_record()).unwrap();
    ///     pack.save(epoch, ConstantLr::new(0.1).to_record()).unwrap();
    /// }
    /// // Nothing changed in epoch 2: its checkpoint refers to epoch 1's data file.
    /// let second = Checkpoint::open(pack.path_for(2)).unwrap();
    /// assert!(second.is_incremental());
    /// let chain = second.chain().unwrap();
    /// assert_eq!(chain.held().count(), 0);
    /// assert_eq!(chain.location("model.w").unwrap(), chain.referred().next().unwrap().1);
    /// assert_eq!(pack.latest_epoch().unwrap(), Some(2));
    /// ```
    #[must_use]
    pub fn incremental(mut self, on: bool) -> Self {
        self.manager = self.manager.incremental(on);
        self
    }

    /// Whether the checkpoints are incremental (see [`incremental`](Self::incremental)).
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let pack = burnpack::train::PackCheckpointer::new(dir.path()).unwrap();
    /// assert!(!pack.is_incremental());
    /// ```
    #[must_use]
    pub fn is_incremental(&self) -> bool {
        self.manager.is_incremental()
    }

    /// Saves the complete epoch from its three parts as an incremental checkpoint: the
    /// model's tensors under `model.` (cast as the options say), the optimizer's and the
    /// scheduler's under their prefixes, the progress; the manager hashes every tensor,
    /// writes the new ones, then the manifest (replacing an earlier one of the same epoch,
    /// as a full checkpoint does when burn-train saves an epoch again after resuming), and
    /// collects the data files no manifest names any more. Its own retention keeps every
    /// checkpoint: burn-train's strategy deletes.
    pub(super) fn publish_incremental(
        &self,
        epoch: usize,
        held: Vec<(Part, Reader)>,
    ) -> Result<(), CheckpointError> {
        let mut model = Vec::new();
        let mut rest = Vec::new();
        let mut scalars = BTreeMap::new();
        let mut metadata = BTreeMap::new();
        for (part, reader) in &held {
            let mut entries = Vec::new();
            absorb_reader(
                reader,
                prefix(*part),
                &mut entries,
                &mut scalars,
                &mut metadata,
            )?;
            if *part == Part::Model {
                model.extend(self.options.cast(entries));
            } else {
                rest.extend(entries);
            }
        }
        epoch_head(epoch, &mut scalars, &mut metadata);
        let options = self.options.clone().overwrite(true);
        let state =
            PreparedState::serialized(epoch as u64, model, (rest, scalars, metadata), options);
        self.manager.write(state)?;
        Ok(())
    }
}
