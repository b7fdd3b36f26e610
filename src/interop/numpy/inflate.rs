//! The deflated members of an `.npz` archive (`np.savez_compressed`), inflated when it is
//! opened.

use std::io::Read;
use std::path::Path;

use burn::tensor::{AllocationProperty, Bytes};

use super::open::{Input, Stored};
use crate::source::SourceError;
use crate::source::data::{aligned_words, zeroed_words};

/// Inflates every deflated member (in parallel), each checked against its CRC-32 and its
/// declared sizes: a damaged member is an error naming it when the file is opened, never a
/// failed read later. Each inflates into memory sized by its header (within the limits,
/// checked before) and no further.
pub(super) fn inflate_all(
    path: &Path,
    input: &Input<'_>,
    mut rows: Vec<(String, Stored)>,
) -> Result<(Vec<(String, Stored)>, Vec<Bytes>), SourceError> {
    use rayon::prelude::*;
    let deflated: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].1.member.as_ref().is_some_and(|m| m.deflated))
        .collect();
    let inflated = deflated
        .par_iter()
        .map(|&i| {
            let (name, stored) = &rows[i];
            inflate(path, input, name, stored)
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (k, &i) in deflated.iter().enumerate() {
        rows[i].1.inflated = Some(k);
    }
    Ok((rows, inflated))
}

/// One deflated member's array, inflated and checked.
fn inflate(
    path: &Path,
    input: &Input<'_>,
    name: &str,
    stored: &Stored,
) -> Result<Bytes, SourceError> {
    let Some(member) = &stored.member else {
        return Err(SourceError::invalid(path)(format!("'{name}' is no member")));
    };
    let damaged = |reason: String| SourceError::Damaged {
        path: path.to_path_buf(),
        tensor: Some(name.to_string()),
        reason: format!("member '{}': {reason}", member.name),
    };
    let raw = input
        .read(stored.start, member.compressed)
        .map_err(SourceError::io(path, "read"))?;
    let mut decoder = flate2::read::DeflateDecoder::new(&raw[..]);
    let mut crc = crc32fast::Hasher::new();
    let head_len =
        usize::try_from(stored.header.data_start).map_err(|_| damaged("too large".into()))?;
    let mut head = vec![0u8; head_len];
    decoder
        .read_exact(&mut head)
        .map_err(|e| damaged(format!("cannot inflate it: {e}")))?;
    crc.update(&head);
    let len = usize::try_from(stored.header.data_len).map_err(|_| damaged("too large".into()))?;
    let mut words = zeroed_words(len.div_ceil(8)).ok_or_else(|| {
        // Memory the machine does not have is no damage of the file.
        SourceError::io(path, "inflate")(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!(
                "tensor '{name}': member '{}': cannot allocate {len} bytes to inflate it",
                member.name
            ),
        ))
    })?;
    let out = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len];
    decoder
        .read_exact(out)
        .map_err(|e| damaged(format!("cannot inflate it: {e}")))?;
    crc.update(out);
    let mut more = [0u8; 1];
    match decoder.read(&mut more) {
        Ok(0) => {}
        Ok(_) => return Err(damaged("it inflates to more bytes than its array".into())),
        Err(e) => return Err(damaged(format!("cannot inflate it: {e}"))),
    }
    let actual = crc.finalize();
    if actual != member.crc {
        return Err(damaged(format!(
            "its CRC-32 is {actual:08x}, the archive says {:08x}",
            member.crc
        )));
    }
    Ok(crate::source::data::view_capable(aligned_words(
        words,
        len,
        AllocationProperty::Native,
    )))
}
