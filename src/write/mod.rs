//! Writing burnpack files: entries, layout planning, the parallel slot writer, atomic commit.
//!
//! Data flows one way: [`Entry`]s (resident, lent or deferred bytes) → a plan computed from
//! their lengths alone → a pre-sized destination → worker threads materialize, checksum and
//! write entries in parallel, each from where its bytes are into their 256-byte-aligned slots
//! (a stream: producers in parallel, one thread writing in file order) → (atomic mode) fsync,
//! rename, directory fsync.
//!
//! `writer.rs` is the public face ([`Writer`] and its sinks: a buffer, a file, a front-to-back
//! stream); `slots.rs` is the pipeline, whole; `commit.rs` is `Scratch`, the locked scratch
//! file that is either committed (fsync, rename, directory fsync) or removed, kept as the
//! model of owning a resource until it is published.

// The rooms above (safetensors writing, checkpoint directories) take what they need of these
// by path (`write::commit::Scratch`, `write::entry::Data`, `write::entry::materialize`), so
// no re-export here depends on their features.
pub(crate) mod cast;
mod chunk;
pub(crate) mod commit;
mod convert;
// Large saves past the page cache (Linux `O_DIRECT`).
#[cfg(target_os = "linux")]
mod direct;
pub(crate) mod entry;
mod error;
mod options;
mod plan;
pub(crate) mod slots;
// Staged writes are the checkpoints' (feature `optim`).
#[cfg(feature = "optim")]
pub(crate) mod staged;
mod writer;

pub use entry::Entry;
pub(crate) use entry::Lent;
pub use error::{ProviderError, WriteError};
pub use options::{WriteMode, WriteOptions};
pub(crate) use options::{metadata_knobs, write_knobs};
/// The planned layout, for tests and benchmarks (feature `internals`).
#[cfg(feature = "internals")]
pub use plan::{Plan, Slot};
pub use writer::Writer;
