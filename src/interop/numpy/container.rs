//! NumPy files as the registry sees them: the `.npy` magic, or a zip archive whose first
//! member is a `.npy` array (`.npz`); the near-miss hint; the openers.

use super::NumpySource;
use super::header::MAGIC;
use super::zip::is_npz;
use crate::interop::container::{Container, boxed};

/// NumPy `.npy` arrays and `.npz` archives of them. Listed before `torch.save`, which takes
/// every other zip archive.
pub(crate) const CONTAINER: Container = Container {
    name: "numpy",
    sniff: |head, _| head.starts_with(MAGIC) || is_npz(head),
    hint: "this looks like a NumPy .npy array or .npz archive: open it with \
           `burnpack::interop::numpy::NumpySource` or `burnpack::interop::open_any`, or \
           convert it with `bpk convert IN.npz OUT.bpk`",
    open: |path, options| boxed(NumpySource::open_with(path, options)),
    open_file: |path, file, options| boxed(NumpySource::open_opened(path, Some(file), options)),
    open_index: None,
    index_shards: None,
    from_bytes: |bytes, options| boxed(NumpySource::from_bytes(bytes, options)),
    refuse: None,
};
