//! The protobuf wire format, walked without decoding: each field of a message as its number
//! and its value, a length-delimited value as a window of the buffer (with its offset in the
//! file, so that `raw_data` stays a place in the mapping). Lengths are checked against what
//! the buffer holds before anything is taken; varints are at most 10 bytes (prost's own
//! decoder); groups (wire types 3 and 4, which ONNX never writes) are refused by name.

use prost::encoding::decode_varint;

/// A field's value as the wire holds it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    /// A length-delimited value and its absolute offset in the file.
    Bytes(&'a [u8], u64),
}

impl<'a> Wire<'a> {
    /// The length-delimited value, or an error naming the field.
    pub(super) fn bytes(self, what: &str) -> Result<(&'a [u8], u64), String> {
        match self {
            Wire::Bytes(data, at) => Ok((data, at)),
            _ => Err(format!("{what} is not length-delimited on the wire")),
        }
    }

    /// The varint value, or an error naming the field.
    pub(super) fn varint(self, what: &str) -> Result<u64, String> {
        match self {
            Wire::Varint(v) => Ok(v),
            _ => Err(format!("{what} is not a varint on the wire")),
        }
    }

    /// A UTF-8 string no longer than `max` bytes.
    pub(super) fn string(self, what: &str, max: usize) -> Result<String, String> {
        let (data, _) = self.bytes(what)?;
        if data.len() > max {
            return Err(format!(
                "{what} is {} bytes, over the limit of {max}",
                data.len()
            ));
        }
        std::str::from_utf8(data)
            .map(str::to_string)
            .map_err(|_| format!("{what} is not UTF-8"))
    }
}

/// The fields of one message (`data`, at absolute offset `base`), in wire order.
pub(super) struct Fields<'a> {
    data: &'a [u8],
    at: usize,
    base: u64,
    failed: bool,
}

/// Walks the fields of the message `data`, found at absolute offset `base`.
pub(super) fn fields(data: &[u8], base: u64) -> Fields<'_> {
    Fields {
        data,
        at: 0,
        base,
        failed: false,
    }
}

impl<'a> Fields<'a> {
    fn next_field(&mut self) -> Result<(u32, Wire<'a>), String> {
        let start = self.at;
        let mut rest = &self.data[self.at..];
        let before = rest.len();
        let key = decode_varint(&mut rest)
            .map_err(|e| format!("a field key at byte {}: {e}", self.base + start as u64))?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n > 0 && n < (1 << 29))
            .ok_or_else(|| {
                format!(
                    "field number {} at byte {} is not a protobuf field number",
                    key >> 3,
                    self.base + start as u64
                )
            })?;
        let value = match key & 7 {
            0 => Wire::Varint(decode_varint(&mut rest).map_err(|e| {
                format!("field {number} at byte {}: {e}", self.base + start as u64)
            })?),
            1 => {
                let (word, tail) = rest.split_first_chunk::<8>().ok_or_else(|| {
                    format!(
                        "field {number} at byte {}: past the end",
                        self.base + start as u64
                    )
                })?;
                rest = tail;
                Wire::Fixed64(u64::from_le_bytes(*word))
            }
            5 => {
                let (word, tail) = rest.split_first_chunk::<4>().ok_or_else(|| {
                    format!(
                        "field {number} at byte {}: past the end",
                        self.base + start as u64
                    )
                })?;
                rest = tail;
                Wire::Fixed32(u32::from_le_bytes(*word))
            }
            2 => {
                let len = decode_varint(&mut rest).map_err(|e| {
                    format!("field {number} at byte {}: {e}", self.base + start as u64)
                })?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= rest.len())
                    .ok_or_else(|| {
                        format!(
                            "field {number} at byte {} says it holds {len} bytes, past the end \
                             of its message ({} bytes left)",
                            self.base + start as u64,
                            rest.len()
                        )
                    })?;
                let offset = self.base + (self.at + (before - rest.len())) as u64;
                let (value, tail) = rest.split_at(len);
                rest = tail;
                Wire::Bytes(value, offset)
            }
            t => {
                return Err(format!(
                    "field {number} at byte {} has wire type {t} ({}), which ONNX does not write",
                    self.base + start as u64,
                    if t == 3 || t == 4 {
                        "a group"
                    } else {
                        "unknown"
                    }
                ));
            }
        };
        self.at += before - rest.len();
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Wire<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.data.len() {
            return None;
        }
        let field = self.next_field();
        self.failed = field.is_err();
        Some(field)
    }
}

/// How many varints the packed `data` holds (each ends with a byte under 0x80); an error
/// when the last one is cut.
pub(super) fn count_varints(data: &[u8]) -> Result<u64, String> {
    if data.last().is_some_and(|&b| b & 0x80 != 0) {
        return Err("a packed varint is cut at the end of its field".into());
    }
    Ok(data.iter().filter(|&&b| b & 0x80 == 0).count() as u64)
}

/// Each varint of the packed `data`.
pub(super) fn varints(mut data: &[u8]) -> impl Iterator<Item = Result<u64, String>> + '_ {
    std::iter::from_fn(move || {
        (!data.is_empty()).then(|| decode_varint(&mut data).map_err(|e| e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_walk_and_refuse_what_is_past_the_end() {
        // field 1 varint 7, field 2 bytes "ab", field 3 fixed32.
        let msg = [0x08, 7, 0x12, 2, b'a', b'b', 0x1d, 1, 0, 0, 0];
        let all: Vec<_> = fields(&msg, 100).collect::<Result<_, _>>().unwrap();
        assert!(matches!(all[0], (1, Wire::Varint(7))));
        assert!(matches!(all[1], (2, Wire::Bytes(b"ab", 104))));
        assert!(matches!(all[2], (3, Wire::Fixed32(1))));
        let cut = [0x12, 9, b'a'];
        let err = fields(&cut, 0).next().unwrap().unwrap_err();
        assert!(err.contains("past the end"), "{err}");
        let long = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert!(fields(&long, 0).next().unwrap().is_err());
        let group = [0x0b];
        assert!(
            fields(&group, 0)
                .next()
                .unwrap()
                .unwrap_err()
                .contains("group")
        );
        assert_eq!(count_varints(&[1, 0x80, 1, 5]).unwrap(), 3);
        assert!(count_varints(&[0x80]).is_err());
    }
}
