//! # burnpack
//!
//! Fast, safe storage for [Burn](https://burn.dev) 0.22 in the burnpack v1 format, byte-
//! compatible with Burn's own `burn_pack` files.
//!
//! - [`format`](mod@format): the container as pure data (header, CBOR metadata, dtypes, limits, validation).
//! - [`read`]: open a file (memory-mapped or buffered) or bytes, list its tensors without
//!   touching their data, and take each tensor as a zero-copy Burn [`Bytes`](burn::tensor::Bytes).
//! - [`write`](mod@write): plan a layout from lengths, then write resident or deferred entries in
//!   parallel into their 256-byte aligned slots, atomically or in place.
//! - [`module`]: the Burn adapter (save a module, load a pack or any
//!   [`TensorSource`](read::TensorSource) into one); [`checkpoint`]: training checkpoints.
//! - [`interop`]: other containers (safetensors) and object storage (feature `object-store`).
//! - Burn's plug-in points: `store` (feature `store`), a `ModuleStore` for burn-store's
//!   `save_into` / `load_from`; `train` (feature `train`), checkpointers for burn-train's
//!   `with_custom_checkpointers`, one file per epoch.
//!
//! Kept on purpose, as the models for what is added: `format` is pure data (no I/O; one open
//! routine, [`format::Layout::read`], for every source); [`read::TensorSource`] is the one seam
//! every container of tensors goes through; `module` is one concern per file; the checkpoint
//! manager is written once over a small `checkpoint::Storage` trait; `write::commit`'s
//! scratch file is owned until published; `platform.rs` holds the few OS calls; test names
//! are sentences that say the behaviour; the metadata's direct decoder is checked byte by
//! byte against the general one. A feature switches a room on or off, not lines in a lower
//! room (the tests-only `internals` feature only widens what `format` and `write` export).
//!
//! ```
//! use burn::tensor::{Bytes, DType};
//! use burnpack::{Entry, Writer, read::Reader};
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
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs, unsafe_op_in_unsafe_fn)]
#![deny(clippy::all)]
#![warn(clippy::pedantic)]
// Slot offsets and lengths are cast to `usize` only after the whole pack was checked to fit in
// this platform's address space (`Writer::write_into` slices a buffer of that size).
#![allow(clippy::cast_possible_truncation)]

// The README's Rust snippets, compiled and run as doctests (with the features of the README's
// test command).
#[cfg(all(doctest, feature = "optim"))]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

#[cfg(feature = "optim")]
pub mod checkpoint;
pub mod format;
pub mod interop;
pub mod module;
mod panic;
mod platform;
pub mod read;
#[cfg(feature = "store")]
pub mod store;
#[cfg(feature = "train")]
pub mod train;
pub mod write;

/// The safetensors conversions under their earlier name ([`interop::safetensors`]).
#[cfg(feature = "safetensors")]
pub use interop::safetensors as convert;

pub use format::{Limits, Scalar};
pub use module::{LoadOptions, ModuleError, PackModule, SaveOptions};
pub use read::{ReadError, Reader};
pub use write::{Entry, WriteError, WriteMode, Writer};
