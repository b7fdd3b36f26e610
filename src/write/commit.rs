//! Atomic commit: a scratch sibling, fsync, rename (or link), directory fsync.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::WriteError;

/// Suffix of scratch files; with the leading dot and the pid in the name, leftovers of a killed
/// process are recognisable (`.<file name>.<pid>-<n>.bpk-tmp`).
pub(crate) const SCRATCH_SUFFIX: &str = ".bpk-tmp";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A scratch file beside the destination, removed on drop unless committed: an error or a
/// panic anywhere before the commit leaves no trace.
pub(crate) struct Scratch {
    path: PathBuf,
    file: File,
    committed: bool,
}

impl Scratch {
    /// Creates a new, empty scratch sibling of `dest`.
    pub(crate) fn create(dest: &Path) -> Result<Self, WriteError> {
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
        remove_stale(&dir, &file_name);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            ".{file_name}.{}-{n}{SCRATCH_SUFFIX}",
            std::process::id()
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| WriteError::io("create scratch file", &path, e))?;
        Ok(Self {
            path,
            file,
            committed: false,
        })
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the scratch file durable and publishes it at `dest`: fsync, copy the permissions
    /// of an existing `dest`, rename (or hard-link when `overwrite` is off, which refuses an
    /// existing `dest` atomically), then fsync the directory.
    pub(crate) fn commit(mut self, dest: &Path, overwrite: bool) -> Result<(), WriteError> {
        self.file
            .sync_all()
            .map_err(|e| WriteError::io("sync", &self.path, e))?;
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

/// The pid in a scratch file name `.<name>.<pid>-<n>.bpk-tmp`.
fn scratch_pid(name: &str) -> Option<i32> {
    let stem = name.strip_prefix('.')?.strip_suffix(SCRATCH_SUFFIX)?;
    let (_, tail) = stem.rsplit_once('.')?;
    let (pid, counter) = tail.split_once('-')?;
    counter.parse::<u64>().ok()?;
    pid.parse().ok()
}

fn process_alive(pid: i32) -> bool {
    if pid == i32::try_from(std::process::id()).unwrap_or(-1) {
        return true;
    }
    // SAFETY: signal 0 only checks whether the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether `name` is a scratch file of a process that no longer runs (a killed save).
pub(crate) fn is_stale_scratch(name: &str) -> bool {
    scratch_pid(name).is_some_and(|pid| !process_alive(pid))
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
            && is_stale_scratch(name)
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

/// Fsyncs a directory so a rename in it survives power loss.
fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WriteError::io("sync directory", dir, e))
}
