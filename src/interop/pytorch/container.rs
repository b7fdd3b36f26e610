//! `torch.save` files as the registry sees them: a zip archive's or a pickle's first bytes,
//! the near-miss hint, the openers.

use super::PytorchSource;
use super::file::{ZIP_MAGIC, is_pickle};
use crate::interop::container::{Container, boxed};

/// `torch.save` files: zip archives and the legacy pickle format; shards through an index.
pub(crate) const CONTAINER: Container = Container {
    name: "pytorch",
    sniff: |head, _| head.starts_with(ZIP_MAGIC) || is_pickle(head),
    hint: "this looks like a PyTorch checkpoint (a zip archive or a Python pickle): open it \
           with `burnpack::interop::pytorch::PytorchSource` or `burnpack::interop::open_any`, \
           or convert it with `bpk convert IN.pt OUT.bpk`",
    open: |path, options| boxed(PytorchSource::open_file(path, options)),
    open_file: |path, file, options| boxed(PytorchSource::open_opened(path, Some(file), options)),
    open_index: Some(|path, options| boxed(PytorchSource::open_index(path, options))),
    index_shards: Some(crate::interop::index::shards),
    from_bytes: |bytes, options| boxed(PytorchSource::from_bytes(bytes, options)),
    refuse: None,
};
