//! The direct decoder for metadata in the canonical form Burn 0.22 and this crate write:
//! definite lengths, the known keys, text dtypes (and `{"Bool": store}`). It reads CBOR heads
//! with `ciborium_ll` and builds the [`Metadata`] without serde's per-item machinery, so a
//! pack of 10,000 tensors opens several times faster. It answers `None` for anything it does
//! not handle, and opening a file ([`Layout::parse`](super::Layout::parse)) then runs the
//! general decoder, which gives the same value or the error; so it never accepts what that one
//! refuses.

#[allow(unused_imports)]
use super::prelude::*;

use burn::tensor::DType;
use ciborium_ll::{Decoder, Header, simple};

use super::dtype::{bool_store_from_name, dtype_from_name};
use super::limits::Limits;
use super::metadata::Metadata;
use super::scalar::Scalar;
use super::table::{Dims, Row, Table};

struct Cursor<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// The next CBOR head. Integer, string, array, map and tag heads (all but a few bytes
    /// of a pack's metadata) are read here directly: a `ciborium_ll` decoder built for each of
    /// the ~50,000 heads of a 10,000-tensor pack was a fifth of its open. Simple values and
    /// floats go to `ciborium_ll`.
    fn header(&mut self) -> Option<Header> {
        let initial = *self.input.get(self.pos)?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        if major == 7 {
            let mut decoder = Decoder::from(self.input.get(self.pos..)?);
            let header = decoder.pull().ok()?;
            self.pos += decoder.offset();
            return Some(header);
        }
        let argument = match info {
            0..=23 => Some(u64::from(info)),
            24..=27 => {
                let width = 1usize << (info - 24);
                let bytes = self.input.get(self.pos + 1..self.pos + 1 + width)?;
                self.pos += width;
                Some(bytes.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b)))
            }
            31 => None,
            _ => return None,
        };
        self.pos += 1;
        let length = |n: Option<u64>| n.map(usize::try_from).transpose().ok();
        Some(match major {
            0 => Header::Positive(argument?),
            1 => Header::Negative(argument?),
            2 => Header::Bytes(length(argument)?),
            3 => Header::Text(length(argument)?),
            4 => Header::Array(length(argument)?),
            5 => Header::Map(length(argument)?),
            _ => Header::Tag(argument?),
        })
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(len)?;
        let taken = self.input.get(self.pos..end)?;
        self.pos = end;
        Some(taken)
    }

    fn text(&mut self) -> Option<&'a str> {
        match self.header()? {
            Header::Text(Some(len)) => core::str::from_utf8(self.take(len)?).ok(),
            _ => None,
        }
    }

    /// A text head and its bytes, unvalidated: for matching against known ASCII keys, where
    /// text that is not UTF-8 matches none of them (and is then refused as before).
    fn key(&mut self) -> Option<&'a [u8]> {
        match self.header()? {
            Header::Text(Some(len)) => self.take(len),
            _ => None,
        }
    }

    /// A definite map's length, if it is within `max` entries.
    fn map(&mut self, max: usize) -> Option<usize> {
        match self.header()? {
            Header::Map(Some(len)) if len <= max => Some(len),
            _ => None,
        }
    }

    fn uint(&mut self) -> Option<u64> {
        match self.header()? {
            Header::Positive(n) => Some(n),
            _ => None,
        }
    }

    /// A definite array of unsigned integers (at most `remaining` bytes' worth).
    fn uints(&mut self) -> Option<Dims<u64>> {
        let Header::Array(Some(len)) = self.header()? else {
            return None;
        };
        // Every element takes at least one byte: the length is bounded by the input.
        if len > self.input.len() - self.pos {
            return None;
        }
        (0..len).map(|_| self.uint()).collect()
    }
}

/// The metadata and where its map ends.
#[cfg(test)]
pub(super) fn decode(bytes: &[u8], limits: &Limits) -> Option<(Metadata, usize)> {
    let (table, mut meta, end) = decode_table(bytes, limits)?;
    meta.tensors = table.into_pairs();
    Some((meta, end))
}

/// The tensors as a [`Table`], the rest of the metadata (its `tensors` empty), and where the
/// map ends.
pub(super) fn decode_table(bytes: &[u8], limits: &Limits) -> Option<(Table, Metadata, usize)> {
    let mut c = Cursor {
        input: bytes,
        pos: 0,
    };
    let mut meta = Metadata::default();
    let mut tensors = None;
    for _ in 0..c.map(4)? {
        match c.text()? {
            "tensors" if tensors.is_none() => {
                tensors = Some(table(&mut c, limits)?);
            }
            "metadata" if meta.metadata.is_empty() => {
                meta.metadata = pairs(&mut c, limits, |c| c.text().map(str::to_owned))?;
            }
            "scalars" if meta.scalars.is_empty() => {
                meta.scalars = pairs(&mut c, limits, scalar)?;
            }
            "checksums" if meta.checksums.is_none() => match c.header()? {
                Header::Bytes(Some(len)) => meta.checksums = Some(c.take(len)?.to_vec()),
                _ => return None,
            },
            _ => return None,
        }
    }
    Some((tensors?, meta, c.pos))
}

/// The `tensors` map: names into one buffer, descriptors beside them.
fn table(c: &mut Cursor<'_>, limits: &Limits) -> Option<Table> {
    let len = c.map(limits.max_tensor_count)?;
    // Each entry takes at least two bytes, so the input bounds the allocation too.
    if len > c.input.len() - c.pos {
        return None;
    }
    // The names are within the rest of the input: one buffer of that size (pages are only
    // touched as names fill them) never grows.
    let mut table = Table::with_capacity(len, c.input.len() - c.pos);
    for _ in 0..len {
        let name = table.push_name(c.text()?);
        table.rows.push(descriptor(c, name)?);
    }
    Some(table)
}

fn pairs<'a, V>(
    c: &mut Cursor<'a>,
    limits: &Limits,
    value: impl Fn(&mut Cursor<'a>) -> Option<V>,
) -> Option<Vec<(String, V)>> {
    let len = c.map(limits.max_tensor_count)?;
    // Each entry takes at least two bytes, so the input bounds the allocation too.
    if len > c.input.len() - c.pos {
        return None;
    }
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        let key = c.text()?.to_owned();
        out.push((key, value(c)?));
    }
    Some(out)
}

fn descriptor(c: &mut Cursor<'_>, name: (usize, usize)) -> Option<Row> {
    let fields = c.map(4)?;
    let (mut dtype, mut shape, mut offsets, mut param_id) = (None, None, None, None);
    for _ in 0..fields {
        match c.key()? {
            b"dtype" if dtype.is_none() => dtype = Some(self::dtype(c)?),
            b"shape" if shape.is_none() => shape = Some(c.uints()?),
            b"data_offsets" if offsets.is_none() => match c.header()? {
                Header::Array(Some(2)) => offsets = Some((c.uint()?, c.uint()?)),
                _ => return None,
            },
            b"param_id" if param_id.is_none() => param_id = Some(c.uint()?),
            _ => return None,
        }
    }
    Some(Row {
        name,
        dtype: dtype?,
        shape: shape?,
        data_offsets: offsets?,
        param_id,
    })
}

fn dtype(c: &mut Cursor<'_>) -> Option<DType> {
    match c.header()? {
        Header::Text(Some(len)) => dtype_from_name(c.take(len)?),
        Header::Map(Some(1)) => {
            if c.text()? != "Bool" {
                return None;
            }
            Some(DType::Bool(bool_store_from_name(c.text()?)?))
        }
        _ => None,
    }
}

fn scalar(c: &mut Cursor<'_>) -> Option<Scalar> {
    if c.map(1)? != 1 {
        return None;
    }
    let kind = c.text()?;
    Some(match (kind, c.header()?) {
        ("Int", Header::Positive(n)) => Scalar::Int(i64::try_from(n).ok()?),
        ("Int", Header::Negative(n)) => Scalar::Int(-1 - i64::try_from(n).ok()?),
        ("UInt", Header::Positive(n)) => Scalar::UInt(n),
        ("Float", Header::Float(f)) => Scalar::Float(f),
        ("Bool", Header::Simple(simple::FALSE)) => Scalar::Bool(false),
        ("Bool", Header::Simple(simple::TRUE)) => Scalar::Bool(true),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use burn::tensor::DType;
    use burn::tensor::quantization::QuantScheme;

    use super::decode;
    use crate::format::limits::Limits;
    use crate::format::metadata::{Extras, Metadata};
    use crate::format::scalar::Scalar;
    use crate::format::table::Descriptor;

    fn sample() -> Metadata {
        let dtypes = crate::format::PLAIN_DTYPES;
        let tensors = dtypes
            .iter()
            .enumerate()
            .map(|(i, &dtype)| {
                let len = dtype.size() as u64 * 6;
                (
                    format!("t{i:02}"),
                    Descriptor {
                        dtype,
                        shape: if i == 3 { vec![] } else { vec![2, 3] },
                        data_offsets: (i as u64 * 256, i as u64 * 256 + len),
                        param_id: (i % 2 == 0).then_some(u64::MAX - i as u64),
                    },
                )
            })
            .collect();
        Metadata {
            tensors,
            metadata: vec![("a".into(), "b".into()), ("producer".into(), "x".into())],
            scalars: vec![
                ("f".into(), Scalar::Float(0.5)),
                ("i".into(), Scalar::Int(-70_000)),
                ("n".into(), Scalar::Bool(true)),
                ("u".into(), Scalar::UInt(u64::MAX)),
            ],
            checksums: Some((0..136).collect()),
        }
    }

    #[test]
    fn direct_and_general_decoders_agree_on_canonical_metadata() {
        let meta = sample();
        let bytes = meta.encode().unwrap();
        let limits = Limits::default();
        assert_eq!(decode(&bytes, &limits), Some((meta.clone(), bytes.len())));
        assert_eq!(
            Metadata::decode_general(&bytes, &limits).unwrap(),
            (meta.clone(), Extras::default())
        );
        // Quantized dtypes go the general way.
        let mut quantized = meta;
        quantized.tensors[0].1.dtype = DType::QFloat(QuantScheme::default());
        let bytes = quantized.encode().unwrap();
        assert_eq!(decode(&bytes, &limits), None);
        assert_eq!(Metadata::decode(&bytes, &limits).unwrap(), quantized);
    }

    /// The direct decoder never accepts what the general one refuses, nor reads it otherwise:
    /// every single-byte change of a canonical blob (each byte set to every value).
    #[test]
    fn direct_decoder_accepts_only_what_the_general_one_reads_the_same() {
        let bytes = sample().encode().unwrap();
        let limits = Limits::default();
        let mut direct = 0;
        for at in 0..bytes.len() {
            for value in 0..=255u8 {
                let mut changed = bytes.clone();
                changed[at] = value;
                if let Some((meta, end)) = decode(&changed, &limits) {
                    direct += 1;
                    let general = Metadata::decode_general(&changed, &limits)
                        .ok()
                        .map(|(meta, extras)| (meta, extras.trailing));
                    // Compared as text: a changed float may be NaN, which is not equal to itself.
                    assert_eq!(
                        format!("{general:?}"),
                        format!("{:?}", Some((meta, changed.len() - end))),
                        "byte {at} set to {value:#04x}"
                    );
                }
            }
        }
        assert!(direct > bytes.len(), "the direct path was exercised");
    }

    #[test]
    fn direct_decoder_leaves_limits_and_malformed_input_to_the_general_one() {
        let limits = Limits {
            max_tensor_count: 3,
            ..Limits::default()
        };
        let bytes = sample().encode().unwrap();
        assert_eq!(decode(&bytes, &limits), None);
        assert!(Metadata::decode(&bytes, &limits).is_err());
        let mut trailing = bytes;
        trailing.push(0);
        assert!(Metadata::decode(&trailing, &Limits::default()).is_err());
        let (_, extras) = Metadata::decode_lenient(&trailing, &Limits::default()).unwrap();
        assert_eq!(extras.trailing, 1);
    }
}
