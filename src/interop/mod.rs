//! Other containers of tensors, beside burnpack: each is an adapter over [`read`](mod@crate::read)
//! and [`write`](mod@crate::write), like [`module`](crate::module) is for Burn modules.
//!
//! A container that tensors are *read* from becomes a [`TensorSource`](crate::source::TensorSource):
//! it builds the table of [`TensorInfo`](crate::format::TensorInfo)s (validated as strictly as a
//! pack's) and hands out each tensor's bytes, zero-copy where it can. The module loader, `bpk`
//! and the conversions consume that table and never ask which container it came from, so a new
//! source (a sharded index, an object in a bucket) is one file here plus its tests, never a copy
//! of the pack path. A container that tensors are *written* to takes the writer's planned
//! entries.
//!
//! - [`safetensors`]: conversions between burnpack and safetensors files, and
//!   [`SafetensorsSource`](safetensors::SafetensorsSource): Hugging Face / `PyTorch` weights, one
//!   file or shards with an index JSON, loaded into Burn modules zero-copy where aligned
//!   (feature `safetensors`, on by default), with the `safetensors` crate.
//! - `burn_record`: records of Burn 0.14-0.21 (`.mpk`, `.mpk.gz`, `.json`, `.json.gz`), which
//!   Burn 0.22 cannot read, as a source of tensors (feature `legacy`, on by default).
//! - `pytorch`: `torch.save` files (`.pt`, `.pth`, `.bin`; zip and legacy; sharded through
//!   an index) through a restricted unpickler that runs nothing (feature `pytorch`, on by
//!   default).
//! - `gguf`: llama.cpp's GGUF files (one file or a split set): plain types as views of the
//!   mapping, quantized types dequantized in parallel as llama.cpp's reference computes them,
//!   llama.cpp's names and layout as a convention (feature `gguf`, on by default).
//! - `onnx`: ONNX models' initializers (and those of nested graphs), `raw_data` and external
//!   data as views of the mappings, typed fields decoded (feature `onnx`, on by default).
//! - `object_store`: packs on S3 and compatibles: ranged loads of only
//!   what a module reads, saves as multipart uploads (feature `object-store`).
//!
//! The registry's output side ([`outputs`], [`output_for`]) lists what a source is written
//! to (a pack, safetensors, sharded safetensors), picked by the output's name, and the
//! [`migrations`] between training layouts.

#[cfg(feature = "legacy")]
pub mod burn_record;
mod container;
#[doc(hidden)]
pub mod fuzz;
#[cfg(feature = "gguf")]
pub mod gguf;
#[cfg(any(feature = "safetensors", feature = "pytorch"))]
mod index;
#[cfg(feature = "numpy")]
pub mod numpy;
#[cfg(feature = "object-store")]
pub mod object_store;
#[cfg(feature = "onnx")]
pub mod onnx;
mod outputs;
mod pack;
#[cfg(feature = "pytorch")]
pub mod pytorch;
#[cfg(any(feature = "pytorch", feature = "safetensors", feature = "numpy"))]
mod read_hints;
mod registry;
#[cfg(feature = "safetensors")]
pub mod safetensors;
mod unknown;

// The guide's Rust snippets, compiled and run as doctests under the features of its test
// command (`cargo test --features cli,store,train,object-store --doc`): every section's code
// compiles and runs. (Here, where the formats' features are named, not in the crate root.)
#[cfg(all(
    doctest,
    feature = "optim",
    feature = "store",
    feature = "train",
    feature = "object-store",
    feature = "gguf",
    feature = "pytorch",
    feature = "legacy",
    feature = "safetensors"
))]
#[doc = include_str!("../../docs/guide.md")]
struct GuideSnippets;

/// Moved to [`crate::source`] (the source core); this path stays one release.
#[doc(hidden)]
pub use crate::source::OpenOptions;
pub use container::{Container, HEAD, IndexShards, OpenBytes, OpenFile, OpenPath, Refuse};
#[cfg(feature = "numpy")]
pub use numpy::write::write_npy;
pub use outputs::{
    Migration, Output, OutputError, OutputOptions, Progress, Written, migration, migrations,
    output_for, output_formats, outputs,
};
pub use registry::{containers, near_miss, open_any, open_any_with, open_bytes_any};

/// What the sources' `open_with` and `from_bytes` take: [`OpenOptions`](crate::source::OpenOptions),
/// or for one release (deprecated: pass the options) a [`Limits`](crate::format::Limits) alone,
/// the old form of the safetensors and Burn-record sources, read as
/// `OpenOptions::new().limits(limits)`.
///
/// ```
/// use burnpack::interop::AsOpenOptions;
/// use burnpack::source::OpenOptions;
/// let limits = burnpack::format::Limits::default().with_max_file_size(1 << 20);
/// assert_eq!(limits.open_options().key_name(), None);
/// assert_eq!(OpenOptions::new().key("ema").open_options().key_name(), Some("ema"));
/// ```
pub trait AsOpenOptions {
    /// These options as [`OpenOptions`](crate::source::OpenOptions).
    fn open_options(&self) -> crate::source::OpenOptions;
}

impl AsOpenOptions for crate::source::OpenOptions {
    fn open_options(&self) -> crate::source::OpenOptions {
        self.clone()
    }
}

/// Deprecated: pass `&OpenOptions::new().limits(limits)`.
impl AsOpenOptions for crate::format::Limits {
    fn open_options(&self) -> crate::source::OpenOptions {
        crate::source::OpenOptions::new().limits(*self)
    }
}

/// Whether `location` names an object on object storage (`s3://bucket/key`, `s3a://...`)
/// rather than a local path. Answered with or without the `object-store` feature, so that a
/// tool built without it can say how to get it (`ObjectLocation::is_url` is this).
///
/// ```
/// assert!(burnpack::interop::is_object_url("s3://bucket/model.bpk"));
/// assert!(!burnpack::interop::is_object_url("/data/model.bpk"));
/// ```
#[must_use]
pub fn is_object_url(location: &str) -> bool {
    location.starts_with("s3://") || location.starts_with("s3a://")
}
