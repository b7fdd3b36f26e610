//! Writing burnpack files: entries, layout planning, the parallel slot writer, atomic commit.
//!
//! Data flows one way: [`Entry`]s (resident, lent or deferred bytes) → a plan computed from
//! their lengths alone → a pre-sized destination → producers materialize and checksum
//! entries in parallel, one writer thread writes them from where they are into their
//! 256-byte-aligned slots → (atomic mode) fsync, rename, directory fsync.
//!
//! `writer.rs` is the public face ([`Writer`] and its sinks: a buffer, a file, a front-to-back
//! stream); `slots.rs` is the pipeline, whole; `commit.rs` is `Scratch`, the locked scratch
//! file that is either committed (fsync, rename, directory fsync) or removed, kept as the
//! model of owning a resource until it is published.

mod commit;
mod entry;
mod error;
mod options;
mod plan;
mod slots;
mod writer;

#[cfg(feature = "safetensors")]
pub(crate) use commit::Scratch;
#[cfg(feature = "optim")]
pub(crate) use commit::{is_scratch_name, is_stale_scratch};
#[cfg(feature = "safetensors")]
pub(crate) use entry::Data;
pub(crate) use entry::Lent;
pub use entry::{Entry, ProviderError};
pub use error::WriteError;
pub use options::{WriteMode, WriteOptions};
pub(crate) use options::{metadata_knobs, write_knobs};
/// The planned layout, for tests and benchmarks (feature `internals`).
#[cfg(feature = "internals")]
pub use plan::{Plan, Slot};
#[cfg_attr(not(feature = "safetensors"), allow(unused_imports))]
pub(crate) use slots::materialize;
pub use writer::Writer;
