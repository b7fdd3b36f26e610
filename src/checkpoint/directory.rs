//! The directory backend of the checkpoint manager: files written atomically (scratch file,
//! fsync, rename, directory fsync), stale scratch files of dead writers removed.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::CheckpointError;
use super::state::PreparedState;
use super::storage::Storage;
use crate::read::Reader;
use crate::write::Writer;

/// A directory of checkpoint files: the [`Storage`] of a [`CheckpointManager`].
///
/// ```
/// use burnpack::checkpoint::{Directory, Storage};
/// let dir = tempfile::tempdir().unwrap();
/// let storage = Directory::new(dir.path());
/// assert_eq!(storage.location("a.bpk"), dir.path().join("a.bpk"));
/// ```
#[derive(Debug, Clone)]
pub struct Directory {
    dir: PathBuf,
    /// How files are opened: mapped (the default), or read into memory of their own
    /// (`ReadMode::Buffered`: a verification that must survive a file changed under it).
    mode: crate::read::ReadMode,
}

impl Directory {
    /// The same directory, its files read into memory of their own instead of mapped (what
    /// `bpk verify` and `convert` use: a file rewritten in place by another program while it
    /// is read cannot fault the reader).
    #[must_use]
    pub(crate) fn buffered(mut self) -> Self {
        self.mode = crate::read::ReadMode::Buffered;
        self
    }

    /// The directory `dir` (not created: [`CheckpointManager::new`] creates it).
    #[must_use]
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Self {
            dir: dir.as_ref().to_path_buf(),
            mode: crate::read::ReadMode::default(),
        }
    }

    /// The directory's path.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// An I/O error of `action` on `path`, as the checkpoint error naming both.
    pub(crate) fn io(
        action: &'static str,
        path: &Path,
    ) -> impl FnOnce(std::io::Error) -> CheckpointError {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io {
            action,
            path,
            source,
        }
    }

    /// `Ok` when `path` is a regular file (a link, a directory or a device is refused: a
    /// manifest's name never leads a read outside the directory).
    fn regular(path: &Path) -> Result<(), CheckpointError> {
        let meta = fs::symlink_metadata(path).map_err(Self::io("open", path))?;
        if !meta.file_type().is_file() {
            return Err(CheckpointError::Io {
                action: "open",
                path: path.to_path_buf(),
                source: std::io::Error::other(
                    "not a regular file of the checkpoint directory (a link, a directory or a \
                     device is not followed)",
                ),
            });
        }
        Ok(())
    }

    /// The directory's entries.
    pub(crate) fn read_dir(&self) -> Result<Vec<fs::DirEntry>, CheckpointError> {
        fs::read_dir(&self.dir)
            .and_then(Iterator::collect)
            .map_err(Self::io("list", &self.dir))
    }
}

/// One checkpoint file of a managed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointEntry {
    /// The training step it was saved at.
    pub step: u64,
    /// Its path.
    pub path: PathBuf,
}

impl Storage for Directory {
    type Location = PathBuf;
    type Source = Reader;
    type Entry = CheckpointEntry;

    fn location(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn names(&self) -> Result<Vec<String>, CheckpointError> {
        Ok(self
            .read_dir()?
            .into_iter()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    fn open(&self, path: &PathBuf) -> Result<Reader, CheckpointError> {
        Ok(crate::read::ReadOptions::new().mode(self.mode).open(path)?)
    }

    fn open_data(&self, path: &PathBuf) -> Result<Reader, CheckpointError> {
        Self::regular(path)?;
        self.open(path)
    }

    /// Mapped data files are shared between the checkpoints of this process that name them
    /// (one mapping, one parsed header), while any of them is alive: a file replaced (renamed
    /// over: another inode) or rewritten in place (other length or times) since is opened
    /// afresh, never served from the old mapping. Buffered files are not shared (each holds
    /// its own descriptor and reads).
    fn open_data_shared(&self, path: &PathBuf) -> Result<std::sync::Arc<Reader>, CheckpointError> {
        if self.mode != crate::read::ReadMode::Mmap {
            return self.open_data(path).map(std::sync::Arc::new);
        }
        Self::regular(path)?;
        Ok(crate::read::open_shared(path)?)
    }

    fn open_data_recorded(
        &self,
        path: &PathBuf,
        head: u64,
        tensors: Vec<crate::format::TensorInfo>,
    ) -> Option<Result<std::sync::Arc<Reader>, CheckpointError>> {
        let open = || {
            Self::regular(path)?;
            let options = crate::read::ReadOptions::new().mode(self.mode);
            Ok(crate::read::open_recorded_shared(
                &options, path, head, tensors,
            )?)
        };
        Some(open())
    }

    fn fingerprint(&self, path: &PathBuf) -> Option<u128> {
        crate::read::fingerprint(path)
    }

    fn settled_fingerprint(&self, path: &PathBuf) -> Option<u128> {
        crate::read::settled_fingerprint(path)
    }

    fn write(&self, path: &PathBuf, writer: Writer) -> Result<(), CheckpointError> {
        writer.write_to_file(path)?;
        Ok(())
    }

    fn write_data(&self, path: &PathBuf, writer: Writer) -> Result<(), CheckpointError> {
        let written = writer
            .mode(crate::write::WriteMode::InPlace)
            .overwrite(false)
            .write_to_file(path);
        if let Err(e) = written {
            // What a failed write left (never another's file: `overwrite(false)` refused
            // to open one). Left behind, it would be collected as a data file nobody names.
            if !matches!(e, crate::write::WriteError::AlreadyExists { .. }) {
                let _ = fs::remove_file(path);
            }
            return Err(e.into());
        }
        Ok(())
    }

    fn sync_data(&self, path: &PathBuf) -> Result<(), CheckpointError> {
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.sync_all())
            .map_err(Self::io("sync", path))
    }

    fn write_when(
        &self,
        path: &PathBuf,
        writer: Writer,
        ready: impl FnOnce() -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        writer.write_to_file_when(path, ready)?;
        Ok(())
    }

    fn write_state(&self, path: &PathBuf, state: PreparedState) -> Result<(), CheckpointError> {
        state.write_to_file(path)?;
        Ok(())
    }

    /// A file already gone (another manager's retention deleted it first) is deleted.
    fn delete(&self, path: &PathBuf) -> Result<(), CheckpointError> {
        match fs::remove_file(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other.map_err(Self::io("delete", path)),
        }
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn describe_location(&self, path: &PathBuf) -> String {
        path.display().to_string()
    }

    fn entry(step: u64, path: PathBuf) -> CheckpointEntry {
        CheckpointEntry { step, path }
    }
}
