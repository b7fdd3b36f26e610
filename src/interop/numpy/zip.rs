//! The `.npz` container: a zip archive of `.npy` members (`np.savez` stores them,
//! `np.savez_compressed` deflates them), read with the `zip` crate under the rules the
//! `PyTorch` reader keeps: offsets as the end record writes them, no two members of one name,
//! local headers that agree with the central directory, nothing encrypted.

use std::io::{Read, Seek};

/// The first bytes of a zip archive (a local file header).
pub(super) const ZIP_MAGIC: &[u8] = b"PK\x03\x04";
/// The start of a zip archive with no member (its end record alone): what `np.savez(path)`
/// writes with no array.
pub(super) const EMPTY_ZIP: &[u8] = b"PK\x05\x06";

/// One member of the archive, as the central directory states it.
#[derive(Debug, Clone)]
pub(super) struct Member {
    /// Its name in the archive (`w.npy`).
    pub name: String,
    /// Where its (stored or deflated) bytes start in the file.
    pub start: u64,
    /// Its bytes in the file.
    pub compressed: u64,
    /// Its bytes once inflated (the `.npy` header and data).
    pub size: u64,
    /// Deflated (else stored).
    pub deflated: bool,
    /// The CRC-32 of its inflated bytes.
    pub crc: u32,
}

/// Whether `head` (a file's first bytes) is a zip archive whose first member is a `.npy`
/// array: what `np.savez` writes (a `torch.save` archive's first member is
/// `<archive>/data.pkl`), or an archive with no member (`np.savez` of no array).
pub(super) fn is_npz(head: &[u8]) -> bool {
    if head.starts_with(EMPTY_ZIP) {
        return true;
    }
    if !head.starts_with(ZIP_MAGIC) || head.len() < 30 {
        return false;
    }
    let name_len = usize::from(u16::from_le_bytes([head[26], head[27]]));
    head.get(30..30 + name_len)
        .is_some_and(|name| name.ends_with(b".npy"))
}

/// The members of the archive `reader` reads (`len` bytes), every one checked against the
/// rules and against `len`; at most `max_members`.
pub(super) fn members<R: Read + Seek>(
    reader: R,
    len: u64,
    max_members: usize,
) -> Result<Vec<Member>, String> {
    let zip_error = |e: zip::result::ZipError| format!("zip: {e}");
    // Offsets as the end record writes them (the zip crate's default looks for an archive
    // elsewhere in the file when they do not fit, and would read another one hidden there).
    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut archive = zip::ZipArchive::with_config(config, reader).map_err(zip_error)?;
    if archive.len() > max_members {
        return Err(format!(
            "{} members, over the tensor-count limit of {max_members}",
            archive.len()
        ));
    }
    if archive.has_duplicate_names() {
        return Err(
            "the zip archive holds two members of the same name (another reader could \
                    take a different one): refused"
                .into(),
        );
    }
    archive.validate_header_consistency().map_err(zip_error)?;
    let mut members = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| format!("zip member {i}: {e}"))?;
        let name = entry
            .name()
            .map_err(|e| format!("zip member {i}: a name that is not UTF-8: {e}"))?
            .to_string();
        if entry.encrypted() {
            return Err(format!(
                "zip member '{name}' is encrypted: np.savez encrypts nothing, and this reader \
                 decrypts nothing"
            ));
        }
        let method = entry.compression();
        #[allow(deprecated)] // The method's number: `Deflated` is a variant only with a feature.
        let code = method.to_u16();
        let deflated = match code {
            0 => false,
            8 => true,
            _ => {
                return Err(format!(
                    "zip member '{name}' is compressed with {method}: .npz members are stored \
                     (np.savez) or deflated (np.savez_compressed)"
                ));
            }
        };
        let start = entry
            .data_start()
            .ok_or_else(|| format!("zip member '{name}': no data offset"))?;
        let compressed = entry.compressed_size();
        if start.checked_add(compressed).is_none_or(|end| end > len) {
            return Err(format!("zip member '{name}' lies past the end of the file"));
        }
        if !deflated && entry.size() != compressed {
            return Err(format!(
                "zip member '{name}' is stored with {compressed} bytes but says it holds {}",
                entry.size()
            ));
        }
        members.push(Member {
            name,
            start,
            compressed,
            size: entry.size(),
            deflated,
            crc: entry.crc32(),
        });
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    #[test]
    fn npz_is_told_from_torch_save_by_its_first_member() {
        let mut head = super::ZIP_MAGIC.to_vec();
        head.resize(26, 0);
        head.extend(5u16.to_le_bytes());
        head.extend([0, 0]);
        head.extend(b"w.npy");
        assert!(super::is_npz(&head));
        head.truncate(30);
        head.extend(b"w/dat");
        assert!(!super::is_npz(&head));
    }
}
