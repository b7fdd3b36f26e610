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

/// The error of [`LegacySource::open`](super::LegacySource::open) for a file whose name says
/// no record format: a bincode record (`.bin`, `.bin.gz`) when its bytes fit one (a `.bin.gz`:
/// when it is a gzip stream, whose contents are told when opened by content), otherwise that
/// the name says nothing.
pub(super) fn not_by_name(path: &std::path::Path) -> crate::source::SourceError {
    use crate::source::SourceError;
    let name = path.to_string_lossy().to_ascii_lowercase();
    let mut head = [0u8; 256];
    let read = crate::platform::open_regular(path)
        .and_then(|file| {
            let len = file.metadata()?.len().min(head.len() as u64) as usize;
            crate::platform::read_exact_at(&file, &mut head[..len], 0).map(|()| len)
        })
        .map(|len| &head[..len]);
    let named = |end: &str| name.ends_with(end);
    let fits = match read {
        Ok(bytes) if named(".bin") => fits_record(bytes),
        Ok(bytes) if named(".bin.gz") => bytes.starts_with(&[0x1f, 0x8b]),
        Ok(_) => false,
        Err(e) => return SourceError::io(path, "read")(e),
    };
    if fits {
        return SourceError::Bincode {
            path: path.to_path_buf(),
        };
    }
    SourceError::Invalid {
        path: path.to_path_buf(),
        reason: "not a valid Burn record: the file name does not end in .mpk, .mpk.gz, .json or \
                 .json.gz, and it is no bincode record (name the format with \
                 LegacySource::open_with, or open it with LegacySource::open_detect)"
            .into(),
    }
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
