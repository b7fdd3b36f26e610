//! Opening what a command names: burnpack files, safetensors weights, Burn 0.14-0.21 records,
//! `torch.save` files, packs on object storage.

use burnpack::format::{Layout, TensorInfo};
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::read::{Reader, TensorSource};
use std::path::Path;

use crate::Failure;
use crate::remote;

/// Whether `path` names safetensors weights (a `.safetensors` file or an index `.json`).
pub(crate) fn is_safetensors(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "safetensors" || e == "json")
}

/// Whether `arg` names an object on object storage (`s3://bucket/key`) rather than a file.
pub(crate) fn is_url(arg: &Path) -> bool {
    arg.to_str().is_some_and(burnpack::interop::is_object_url)
}

/// A burnpack file, safetensors weights (one file or an index and its shards), or a pack on
/// object storage.
pub(crate) enum Opened {
    Pack(Reader),
    Safetensors(SafetensorsSource),
    Legacy(burnpack::interop::burn_record::LegacySource),
    Pytorch(burnpack::interop::pytorch::PytorchSource),
    #[cfg(feature = "object-store")]
    Remote(burnpack::interop::object_store::ObjectSource),
}

impl Opened {
    pub(crate) fn open(path: &Path) -> Result<Self, Failure> {
        if is_url(path) {
            let source = remote::open(path)?;
            #[cfg(feature = "object-store")]
            {
                // Everything at once: coalesced parallel requests, checked as they arrive.
                let all: Vec<&TensorInfo> = source.tensors().iter().collect();
                source.prefetch(&all).map_err(Failure::file)?;
                return Ok(Opened::Remote(source));
            }
            #[cfg(not(feature = "object-store"))]
            match source {}
        }
        if crate::pytorch::is_pytorch(path) {
            return crate::pytorch::open(path).map(Opened::Pytorch);
        }
        if crate::legacy::is_legacy(path) {
            return crate::legacy::open(path).map(Opened::Legacy);
        }
        if is_safetensors(path) {
            SafetensorsSource::open(path)
                .map(Opened::Safetensors)
                .map_err(Failure::file)
        } else {
            Reader::open(path).map(Opened::Pack).map_err(Failure::file)
        }
    }

    pub(crate) fn source(&self) -> &(dyn TensorSource + Sync) {
        match self {
            Opened::Pack(r) => r,
            Opened::Safetensors(s) => s,
            Opened::Legacy(s) => s,
            Opened::Pytorch(s) => s,
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => s,
        }
    }

    /// The pack's layout (`None` for safetensors).
    pub(crate) fn layout(&self) -> Option<&Layout> {
        match self {
            Opened::Pack(r) => Some(r.layout()),
            Opened::Safetensors(_) | Opened::Legacy(_) | Opened::Pytorch(_) => None,
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => Some(s.layout()),
        }
    }

    pub(crate) fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        match self {
            Opened::Pack(r) => r.tensor(name),
            Opened::Safetensors(s) => s.tensor(name),
            Opened::Legacy(s) => s.tensors().iter().find(|t| t.name() == name),
            Opened::Pytorch(s) => s.tensor(name),
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => s.layout().tensor(name),
        }
    }

    pub(crate) fn metadata(&self) -> &std::collections::BTreeMap<String, String> {
        match self {
            Opened::Pack(r) => r.metadata(),
            Opened::Safetensors(s) => s.metadata(),
            Opened::Legacy(s) => s.metadata(),
            Opened::Pytorch(_) => &NO_METADATA,
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => s.layout().metadata(),
        }
    }

    /// Scalars as text (safetensors has none).
    pub(crate) fn scalars(&self) -> Vec<(String, String)> {
        self.layout().map_or_else(Vec::new, |layout| {
            layout
                .scalars()
                .iter()
                .map(|(k, v)| (k.clone(), format!("{v:?}")))
                .collect()
        })
    }
}

/// What a source without string metadata (a `torch.save` file) shows.
static NO_METADATA: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

pub(crate) fn open(path: &Path) -> Result<Reader, Failure> {
    Reader::open(path).map_err(Failure::file)
}
