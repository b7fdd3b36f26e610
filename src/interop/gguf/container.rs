//! GGUF as the registry sees it: its magic, its near-miss hint, its openers.

use super::GgufSource;
use super::header::MAGIC;
use crate::interop::container::{Container, boxed};

/// GGUF files (llama.cpp), one or the first of a split set.
pub(crate) const CONTAINER: Container = Container {
    name: "gguf",
    sniff: |head, _| head.starts_with(MAGIC),
    hint: "this looks like a GGUF file (llama.cpp): open it with \
           `burnpack::interop::gguf::GgufSource` or `burnpack::interop::open_any`, or convert \
           it with `bpk convert IN.gguf OUT.bpk`",
    open: |path, options| boxed(GgufSource::open_with(path, options)),
    open_file: |path, file, options| boxed(GgufSource::open_opened(path, Some(file), options)),
    open_index: None,
    index_shards: None,
    from_bytes: |bytes, options| boxed(GgufSource::from_bytes(bytes, options)),
    refuse: None,
};
