//! What the incremental checkpoint tests look at in a checkpoint directory.

use std::collections::BTreeSet;
use std::path::Path;

use burnpack::checkpoint::{Checkpoint, CheckpointManager};

/// The data files in `dir`, by name.
pub fn data_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("data-"))
        .collect()
}

/// The data files the checkpoints `manager` lists name.
pub fn named(manager: &CheckpointManager) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for entry in manager.list().unwrap() {
        let ckpt = Checkpoint::open(&entry.path).unwrap();
        named.extend(
            ckpt.chain()
                .unwrap()
                .data_files()
                .map(|(n, _)| n.to_string()),
        );
    }
    named
}
