//! A GGUF file's header: magic, version, typed key/value metadata and the tensor table, read
//! in order from any `Read` (a file read with ordinary reads, or bytes), every count and length
//! checked against what the input still holds and against the limits before anything is
//! allocated for it.

use std::io::Read;

use super::value::{Array, Value};
use crate::format::Limits;

/// The magic number: `GGUF` as bytes.
pub(super) const MAGIC: &[u8; 4] = b"GGUF";

/// Alignment of the data section and of every tensor, unless `general.alignment` says another.
const DEFAULT_ALIGNMENT: u64 = 32;

/// Longest tensor name read (llama.cpp allows 64 bytes; files with longer ones exist).
const MAX_NAME: u64 = 64 << 10;

/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// A tensor as the table declares it.
pub(super) struct RawTensor {
    pub name: String,
    /// ggml's dimensions, fastest first.
    pub dims: Vec<u64>,
    pub type_id: u32,
    /// From the start of the data section.
    pub offset: u64,
}

/// Why a header could not be read: the file ends first, a format this crate recognises but
/// does not read (big-endian, another version), or anything else wrong.
pub(super) enum HeaderError {
    Truncated(String),
    Unsupported(String),
    Invalid(String),
}

impl From<String> for HeaderError {
    fn from(reason: String) -> Self {
        Self::Invalid(reason)
    }
}

/// A parsed header.
pub(super) struct Header {
    pub version: u32,
    /// In file order; no key twice.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<RawTensor>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_start: u64,
}

/// Reads primitives, counting what was read against the input's length.
struct Input<R> {
    inner: R,
    at: u64,
    len: u64,
    depth: usize,
    max_depth: usize,
    /// The header may not be longer than this (`Limits::max_metadata_size`).
    max_header: u64,
    /// Whether the last error was the file ending first.
    ended: bool,
}

impl<R: Read> Input<R> {
    fn left(&self) -> u64 {
        self.len.saturating_sub(self.at)
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        if self.left() < N as u64 {
            self.ended = true;
            return Err(format!("the file ends in {what}"));
        }
        self.within_limit(N as u64)?;
        self.inner
            .read_exact(&mut out)
            .map_err(|e| format!("cannot read {what}: {e}"))?;
        self.at += N as u64;
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.bytes::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.bytes::<8>(what).map(u64::from_le_bytes)
    }

    /// `count` items of at least `each` bytes: refused when the input cannot hold them, before
    /// anything is allocated for them.
    fn count(&mut self, count: u64, each: u64, what: &str) -> Result<usize, String> {
        if count.saturating_mul(each) > self.left() {
            self.ended = true;
            return Err(format!(
                "{what}: {count} items, more than the {} bytes left in the file can hold",
                self.left()
            ));
        }
        usize::try_from(count).map_err(|_| format!("{what}: {count} items"))
    }

    /// The header is bounded by the metadata-size limit: checked before `more` bytes are
    /// read (and kept).
    fn within_limit(&self, more: u64) -> Result<(), String> {
        if self.at.saturating_add(more) > self.max_header {
            return Err(format!(
                "the header (metadata and tensor table) passes the metadata-size limit of {} \
                 bytes (raise `Limits::max_metadata_size` if you trust this file)",
                self.max_header
            ));
        }
        Ok(())
    }

    fn string(&mut self, max: u64, what: &str) -> Result<String, String> {
        let len = self.u64(what)?;
        if len > self.left() {
            self.ended = true;
        }
        if len > max || len > self.left() {
            return Err(format!(
                "{what}: a string of {len} bytes (the file has {} left; at most {max})",
                self.left()
            ));
        }
        self.within_limit(len)?;
        let mut out = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut out)
            .map_err(|e| format!("cannot read {what}: {e}"))?;
        self.at += len;
        String::from_utf8(out).map_err(|_| format!("{what}: a string that is not UTF-8"))
    }

    /// A value of type `kind` (GGUF's `gguf_type`).
    fn value(&mut self, kind: u32, what: &str) -> Result<Value, String> {
        Ok(match kind {
            0 => Value::U8(self.bytes::<1>(what)?[0]),
            1 => Value::I8(i8::from_le_bytes(self.bytes::<1>(what)?)),
            2 => Value::U16(u16::from_le_bytes(self.bytes::<2>(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes::<2>(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.bytes::<4>(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes::<4>(what)?)),
            7 => Value::Bool(self.bool(what)?),
            8 => Value::String(self.string(u64::MAX, what)?),
            9 => Value::Array(self.array(what)?),
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.bytes::<8>(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes::<8>(what)?)),
            other => return Err(format!("{what}: a value of unknown type {other}")),
        })
    }

    fn bool(&mut self, what: &str) -> Result<bool, String> {
        match self.bytes::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{what}: a bool of value {other}")),
        }
    }

    fn array(&mut self, what: &str) -> Result<Array, String> {
        if self.depth >= self.max_depth {
            return Err(format!(
                "{what}: arrays nested deeper than {}",
                self.max_depth
            ));
        }
        self.depth += 1;
        let kind = self.u32(what)?;
        let count = self.u64(what)?;
        // Every item's least size in the file: what bounds what is allocated for them.
        let each = match kind {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            other => return Err(format!("{what}: an array of unknown type {other}")),
        };
        let n = self.count(count, each, what)?;
        macro_rules! items {
            ($variant:ident, $read:expr) => {{
                // Grown as items are read: what is kept is bounded by what the file holds, not
                // by what the count says.
                let mut out = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    out.push($read(&mut *self)?);
                }
                Array::$variant(out)
            }};
        }
        let array = match kind {
            0 => items!(U8, |s: &mut Self| s.bytes::<1>(what).map(|b| b[0])),
            1 => items!(I8, |s: &mut Self| s.bytes::<1>(what).map(i8::from_le_bytes)),
            2 => items!(U16, |s: &mut Self| s
                .bytes::<2>(what)
                .map(u16::from_le_bytes)),
            3 => items!(I16, |s: &mut Self| s
                .bytes::<2>(what)
                .map(i16::from_le_bytes)),
            4 => items!(U32, |s: &mut Self| s.u32(what)),
            5 => items!(I32, |s: &mut Self| s
                .bytes::<4>(what)
                .map(i32::from_le_bytes)),
            6 => items!(F32, |s: &mut Self| s
                .bytes::<4>(what)
                .map(f32::from_le_bytes)),
            7 => items!(Bool, |s: &mut Self| s.bool(what)),
            8 => items!(String, |s: &mut Self| s.string(u64::MAX, what)),
            10 => items!(U64, |s: &mut Self| s.u64(what)),
            11 => items!(I64, |s: &mut Self| s
                .bytes::<8>(what)
                .map(i64::from_le_bytes)),
            12 => items!(F64, |s: &mut Self| s
                .bytes::<8>(what)
                .map(f64::from_le_bytes)),
            _ => items!(Array, |s: &mut Self| s.array(what)),
        };
        self.depth -= 1;
        Ok(array)
    }
}

/// Reads the header of a GGUF file of `len` bytes from `inner` (positioned at its start).
pub(super) fn read(inner: impl Read, len: u64, limits: &Limits) -> Result<Header, HeaderError> {
    let mut input = Input {
        inner,
        at: 0,
        len,
        depth: 0,
        max_depth: limits.max_cbor_depth,
        max_header: u64::from(limits.max_metadata_size),
        ended: false,
    };
    read_with(&mut input, limits).map_err(|reason| match reason {
        HeaderError::Invalid(reason) if input.ended => HeaderError::Truncated(reason),
        other => other,
    })
}

fn read_with<R: Read>(input: &mut Input<R>, limits: &Limits) -> Result<Header, HeaderError> {
    let magic = input.bytes::<4>("the magic number")?;
    if &magic != MAGIC {
        return Err(HeaderError::Invalid(
            "not a GGUF file (its first bytes are not GGUF)".into(),
        ));
    }
    let version = input.u32("the version")?;
    if (1..=3).contains(&version.swap_bytes()) {
        return Err(HeaderError::Unsupported(format!(
            "a big-endian GGUF file (version {}): only little-endian files are read",
            version.swap_bytes()
        )));
    }
    if !(2..=3).contains(&version) {
        return Err(HeaderError::Unsupported(format!(
            "GGUF version {version}: versions 2 and 3 are read"
        )));
    }
    let tensor_count = input.u64("the tensor count")?;
    let kv_count = input.u64("the metadata count")?;
    if tensor_count > limits.max_tensor_count as u64 {
        return Err(HeaderError::Invalid(format!(
            "{tensor_count} tensors, over the tensor-count limit of {}",
            limits.max_tensor_count
        )));
    }
    if kv_count > limits.max_tensor_count as u64 {
        return Err(HeaderError::Invalid(format!(
            "{kv_count} metadata entries, over the limit of {} entries in a map",
            limits.max_tensor_count
        )));
    }
    // A key is at least its length (8), a type (4) and a byte of value.
    let kv_count = input.count(kv_count, 13, "the metadata")?;
    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(kv_count.min(1 << 16));
    let mut keys = std::collections::HashSet::new();
    for i in 0..kv_count {
        let key = input.string(MAX_NAME, &format!("metadata key {i}"))?;
        let kind = input.u32(&format!("the type of '{key}'"))?;
        let value = input.value(kind, &format!("metadata '{key}'"))?;
        if !keys.insert(key.clone()) {
            return Err(HeaderError::Invalid(format!(
                "metadata key '{key}' is given twice (one value would be lost)"
            )));
        }
        metadata.push((key, value));
    }
    // A tensor's entry is at least a name (8), its rank (4), a type (4) and an offset (8).
    let count = input.count(tensor_count, 24, "the tensor table")?;
    let mut tensors = Vec::with_capacity(count);
    for i in 0..count {
        let name = input.string(MAX_NAME, &format!("the name of tensor {i}"))?;
        let what = format!("tensor '{name}'");
        let rank = input.u32(&what)?;
        if rank > MAX_DIMS {
            return Err(HeaderError::Invalid(format!(
                "{what}: {rank} dimensions (ggml has at most {MAX_DIMS})"
            )));
        }
        let dims = (0..rank)
            .map(|_| input.u64(&what))
            .collect::<Result<Vec<u64>, String>>()?;
        if let Some(d) = dims.iter().find(|&&d| i64::try_from(d).is_err()) {
            return Err(HeaderError::Invalid(format!(
                "{what}: a dimension of {d}, past ggml's signed 64-bit sizes"
            )));
        }
        let type_id = input.u32(&what)?;
        let offset = input.u64(&what)?;
        tensors.push(RawTensor {
            name,
            dims,
            type_id,
            offset,
        });
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, other)) => {
            return Err(HeaderError::Invalid(format!(
                "general.alignment is {other}: a power of two of type u32 is expected"
            )));
        }
    };
    let data_start = input.at.div_ceil(alignment) * alignment;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}
