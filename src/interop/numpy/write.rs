//! One tensor of any source written as a `.npy` file (NumPy's format 1.0, or 2.0 for a header
//! over 64 KiB), atomically: what `bpk cat --npy` writes.

use std::io::Write;
use std::ops::Range;
use std::path::Path;

use burn::tensor::{BoolStore, DType};

use crate::format::TensorInfo;
use crate::interop::OutputError;
use crate::source::{ReadError, SourceErrorKind, TensorSource, TensorSourceExt};
use crate::write::commit::Scratch;

/// Rows read and written at a time when part of a tensor is written (at least one row).
const CHUNK: u64 = 64 << 20;

/// NumPy's type string for `dtype` (little-endian, as Burn's bytes are), or `None` where a
/// `.npy` file cannot hold it as this crate reads it back.
fn descr(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F64 => "<f8",
        DType::F32 | DType::Flex32 => "<f4",
        DType::F16 => "<f2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I16 => "<i2",
        DType::I8 => "|i1",
        DType::U64 => "<u8",
        DType::U32 => "<u4",
        DType::U16 => "<u2",
        DType::U8 => "|u1",
        DType::Bool(BoolStore::Native | BoolStore::U8) => "|b1",
        _ => return None,
    })
}

/// The preamble and header of a C-order array of `descr` and `shape`: the magic, the version,
/// the header's length, the dict padded with spaces to a multiple of 64 bytes and a newline.
fn header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // Version 1.0 has a 2-byte length after 8 bytes of preamble; 2.0 a 4-byte one.
    // The padded header (the dict, spaces, a newline) ends the preamble on a multiple of 64.
    let padded = |prefix: usize| (prefix + dict.len() + 1).div_ceil(64) * 64 - prefix;
    let (version, prefix) = if u16::try_from(padded(10)).is_ok() {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let padded = padded(prefix);
    let mut out = Vec::with_capacity(prefix + padded);
    out.extend_from_slice(b"\x93NUMPY");
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(padded as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(padded as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(prefix + padded - 1, b' ');
    out.push(b'\n');
    out
}

/// Writes the tensor `name` of `source` (or its rows `rows`, a range of its first dimension)
/// to `path` as a `.npy` array NumPy's `np.load` reads: a scratch sibling renamed into place
/// once whole, so nothing is left at `path` on failure. The whole tensor is read as the source
/// hands it out and checked against its checksum where the source keeps one; rows are read
/// a few at a time, only their bytes, unchecked (a checksum covers the whole tensor). Returns
/// the file's size.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![Entry::resident("w", DType::F32, vec![2], Bytes::from_elems(vec![1.0f32, 2.0]))])
///     .into_bytes()
///     .unwrap();
/// let reader = Reader::from_bytes(pack).unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("w.npy");
/// let size = burnpack::interop::write_npy(&out, &reader, "w", None).unwrap();
/// assert_eq!(size, 128 + 8);
/// assert!(std::fs::read(&out).unwrap().starts_with(b"\x93NUMPY"));
/// ```
///
/// # Errors
/// [`OutputError::Usage`] for a dtype a `.npy` file does not hold as Burn reads it back
/// (bfloat16, quantized tensors, booleans stored as `u32`) or rows outside the tensor (nothing
/// read or written); [`OutputError::Failed`] for a tensor that cannot be read (naming the
/// input, `is_damaged` when its checksum does not match) or a file that cannot be written.
pub fn write_npy<S: TensorSource + ?Sized>(
    path: &Path,
    source: &S,
    name: &str,
    rows: Option<Range<usize>>,
) -> Result<u64, OutputError> {
    let info = source.find_tensor(name).map_err(read_failed)?;
    let usage = |reason: String| OutputError::Usage {
        path: path.to_path_buf(),
        reason: format!("{}: {reason}", path.display()),
    };
    let Some(descr) = descr(info.dtype()) else {
        return Err(usage(format!(
            "a .npy file cannot hold tensor '{name}' of {}: it is {} (NumPy has no such \
             dtype)",
            source.file(),
            match info.dtype() {
                DType::QFloat(scheme) => format!("quantized ({:?} values)", scheme.value),
                dtype => format!("{dtype:?}"),
            }
        )));
    };
    let (shape, range) = match &rows {
        None => (info.shape().to_vec(), None),
        Some(rows) => {
            let first = info.shape().first().copied().unwrap_or(0);
            if info.shape().is_empty() || rows.start > rows.end || rows.end > first {
                return Err(usage(format!(
                    "rows {}..{} asked of tensor '{name}' of {}, whose shape is {:?}",
                    rows.start,
                    rows.end,
                    source.file(),
                    info.shape()
                )));
            }
            let mut shape = info.shape().to_vec();
            shape[0] = rows.len();
            (shape, Some(rows.clone()))
        }
    };
    let written = |e: std::io::Error| OutputError::Failed {
        message: format!("{}: cannot write: {e}", path.display()),
        damaged: false,
        source: Box::new(e),
    };
    let write_error = |e: crate::write::WriteError| OutputError::Failed {
        message: e.to_string(),
        damaged: false,
        source: Box::new(e),
    };
    let scratch = Scratch::create(path).map_err(write_error)?;
    let mut out = std::io::BufWriter::new(scratch.file());
    let head = header(descr, &shape);
    out.write_all(&head).map_err(written)?;
    let mut size = head.len() as u64;
    match range {
        None => {
            let bytes = source.read(info).map_err(read_failed)?;
            source.check(info, &bytes).map_err(read_failed)?;
            out.write_all(&bytes).map_err(written)?;
            size += bytes.len() as u64;
        }
        Some(rows) => {
            size += write_rows(source, info, rows, &mut out, &written)?;
        }
    }
    out.flush().map_err(written)?;
    drop(out);
    scratch.commit(path, true).map_err(write_error)?;
    Ok(size)
}

/// Writes `rows` of `info` to `out`, a chunk of rows at a time; returns the bytes written.
fn write_rows<S: TensorSource + ?Sized>(
    source: &S,
    info: &TensorInfo,
    rows: Range<usize>,
    out: &mut impl Write,
    written: &impl Fn(std::io::Error) -> OutputError,
) -> Result<u64, OutputError> {
    let first = info.shape().first().copied().unwrap_or(1).max(1) as u64;
    let row = info.len() / first;
    let per_chunk = (CHUNK / row.max(1)).max(1) as usize;
    let mut total = 0;
    let mut at = rows.start;
    while at < rows.end {
        let end = rows.end.min(at.saturating_add(per_chunk));
        let bytes = source
            .read_range(info, at as u64 * row..end as u64 * row)
            .map_err(read_failed)?;
        out.write_all(&bytes).map_err(written)?;
        total += bytes.len() as u64;
        at = end;
    }
    Ok(total)
}

/// A read of the input that failed, naming it.
fn read_failed(e: ReadError) -> OutputError {
    OutputError::Failed {
        message: e.to_string(),
        damaged: e.kind() == SourceErrorKind::Damaged,
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_what_numpy_writes() {
        let h = header("<f4", &[3, 4]);
        assert_eq!(h.len() % 64, 0);
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        let dict = std::str::from_utf8(&h[10..]).unwrap();
        assert!(dict.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"));
        assert!(dict.ends_with(" \n"));
        let parsed = super::super::header::parse((1, 0), 10, dict.as_bytes()).unwrap();
        assert_eq!(parsed.shape, vec![3, 4]);
        assert!(
            std::str::from_utf8(&header("|b1", &[5])[10..])
                .unwrap()
                .contains("(5,)")
        );
        assert!(
            std::str::from_utf8(&header("<f8", &[])[10..])
                .unwrap()
                .contains("()")
        );
    }

    #[test]
    fn dtypes_npy_cannot_hold_are_refused() {
        assert_eq!(descr(DType::BF16), None);
        assert_eq!(descr(DType::Bool(BoolStore::U32)), None);
        assert_eq!(descr(DType::F16), Some("<f2"));
    }
}
