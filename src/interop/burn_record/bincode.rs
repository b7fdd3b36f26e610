//! Whether bytes fit a bincode record of Burn 0.14-0.21 (`BinFileRecorder`,
//! `BinBytesRecorder`): it has no magic number and does not describe itself, so only the
//! shape of its first fields says what it is. Such a record starts with its `BurnMetadata`,
//! bincode's standard encoding of five strings (a length below 251 is one byte): the float
//! type (`f32`), the int type (`i64`), the recorder's type name (`...::BinFileRecorder<...>`),
//! Burn's version, the settings' type name.

/// Whether `head` (a file's first bytes, at least as far as the recorder's name) fits a
/// bincode record: an element type name (`f16`, `bf16`, `f32`, `f64`), an integer type name
/// (`i8`..`i64`, `u8`..`u64`), then the type name of a recorder.
pub(crate) fn fits_record(head: &[u8]) -> bool {
    let mut rest = head;
    let mut string = || -> Option<&[u8]> {
        let (&len, tail) = rest.split_first()?;
        let len = usize::from(len);
        if len >= 251 || tail.len() < len {
            return None;
        }
        let (s, tail) = tail.split_at(len);
        rest = tail;
        Some(s)
    };
    let float = string().is_some_and(|s| [&b"f16"[..], b"bf16", b"f32", b"f64"].contains(&s));
    let int = string().is_some_and(|s| {
        [
            &b"i8"[..],
            b"i16",
            b"i32",
            b"i64",
            b"u8",
            b"u16",
            b"u32",
            b"u64",
        ]
        .contains(&s)
    });
    // The recorder's type name: a Rust path naming a recorder. It may be longer than `head`.
    let recorder = rest.split_first().is_some_and(|(&len, name)| {
        let shown = &name[..name.len().min(usize::from(len))];
        len < 251 && shown.is_ascii() && shown.windows(8).any(|w| w == b"Recorder")
    });
    float && int && recorder
}

#[cfg(test)]
mod tests {
    use super::fits_record;

    #[test]
    fn a_record_fits_and_other_bytes_do_not() {
        let record = b"\x03f32\x03i64\x2cburn_core::record::file::BinFileRecorder<x>\x060.21.0";
        assert!(fits_record(record));
        assert!(!fits_record(b"\x03f32\x03i64\x05hello"));
        assert!(!fits_record(
            b"version https://git-lfs.github.com/spec/v1\n"
        ));
        assert!(!fits_record(&[0u8; 64]));
        assert!(!fits_record(b""));
    }
}
