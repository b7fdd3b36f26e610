//! Where training stands.

use std::collections::BTreeMap;

use crate::format::Scalar;

/// Where training stands: epoch, step and any named values (a loss, a metric, a seed).
///
/// ```
/// use burnpack::checkpoint::Progress;
/// let p = Progress::new(2, 500).with("val_loss", 0.31).with("seed", 42u64);
/// assert_eq!(p.scalars["seed"], burnpack::format::Scalar::UInt(42));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    /// The epoch.
    pub epoch: u64,
    /// The global step.
    pub step: u64,
    /// Named values.
    pub scalars: BTreeMap<String, Scalar>,
}

impl Progress {
    /// Progress at `epoch` and `step`.
    #[must_use]
    pub fn new(epoch: u64, step: u64) -> Self {
        Self {
            epoch,
            step,
            scalars: BTreeMap::new(),
        }
    }

    /// Adds a named value.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<Scalar>) -> Self {
        self.scalars.insert(name.into(), value.into());
        self
    }
}
