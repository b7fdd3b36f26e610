//! The zip container of `PyTorch` 1.6 and later: `<name>/data.pkl` and one stored entry per
//! storage, `<name>/data/<key>`.

use std::borrow::Cow;
use std::io::{Cursor, Read, Seek};

use super::pickle::{self, Pickle};
use super::{Fault, StorageEntry, Storages};
use crate::source::OpenOptions;

/// The bytes of a `torch.save` file, as the zip reader reads them: a file with ordinary
/// reads (its central directory and pickle are never read through a mapping, so opening a
/// damaged file is an error rather than a fault), or bytes in memory.
pub(super) enum Input<'a> {
    /// A file of this length.
    File(&'a std::fs::File, u64),
    /// Bytes in memory.
    Memory(&'a [u8]),
}

impl Input<'_> {
    fn len(&self) -> u64 {
        match self {
            Input::File(_, len) => *len,
            Input::Memory(all) => all.len() as u64,
        }
    }

    /// `len` bytes at `start` (within the input: checked by the caller).
    fn read(&self, start: u64, len: u64) -> Result<Cow<'_, [u8]>, String> {
        match self {
            Input::File(file, _) => {
                let mut out = vec![0u8; usize::try_from(len).map_err(|e| e.to_string())?];
                crate::platform::read_exact_at(file, &mut out, start)
                    .map_err(|e| format!("cannot read bytes {start}..{}: {e}", start + len))?;
                Ok(Cow::Owned(out))
            }
            Input::Memory(all) => Ok(Cow::Borrowed(&all[start as usize..(start + len) as usize])),
        }
    }
}

/// The zip format: the pickle (read) and where each storage's bytes are.
///
/// From a file, its structure (central directory, local headers, pickle) is read with no
/// readahead, and the pages these reads cached that nobody had cached before are dropped again
/// after (see `platform::CacheProbe`): left cached one by one in the middle of the tensors'
/// bytes, they kept the kernel from reading those into large folios when the load maps them.
pub(super) fn zip_parts(
    input: &Input<'_>,
    options: &OpenOptions,
) -> Result<(Pickle, Storages, StorageEntry), Fault> {
    #[cfg(target_os = "linux")]
    if let Input::File(file, _) = input {
        let probe = crate::platform::CacheProbe::new(file)
            .and_then(|probe| Some((probe.residency()?, probe)));
        crate::platform::reads_random(file, true);
        let parts = read_parts(input, options);
        crate::platform::reads_random(file, false);
        if let Some((before, probe)) = probe {
            probe.drop_cached_since(file, &before, None);
        }
        return parts;
    }
    read_parts(input, options)
}

/// [`zip_parts`]' reads.
fn read_parts(
    input: &Input<'_>,
    options: &OpenOptions,
) -> Result<(Pickle, Storages, StorageEntry), Fault> {
    let (entry, storages) = match input {
        Input::File(file, _) => {
            // Headers inside the bytes just asked for (small entries, in file order) ask
            // nothing more.
            let asked = std::cell::Cell::new(0..0);
            let hint = |start: u64| {
                let mut range = asked.take();
                if !range.contains(&start) {
                    crate::platform::start_reading_ahead(file, start, LOCAL_HEADER_HINT);
                    range = start..start.saturating_add(LOCAL_HEADER_HINT);
                }
                asked.set(range);
            };
            // Buffered: the central directory is read in small pieces (a few per entry).
            let reader = std::io::BufReader::new(*file);
            zip_layout(consistent_archive(reader, hint)?, input, options)
        }
        Input::Memory(all) => zip_layout(
            consistent_archive(Cursor::new(*all), |_| ())?,
            input,
            options,
        ),
    }
    .map_err(Fault::Other)?;
    let bytes = input.read(entry.start, entry.len).map_err(Fault::Other)?;
    // The pickle decides what every byte of the file means: checked against its CRC-32 on
    // every open, before it is read (the storages are checked by verified loads).
    let actual = crc32fast::hash(&bytes);
    if Some(actual) != entry.crc {
        return Err(Fault::Damaged(format!(
            "data.pkl does not match its zip CRC-32 (expected {:08x}, found {actual:08x}): the \
             file is damaged",
            entry.crc.unwrap_or_default()
        )));
    }
    let (pickle, _) = pickle::load(&bytes).map_err(Fault::Pickle)?;
    Ok((pickle, storages, entry))
}

/// Bytes asked for ahead at each local header: what the zip crate reads of it through an 8 KiB
/// `BufReader` (a header is 30 bytes, then the entry's name and extra field; torch.save's
/// padding keeps it well inside one page).
const LOCAL_HEADER_HINT: u64 = 8 << 10;

/// The zip archive, when every reader would read it alike: two entries of one name would be
/// read differently by different readers (this one would see the last, another the first), so
/// they are refused, as are local headers that disagree with the central directory.
///
/// Checking the local headers reads each (one small read per entry, spread over the file);
/// `hint` is first given every header's offset, as the central directory says, so that a
/// file not in the page cache can have them all asked of the disk at once (a cold open was
/// one disk round trip per tensor, one after another).
fn consistent_archive<R: Read + Seek>(
    reader: R,
    hint: impl Fn(u64),
) -> Result<zip::ZipArchive<R>, Fault> {
    let fault = |e: zip::result::ZipError| Fault::Other(format!("zip: {e}"));
    // Offsets as the end record writes them, as PyTorch's reader (miniz) takes them: the zip
    // crate's default looks for a central directory elsewhere and shifts every offset when
    // it finds one, which would read another archive hidden in the file.
    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut archive = zip::ZipArchive::with_config(config, reader).map_err(fault)?;
    for i in 0..archive.len() {
        if let Ok(entry) = archive.by_index_data(i) {
            hint(entry.header_start());
        }
    }
    if archive.has_duplicate_names() {
        return Err(Fault::Other(
            "the zip archive holds two entries of the same name (another reader could take a \
             different one): refused"
                .into(),
        ));
    }
    archive.validate_header_consistency().map_err(fault)?;
    Ok(archive)
}

/// The zip format's pickle (its byte range) and storages.
fn zip_layout<R: Read + Seek>(
    mut archive: zip::ZipArchive<R>,
    input: &Input<'_>,
    options: &OpenOptions,
) -> Result<(StorageEntry, Storages), String> {
    let mut entries = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| format!("zip entry {i}: {e}"))?;
        let name = entry
            .name()
            .map_err(|e| format!("zip entry {i}: a name that is not UTF-8: {e}"))?
            .to_string();
        if entry.encrypted() {
            return Err(format!(
                "zip entry '{name}' is encrypted: torch.save encrypts nothing, and its bytes \
                 are not tensor data"
            ));
        }
        let start = entry
            .data_start()
            .ok_or_else(|| format!("zip entry '{name}': no data offset"))?;
        let stored = entry.compression() == zip::CompressionMethod::Stored;
        // What lies in the file (a stored entry's bytes are its contents).
        let len = entry.compressed_size();
        if start.checked_add(len).is_none_or(|end| end > input.len()) {
            return Err(format!("zip entry '{name}' lies past the end of the file"));
        }
        if stored && entry.size() != len {
            return Err(format!(
                "zip entry '{name}' is stored with {len} bytes but says it holds {}",
                entry.size()
            ));
        }
        entries.push((name, start, len, stored, entry.compression(), entry.crc32()));
    }
    let pickles: Vec<_> = entries
        .iter()
        .filter(|(n, ..)| n.ends_with("data.pkl") && n.matches('/').count() == 1)
        .collect();
    let [(pkl_name, pkl_start, pkl_len, pkl_stored, method, pkl_crc)] = pickles.as_slice() else {
        return Err(format!(
            "{} entries named <archive>/data.pkl (torch.save writes one)",
            pickles.len()
        ));
    };
    let prefix = pkl_name.trim_end_matches("data.pkl").to_string();
    let stored_only = |name: &str, stored: bool, method: zip::CompressionMethod| {
        if stored {
            Ok(())
        } else {
            Err(format!(
                "zip entry '{name}' is compressed ({method}): torch.save stores every entry \
                 as is, and this reader decompresses nothing"
            ))
        }
    };
    stored_only(pkl_name, *pkl_stored, *method)?;
    if *pkl_len > u64::from(options.limits.max_metadata_size) {
        return Err(format!(
            "a pickle of {pkl_len} bytes, over the limit of {}",
            options.limits.max_metadata_size
        ));
    }
    let data_prefix = format!("{prefix}data/");
    let mut storages = Storages::new();
    for (name, start, len, stored, method, crc) in &entries {
        if name == &format!("{prefix}byteorder") {
            // `little` or `big`: anything longer is neither, and is not read whole.
            let order = input.read(*start, (*len).min(16))?;
            if *order != *b"little" {
                return Err(format!(
                    "byte order '{}': only little-endian files are read",
                    String::from_utf8_lossy(&order)
                ));
            }
        }
        if let Some(key) = name.strip_prefix(&data_prefix) {
            stored_only(name, *stored, *method)?;
            storages.insert(
                key.to_string(),
                StorageEntry {
                    start: *start,
                    len: *len,
                    crc: Some(*crc),
                },
            );
        }
    }
    let pickle = StorageEntry {
        start: *pkl_start,
        len: *pkl_len,
        crc: Some(*pkl_crc),
    };
    Ok((pickle, storages))
}
