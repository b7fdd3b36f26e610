//! Files mapped once per process: a [`Reader`] opened through [`open_shared`] is handed to
//! every later caller that opens the same, unchanged file while the first is still alive
//! (incremental checkpoints naming one data file share its mapping and its parsed header).
//!
//! The cache holds weak references only: it keeps no mapping alive, and an entry whose
//! readers are all gone is never served (it is dropped at the next insertion). A file is the
//! same when its path, device, inode, length, modification and change times are: a file
//! replaced by rename has another inode (the old one cannot be reused while the cached reader
//! maps it), and one rewritten in place has new times; either is opened afresh. Times are
//! only trusted for a file that last changed more than a few seconds before it is opened
//! (`RACY`): a file changed since is never shared, as a coarse timestamp may miss a rewrite.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::{ReadOptions, Reader};
use crate::source::ReadError;
#[cfg(feature = "optim")]
use {
    super::errors::{invalid_error, io_error},
    super::reader::ReadMode,
    super::recorded::Record,
    crate::format::{FormatError, Layout, TensorInfo},
    crate::platform::read_exact_at,
    crate::source::data::file_data,
};

/// What makes two opens of a path the same file, unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Identity {
    path: PathBuf,
    device: u64,
    inode: u64,
    len: u64,
    /// Modification time, seconds and nanoseconds.
    modified: (i64, i64),
    /// Status change time (set by every write, and by anything that sets the modification
    /// time back), seconds and nanoseconds.
    changed: (i64, i64),
}

impl Identity {
    #[cfg(unix)]
    fn of(path: &Path, meta: &std::fs::Metadata) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        Some(Self {
            path: path.to_path_buf(),
            device: meta.dev(),
            inode: meta.ino(),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Elsewhere the identity of a file is not known: nothing is shared.
    #[cfg(not(unix))]
    fn of(_: &Path, _: &std::fs::Metadata) -> Option<Self> {
        None
    }
}

/// The readers opened through [`open_shared`], weakly, each with the file's modification and
/// change times as nanoseconds since the epoch.
fn cache() -> &'static Mutex<HashMap<Identity, Weak<Reader>>> {
    static CACHE: OnceLock<Mutex<HashMap<Identity, Weak<Reader>>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// How long after its last change a file is not shared: a filesystem whose timestamps are
/// coarse (one or two seconds on FAT, HFS+ and ext3; a clock tick on older kernels and on
/// ramfs) can rewrite a file in place without changing its times, so a file is taken for
/// unchanged only once its times are older than this when it is opened (git's "racily
/// clean" rule).
const RACY: std::time::Duration = std::time::Duration::from_secs(3);

impl Identity {
    /// Whether the file changed too recently for its times to tell a rewrite in place.
    fn racy(&self) -> bool {
        let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
            return true;
        };
        let ns = |(secs, nanos): (i64, i64)| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        let latest = ns(self.modified).max(ns(self.changed));
        latest + RACY.as_nanos() as i128 >= now.as_nanos() as i128
    }
}

/// The pack at `path`, mapped with the default limits ([`Reader::open`]): the reader another
/// caller of this process already holds for the same unchanged file (see the module's text),
/// or a new one, then offered to later callers.
///
/// # Errors
/// As [`ReadOptions::open`].
pub(crate) fn open_shared(path: &Path) -> Result<Arc<Reader>, ReadError> {
    // The identity is the open file's (`fstat`), so that the reader handed out is of the
    // file this call opened, not of one that a rename put at the path since.
    let (file, meta) = open_stat(path)?;
    let Some(identity) = Identity::of(path, &meta) else {
        return ReadOptions::new().open_file(path, &file).map(Arc::new);
    };
    let lock = || {
        cache()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    // A file changed within the last seconds is opened alone and not offered (see `RACY`).
    if identity.racy() {
        return ReadOptions::new().open_file(path, &file).map(Arc::new);
    }
    if let Some(reader) = lock().get(&identity).and_then(Weak::upgrade) {
        return Ok(reader);
    }
    let reader = Arc::new(ReadOptions::new().open_file(path, &file)?);
    let mut cache = lock();
    cache.retain(|_, r| r.strong_count() > 0);
    cache.insert(identity, Arc::downgrade(&reader));
    Ok(reader)
}

/// [`open_recorded`] of `path`, shared: the reader another open of the same,
/// unchanged file holds (its table decoded whole, its header checksum `head`) when there is
/// one alive, else one of the record's own (not offered to others: its table is the
/// record's).
#[cfg(feature = "optim")]
pub(crate) fn open_recorded_shared(
    options: &ReadOptions,
    path: &Path,
    head: u64,
    tensors: Vec<crate::format::TensorInfo>,
) -> Result<Arc<Reader>, ReadError> {
    let (file, meta) = open_stat(path)?;
    let alive = Identity::of(path, &meta)
        .filter(|identity| !identity.racy())
        .and_then(|identity| {
            cache()
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&identity)
                .and_then(Weak::upgrade)
        })
        .filter(|reader| reader.layout().head_checksum() == Some(head));
    match alive {
        Some(reader) => Ok(reader),
        None => open_recorded(options, path, &file, head, tensors).map(Arc::new),
    }
}

#[cfg(feature = "optim")]
/// Opens `path` (opened as `file`) with `tensors` as its table, as a record made when it
/// was written says (an incremental checkpoint's references): its header and metadata are
/// read and hashed, never decoded, and must hash to `head` (the file's header and metadata
/// checksum the record keeps), so the file is the one recorded. The reader lists only
/// `tensors`; its first checksum check and its
/// [`verify_structure`](Reader::verify_structure) decode the file and check them against
/// it.
///
/// # Errors
/// [`ReadError::Invalid`] when the file is not the one recorded or a tensor is out of
/// place, [`ReadError::Io`].
fn open_recorded(
    options: &ReadOptions,
    path: &Path,
    file: &std::fs::File,
    head: u64,
    tensors: Vec<TensorInfo>,
) -> Result<Reader, ReadError> {
    let name = path.display().to_string();
    let (io, invalid) = (
        |action| io_error(&name, action),
        |e| invalid_error(&name, e),
    );
    let file_len = file.metadata().map_err(io("stat"))?.len();
    let mut first = [0u8; crate::format::HEADER_SIZE];
    if file_len < first.len() as u64 {
        return Err(invalid(FormatError::Truncated {
            what: "header",
            needed: first.len() as u64,
            available: file_len,
        }));
    }
    read_exact_at(file, &mut first, 0).map_err(io("read"))?;
    let header = crate::format::Header::parse(&first).map_err(invalid)?;
    Layout::check_header(&header, file_len, &options.limits).map_err(invalid)?;
    let source =
        file_data(file, options.mode == ReadMode::Buffered).map_err(|(action, e)| io(action)(e))?;
    let size = first.len() + header.metadata_size as usize;
    // Hashed where the file is mapped (no copy); read otherwise, into memory bounded by the
    // limit on metadata checked above.
    let header = match &source {
        crate::source::data::Source::Memory(bytes) if bytes.len() >= size => {
            crate::format::vouched::check_head(&bytes[..size], head)
        }
        _ => {
            let mut bytes = vec![0u8; size];
            read_exact_at(file, &mut bytes, 0).map_err(io("read"))?;
            crate::format::vouched::check_head(&bytes, head)
        }
    }
    .map_err(invalid)?;
    let layout = crate::format::vouched::layout(header, file_len, tensors, head, &options.limits)
        .map_err(invalid)?;
    Ok(Reader {
        file: name.clone(),
        layout,
        source,
        recorded: Some(Record::default()),
    })
}

/// `path` opened (a regular file), with its metadata.
fn open_stat(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), ReadError> {
    let io = |action: &'static str| {
        move |source| ReadError::Io {
            file: path.display().to_string(),
            action,
            source,
        }
    };
    let file = crate::platform::open_regular(path).map_err(io("open"))?;
    let meta = file.metadata().map_err(io("stat"))?;
    Ok((file, meta))
}

/// What tells the file at `path` unchanged (see [`Identity`]), hashed; `None` where it cannot
/// be read or identities are not known. A symbolic link is the link's own (a file linked in
/// its place changes it). Unlike a shared mapping, this takes no account of `RACY`: a
/// rewrite in place within one tick of the clock goes unseen, which its users check for
/// otherwise.
pub(crate) fn fingerprint(path: &Path) -> Option<u128> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    Identity::of(path, &meta).map(|id| id.hashed())
}

/// [`fingerprint`], `None` for a file changed within `RACY` (whose times may not tell a
/// rewrite in place yet) and for a symbolic link (whose own times do not change with the
/// file it points to, which an open follows): what an opened checkpoint is shared by.
pub(crate) fn settled_fingerprint(path: &Path) -> Option<u128> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        return None;
    }
    Identity::of(path, &meta)
        .filter(|id| !id.racy())
        .map(|id| id.hashed())
}

impl Identity {
    /// The identity as one number.
    fn hashed(&self) -> u128 {
        let id = self;
        let mut bytes = id.path.as_os_str().as_encoded_bytes().to_vec();
        for n in [id.device, id.inode, id.len] {
            bytes.extend_from_slice(&n.to_le_bytes());
        }
        for t in [id.modified.0, id.modified.1, id.changed.0, id.changed.1] {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        twox_hash::XxHash3_128::oneshot(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::Writer;

    fn pack(path: &Path, value: u8) {
        let entry = crate::write::Entry::resident(
            "w",
            burn::tensor::DType::U8,
            vec![1],
            burn::tensor::Bytes::from_bytes_vec(vec![value]),
        );
        Writer::new(vec![entry]).write_to_file(path).unwrap();
    }

    /// Waits until a file written now is no longer racily recent.
    fn settle() {
        std::thread::sleep(RACY + std::time::Duration::from_millis(100));
    }

    #[test]
    fn shared_while_alive_never_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bpk");
        pack(&path, 1);
        // Just written: not shared (its times could miss a rewrite in place).
        let fresh = open_shared(&path).unwrap();
        assert!(!Arc::ptr_eq(&fresh, &open_shared(&path).unwrap()));
        drop(fresh);
        settle();
        let a = open_shared(&path).unwrap();
        let b = open_shared(&path).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one mapping for the same file");
        // Replaced by rename (the atomic writer): a new inode, read afresh.
        pack(&path, 2);
        settle();
        let c = open_shared(&path).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(&c.bytes("w").unwrap()[..], &[2]);
        assert_eq!(&a.bytes("w").unwrap()[..], &[1]);
        // Nothing kept alive: once every reader is gone, the next open maps again.
        let weak = Arc::downgrade(&c);
        drop((a, b, c));
        assert!(weak.upgrade().is_none());
        let d = open_shared(&path).unwrap();
        assert_eq!(&d.bytes("w").unwrap()[..], &[2]);
    }
}
