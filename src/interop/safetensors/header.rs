//! A safetensors header read and checked before anything is mapped: the length prefix, the
//! JSON (each name once, the tensor-count limit), the `safetensors` crate's own validation
//! (offsets, overlaps, lengths against dtype and shape), and the file's length.

use std::path::Path;

use crate::format::Limits;
use crate::source::SourceError;

/// Validates a safetensors header with the `safetensors` crate's own rules: `head` holds the
/// 8-byte prefix and the header (or all of a file in memory), `total` is the file's length.
/// Returns the header's length and the parsed metadata. A file shorter than its header or its
/// tensors say is [`SourceError::Truncated`]; a tensor named twice in the header (which a
/// map would keep one of, in silence) is an error naming it.
pub(super) fn validate(
    path: &Path,
    head: &[u8],
    total: u64,
    limits: &Limits,
) -> Result<(usize, safetensors::tensor::Metadata), SourceError> {
    let invalid = |e: safetensors::SafeTensorError| SourceError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    crate::source::data::within_file_size(path, total, limits)?;
    let n = header_len(path, head, total)?;
    let json = std::str::from_utf8(&head[8..8 + n])
        .map_err(|e| invalid(safetensors::SafeTensorError::InvalidHeader(e)))?;
    unique_names(path, json, limits)?;
    let metadata: safetensors::tensor::Metadata = serde_json::from_str(json).map_err(|e| {
        invalid(safetensors::SafeTensorError::InvalidHeaderDeserialization(
            e,
        ))
    })?;
    let end = (8 + n as u64).saturating_add(metadata.data_len() as u64);
    if end > total {
        return Err(SourceError::Truncated {
            path: path.to_path_buf(),
            reason: format!("its tensors end at byte {end}, but the file has {total} bytes"),
        });
    }
    if end < total {
        return Err(invalid(
            safetensors::SafeTensorError::MetadataIncompleteBuffer,
        ));
    }
    Ok((n, metadata))
}

/// The header length the 8-byte prefix of `head` declares, checked against the crate's bound
/// and the file's length `total` (`head` holds at least the prefix, or all of a short file).
pub(super) fn header_len(path: &Path, head: &[u8], total: u64) -> Result<usize, SourceError> {
    let invalid = |e: safetensors::SafeTensorError| SourceError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let prefix: [u8; 8] = head
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| invalid(safetensors::SafeTensorError::HeaderTooSmall))?;
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER as u64 {
        return Err(invalid(safetensors::SafeTensorError::HeaderTooLarge));
    }
    if 8 + n > total {
        return Err(SourceError::Truncated {
            path: path.to_path_buf(),
            reason: format!("its header says it is {n} bytes long, but the file has {total} bytes"),
        });
    }
    Ok(n as usize)
}

/// Refuses a header that names a tensor twice (JSON allows it; the `safetensors` crate keeps
/// the last), or lists more entries than the tensor-count limit (checked before each one is
/// kept: what is kept is bounded by the limit).
fn unique_names(path: &Path, json: &str, limits: &Limits) -> Result<(), SourceError> {
    struct Names<'l>(&'l Limits);
    impl<'de> serde::de::DeserializeSeed<'de> for Names<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Names<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(name) = map.next_key::<String>()? {
                // The tensors and `__metadata__`.
                if seen.len() > self.0.max_tensor_count {
                    return Err(serde::de::Error::custom(format!(
                        "more than {} tensors, the tensor-count limit",
                        self.0.max_tensor_count
                    )));
                }
                if name == "__metadata__" {
                    // Its entries are bounded as a pack's metadata is (each becomes a string
                    // pair in memory, and an entry of a converted pack).
                    map.next_value_seed(Entries(self.0.max_tensor_count))?;
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                if !seen.insert(name.clone()) {
                    return Err(serde::de::Error::custom(format!(
                        "'{name}' is listed twice in the header (one of them would be dropped)"
                    )));
                }
            }
            Ok(())
        }
    }
    /// `__metadata__` (or `null`), counted: at most the given number of entries.
    struct Entries(usize);
    impl<'de> serde::de::DeserializeSeed<'de> for Entries {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_option(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object of strings")
        }
        fn visit_none<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut count = 0usize;
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {
                count += 1;
                if count > self.0 {
                    return Err(serde::de::Error::custom(format!(
                        "__metadata__ has more than {} entries, the metadata entry limit",
                        self.0
                    )));
                }
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(json);
    serde::de::DeserializeSeed::deserialize(Names(limits), &mut de).map_err(|e| {
        SourceError::Invalid {
            path: path.to_path_buf(),
            reason: format!("invalid header: {e}"),
        }
    })
}

/// The `safetensors` crate's own bound on a header (100 MB).
pub(super) const MAX_HEADER: usize = 100_000_000;
