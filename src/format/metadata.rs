//! The CBOR metadata blob: tensor descriptors, string metadata and typed scalars.
//!
//! Encoding goes through serde and ciborium with the same shapes Burn 0.22 uses, so the bytes
//! are identical to Burn's. Decoding keeps every map as a list of pairs in file order, so
//! duplicate keys are caught instead of silently collapsed, and refuses maps with more entries
//! than the [`Limits`] allow before it stores any of them.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use burn::tensor::DType;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::error::FormatError;
use super::limits::Limits;

/// One tensor's entry in the metadata, exactly as stored.
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::format::Descriptor;
/// let d = Descriptor { dtype: DType::F32, shape: vec![2], data_offsets: (0, 8), param_id: None };
/// assert_eq!(d.data_offsets.1 - d.data_offsets.0, 8);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Descriptor {
    /// Element type.
    pub dtype: DType,
    /// Dimensions; empty for a scalar tensor.
    pub shape: Vec<u64>,
    /// `[start, end)` relative to the data section.
    pub data_offsets: (u64, u64),
    /// The parameter's `ParamId`, when the tensor is a module parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_id: Option<u64>,
}

/// A typed scalar stored in the metadata (an epoch, a learning rate, a flag).
///
/// Serialized as Burn's `burn_pack::Scalar` is: `{"Int": i64}`, `{"UInt": u64}`,
/// `{"Float": f64}` or `{"Bool": bool}`.
///
/// ```
/// use burnpack::format::Scalar;
/// let s = Scalar::from(7u32);
/// assert_eq!(s, Scalar::UInt(7));
/// assert_eq!(u8::try_from(s).unwrap(), 7);
/// assert!(bool::try_from(s).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// A [`Scalar`] could not become the requested type (wrong kind, or out of range).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("scalar {0:?} does not fit the requested type")]
pub struct ScalarConversionError(pub Scalar);

macro_rules! scalar_ints {
    ($($t:ty => $variant:ident),*) => {$(
        impl From<$t> for Scalar {
            fn from(value: $t) -> Self {
                Scalar::$variant(value.into())
            }
        }
        impl TryFrom<Scalar> for $t {
            type Error = ScalarConversionError;
            fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
                let fitted = match scalar {
                    Scalar::Int(v) => v.try_into().ok(),
                    Scalar::UInt(v) => v.try_into().ok(),
                    Scalar::Float(_) | Scalar::Bool(_) => None,
                };
                fitted.ok_or(ScalarConversionError(scalar))
            }
        }
    )*};
}
scalar_ints!(i8 => Int, i16 => Int, i32 => Int, i64 => Int, u8 => UInt, u16 => UInt, u32 => UInt, u64 => UInt);

impl From<usize> for Scalar {
    fn from(value: usize) -> Self {
        Scalar::UInt(value as u64)
    }
}

impl TryFrom<Scalar> for usize {
    type Error = ScalarConversionError;
    fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
        u64::try_from(scalar)?
            .try_into()
            .map_err(|_| ScalarConversionError(scalar))
    }
}

impl From<f64> for Scalar {
    fn from(value: f64) -> Self {
        Scalar::Float(value)
    }
}

impl From<f32> for Scalar {
    fn from(value: f32) -> Self {
        Scalar::Float(value.into())
    }
}

impl From<bool> for Scalar {
    fn from(value: bool) -> Self {
        Scalar::Bool(value)
    }
}

impl TryFrom<Scalar> for f64 {
    type Error = ScalarConversionError;
    #[allow(clippy::cast_precision_loss)] // documented: integers convert to the nearest f64
    fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
        match scalar {
            Scalar::Float(v) => Ok(v),
            Scalar::Int(v) => Ok(v as f64),
            Scalar::UInt(v) => Ok(v as f64),
            Scalar::Bool(_) => Err(ScalarConversionError(scalar)),
        }
    }
}

impl TryFrom<Scalar> for bool {
    type Error = ScalarConversionError;
    fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
        match scalar {
            Scalar::Bool(v) => Ok(v),
            _ => Err(ScalarConversionError(scalar)),
        }
    }
}

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
        let len = 1
            + usize::from(!self.metadata.is_empty())
            + usize::from(!self.scalars.is_empty())
            + usize::from(self.checksums.is_some());
        let mut map = serializer.serialize_map(Some(len))?;
        map.serialize_entry("tensors", &PairsRef(&self.tensors))?;
        if !self.metadata.is_empty() {
            map.serialize_entry("metadata", &PairsRef(&self.metadata))?;
        }
        if !self.scalars.is_empty() {
            map.serialize_entry("scalars", &PairsRef(&self.scalars))?;
        }
        if let Some(checksums) = &self.checksums {
            map.serialize_entry("checksums", &ByteString(checksums))?;
        }
        map.end()
    }
}

impl Metadata {
    /// Encodes the blob as Burn 0.22 does (definite lengths, shortest integers).
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
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        // ciborium only exposes `DeserializeOwned` entry points, so the entry limit reaches the
        // visitors through this thread's decode state rather than a `DeserializeSeed`.
        DECODE.with(|state| {
            state.set(DecodeState {
                max_entries: limits.max_tensor_count,
                exceeded: None,
            });
        });
        let mut rest = bytes;
        let result = ciborium::de::from_reader_with_recursion_limit::<Decoded, _>(
            &mut rest,
            limits.max_cbor_depth,
        );
        let exceeded = DECODE.with(|state| state.replace(DecodeState::default()).exceeded);
        match (result, exceeded) {
            // Burn writes exactly the map: bytes after it mean a damaged length somewhere (a
            // map or string that now ends early), not a longer file.
            (Ok(_), _) if !rest.is_empty() => Err(FormatError::Metadata {
                reason: format!(
                    "{} bytes follow the end of the metadata map (a damaged length?)",
                    rest.len()
                ),
            }),
            (Ok(Decoded(meta)), _) => Ok(meta),
            (Err(_), Some(count)) => Err(FormatError::LimitExceeded {
                what: "tensor count",
                size: count as u64,
                limit: limits.max_tensor_count as u64,
            }),
            (Err(e), None) => Err(FormatError::Metadata {
                reason: e.to_string(),
            }),
        }
    }
}

/// The limit in force for the decode running on this thread, and whether it was hit.
#[derive(Clone, Copy, Default)]
struct DecodeState {
    max_entries: usize,
    exceeded: Option<usize>,
}

thread_local! {
    static DECODE: Cell<DecodeState> = const { Cell::new(DecodeState { max_entries: 0, exceeded: None }) };
}

/// The top-level map, decoded under the thread's [`DecodeState`].
struct Decoded(Metadata);

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
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "tensors" => tensors = Some(map.next_value::<Pairs<Descriptor>>()?.0),
                "metadata" => meta.metadata = map.next_value::<Pairs<String>>()?.0,
                "scalars" => meta.scalars = map.next_value::<Pairs<Scalar>>()?.0,
                "checksums" => meta.checksums = Some(map.next_value::<ByteBuf>()?.0),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        meta.tensors = tensors.ok_or_else(|| de::Error::missing_field("tensors"))?;
        Ok(Decoded(meta))
    }
}

/// One map decoded into pairs, refused as soon as it has too many entries.
struct Pairs<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Pairs<V> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PairsVisitor(std::marker::PhantomData))
    }
}

struct PairsVisitor<V>(std::marker::PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<V> {
    type Value = Pairs<V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map with text keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs<V>, A::Error> {
        let max = DECODE.with(|state| state.get().max_entries);
        let too_many = |count: usize| {
            DECODE.with(|state| {
                state.set(DecodeState {
                    max_entries: max,
                    exceeded: Some(count),
                });
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
