//! The burnpack v1 container, as pure data: header, CBOR metadata, dtypes, limits and the
//! validation that turns untrusted bytes into a trusted [`Layout`].
//!
//! Nothing here performs I/O. The reader ([`crate::read`]) and the writer ([`crate::write`])
//! both build on these pieces, so the rules for what a valid file is live in one place; every
//! source that opens a pack (a file mapped or buffered, bytes, an object store) opens it with
//! [`Layout::read`], which asks its caller for byte ranges, so "validate before allocating"
//! is written once. Kept on purpose, as the model for the rest: this room is pure data; the
//! metadata has a fast direct decoder (`canonical.rs`) and the general serde one, and a test
//! changes every byte of a canonical blob to every value to check that the direct one never
//! accepts what the general one refuses or reads differently.

/// What the standard prelude gives, from `alloc`, for the `no_std` build.
#[allow(unused_imports)]
mod prelude {
    pub(crate) use alloc::borrow::ToOwned;
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
    pub(crate) use alloc::{format, vec};
}

mod by_name;
mod canonical;
pub(crate) mod dtype;
mod error;
mod header;
mod keys;
mod layout;
mod layout_checks;
mod limits;
mod metadata;
mod scalar;
mod slice;
mod table;
mod tensor;
#[cfg(feature = "optim")]
pub(crate) mod vouched;

/// The raw metadata records, for tests that build malformed files (feature `internals`).
#[cfg(feature = "internals")]
pub use self::{metadata::Metadata, table::Descriptor};
#[cfg(feature = "std")]
pub(crate) use by_name::owned;
pub(crate) use by_name::{position, sort_unique};
#[cfg(any(test, feature = "internals"))]
pub use dtype::PLAIN_DTYPES;
#[cfg(feature = "std")]
pub(crate) use dtype::byte_len_of;
#[cfg(feature = "std")]
pub(crate) use dtype::tensor_description;
pub use dtype::{byte_len, checksum, element_align, metadata_checksum};
pub use error::FormatError;
pub use header::{
    FORMAT_VERSION, HEADER_SIZE, Header, MAGIC, TENSOR_ALIGNMENT, align_up, data_start, looks_like,
};
pub use keys::{
    FLOAT_DTYPE_KEY, INCREMENTAL_KEY, NAMESPACE_KEY, PRODUCER, PRODUCER_NAME, is_reserved_key,
};
pub use layout::{Layout, OpenError};
pub use limits::Limits;
pub use metadata::Extras;
#[cfg(feature = "std")]
pub(crate) use metadata::{Blob, DescriptorRef};
pub use scalar::{Scalar, ScalarConversionError};
pub use slice::PackSlice;
pub use tensor::TensorInfo;
