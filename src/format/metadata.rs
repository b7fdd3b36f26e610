//! The CBOR metadata blob: tensor descriptors, string metadata and typed scalars.
//!
//! Encoding goes through serde and ciborium with the same shapes Burn 0.22 uses, so the bytes
//! are identical to Burn's. Decoding keeps every map as a list of pairs in file order, so
//! duplicate keys are caught instead of silently collapsed, and refuses maps with more entries
//! than the [`Limits`] allow before it stores any of them.

#[allow(unused_imports)]
use super::prelude::*;

use alloc::collections::BTreeMap;
#[cfg(feature = "std")]
use core::cell::Cell;
use core::fmt;

use burn::tensor::DType;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::error::FormatError;
use super::limits::Limits;
use super::scalar::Scalar;
use super::table::Descriptor;

/// The decoded (or to-be-encoded) metadata blob.
///
/// Maps are kept as `(key, value)` lists: in file order after [`Metadata::decode`], and in
/// the order given for [`Metadata::encode`] (Burn writes every map sorted by key; the writer
/// does the same). Unknown top-level keys are ignored when decoding, as Burn does.
///
/// ```
/// use burnpack::format::{Limits, Metadata};
/// let meta = Metadata { metadata: vec![("k".into(), "v".into())], ..Metadata::default() };
/// let bytes = meta.encode().unwrap();
/// assert_eq!(Metadata::decode(&bytes, &Limits::default()).unwrap(), meta);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(clippy::struct_field_names)] // `metadata` is the CBOR key's name, as in Burn
pub struct Metadata {
    /// Tensor descriptors by name.
    pub tensors: Vec<(String, Descriptor)>,
    /// String key/value pairs (omitted from the encoding when empty).
    pub metadata: Vec<(String, String)>,
    /// Typed scalars (omitted from the encoding when empty).
    pub scalars: Vec<(String, Scalar)>,
    /// Checksums (xxh3-64, little-endian): 8 bytes per tensor in the order of `tensors`, then
    /// 8 bytes for the header and metadata ([`metadata_checksum`](super::metadata_checksum) of
    /// everything before them), as one CBOR byte string under the top-level key `checksums`:
    /// the last entry of the map, so its bytes end the metadata blob and can be filled in after
    /// the data is written. Burn's reader ignores the key. Omitted when `None`.
    pub checksums: Option<Vec<u8>>,
}

/// Serializes bytes as one CBOR byte string.
struct ByteString<'a>(&'a [u8]);

impl Serialize for ByteString<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Decodes one CBOR byte string.
struct ByteBuf(Vec<u8>);

impl<'de> Deserialize<'de> for ByteBuf {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteBuf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v))
            }
        }
        deserializer.deserialize_byte_buf(V)
    }
}

/// Serializes a list of pairs as a definite-length CBOR map, in list order.
struct PairsRef<'a, V>(&'a [(String, V)]);

impl<V: Serialize> Serialize for PairsRef<'_, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Blob {
            tensors: PairsRef(&self.tensors),
            metadata: (!self.metadata.is_empty()).then_some(PairsRef(&self.metadata)),
            scalars: (!self.scalars.is_empty()).then_some(PairsRef(&self.scalars)),
            checksums: self.checksums.as_deref(),
        }
        .serialize(serializer)
    }
}

/// The top-level map with borrowed parts: what [`Metadata`] and the writer's plan (which
/// serializes its entries in place, without building descriptors) both encode.
pub(crate) struct Blob<'a, T, M, S> {
    pub tensors: T,
    pub metadata: Option<M>,
    pub scalars: Option<S>,
    pub checksums: Option<&'a [u8]>,
}

impl<T: Serialize, M: Serialize, S: Serialize> Serialize for Blob<'_, T, M, S> {
    fn serialize<Ser: Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        let len = 1
            + usize::from(self.metadata.is_some())
            + usize::from(self.scalars.is_some())
            + usize::from(self.checksums.is_some());
        let mut map = serializer.serialize_map(Some(len))?;
        map.serialize_entry("tensors", &self.tensors)?;
        if let Some(metadata) = &self.metadata {
            map.serialize_entry("metadata", metadata)?;
        }
        if let Some(scalars) = &self.scalars {
            map.serialize_entry("scalars", scalars)?;
        }
        if let Some(checksums) = self.checksums {
            map.serialize_entry("checksums", &ByteString(checksums))?;
        }
        map.end()
    }
}

#[cfg_attr(not(feature = "std"), allow(dead_code))]
impl<T: Serialize, M: Serialize, S: Serialize> Blob<'_, T, M, S> {
    /// Appends the encoded blob to `out` (definite lengths, shortest integers, as Burn 0.22
    /// does).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FormatError> {
        ciborium::ser::into_writer(self, out).map_err(|e| FormatError::Metadata {
            reason: e.to_string(),
        })
    }
}

/// One tensor's descriptor with a borrowed shape, serialized exactly as [`Descriptor`].
#[cfg_attr(not(feature = "std"), allow(dead_code))]
pub(crate) struct DescriptorRef<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data_offsets: (u64, u64),
    pub param_id: Option<u64>,
}

impl Serialize for DescriptorRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s =
            serializer.serialize_struct("Descriptor", 3 + usize::from(self.param_id.is_some()))?;
        s.serialize_field("dtype", &self.dtype)?;
        s.serialize_field("shape", self.shape)?;
        s.serialize_field("data_offsets", &self.data_offsets)?;
        if let Some(id) = &self.param_id {
            s.serialize_field("param_id", id)?;
        }
        s.end()
    }
}

impl Metadata {
    /// Encodes the blob as Burn 0.22 does (definite lengths, shortest integers). The writer
    /// encodes its plan without building a `Metadata`; this is for tests that build files.
    #[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
    ///
    /// # Errors
    /// [`FormatError::Metadata`] if the encoder fails (it cannot for in-memory output, but the
    /// error is passed on rather than unwrapped).
    pub fn encode(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::new();
        ciborium::ser::into_writer(self, &mut out).map_err(|e| FormatError::Metadata {
            reason: e.to_string(),
        })?;
        Ok(out)
    }

    /// Decodes a metadata blob under `limits`: nesting depth and the number of entries of
    /// every map are checked while decoding, before those entries are stored.
    ///
    /// # Errors
    /// [`FormatError::Metadata`] for malformed CBOR, a missing `tensors` map or bytes after
    /// the end of the map,
    /// [`FormatError::LimitExceeded`] for a map with too many entries.
    #[cfg_attr(not(any(test, feature = "internals")), allow(dead_code))]
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let (meta, extras) = Self::decode_lenient(bytes, limits)?;
        match extras.trailing {
            0 => Ok(meta),
            // Burn writes exactly the map: bytes after it mean a damaged length somewhere (a
            // map or string that now ends early), or another writer's padding.
            n => Err(FormatError::Metadata {
                reason: trailing_reason(n),
            }),
        }
    }

    /// Decodes a metadata blob as Burn 0.22's reader does: the CBOR map that starts `bytes`,
    /// whatever follows it (Burn decodes the map and ignores the rest of `metadata_size`),
    /// with the top-level keys this crate does not know ignored. What was ignored is returned
    /// beside the metadata, for verification to report.
    ///
    /// ```
    /// use burnpack::format::{Limits, Metadata};
    /// let mut bytes = Metadata::default().encode().unwrap();
    /// bytes.extend_from_slice(&[0, 0, 0]); // another writer's padding
    /// let (meta, extras) = Metadata::decode_lenient(&bytes, &Limits::default()).unwrap();
    /// assert_eq!((meta, extras.trailing), (Metadata::default(), 3));
    /// assert!(Metadata::decode(&bytes, &Limits::default()).is_err());
    /// ```
    ///
    /// # Errors
    /// As [`decode`](Self::decode), except for bytes after the map.
    pub fn decode_lenient(bytes: &[u8], limits: &Limits) -> Result<(Self, Extras), FormatError> {
        Self::decode_general(bytes, limits)
    }

    /// The general decoder: serde over ciborium, for every encoding of the map.
    pub(super) fn decode_general(
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<(Self, Extras), FormatError> {
        // ciborium only exposes `DeserializeOwned` entry points, so the entry limit reaches the
        // visitors through this thread's decode state rather than a `DeserializeSeed`.
        set_decode_state(DecodeState {
            max_entries: limits.max_tensor_count,
            exceeded: None,
            map: 0,
        });
        let mut rest = bytes;
        let result = ciborium::de::from_reader_with_recursion_limit::<Decoded, _>(
            &mut rest,
            limits.max_cbor_depth,
        );
        let DecodeState {
            exceeded,
            map: exceeded_map,
            ..
        } = decode_state();
        set_decode_state(DecodeState::default());
        match (result, exceeded) {
            (Ok(Decoded(meta, unknown_keys)), _) => Ok((
                meta,
                Extras {
                    unknown_keys,
                    trailing: rest.len(),
                },
            )),
            (Err(_), Some(count)) => Err(FormatError::LimitExceeded {
                what: MAP_COUNTS[usize::from(exceeded_map).min(MAP_COUNTS.len() - 1)],
                size: count as u64,
                limit: limits.max_tensor_count as u64,
            }),
            (Err(e), None) => Err(FormatError::Metadata {
                reason: e.to_string(),
            }),
        }
    }
}

/// What `Metadata::decode_lenient` read past, as Burn's reader does: the file still loads,
/// and verification reports these (see `Reader::verify_structure`).
///
/// ```
/// let extras = burnpack::format::Extras::default();
/// assert!(extras.unknown_keys.is_empty() && extras.trailing == 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    /// Top-level keys other than `tensors`, `metadata`, `scalars` and `checksums`, in file
    /// order (their values were skipped).
    pub unknown_keys: Vec<String>,
    /// Bytes after the end of the CBOR map, inside `metadata_size`.
    pub trailing: usize,
}

/// Why bytes after the metadata map are refused where they are.
pub(crate) fn trailing_reason(n: usize) -> String {
    format!("{n} bytes follow the end of the metadata map (a damaged length?)")
}

/// The limit in force for the decode running on this thread, whether it was hit, and in
/// which map (an index of [`MAP_COUNTS`]).
#[derive(Clone, Copy, Default)]
struct DecodeState {
    max_entries: usize,
    exceeded: Option<usize>,
    map: u8,
}

/// What a [`FormatError::LimitExceeded`] counts, by the map whose entries passed the limit:
/// the tensors, the string metadata, the scalars.
const MAP_COUNTS: [&str; 3] = ["tensor count", "metadata entry count", "scalar count"];

/// Notes which map (an index of [`MAP_COUNTS`]) the decode is in.
fn enter_map(map: u8) {
    let mut state = decode_state();
    state.map = map;
    set_decode_state(state);
}

#[cfg(feature = "std")]
std::thread_local! {
    static DECODE: Cell<DecodeState> = const { Cell::new(DecodeState { max_entries: 0, exceeded: None, map: 0 }) };
}

/// The decode state of this thread.
#[cfg(feature = "std")]
fn decode_state() -> DecodeState {
    DECODE.with(Cell::get)
}

/// Sets the decode state of this thread.
#[cfg(feature = "std")]
fn set_decode_state(state: DecodeState) {
    DECODE.with(|cell| cell.set(state));
}

/// Without `std` there are no thread-locals: the state is one global pair of atomics, which
/// assumes (as `no_std` targets do) one decode at a time; two at once on two cores could see
/// each other's limit (never an unbounded one: the limit is set before each decode).
#[cfg(not(feature = "std"))]
static DECODE: [core::sync::atomic::AtomicUsize; 3] = [
    core::sync::atomic::AtomicUsize::new(0),
    core::sync::atomic::AtomicUsize::new(usize::MAX),
    core::sync::atomic::AtomicUsize::new(0),
];

#[cfg(not(feature = "std"))]
fn decode_state() -> DecodeState {
    use core::sync::atomic::Ordering::SeqCst;
    let exceeded = DECODE[1].load(SeqCst);
    DecodeState {
        max_entries: DECODE[0].load(SeqCst),
        exceeded: (exceeded != usize::MAX).then_some(exceeded),
        map: u8::try_from(DECODE[2].load(SeqCst)).unwrap_or(0),
    }
}

#[cfg(not(feature = "std"))]
fn set_decode_state(state: DecodeState) {
    use core::sync::atomic::Ordering::SeqCst;
    DECODE[0].store(state.max_entries, SeqCst);
    DECODE[1].store(state.exceeded.unwrap_or(usize::MAX), SeqCst);
    DECODE[2].store(usize::from(state.map), SeqCst);
}

/// The top-level map, decoded under the thread's [`DecodeState`], and its unknown keys.
struct Decoded(Metadata, Vec<String>);

impl<'de> Deserialize<'de> for Decoded {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MetadataVisitor)
    }
}

struct MetadataVisitor;

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = Decoded;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a burnpack metadata map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let mut tensors = None;
        let mut meta = Metadata::default();
        let mut unknown = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "tensors" => {
                    enter_map(0);
                    tensors = Some(map.next_value::<Pairs<Descriptor>>()?.0);
                }
                "metadata" => {
                    enter_map(1);
                    meta.metadata = map.next_value::<Pairs<String>>()?.0;
                }
                "scalars" => {
                    enter_map(2);
                    meta.scalars = map.next_value::<Pairs<Scalar>>()?.0;
                }
                "checksums" => meta.checksums = Some(map.next_value::<ByteBuf>()?.0),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    // Bounded like every map: a map of a million unknown keys is refused.
                    if unknown.len() == decode_state().max_entries {
                        return Err(de::Error::custom("too many unknown top-level keys"));
                    }
                    unknown.push(key);
                }
            }
        }
        meta.tensors = tensors.ok_or_else(|| de::Error::missing_field("tensors"))?;
        Ok(Decoded(meta, unknown))
    }
}

/// One map decoded into pairs, refused as soon as it has too many entries.
struct Pairs<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Pairs<V> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PairsVisitor(core::marker::PhantomData))
    }
}

struct PairsVisitor<V>(core::marker::PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<V> {
    type Value = Pairs<V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map with text keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs<V>, A::Error> {
        let max = decode_state().max_entries;
        let too_many = |count: usize| {
            set_decode_state(DecodeState {
                exceeded: Some(count),
                ..decode_state()
            });
            de::Error::custom(format!(
                "map has {count} entries, more than the limit of {max}"
            ))
        };
        // A definite-length map says its length up front: refuse it before reading any entry.
        let hint = map.size_hint().unwrap_or(0);
        if hint > max {
            return Err(too_many(hint));
        }
        let mut out = Vec::with_capacity(hint.min(4096));
        while let Some((k, v)) = map.next_entry::<String, V>()? {
            if out.len() == max {
                return Err(too_many(out.len() + 1));
            }
            out.push((k, v));
        }
        Ok(Pairs(out))
    }
}

/// Builds sorted, duplicate-free maps from decoded pairs.
pub(crate) fn into_map<V>(
    map: &'static str,
    pairs: Vec<(String, V)>,
) -> Result<BTreeMap<String, V>, FormatError> {
    let mut out = BTreeMap::new();
    for (key, value) in pairs {
        if out.contains_key(&key) {
            return Err(FormatError::DuplicateKey { map, key });
        }
        out.insert(key, value);
    }
    Ok(out)
}
