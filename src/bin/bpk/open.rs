//! Opening what a command names, of any format, through the library's container registry
//! (`burnpack::interop::open_any_with`): no command knows a format by name.

use std::path::Path;

use burnpack::source::OpenOptions;
use burnpack::source::{DescribedSource, SourceError, SourceErrorKind};

use crate::Failure;

/// The options every command opens its inputs with (`--key`), set once by `main`.
pub(crate) static OPTIONS: std::sync::OnceLock<OpenOptions> = std::sync::OnceLock::new();

fn options() -> OpenOptions {
    OPTIONS.get().cloned().unwrap_or_default()
}

/// Whether `arg` names an object on object storage (`s3://bucket/key`) rather than a file.
pub(crate) fn is_url(arg: &Path) -> bool {
    arg.to_str().is_some_and(burnpack::interop::is_object_url)
}

/// The failure of an input that could not be opened: a path or URL that is itself wrong is a
/// usage error (2), a file its own checks found damaged exit 1, anything else exit 3; the
/// message names the input.
pub(crate) fn failure(e: &SourceError) -> Failure {
    if e.kind() == SourceErrorKind::Location {
        Failure::usage(e)
    } else {
        Failure::of(e)
    }
}

/// Opens `arg` (a file of any format bpk reads, an index of shards, or an s3:// URL) for
/// reading its tensors: a source that fetches over a network fetches everything at once
/// (coalesced parallel requests, each checked as it arrives), and a mapped foreign file is
/// read ahead in its own order.
pub(crate) fn open(arg: &Path) -> Result<Box<dyn DescribedSource>, Failure> {
    let source = burnpack::interop::open_any_with(arg, &options()).map_err(|e| failure(&e))?;
    let tensors = source.as_tensor_source();
    if tensors.wants_prefetch() {
        let all: Vec<_> = tensors.tensors().iter().collect();
        tensors.prefetch(&all).map_err(|e| Failure::of(&e))?;
    }
    Ok(source)
}

/// Opens `arg` for `verify`: a pack, safetensors, GGUF and `torch.save` zip files with
/// ordinary reads, never through a mapping (a damaged file, or one cut while it is read, is an
/// error to report, not a `SIGBUS`), a URL fetched whole; Burn records and legacy `torch.save`
/// files are parsed through their mapping (see [`OpenOptions::verify`]). The error is returned
/// for `verify` to judge.
pub(crate) fn open_for_verify(arg: &Path) -> Result<Box<dyn DescribedSource>, SourceError> {
    burnpack::interop::open_any_with(arg, &options().verify(true))
}
