//! Atomic commit: a scratch sibling, fsync, rename (or link), directory fsync.

use std::fs::TryLockError;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::error::WriteError;
use super::options::{WriteMode, WriteOptions};

/// Suffix of scratch files (`.<file name>.<pid>-<n>-<nanos>.bpk-tmp`).
pub(crate) const SCRATCH_SUFFIX: &str = ".bpk-tmp";

/// A scratch file that nobody holds locked is a dead writer's only where locks work; where the
/// filesystem cannot lock, only files untouched for this long are taken for dead.
pub(crate) const STALE_AFTER: Duration = Duration::from_hours(1);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A scratch file beside the destination, removed on drop unless committed: an error or a
/// panic anywhere before the commit leaves no trace.
///
/// While it exists its writer holds an exclusive advisory lock on it (`flock` on Unix,
/// `LockFileEx` on Windows). The kernel drops the lock when the writer dies, however it dies,
/// so a scratch file nobody holds locked is a dead writer's, whatever PID namespace, container
/// or host (over NFS) the writer ran in: that is how stale files are told from live ones,
/// never by process id.
pub(crate) struct Scratch {
    path: PathBuf,
    /// The file written to: another writer's, once it replaced the scratch file.
    pub(crate) file: File,
    committed: bool,
}

impl Scratch {
    /// Creates a new, empty, locked scratch sibling of `dest`, after removing dead writers'
    /// scratch files of the same destination.
    pub(crate) fn create(dest: &Path) -> Result<Self, WriteError> {
        refuse_not_regular(dest)?;
        let dir = parent_dir(dest);
        let file_name = dest
            .file_name()
            .ok_or_else(|| {
                WriteError::io(
                    "create",
                    dest,
                    io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"),
                )
            })?
            .to_string_lossy()
            .into_owned();
        match fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(WriteError::io(
                    "create",
                    dest,
                    io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("{} is not a directory", dir.display()),
                    ),
                ));
            }
            Err(e) => {
                let what = if e.kind() == io::ErrorKind::NotFound {
                    "is not there"
                } else {
                    "cannot be used"
                };
                return Err(WriteError::io(
                    "create",
                    dest,
                    io::Error::new(
                        e.kind(),
                        format!("its directory {} {what}: {e}", dir.display()),
                    ),
                ));
            }
        }
        remove_stale(&dir, &file_name);
        // A cleaner in another process may take a file between its creation and its lock:
        // then the name no longer leads to it (or the lock is taken), and another name is
        // tried.
        for _ in 0..16 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = dir.join(format!(
                ".{file_name}.{}-{n}-{nanos:x}{SCRATCH_SUFFIX}",
                crate::platform::process_id()
            ));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| WriteError::io("create a scratch file for", dest, e))?;
            let owned = match file.try_lock() {
                Ok(()) => crate::platform::names(&path, &file),
                Err(TryLockError::WouldBlock) => false,
                // No locks on this filesystem: the age limit protects the file instead.
                Err(TryLockError::Error(_)) => true,
            };
            if owned {
                return Ok(Self {
                    path,
                    file,
                    committed: false,
                });
            }
        }
        Err(WriteError::io(
            "create a scratch file for",
            dest,
            io::Error::other("other processes kept removing the new scratch files"),
        ))
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the scratch file durable and publishes it at `dest`: fsync, copy the permissions
    /// of an existing `dest`, rename (or hard-link when `overwrite` is off, which refuses an
    /// existing `dest` atomically), then fsync the directory. (The formats' own writers use
    /// it; a build with none of them leaves it unused.)
    #[allow(dead_code)]
    pub(crate) fn commit(self, dest: &Path, overwrite: bool) -> Result<(), WriteError> {
        self.sync()?;
        self.publish(dest, overwrite)
    }

    /// Makes the scratch file's bytes durable (before [`publish`](Self::publish)).
    pub(crate) fn sync(&self) -> Result<(), WriteError> {
        self.file
            .sync_all()
            .map_err(|e| WriteError::io("sync", &self.path, e))
    }

    /// Publishes the synced scratch file at `dest`: the second half of
    /// [`commit`](Self::commit).
    fn publish(mut self, dest: &Path, overwrite: bool) -> Result<(), WriteError> {
        if overwrite {
            if let Ok(meta) = fs::metadata(dest)
                && meta.is_file()
            {
                fs::set_permissions(&self.path, meta.permissions())
                    .map_err(|e| WriteError::io("copy permissions to", &self.path, e))?;
            }
            fs::rename(&self.path, dest).map_err(|e| WriteError::io("rename onto", dest, e))?;
        } else {
            fs::hard_link(&self.path, dest).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => WriteError::AlreadyExists {
                    path: dest.to_path_buf(),
                },
                _ => WriteError::io("link onto", dest, e),
            })?;
            // The link is the publication; the scratch name is removed by `Drop`.
            let _ = fs::remove_file(&self.path);
        }
        self.committed = true;
        sync_dir(&parent_dir(dest))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Refuses a destination that exists and is not a regular file (followed through links): a
/// directory, a device (`/dev/null`), a FIFO or a socket would be replaced by the rename, or
/// written into in place, instead of receiving a file.
fn refuse_not_regular(dest: &Path) -> Result<(), WriteError> {
    match fs::metadata(dest) {
        Ok(meta) if !meta.is_file() => Err(WriteError::io(
            "replace",
            dest,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "it exists and is not a regular file (a directory, a device, a FIFO or a \
                 socket): nothing is written there",
            ),
        )),
        _ => Ok(()),
    }
}

/// Whether `name` is the name of a scratch file (of any destination).
pub(crate) fn is_scratch_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(SCRATCH_SUFFIX)
}

/// Whether the scratch file at `path` was left by a writer that is gone: nobody holds its
/// lock (a live writer always does), or, on a filesystem without locks, it has not been
/// touched for [`STALE_AFTER`]. A file that cannot be opened is not taken for stale.
pub(crate) fn is_stale_scratch(path: &Path) -> bool {
    let Ok(file) = crate::platform::open_regular(path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => true,
        Err(TryLockError::WouldBlock) => false,
        Err(TryLockError::Error(_)) => file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER),
    }
}

/// Removes the stale scratch files of `file_name` in `dir` (best effort: a save does not fail
/// because an old leftover could not be removed).
fn remove_stale(dir: &Path, file_name: &str) {
    let prefix = format!(".{file_name}.");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(name) = name.to_str()
            && name.starts_with(&prefix)
            && is_scratch_name(name)
            && is_stale_scratch(&entry.path())
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Fsyncs a directory so a rename in it survives power loss. WASI has no way to sync a
/// directory (a directory's descriptor refuses `fd_sync`): there the rename is as durable as
/// the runtime's host makes it.
#[cfg(not(target_os = "wasi"))]
fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WriteError::io("sync directory", dir, e))
}

#[cfg(target_os = "wasi")]
#[allow(clippy::unnecessary_wraps)]
fn sync_dir(_dir: &Path) -> Result<(), WriteError> {
    Ok(())
}

/// The file a pack is written to: a scratch sibling committed at the end (atomic mode) or
/// the destination itself (in place).
pub(crate) enum Target {
    Scratch(Scratch),
    InPlace(File, std::path::PathBuf),
}

impl Target {
    /// Opens the file for a write to `path` under `options` (refusing an existing `path`
    /// without `overwrite`).
    pub(crate) fn open(path: &Path, options: &WriteOptions) -> Result<Self, WriteError> {
        let overwrite = options.overwrite;
        if !overwrite && path.symlink_metadata().is_ok() {
            return Err(WriteError::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        refuse_not_regular(path)?;
        match options.mode {
            WriteMode::Atomic => Ok(Self::Scratch(Scratch::create(path)?)),
            WriteMode::InPlace => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .truncate(true)
                    .create(overwrite)
                    .create_new(!overwrite)
                    .open(path)
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::AlreadyExists => WriteError::AlreadyExists {
                            path: path.to_path_buf(),
                        },
                        _ => WriteError::io("open", path, e),
                    })?;
                Ok(Self::InPlace(file, path.to_path_buf()))
            }
        }
    }

    pub(crate) fn file(&self) -> &File {
        match self {
            Self::Scratch(scratch) => scratch.file(),
            Self::InPlace(file, _) => file,
        }
    }

    /// The file's own path (the scratch file's, in atomic mode), for errors.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Scratch(scratch) => scratch.path(),
            Self::InPlace(_, path) => path,
        }
    }

    /// Publishes the written file at `dest` (atomic mode: fsync, rename, directory fsync),
    /// `ready` called once the file is durable and before it is published (its error,
    /// returned, leaves `dest` as it was in atomic mode; in place, the file is neither synced
    /// nor published: `ready` is called at once).
    pub(crate) fn finish_when<E: From<WriteError>>(
        self,
        dest: &Path,
        overwrite: bool,
        ready: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Self::Scratch(scratch) => {
                scratch.sync()?;
                ready()?;
                Ok(scratch.publish(dest, overwrite)?)
            }
            Self::InPlace(..) => ready(),
        }
    }
}
