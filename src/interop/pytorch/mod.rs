//! `PyTorch` `torch.save` files (`.pt`, `.pth`, `.bin`) as a [`TensorSource`](crate::source::TensorSource), read without
//! running anything in them: a restricted unpickler reads the state dict's object graph and
//! refuses every global a state dict does not need, by name.
//!
//! Both containers `torch.save` has written are read:
//! - the zip archive of `PyTorch` 1.6 and later: `<name>/data.pkl` (the pickle) and one stored
//!   (uncompressed) entry per storage, `<name>/data/<key>`, each aligned to 64 bytes by recent
//!   versions. The file is mapped once and each contiguous tensor of an aligned storage is a
//!   zero-copy window of the mapping.
//! - the legacy format (before 1.6): pickles in a row (magic number, protocol, system info, the
//!   object, the storage keys), then each storage's element count and bytes.
//!
//! Tensors are views of storages: at an offset, several sharing one storage, with any strides.
//! A contiguous view is a window; a non-contiguous one (a transposed weight saved as is, a
//! buffer expanded with stride 0) is gathered into memory of its own, once, in parallel across
//! tensors when the module loader asks for them together, and the load report says why
//! ([`CopyReason::Strided`](crate::source::CopyReason::Strided)). What the gathered views of a file add up to is bounded by the
//! file's own size plus 16 MiB, checked when it is opened: a few bytes expanded to gigabytes
//! are an error naming the tensor, not an allocation.
//!
//! Nothing is dropped in silence, and memory is bounded by the input: see the restricted
//! unpickler's rules (an argument or construct it does not fully understand is an error naming
//! it; its graph is at most 32 bytes per byte of the pickle plus 1 MiB) and docs/integrity.md.
//! Only regular files are opened (a FIFO or a device is refused before it is opened).
//!
//! The state dict is found at the top, or under a key: the one the options name, else the
//! first of `state_dict`, `model_state_dict` and `model` that holds tensors when the top holds
//! none directly. Nested dicts and lists are flattened with `.` (`encoder.layers.0.weight`).
//! A sharded checkpoint (`pytorch_model.bin.index.json`) is opened through its index, as for
//! safetensors.
//!
//! ```no_run
//! use burnpack::interop::pytorch::PytorchSource;
//! use burnpack::module::{LoadOptions, PackModule};
//! # use burn::module::Module;
//! # #[derive(Module, Debug)] struct Net { fc: burn::nn::Linear }
//! # let device = burn::tensor::Device::flex();
//! # let net = Net { fc: burn::nn::LinearConfig::new(2, 2).init(&device) };
//! let source = PytorchSource::open("resnet18.pth")?;
//! // PyTorch's Linear stores [out, in]; `pytorch(true)` transposes and renames norm parameters.
//! let net = net.load_from_source(&source, &LoadOptions::new().pytorch(true))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod container;
mod file;
mod legacy;
mod pickle;
mod source;
mod state_dict;
mod views;
mod zip;

use std::collections::HashMap;

pub(crate) use container::CONTAINER;
pub use source::PytorchSource;

/// Why a `torch.save` file could not be opened: the error of every source
/// ([`SourceError`](crate::source::SourceError)), under its former name.
#[deprecated(
    since = "0.1.0",
    note = "use burnpack::source::SourceError, the error of every source"
)]
pub type PytorchError = crate::source::SourceError;

/// How to open a `torch.save` file: the options of opening any source
/// ([`OpenOptions`](crate::source::OpenOptions)), under its former name.
#[deprecated(
    since = "0.1.0",
    note = "use burnpack::source::OpenOptions, the options of every source"
)]
pub type PytorchOptions = crate::source::OpenOptions;

/// The two containers `torch.save` writes.
///
/// ```no_run
/// use burnpack::interop::pytorch::{PytorchFormat, PytorchSource};
/// let source = PytorchSource::open("old-model.pth").unwrap();
/// if source.format() == PytorchFormat::Legacy {
///     println!("written before PyTorch 1.6: its tensors are copied when loaded");
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PytorchFormat {
    /// The zip archive of `PyTorch` 1.6 and later.
    Zip,
    /// The pickle-and-records format before 1.6.
    Legacy,
}

/// A storage's bytes in the file.
#[derive(Clone, Copy)]
struct StorageEntry {
    start: u64,
    len: u64,
    /// The zip entry's CRC-32 (the legacy format stores none).
    crc: Option<u32>,
}

/// Each storage by key.
type Storages = HashMap<String, StorageEntry>;

/// Why a container could not be read: its pickle, bytes that fail the archive's own CRC-32,
/// or anything else (said as a sentence).
enum Fault {
    Pickle(pickle::PickleError),
    Damaged(String),
    Other(String),
}
