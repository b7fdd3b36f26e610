//! What a save reports ([`SaveReport`]), and where its time goes, part by part (`SaveReport::phases`).

use std::time::{Duration, Instant};

/// Wall time by part of a save, in the order the parts first ran; a part that runs more
/// than once (a data file per part of the state) adds up.
#[derive(Default, Debug, Clone)]
pub(crate) struct Phases(pub(crate) Vec<(&'static str, Duration)>);

impl Phases {
    /// Adds `time` to the part `name`.
    pub(crate) fn add(&mut self, name: &'static str, time: Duration) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += time,
            None => self.0.push((name, time)),
        }
    }

    /// Adds the time since `*since` to the part `name`, and restarts `*since`.
    pub(crate) fn lap(&mut self, name: &'static str, since: &mut Instant) {
        let now = Instant::now();
        self.add(name, now - *since);
        *since = now;
    }
}

/// What [`Manager::save`](super::Manager::save) wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SaveReport<L> {
    /// Where the checkpoint is (a path, an object location).
    pub location: L,
    /// Its step.
    pub step: u64,
    /// The bytes this save wrote: the checkpoint's file (for an incremental checkpoint, its
    /// manifest) and the data files it wrote.
    pub bytes_written: u64,
    /// The tensors whose bytes this save wrote (every tensor of a full checkpoint).
    pub tensors_written: usize,
    /// The tensors an incremental checkpoint refers to in data files of earlier saves
    /// (0 for a full checkpoint).
    pub tensors_referred: usize,
    /// The data files this incremental save wrote, by name (none for a full checkpoint, or
    /// an incremental one where nothing changed).
    pub data_files_written: Vec<String>,
    /// Where an incremental save's time went, part by part, in the order the parts ran
    /// (listing and reading the manifests, hashing, writing the data file, the manifest,
    /// reopening it, retention, collection of unnamed data files); empty for a full
    /// checkpoint. For profiling: the parts and their names may change between versions.
    pub phases: Vec<(&'static str, std::time::Duration)>,
}
