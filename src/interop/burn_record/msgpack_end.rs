//! Where a `MessagePack` value ends, found from its markers and lengths alone: no payload byte
//! (a tensor's `bin`) is read or copied, so checking that nothing follows a mapped record
//! costs the structure's size, not the file's.

/// The offset just past the one `MessagePack` value at the start of `bytes`, or why it cannot
/// be found (truncated, or the never-used marker `0xc1`).
///
/// Values are counted, not recursed into: an array of `n` adds `n` values to skip, a map of
/// `n` adds `2n`, so nesting depth costs nothing. Every value takes at least one byte, so a
/// count above the bytes left is refused before it is worked through.
pub(super) fn value_end(bytes: &[u8]) -> Result<usize, String> {
    let truncated = |at: usize| format!("the MessagePack value is cut short at byte {at}");
    let mut at = 0usize;
    let mut pending: u64 = 1;
    // A big-endian length of `n` bytes at `at`.
    let length = |at: usize, n: usize| -> Result<u64, String> {
        let field = bytes.get(at..at + n).ok_or_else(|| truncated(at))?;
        Ok(field.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    };
    while pending > 0 {
        pending -= 1;
        let marker = *bytes.get(at).ok_or_else(|| truncated(at))?;
        at += 1;
        // (bytes of length field, fixed payload bytes, payload length, child values)
        let (payload, children): (u64, u64) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(marker & 0x0f)),
            0x90..=0x9f => (0, u64::from(marker & 0x0f)),
            0xa0..=0xbf => (u64::from(marker & 0x1f), 0),
            0xc1 => return Err(format!("byte {}: marker 0xc1 is never used", at - 1)),
            0xc4 | 0xd9 => (length(at, 1)? + 1, 0),
            0xc5 | 0xda => (length(at, 2)? + 2, 0),
            0xc6 | 0xdb => (length(at, 4)? + 4, 0),
            0xc7 => (length(at, 1)? + 2, 0),
            0xc8 => (length(at, 2)? + 3, 0),
            0xc9 => (length(at, 4)? + 5, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 | 0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (2, length(at, 2)?),
            0xdd => (4, length(at, 4)?),
            0xde => (2, 2 * length(at, 2)?),
            0xdf => (4, 2 * length(at, 4)?),
        };
        let payload = usize::try_from(payload).map_err(|_| truncated(at))?;
        at = at
            .checked_add(payload)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| truncated(at))?;
        pending += children;
        if pending > (bytes.len() - at) as u64 {
            return Err(truncated(bytes.len()));
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::value_end;

    #[test]
    fn ends_match_rmp_serde() {
        use serde::Serialize;
        #[derive(Serialize)]
        struct Record {
            name: String,
            bytes: serde_bytes_like::Bin,
            nested: Vec<Vec<Option<i64>>>,
            floats: (f32, f64),
            map: std::collections::BTreeMap<String, u64>,
        }
        mod serde_bytes_like {
            pub struct Bin(pub Vec<u8>);
            impl serde::Serialize for Bin {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_bytes(&self.0)
                }
            }
        }
        for size in [0usize, 5, 300, 70_000] {
            let record = Record {
                name: "x".repeat(size % 40),
                bytes: serde_bytes_like::Bin(vec![7; size]),
                nested: vec![vec![Some(-5), None, Some(i64::MAX)]; size % 20],
                floats: (1.5, -2.25),
                map: (0..size as u64 % 30)
                    .map(|k| (k.to_string(), k << 40))
                    .collect(),
            };
            let mut bytes = rmp_serde::to_vec_named(&record).unwrap();
            let end = bytes.len();
            assert_eq!(value_end(&bytes), Ok(end));
            bytes.extend_from_slice(&[0x93, 1, 2]);
            assert_eq!(value_end(&bytes), Ok(end));
            assert!(value_end(&bytes[..end - 1]).is_err());
        }
    }

    #[test]
    fn hostile_counts_and_markers_are_refused() {
        assert!(value_end(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(value_end(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        assert!(value_end(&[0xc6, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(value_end(&[0xc1]).is_err());
        assert!(value_end(&[]).is_err());
        assert_eq!(value_end(&[0x91, 0x91, 0x91, 0xc0]), Ok(4));
    }
}
