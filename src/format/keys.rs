//! The metadata keys a pack reserves (its namespace, an incremental checkpoint's marker,
//! the `producer` this crate's writer adds), and which keys are reserved.

/// Metadata key by which a pack declares the namespace (a name prefix such as `model.`) its
/// module parameters live under: module loaders read only the tensors under it, prefix
/// removed. Checkpoints declare `model.`; any other pack may.
pub const NAMESPACE_KEY: &str = "burnpack.namespace";

/// Metadata key marking an incremental checkpoint's manifest (a pack whose tensors live in
/// data files beside it, see docs/format.md, "Incremental checkpoints"); its value is the
/// layout's version, `1`. A manifest is not a pack of tensors: loaders that read one file
/// refuse it by this key rather than report every parameter missing.
pub const INCREMENTAL_KEY: &str = "burnpack.incremental";

/// Metadata key recording that a pack's float tensors were written in one float dtype
/// (`F16`, `BF16` or `F32`), cast at save time (`SaveOptions::float_dtype`, `bpk convert
/// --dtype`); ints, bools and quantized tensors keep their own. Informative: each tensor's
/// descriptor says its dtype, and readers (Burn's among them) load it as any other key.
pub const FLOAT_DTYPE_KEY: &str = "burnpack.float_dtype";

/// Whether a metadata key means something to this crate's readers: `producer` (the writer
/// of the file, which verification holds to its word) and every key under `burnpack.` (a
/// namespace, a checkpoint's kind, its references...). A key copied from another format's
/// file never takes one of these meanings (conversions keep it under the format's prefix).
///
/// ```
/// use burnpack::format::{NAMESPACE_KEY, is_reserved_key};
/// assert!(is_reserved_key(NAMESPACE_KEY) && is_reserved_key("producer"));
/// assert!(!is_reserved_key("general.architecture"));
/// ```
#[must_use]
pub fn is_reserved_key(key: &str) -> bool {
    key == "producer" || key.starts_with("burnpack.")
}

/// The first word of the `producer` metadata value this crate writes (`burnpack <version>`).
pub const PRODUCER_NAME: &str = "burnpack";

/// The `producer` metadata value this crate's writer adds to every pack it writes with
/// checksums (unless the caller set a `producer`): a file that says it is this crate's and
/// carries no checksums is taken for a damaged one by verification.
///
/// ```
/// assert!(burnpack::format::PRODUCER.starts_with(burnpack::format::PRODUCER_NAME));
/// ```
pub const PRODUCER: &str = concat!("burnpack ", env!("CARGO_PKG_VERSION"));

/// Whether a `producer` value is this crate's: `burnpack` alone or followed by a version.
pub(crate) fn is_ours(producer: &str) -> bool {
    producer == PRODUCER_NAME
        || producer
            .strip_prefix(PRODUCER_NAME)
            .and_then(|rest| rest.strip_prefix(' '))
            .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}
