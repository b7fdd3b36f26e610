//! The fixed 10-byte header and the alignment rules of the data section.

#[allow(unused_imports)]
use super::prelude::*;

use super::error::FormatError;

/// The magic number, `0x4255524E` ("BURN"); on disk, little-endian, the bytes read `NRUB`.
pub const MAGIC: u32 = 0x4255_524E;

/// The format version this crate reads and writes. Newer versions are refused.
pub const FORMAT_VERSION: u16 = 1;

/// Size of the fixed header: magic (4) + version (2) + metadata size (4).
pub const HEADER_SIZE: usize = 10;

/// Every tensor starts on a multiple of this many bytes, relative to the data section, which
/// itself starts on such a multiple: every tensor is 256-byte aligned in the file.
pub const TENSOR_ALIGNMENT: u64 = 256;

/// The smallest multiple of [`TENSOR_ALIGNMENT`] that is `>= offset`, or `None` on overflow.
///
/// ```
/// assert_eq!(burnpack::format::align_up(0), Some(0));
/// assert_eq!(burnpack::format::align_up(1), Some(256));
/// assert_eq!(burnpack::format::align_up(256), Some(256));
/// assert_eq!(burnpack::format::align_up(u64::MAX), None);
/// ```
#[must_use]
pub const fn align_up(offset: u64) -> Option<u64> {
    match offset.checked_add(TENSOR_ALIGNMENT - 1) {
        Some(v) => Some(v / TENSOR_ALIGNMENT * TENSOR_ALIGNMENT),
        None => None,
    }
}

/// Where the data section starts for a metadata blob of `metadata_size` bytes:
/// `ceil((10 + metadata_size) / 256) * 256`.
///
/// ```
/// assert_eq!(burnpack::format::data_start(0), 256);
/// assert_eq!(burnpack::format::data_start(246), 256);
/// assert_eq!(burnpack::format::data_start(247), 512);
/// ```
#[must_use]
pub const fn data_start(metadata_size: u32) -> u64 {
    // Cannot overflow: 10 + u32::MAX + 255 fits easily in a u64.
    (HEADER_SIZE as u64 + metadata_size as u64).div_ceil(TENSOR_ALIGNMENT) * TENSOR_ALIGNMENT
}

/// The fixed header at the start of every burnpack file.
///
/// ```
/// use burnpack::format::{Header, HEADER_SIZE};
/// let header = Header::new(42);
/// let bytes = header.to_bytes();
/// assert_eq!(&bytes[..4], b"NRUB");
/// assert_eq!(Header::parse(&bytes).unwrap(), header);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Format version ([`FORMAT_VERSION`] for files written here).
    pub version: u16,
    /// Length of the CBOR metadata blob that follows the header.
    pub metadata_size: u32,
}

impl Header {
    /// A current-version header for a metadata blob of `metadata_size` bytes.
    #[must_use]
    pub const fn new(metadata_size: u32) -> Self {
        Self {
            version: FORMAT_VERSION,
            metadata_size,
        }
    }

    /// The header's 10 bytes, little-endian.
    #[must_use]
    pub fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6..10].copy_from_slice(&self.metadata_size.to_le_bytes());
        out
    }

    /// Parses and checks a header: enough bytes, the magic, and a version this crate knows.
    ///
    /// # Errors
    /// [`FormatError::Truncated`], [`FormatError::BadMagic`] or [`FormatError::UnsupportedVersion`].
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        // Length first: an input shorter than the header is truncated (four zero bytes are a
        // file cut short, not "bad magic 0x00000000"), unless its first bytes are another
        // format's signature: then the useful answer is what it is and what to do instead.
        let Some(raw) = bytes.get(..HEADER_SIZE) else {
            if let (Some(hint), Some(magic)) = (looks_like(bytes), bytes.get(..4)) {
                return Err(FormatError::BadMagic {
                    found: u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]),
                    looks_like: Some(hint),
                });
            }
            return Err(FormatError::Truncated {
                what: "header",
                needed: HEADER_SIZE as u64,
                available: bytes.len() as u64,
            });
        };
        let magic = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        if magic != MAGIC {
            return Err(FormatError::BadMagic {
                found: magic,
                looks_like: looks_like(bytes).or(Some(ANOTHER_FORMAT)),
            });
        }
        let version = u16::from_le_bytes([raw[4], raw[5]]);
        if version == 0 || version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion { found: version });
        }
        let metadata_size = u32::from_le_bytes([raw[6], raw[7], raw[8], raw[9]]);
        Ok(Self {
            version,
            metadata_size,
        })
    }

    /// Absolute offset of the data section for this header.
    #[must_use]
    pub const fn data_start(&self) -> u64 {
        data_start(self.metadata_size)
    }
}

/// What a file that is not a burnpack resembles, as far as this layer tells (it knows no other
/// format: each format's own hint is its container's, `burnpack::interop::near_miss`); `None`
/// when the first bytes say nothing it knows. Used in [`FormatError::BadMagic`].
///
/// ```
/// assert!(burnpack::format::looks_like(&[0; 16]).unwrap().contains("zero bytes"));
/// assert!(burnpack::format::looks_like(br#"{"weight_map": {}}"#).unwrap().contains("JSON"));
/// assert_eq!(burnpack::format::looks_like(b"\x01\x02\x03\x04\x05\x06"), None);
/// ```
#[must_use]
pub fn looks_like(bytes: &[u8]) -> Option<&'static str> {
    if bytes.len() >= HEADER_SIZE && bytes[..HEADER_SIZE].iter().all(|&b| b == 0) {
        return Some(
            "the file starts with zero bytes: an unfinished or failed write (an in-place save \
             that was interrupted?)",
        );
    }
    let text = bytes.iter().take(64);
    if bytes.first().is_some_and(|b| matches!(b, b'{' | b'[')) && text.clone().all(u8::is_ascii) {
        return Some(
            "this looks like a JSON file (an index of shards?), not a burnpack file: \
             `bpk inspect` says what it is, `burnpack::interop::open_any` opens what it names",
        );
    }
    None
}

/// The hint of [`FormatError::BadMagic`] for bytes [`looks_like`] says nothing of: what to do
/// with a file of another format.
pub(crate) const ANOTHER_FORMAT: &str = "another format's? `bpk inspect` names the format of any \
    file bpk reads, `burnpack::interop::open_any` opens it, `bpk convert IN OUT.bpk` converts it";
