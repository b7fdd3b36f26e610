//! # burnpack
//!
//! Fast, safe storage for [Burn](https://burn.dev) 0.22 models and training checkpoints in the
//! burnpack v1 format, byte-compatible both ways with Burn's own `burn_pack` files: saved in
//! parallel and atomically, loaded memory-mapped and zero-copy. Safetensors weights, `PyTorch`
//! `torch.save` files and records of Burn 0.14-0.21 load through the same loader.
//!
//! # Save and load a module
//!
//! [`PackModule`] is implemented for every Burn [`Module`](burn::module::Module).
//! [`save_pack`](module::PackModule::save_pack) writes a scratch file, fsyncs it and renames it over
//! the destination; [`load_pack`](module::PackModule::load_pack) maps the file and loads it into a
//! fresh instance, strictly (every missing, unused or mis-shaped parameter is reported at
//! once). [`save_pack_with`](module::PackModule::save_pack_with) and
//! [`load_pack_with`](module::PackModule::load_pack_with) take [`SaveOptions`] and [`LoadOptions`].
//!
//! ```no_run
//! use burn::module::{Module, Param};
//! use burn::tensor::{Device, Tensor};
//! use burnpack::module::PackModule;
//!
//! #[derive(Module, Debug)]
//! struct Net {
//!     w: Param<Tensor<2>>,
//! }
//!
//! # fn main() -> Result<(), burnpack::module::ModuleError> {
//! let device = Device::flex();
//! let net = Net { w: Param::from_data([[1.0, 2.0], [3.0, 4.0]], &device) };
//! net.save_pack("net.bpk")?;
//!
//! let fresh = Net { w: Param::from_data([[0.0; 2]; 2], &device) };
//! let net = fresh.load_pack("net.bpk")?; // zero-copy on flex and ndarray
//! # let _ = net;
//! # Ok(())
//! # }
//! ```
//!
//! # Checkpoints
//!
//! [`checkpoint`] (feature `optim`, default): the model, the optimizer state, the LR
//! scheduler record and the progress in one crash-safe file; a manager of a directory of them
//! (retention, `latest`), and saves on a background thread (`AsyncSaver`). For fine-tuning,
//! incremental checkpoints (`checkpoint::Manager::incremental`) write only the tensors that
//! changed since the checkpoints the manager keeps (a frozen base is written once, then
//! referred to); `examples/incremental.rs` runs one and resumes from it, and
//! docs/guide.md ("Incremental checkpoints") says what is on disk.
//!
//! ```no_run
//! # #[cfg(feature = "optim")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use burn::module::{Module, Param};
//! # use burn::tensor::{Device, Tensor};
//! # #[derive(Module, Debug)]
//! # struct Net { w: Param<Tensor<2>> }
//! # let device = Device::flex();
//! # let net = Net { w: Param::from_data([[1.0, 2.0], [3.0, 4.0]], &device) };
//! use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
//!
//! let manager = CheckpointManager::new("checkpoints")?.keep_last(3);
//! // Fine-tuning: `.incremental(true)` writes only what changed since the kept checkpoints.
//! // Add `.optimizer(&optim)` and `.scheduler(sched.to_record())` to save those too.
//! manager.save(TrainingState::new(&net, Progress::new(1, 500)))?;
//! if let Some(ckpt) = manager.latest()? {
//!     println!("resuming at step {}", ckpt.progress().step);
//!     let net = ckpt.load_model(net)?;
//! #   let _ = net;
//! }
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "optim"))]
//! # fn main() {}
//! ```
//!
//! # Coming from Burn
//!
//! | you used | here |
//! |---|---|
//! | `model.save_file(path)` / `model.load_file(path)` (Burn 0.22) | [`model.save_pack(path)`](module::PackModule::save_pack) / [`model.load_pack(path)`](module::PackModule::load_pack); the files are the same format both ways |
//! | burn-store `BurnpackStore::from_file(path)` with `save_into` / `load_from` | `store::PackStore::from_file(path)`, same calls (feature `store`) |
//! | burn-store `SafetensorsStore::from_file(path)` with `load_from` | `interop::safetensors::SafetensorsSource::open(path)?`, then [`load_from_source`](module::PackModule::load_from_source)`(&source, &LoadOptions::new())`; [`LoadOptions::pytorch`](module::LoadOptions::pytorch)`(true)` where `PyTorchToBurnAdapter` was given |
//! | `SafetensorsStore` with `save_into` | `interop::safetensors::save_safetensors(&model, path, None)` |
//! | burn-store `PytorchStore::from_file(path)` (`with_top_level_key(k)`) | `interop::pytorch::PytorchSource::open(path)?` (`open_with(path, &OpenOptions::new().key(k))`), then `load_from_source(&source, &LoadOptions::new().pytorch(true))` |
//! | `NamedMpkFileRecorder`, `NamedMpkGzFileRecorder`, `PrettyJsonFileRecorder`, `JsonGzFileRecorder` (Burn 0.14-0.21; gone in 0.22) | `interop::burn_record::LegacySource::open(path)?`, then `load_from_source(&source, &LoadOptions::new())`; or `bpk convert model.mpk model.bpk` once |
//! | burn-train's `FileCheckpointer`s (three files an epoch) | `train::PackCheckpointer`, one file an epoch (feature `train`); runs of Burn 0.14-0.21: `interop::burn_record::import_legacy_burn_train` or `bpk migrate` |
//!
//! # Versions
//!
//! | | |
//! |---|---|
//! | this crate | 0.1.0 |
//! | Burn | `=0.22.0` |
//! | file format | burnpack v1 ([`format::FORMAT_VERSION`]), byte-compatible with Burn 0.22's `burn_pack` |
//! | minimum Rust | 1.95 (edition 2024) |
//! | records read | Burn 0.14-0.21; tested on files written by Burn 0.21.0 and Burn 0.16.1 (quantized tensors: Burn 0.21.0 only) |
//! | `torch.save` files read | zip (`PyTorch` 1.6 and later) and legacy; tested on 53 files from Burn's test data |
//!
//! # Modules
//!
//! - [`module`]: the Burn adapter ([`PackModule`]: save a module, load a pack or any
//!   [`TensorSource`](read::TensorSource) into one); [`checkpoint`]: training checkpoints.
//! - [`interop`]: other containers, each a `TensorSource`: `safetensors` (one file or shards
//!   with an index; conversions both ways; feature `safetensors`, default), `pytorch`
//!   (`torch.save` files through an unpickler that runs nothing; feature `pytorch`, default),
//!   `burn_record` (records of Burn 0.14-0.21; feature `legacy`, default), `gguf` (llama.cpp's
//!   GGUF files, quantized types dequantized; feature `gguf`, default), `numpy` (NumPy's
//!   `.npy` arrays and `.npz` archives; feature `numpy`, default) and `object_store`
//!   (packs and checkpoints on S3 and compatibles; feature `object-store`).
//! - Burn's plug-in points: `store` (feature `store`), a `ModuleStore` for burn-store's
//!   `save_into` / `load_from`; `train` (feature `train`), checkpointers for burn-train's
//!   `with_custom_checkpointers`, one file per epoch.
//! - [`format`](mod@format): the container as pure data (header, CBOR metadata, dtypes, limits,
//!   validation).
//! - [`read`]: open a file (memory-mapped or buffered) or bytes, list its tensors without
//!   touching their data, and take each tensor as a zero-copy Burn [`Bytes`](burn::tensor::Bytes).
//! - [`write`](mod@write): plan a layout from lengths, then write resident or deferred entries in
//!   parallel into their 256-byte aligned slots, atomically or in place.
//!
//! Tensors without a module, through the low-level [`write::Writer`] and [`read::Reader`]:
//!
//! ```
//! use burn::tensor::{Bytes, DType};
//! use burnpack::read::Reader;
//! use burnpack::write::{Entry, Writer};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("model.bpk");
//! let weight = Entry::deferred("layer.weight", DType::F32, vec![2, 2], 16, || {
//!     Ok(Bytes::from_elems(vec![1.0f32, 2.0, 3.0, 4.0]))
//! })
//! .with_param_id(42);
//! Writer::new(vec![weight]).scalar("epoch", 3u32).write_to_file(&path).unwrap();
//!
//! let reader = Reader::open(&path).unwrap();
//! let info = reader.tensor("layer.weight").unwrap();
//! assert_eq!((info.shape(), info.param_id()), (&[2, 2][..], Some(42)));
//! assert_eq!(reader.bytes("layer.weight").unwrap().len(), 16);
//! assert_eq!(u32::try_from(reader.scalars()["epoch"]).unwrap(), 3);
//! ```
//!
//! Kept on purpose, as the models for what is added: `format` is pure data (no I/O; one open
//! routine, [`format::Layout::read`], for every source); [`read::TensorSource`] is the one seam
//! every container of tensors goes through; `module` is one concern per file; the checkpoint
//! manager is written once over a small `checkpoint::Storage` trait; `write::commit`'s
//! scratch file is owned until published; `platform.rs` holds the few OS calls; test names
//! are sentences that say the behaviour; the metadata's direct decoder is checked byte by
//! byte against the general one. A feature switches a room on or off, not lines in a lower
//! room (the tests-only `internals` feature only widens what `format` and `write` export).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs, unsafe_op_in_unsafe_fn)]
#![deny(clippy::all, clippy::undocumented_unsafe_blocks)]
#![warn(clippy::pedantic)]
// Slot offsets and lengths are cast to `usize` only after the whole pack was checked to fit in
// this platform's address space (`Writer::write_into` slices a buffer of that size).
#![allow(clippy::cast_possible_truncation)]

// The README's Rust snippets, compiled and run as doctests (with the features of the README's
// test command).
#[cfg(all(doctest, feature = "optim"))]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

extern crate alloc;

#[cfg(feature = "optim")]
pub mod checkpoint;
pub mod format;
#[cfg(feature = "std")]
pub mod interop;
#[cfg(feature = "std")]
pub mod module;
#[cfg(feature = "std")]
mod panic;
#[cfg(feature = "std")]
mod platform;
#[cfg(feature = "std")]
pub mod read;
#[cfg(feature = "std")]
pub mod source;
#[cfg(feature = "store")]
pub mod store;
#[cfg(feature = "train")]
pub mod train;
#[cfg(feature = "std")]
pub mod write;

#[deprecated(since = "0.1.0", note = "use burnpack::interop::safetensors")]
pub mod convert;

// One public path per item: the public modules. These root shortcuts are the paths of earlier
// releases, kept (hidden from the docs) for compatibility; the crate's own code, its docs and
// examples name the modules (`burnpack::write::Writer`, `burnpack::module::PackModule`).
#[doc(hidden)]
pub use format::{Limits, PackSlice, Scalar};
#[cfg(feature = "std")]
#[doc(hidden)]
pub use module::{LoadOptions, ModuleError, PackModule, SaveOptions};
#[cfg(feature = "std")]
#[doc(hidden)]
pub use read::Reader;
#[cfg(feature = "std")]
#[doc(hidden)]
pub use source::ReadError;
#[cfg(feature = "std")]
#[doc(hidden)]
pub use write::{Entry, WriteError, WriteMode, Writer};

/// A pack compiled into the program, aligned for zero-copy loading: `include_bytes!` of `path`
/// (relative to the file that calls the macro, as `include_bytes!` reads it) placed at a
/// 256-byte boundary, as a `&'static [u8]`. `include_bytes!` alone guarantees no alignment, and
/// a tensor whose bytes are not aligned for its element type cannot be a view of them; with
/// this macro, [`PackModule::load_pack_static`](module::PackModule::load_pack_static) loads every tensor as a view of the program's
/// own memory, on every target (WebAssembly and `no_std` ones included).
///
/// ```
/// // The path is relative to the file that calls the macro (here, this crate's `src/lib.rs`).
/// static MODEL: &[u8] = burnpack::include_pack!("../tools/web-tests/tiny.bpk");
/// assert_eq!(MODEL.as_ptr() as usize % 256, 0);
/// let pack = burnpack::format::PackSlice::new(MODEL, &burnpack::format::Limits::default()).unwrap();
/// assert!(pack.tensor("scale").is_some());
/// // With `std`: `model.load_pack_static(MODEL, &LoadOptions::new())`, every tensor a view.
/// ```
#[macro_export]
macro_rules! include_pack {
    ($path:expr) => {{
        #[repr(C, align(256))]
        struct Aligned<T: ?Sized>(T);
        static PACK: &Aligned<[u8]> = &Aligned(*include_bytes!($path));
        &PACK.0
    }};
}
