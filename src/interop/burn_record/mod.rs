//! Records of Burn 0.14 to 0.21 (which Burn 0.22 can no longer read) as a [`TensorSource`](crate::source::TensorSource):
//! the files of `NamedMpkFileRecorder` (`.mpk`, Burn's default), `NamedMpkGzFileRecorder`
//! (`.mpk.gz`), `PrettyJsonFileRecorder` (`.json`) and `JsonGzFileRecorder` (`.json.gz`).
//!
//! Such a file is `BurnRecord { metadata, item }` serialized with field names: the item is the
//! module's record tree (struct fields, `Vec` items, enum variants, `Option`s), each parameter
//! a `ParamSerde { id, param }` whose tensor is a `TensorData { bytes, shape, dtype }`. Every
//! tensor comes out under the dotted path Burn 0.22 gives the same module's parameter, with its
//! `ParamId`, so [`PackModule::load_from_source`](crate::module::PackModule::load_from_source)
//! loads a Burn 0.21 model into the same model under Burn 0.22 in one call, with every
//! [`LoadOptions`](crate::module::LoadOptions).
//!
//! `MessagePack` is decoded with `rmp-serde` over the mapped file: tensor bytes are windows of
//! the mapping where aligned for their element type, copied otherwise (the load report says
//! which). A `.gz` file is decompressed into memory once, and its tensors are windows of that
//! buffer. JSON stores bytes as numbers: they are decoded when the file is opened
//! ([`CopyReason::Decoded`](crate::source::CopyReason::Decoded)). Bincode records (`.bin`, `.bin.gz`) do not describe themselves
//! (no field names, no lengths) and are refused with an explanation.

mod bincode;
mod compact;
mod container;
mod deprecated;
mod dtype;
#[cfg(all(test, target_os = "linux"))]
mod mapped_tests;
mod msgpack_end;
mod node;
mod source;
mod tensor_data;
mod train;
mod walk;

pub(crate) use container::CONTAINER;
pub use source::LegacySource;
#[cfg(feature = "optim")]
pub(crate) use train::BURN_TRAIN;
pub use train::{SchedulerKind, burn_train_epochs};
#[cfg(feature = "optim")]
pub use train::{check_burn_train_schedulers, import_legacy_burn_train};

use std::path::Path;

use node::Node;

/// An error opening a Burn 0.14-0.21 record: the error of every source
/// ([`SourceError`](crate::source::SourceError)), under its former name.
#[deprecated(
    since = "0.1.0",
    note = "use burnpack::source::SourceError, the error of every source"
)]
pub type LegacyError = crate::source::SourceError;

/// The record formats of Burn 0.14-0.21 that describe themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordFormat {
    /// `NamedMpkFileRecorder` (`.mpk`): `MessagePack` with field names.
    NamedMpk,
    /// `NamedMpkGzFileRecorder` (`.mpk.gz`).
    NamedMpkGz,
    /// `PrettyJsonFileRecorder` (`.json`).
    Json,
    /// `JsonGzFileRecorder` (`.json.gz`).
    JsonGz,
}

impl RecordFormat {
    /// The format a file name's ending says, if it is one of these.
    ///
    /// ```
    /// use burnpack::interop::burn_record::RecordFormat;
    /// assert_eq!(RecordFormat::from_path("model.mpk.gz"), Some(RecordFormat::NamedMpkGz));
    /// assert_eq!(RecordFormat::from_path("model.bpk"), None);
    /// ```
    #[must_use]
    pub fn from_path(path: impl AsRef<Path>) -> Option<Self> {
        let name = path.as_ref().file_name()?.to_str()?.to_ascii_lowercase();
        [
            (".mpk.gz", Self::NamedMpkGz),
            (".json.gz", Self::JsonGz),
            (".mpk", Self::NamedMpk),
            (".json", Self::Json),
        ]
        .into_iter()
        .find_map(|(ending, format)| name.ends_with(ending).then_some(format))
    }

    /// The format of a record's (decompressed) bytes: JSON when its first byte that is not
    /// white space is `{`, `MessagePack` otherwise.
    pub(super) fn of_content(gzip: bool, bytes: &[u8]) -> Self {
        let json = bytes
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        match (gzip, json) {
            (false, false) => Self::NamedMpk,
            (true, false) => Self::NamedMpkGz,
            (false, true) => Self::Json,
            (true, true) => Self::JsonGz,
        }
    }

    fn is_gzip(self) -> bool {
        matches!(self, Self::NamedMpkGz | Self::JsonGz)
    }

    fn is_json(self) -> bool {
        matches!(self, Self::Json | Self::JsonGz)
    }

    /// The recorder that writes this format, as Burn names it.
    #[must_use]
    pub fn recorder(self) -> &'static str {
        match self {
            Self::NamedMpk => "NamedMpkFileRecorder",
            Self::NamedMpkGz => "NamedMpkGzFileRecorder",
            Self::Json => "PrettyJsonFileRecorder",
            Self::JsonGz => "JsonGzFileRecorder",
        }
    }
}

/// The `metadata` of a Burn record: the element types and the Burn version that wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The float element type of the precision settings (`"f32"`, `"f16"`...).
    pub float: String,
    /// The int element type of the precision settings.
    pub int: String,
    /// The recorder's format name (`"NamedMpk"`...).
    pub format: String,
    /// The Burn version that wrote the record (`"0.21.0"`).
    pub version: String,
    /// The precision settings' type, as Burn printed it.
    pub settings: String,
}

/// The prefix of the metadata entries that keep a record's `BurnMetadata` in a pack
/// converted from it.
pub const METADATA_PREFIX: &str = "burn.record.";

/// `metadata` of the root map, if it has the fields of Burn's `BurnMetadata`.
fn record_metadata(root: &Node) -> Option<RecordMetadata> {
    let Node::Map(entries) = root else {
        return None;
    };
    let (_, Node::Map(meta)) = entries.iter().find(|(k, _)| k == "metadata")? else {
        return None;
    };
    entries.iter().find(|(k, _)| k == "item")?;
    let field = |name: &str| {
        meta.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_str())
            .map(str::to_string)
    };
    Some(RecordMetadata {
        float: field("float")?,
        int: field("int")?,
        format: field("format")?,
        version: field("version")?,
        settings: field("settings").unwrap_or_default(),
    })
}

/// A `ParamId` as Burn 0.14-0.21 serialized it: the id's little-endian bytes in base32
/// (DNSSEC alphabet: `0-9a-v`, no padding), 8 bytes, or 6 in the oldest format. Ids of the
/// uuid era (before 0.14) were hashed by Burn with a per-build hasher and are not recovered.
pub(super) fn param_id(text: &str) -> Option<u64> {
    let bytes = data_encoding::BASE32_DNSSEC.decode(text.as_bytes()).ok()?;
    if bytes.is_empty() || bytes.len() > 8 {
        return None;
    }
    let mut buffer = [0u8; 8];
    buffer[..bytes.len()].copy_from_slice(&bytes);
    Some(u64::from_le_bytes(buffer))
}
