//! The fields of a reference line read as numbers and split, without a branch a digit or a
//! search call a field: hex digits eight at a time, decimal digits, tabs eight bytes at a
//! time (an open reads some 70 digits and ten tabs a tensor). Text only, no I/O.

/// Each byte's value as a hex digit (either case), `0xFF` for any other byte.
const HEX: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// At most 16 hex digits as a number (no branch a digit: an open reads two such numbers a
/// tensor).
pub(super) fn hex64(digits: &[u8]) -> Option<u64> {
    let (mut value, mut bad) = (0u64, 0u8);
    for &b in digits {
        let digit = HEX[usize::from(b)];
        bad |= digit;
        value = value << 4 | u64::from(digit & 0x0F);
    }
    (digits.len() <= 16 && bad & 0xF0 == 0).then_some(value)
}

/// `text` as a `u64` in decimal digits only: no sign, no leading zero (one text per number).
pub(super) fn decimal(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || bytes.len() > 20 || bytes.len() > 1 && bytes[0] == b'0' {
        return None;
    }
    // At most 19 digits cannot overflow: no check a digit, one for them all; a twentieth
    // (a parameter id past 10^19, half of them) is the one step checked.
    let (head, last) = bytes.split_at(bytes.len().min(19));
    let (mut value, mut bad) = (0u64, false);
    for &b in head {
        let digit = b.wrapping_sub(b'0');
        bad |= digit > 9;
        // Wraps only past a byte that is not a digit, and the text is then refused.
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit));
    }
    if bad {
        return None;
    }
    match last {
        [] => Some(value),
        [b] if b.is_ascii_digit() => value.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    }
}

/// Eight hex digits (either case) as a number, all at once; `None` if one is not a digit.
pub(super) fn hex8(digits: [u8; 8]) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let x = u64::from_le_bytes(digits);
    // Each byte's high bit set where the byte is at least `n` (bytes below 0x80 only: the sum
    // stays inside its byte).
    let at_least = |x: u64, n: u8| x.wrapping_add(ONES * u64::from(0x80 - n)) & HIGH;
    let lower = x | ONES * 0x20;
    let digit = at_least(x, b'0') & !at_least(x, b'9' + 1);
    let letter = at_least(lower, b'a') & !at_least(lower, b'f' + 1);
    if x & HIGH != 0 || (digit | letter) != HIGH {
        return None;
    }
    // Each byte's value (a letter's low four bits are its value less 9), then the eight
    // values packed, the first byte's highest.
    let nibbles = (x & ONES * 0x0F) + (letter >> 7) * 9;
    let pairs = ((nibbles << 4) | (nibbles >> 8)) & 0x00FF_00FF_00FF_00FF;
    let quads = ((pairs << 8) | (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some(((quads << 16) | (quads >> 32)) & 0xFFFF_FFFF)
}

/// Calls `found` with the position of each tab of `line`, in order, while it returns `true`:
/// eight bytes at a time (a line is a dozen fields of a few to 32 bytes; a search call a
/// field costs more than the search).
pub(super) fn for_each_tab(line: &[u8], mut found: impl FnMut(usize) -> bool) {
    const LOW: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const TABS: u64 = 0x0909_0909_0909_0909;
    let mut chunks = line.chunks_exact(8);
    let mut base = 0;
    for chunk in chunks.by_ref() {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default()) ^ TABS;
        // The high bit of each byte that is zero (a tab), exactly (no borrow between bytes).
        let mut zero = !(((word & LOW) + LOW) | word | LOW);
        while zero != 0 {
            if !found(base + (zero.trailing_zeros() / 8) as usize) {
                return;
            }
            zero &= zero - 1;
        }
        base += 8;
    }
    for (i, &b) in chunks.remainder().iter().enumerate() {
        if b == b'\t' && !found(base + i) {
            return;
        }
    }
}

/// A field as an error shows it: at most 40 characters.
pub(super) fn short(text: &str) -> String {
    text.chars().take(40).collect()
}

/// `text` as a number of exactly `digits` hex digits (either case), at most 32.
pub(super) fn hex(text: &str, digits: usize) -> Option<u128> {
    if text.len() != digits || digits > 32 {
        return None;
    }
    let bytes = text.as_bytes();
    if digits % 8 == 0 {
        // The fields of a reference line (16 and 32 digits): eight at a time.
        return bytes.chunks_exact(8).try_fold(0u128, |value, chunk| {
            let eight = hex8(chunk.try_into().unwrap_or_default())?;
            Some(value << 32 | u128::from(eight))
        });
    }
    let split = digits.saturating_sub(16);
    let high = hex64(&bytes[..split])?;
    let low = hex64(&bytes[split..])?;
    Some(u128::from(high) << 64 | u128::from(low))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_reads_exactly_the_digits_it_is_given() {
        let mut x: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        for _ in 0..200 {
            x = x.rotate_left(7) ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for digits in [1, 15, 16, 17, 31, 32] {
                let value = if digits == 32 {
                    x
                } else {
                    x & ((1u128 << (4 * digits)) - 1)
                };
                let lower = format!("{value:0digits$x}");
                let upper = format!("{value:0digits$X}");
                assert_eq!(hex(&lower, digits), Some(value), "{lower}");
                assert_eq!(hex(&upper, digits), Some(value), "{upper}");
                assert_eq!(hex(&lower, digits + 1), None);
            }
        }
        for bad in ["g", " 1", "+1", "-1", "é", "0x1", "1\n", ":", "@", "`", "/"] {
            assert_eq!(hex(bad, bad.len()), None, "{bad:?}");
        }
        assert_eq!(hex(&"f".repeat(33), 33), None);
        assert_eq!(hex("", 0), Some(0));
    }

    #[test]
    fn tabs_are_found_eight_bytes_at_a_time_as_one_at_a_time() {
        // Every position in and around a word, bytes next to a tab that a borrow between bytes
        // would mistake for one (0x08, 0x0A, 0x89), and high bytes.
        let bytes: Vec<u8> = (0..67u8)
            .map(|i| match i % 7 {
                0 => b'\t',
                1 => 0x08,
                2 => 0x89,
                3 => 0x0A,
                4 => 0xFF,
                _ => b'a' + i % 26,
            })
            .collect();
        for start in 0..9 {
            for end in start..bytes.len() {
                let line = &bytes[start..end];
                let mut found = Vec::new();
                for_each_tab(line, |at| {
                    found.push(at);
                    true
                });
                let expected: Vec<usize> = (0..line.len()).filter(|&i| line[i] == b'\t').collect();
                assert_eq!(found, expected, "{start}..{end}");
            }
        }
        // Stops when told.
        let mut first = Vec::new();
        for_each_tab(b"a\tb\tc\t", |at| {
            first.push(at);
            false
        });
        assert_eq!(first, [1]);
    }

    #[test]
    fn decimals_are_digits_only_and_fit_64_bits() {
        assert_eq!(decimal("0"), Some(0));
        assert_eq!(
            decimal("1234567890123456789"),
            Some(1_234_567_890_123_456_789)
        );
        assert_eq!(decimal("18446744073709551615"), Some(u64::MAX));
        // Bytes far from the digits, up to 19 of them (past the digits' range: outside attack).
        let high = "\u{e9}".repeat(9);
        for bad in [
            "",
            "01",
            "18446744073709551616",
            "99999999999999999999",
            "+1",
            "1a",
            "-1",
            " 1",
            "1:",
            "zzzzzzzzzzzzzzzzzzz",
            &high,
        ] {
            assert_eq!(decimal(bad), None, "{bad}");
        }
    }

    #[test]
    fn eight_hex_digits_at_once_read_as_one_at_a_time() {
        // Every byte value in every position, beside digits of both cases.
        let base = *b"0aF9c3E7";
        for position in 0..8 {
            for byte in 0..=255u8 {
                let mut digits = base;
                digits[position] = byte;
                let one_at_a_time = hex64(&digits);
                assert_eq!(hex8(digits), one_at_a_time, "{digits:?}");
            }
        }
        assert_eq!(hex8(*b"ffffffff"), Some(0xFFFF_FFFF));
        assert_eq!(hex8(*b"00000000"), Some(0));
        assert_eq!(hex8(*b"12345678"), Some(0x1234_5678));
        // Pairs of bytes next to the ranges' edges.
        let edges = [
            b'/', b'0', b'9', b':', b'@', b'A', b'F', b'G', b'`', b'a', b'f', b'g', 0x7F, 0x80,
            0xC0,
        ];
        for &a in &edges {
            for &b in &edges {
                let digits = [a, b, b'1', b'2', b'3', b'4', b'5', b'6'];
                assert_eq!(hex8(digits), hex64(&digits), "{digits:?}");
            }
        }
        // Through `hex`: 16 and 32 digits at once, other lengths one at a time.
        assert_eq!(
            hex("0123456789abcdefFEDCBA9876543210", 32),
            Some(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210)
        );
        assert_eq!(hex("0123456789abcdeg", 16), None);
        assert_eq!(hex("abc", 3), Some(0xabc));
    }

    #[test]
    fn twenty_digit_decimals_are_checked_on_the_last() {
        assert_eq!(
            decimal("10000000000000000000"),
            Some(10_000_000_000_000_000_000)
        );
        assert_eq!(decimal("18446744073709551615"), Some(u64::MAX));
        assert_eq!(decimal("18446744073709551616"), None);
        assert_eq!(decimal("1844674407370955161a"), None);
        assert_eq!(decimal("a8446744073709551615"), None);
        assert_eq!(decimal("100000000000000000000"), None);
    }
}
