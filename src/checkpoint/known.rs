//! What an incremental save may refer to: the tensors the kept checkpoints hold, by content
//! ([`Index`]), and what a manager knows of its storage between saves ([`Known`]), so that a
//! save reads again only the manifests and data files that changed since the last one.
//!
//! A file is taken for unchanged while its storage's [`fingerprint`](Storage::fingerprint) is
//! (a directory: device, inode, length, modification and change times). A storage without
//! fingerprints (object storage) has every manifest and data file looked at again at each save,
//! as if nothing were known. What a fingerprint cannot see (a data file rewritten in place,
//! header and all, within one tick of the filesystem's clock) is caught by the save's check that
//! the checkpoint it wrote opens: that save fails naming the file, the manager forgets what it
//! knew, and the next save looks at everything again.
//!
//! The bytes of a tensor a save may refer to are read and checked against its data file's
//! checksum once while the file's fingerprint holds (a data file the manager wrote itself is
//! taken as written): a tensor damaged in place, its header intact, is written anew. A rewrite
//! within one tick of the clock after the bytes were looked at, and the bytes of a storage
//! without fingerprints, are not looked at again: `verify` finds them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::collect::{Listing, references};
use super::error::CheckpointError;
use super::refs::{self, Ref, Where};
use super::storage::Storage;
use crate::source::{PackSource, TensorSource};

/// The tensors kept checkpoints hold, by content: dtype, shape and XXH3-128 of the bytes.
/// Each candidate is tagged with the step of the manifest that named it; a lookup takes the
/// newest (its data file is the last one retention deletes).
#[derive(Default)]
pub(crate) struct Index {
    by_hash: HashMap<u128, Vec<Place>>,
}

/// Where a tensor's bytes are: a line of a manifest's references, or a tensor this save
/// writes.
pub(crate) enum Place {
    /// Line `line` of the references of the manifest of step `step`.
    Stored {
        step: u64,
        refs: Arc<[Ref]>,
        line: usize,
    },
    /// A tensor the save writes into `file` as `stored_as`.
    Fresh {
        dtype: String,
        shape: Vec<usize>,
        file: String,
        stored_as: String,
    },
}

impl Place {
    fn is(&self, dtype: &str, shape: &[usize]) -> bool {
        match self {
            Place::Stored { refs, line, .. } => {
                refs[*line].dtype == dtype && refs[*line].shape == shape
            }
            Place::Fresh {
                dtype: d, shape: s, ..
            } => d == dtype && s == shape,
        }
    }

    fn step(&self) -> u64 {
        match self {
            Place::Stored { step, .. } => *step,
            Place::Fresh { .. } => u64::MAX,
        }
    }

    /// Its data file, its name there, the data file's checksum of it and where the data file
    /// holds it, where known (a tensor this save writes has neither until its data file is
    /// written).
    pub(crate) fn place(&self) -> (&str, &str, Option<u64>, Option<Where>) {
        match self {
            Place::Stored { refs, line, .. } => {
                let r = &refs[*line];
                (&r.file, &r.stored_as, r.checksum, r.at)
            }
            Place::Fresh {
                file, stored_as, ..
            } => (file, stored_as, None, None),
        }
    }
}

impl Index {
    /// Adds a place for the tensor of content `hash`. A fresh place replaces an equal one.
    pub(crate) fn insert(&mut self, hash: u128, place: Place) {
        let same = self.by_hash.entry(hash).or_default();
        if let Place::Fresh { dtype, shape, .. } = &place {
            same.retain(|k| !k.is(dtype, shape));
        }
        same.push(place);
    }

    /// The newest place of a tensor of this dtype, shape and content.
    pub(crate) fn find(&self, dtype: &str, shape: &[usize], hash: u128) -> Option<&Place> {
        self.by_hash
            .get(&hash)?
            .iter()
            .filter(|k| k.is(dtype, shape))
            .max_by_key(|k| k.step())
    }

    /// Adds the lines of `refs` (the manifest of `step`) that `usable` accepts.
    fn add(&mut self, step: u64, refs: &Arc<[Ref]>, mut usable: impl FnMut(&Ref) -> bool) {
        for (line, r) in refs.iter().enumerate() {
            if usable(r) {
                self.insert(
                    r.hash,
                    Place::Stored {
                        step,
                        refs: Arc::clone(refs),
                        line,
                    },
                );
            }
        }
    }

    /// Removes what the manifest of `step` (whose references are `refs`) added.
    fn remove(&mut self, step: u64, refs: &[Ref]) {
        for r in refs {
            if let Some(same) = self.by_hash.get_mut(&r.hash) {
                same.retain(|k| k.step() != step);
                if same.is_empty() {
                    self.by_hash.remove(&r.hash);
                }
            }
        }
    }
}

/// A manifest as a manager last read it.
struct Manifest {
    step: u64,
    fingerprint: Option<u128>,
    /// XXH3-128 of its references' text (a manifest rewritten with the same text is not
    /// parsed again).
    text: u128,
    /// Its references; `None` when it did not open or parse (then everything is kept).
    refs: Option<Arc<[Ref]>>,
    /// The data files it names.
    files: Option<Arc<HashSet<String>>>,
    /// Whether its usable lines are in the index.
    indexed: bool,
}

impl Manifest {
    /// A manifest read whole, its usable lines in the index.
    fn indexed(step: u64, fingerprint: Option<u128>, text: u128, refs: Arc<[Ref]>) -> Self {
        let files: HashSet<String> = refs.iter().map(|r| r.file.clone()).collect();
        Self {
            step,
            fingerprint,
            text,
            refs: Some(refs),
            files: Some(Arc::new(files)),
            indexed: true,
        }
    }
}

/// What a manager knows of its storage between incremental saves: every manifest's
/// references, the fingerprints of the data files their lines were checked against, and the
/// index of what a save may refer to. Kept up to date by [`refresh`](Self::refresh) (what
/// changed in the storage since) and [`saved`](Self::saved) (what the save wrote).
#[derive(Default)]
pub(crate) struct Known {
    /// The newest step a save was indexed for: the index offers data files of that step and
    /// before, so a save of an earlier step starts from nothing.
    upto: Option<u64>,
    manifests: HashMap<String, Manifest>,
    /// The data files lines were checked against, with their fingerprints then (`None`: look
    /// again at the next save).
    data: HashMap<String, Option<u128>>,
    /// The tensors of those data files whose bytes were read and found to match the data
    /// file's checksum (by offset), each read once while its file's fingerprint holds; and
    /// the data files this manager wrote (whose every tensor it checksummed as it wrote it).
    bytes_checked: HashMap<String, HashSet<(u64, u64)>>,
    written: HashSet<String>,
    index: Index,
}

impl Known {
    /// Brings what is known up to date with `storage` for a save of `step`, and returns the
    /// index of what it may refer to and the storage's listing. A tensor of a manifest's
    /// references is offered when its data file is listed, is of a step not after `step` (a
    /// save below a newer checkpoint never leans on its files), opens, and holds the tensor as
    /// the line records it, its checksum included; a line without a recorded checksum (a
    /// manifest of the first layout) is not offered: nothing says its data file is the one it
    /// was written with. A damaged or swapped data file thus costs one save that writes its
    /// tensors anew. Only manifests and data files new or changed since the last call are read
    /// (each data file's head once); those opened are pushed to `opened` (a manager holds them
    /// until its next save).
    pub(crate) fn refresh<S: Storage>(
        &mut self,
        storage: &S,
        step: u64,
        opened: &mut Vec<Arc<S::Source>>,
    ) -> Result<(&Index, Listing), CheckpointError> {
        let names = storage.names()?;
        if self.upto.is_some_and(|upto| step < upto) {
            *self = Self::default();
        }
        let listed: HashSet<&str> = names.iter().map(String::as_str).collect();
        let fingerprint = |name: &str| storage.fingerprint(&storage.location(name));
        // The data files changed or gone since their lines were checked.
        let mut stale: HashSet<String> = HashSet::new();
        self.data.retain(|name, was| {
            let same = was.is_some() && listed.contains(name.as_str()) && fingerprint(name) == *was;
            if !same {
                stale.insert(name.clone());
            }
            same
        });
        // What was checked of a file changed since is checked again.
        self.bytes_checked.retain(|name, _| !stale.contains(name));
        self.written.retain(|name| !stale.contains(name));
        // Manifests gone: their lines leave the index.
        let index = &mut self.index;
        self.manifests.retain(|name, m| {
            let keep = listed.contains(name.as_str());
            if !keep && m.indexed {
                index.remove(m.step, m.refs.as_deref().unwrap_or_default());
            }
            keep
        });
        let mut manifests: Vec<(u64, &String)> = names
            .iter()
            .filter_map(|n| Some((refs::step_of(n)?, n)))
            .collect();
        manifests.sort_unstable();
        // Each data file's head, as read once by this call: `None` when it is not usable.
        let mut heads: HashMap<String, Option<Arc<S::Source>>> = HashMap::new();
        for (manifest_step, name) in manifests {
            let now = fingerprint(name);
            let known = self.manifests.get_mut(name.as_str());
            let unchanged = known
                .as_ref()
                .is_some_and(|m| m.fingerprint.is_some() && m.fingerprint == now);
            if let Some(m) = &known
                && unchanged
                && m.indexed
                && m.files
                    .as_ref()
                    .is_some_and(|files| files.iter().all(|f| !stale.contains(f)))
            {
                continue;
            }
            let previous = known.map(|m| {
                if m.indexed {
                    self.index
                        .remove(m.step, m.refs.as_deref().unwrap_or_default());
                }
                (m.text, m.refs.clone())
            });
            let refs = match &previous {
                Some((text, Some(refs))) if unchanged => Some((*text, Arc::clone(refs))),
                _ => references(storage, name, previous.as_ref(), Some(opened)),
            };
            let Some((text, list)) = refs else {
                self.manifests.insert(
                    name.clone(),
                    Manifest {
                        step: manifest_step,
                        fingerprint: None,
                        text: 0,
                        refs: None,
                        files: None,
                        indexed: false,
                    },
                );
                continue;
            };
            let data = &mut self.data;
            let (bytes_checked, written) = (&mut self.bytes_checked, &mut self.written);
            self.index.add(manifest_step, &list, |r| {
                if r.checksum.is_none() {
                    return false;
                }
                let head = heads.entry(r.file.clone()).or_insert_with(|| {
                    let usable = listed.contains(r.file.as_str())
                        && refs::data_step(&r.file).is_some_and(|s| s <= step);
                    // The fingerprint first: a file changed after it is looked at again.
                    let print = usable.then(|| fingerprint(&r.file)).flatten();
                    let head = usable
                        .then(|| storage.open_data_shared(&storage.location(&r.file)).ok())
                        .flatten();
                    let print = print.filter(|_| head.is_some());
                    // A file found changed since it was last looked at (between the check of
                    // the data files above and now) is trusted for nothing checked before.
                    if data.get(&r.file).is_some_and(|was| *was != print) {
                        bytes_checked.remove(&r.file);
                        written.remove(&r.file);
                    }
                    data.insert(r.file.clone(), print);
                    if let Some(head) = &head {
                        opened.push(Arc::clone(head));
                    }
                    head
                });
                head.as_ref().is_some_and(|source| {
                    source.tensor(&r.stored_as).is_some_and(|t| {
                        t.checksum() == r.checksum
                            && t.shape() == r.shape.as_slice()
                            && refs::dtype_is(t.dtype(), &r.dtype)
                            // Where it is, when recorded, is where it is: a later manifest
                            // copies it.
                            && r.at.is_none_or(|at| {
                                at.offset == t.offset()
                                    && source.layout().head_checksum() == Some(at.head)
                            })
                            // Its bytes, read once while the file is unchanged: a tensor
                            // damaged in place (its header intact) is written anew, never
                            // referred to by a checkpoint that would not verify. (Where the
                            // storage has no fingerprints, object storage, nothing would keep
                            // the bytes read once: its heads only are checked.)
                            && (!data.get(&r.file).is_some_and(Option::is_some)
                                || bytes_hold(source.as_ref(), t, &r.file, written, bytes_checked))
                    })
                })
            });
            self.manifests.insert(
                name.clone(),
                Manifest::indexed(manifest_step, now, text, list),
            );
        }
        self.upto = self.upto.max(Some(step));
        let listing = Listing {
            data: names
                .iter()
                .filter_map(|n| Some((refs::data_step(n)?, n.clone())))
                .collect(),
            manifests: self
                .manifests
                .values()
                .map(|m| (m.step, m.files.clone()))
                .collect(),
        };
        Ok((&self.index, listing))
    }

    /// The save of `step` wrote its manifest `name` (fingerprint `print`, references `refs`,
    /// whose text hashes to `text`) and the data files `new` (with their fingerprints), and
    /// the checkpoint opened: its lines are checked, and go into the index as they are.
    pub(crate) fn saved(
        &mut self,
        step: u64,
        name: String,
        print: Option<u128>,
        text: u128,
        refs: Arc<[Ref]>,
        new: Vec<(String, Option<u128>)>,
    ) {
        if let Some(m) = self.manifests.get(&name)
            && m.indexed
        {
            self.index
                .remove(m.step, m.refs.as_deref().unwrap_or_default());
        }
        self.written
            .extend(new.iter().map(|(name, _)| name.clone()));
        self.data.extend(new);
        self.index.add(step, &refs, |r| r.checksum.is_some());
        self.manifests
            .insert(name, Manifest::indexed(step, print, text, refs));
        self.upto = self.upto.max(Some(step));
    }
}

/// Whether the bytes of `tensor` (of the data file `file`, opened as `source`) match the data
/// file's checksum of it: read and hashed once while the file's fingerprint holds
/// (`checked`), taken as they are in a file this manager wrote (`written`: checksummed as
/// they were written).
fn bytes_hold<Src: PackSource + ?Sized>(
    source: &Src,
    tensor: &crate::format::TensorInfo,
    file: &str,
    written: &HashSet<String>,
    checked: &mut HashMap<String, HashSet<(u64, u64)>>,
) -> bool {
    // By place and length: an empty tensor may sit where the next one starts.
    let place = (tensor.offset(), tensor.len());
    if written.contains(file)
        || checked
            .get(file)
            .is_some_and(|places| places.contains(&place))
    {
        return true;
    }
    let holds = source
        .read(tensor)
        .and_then(|bytes| source.check(tensor, &bytes))
        .is_ok_and(|checked| checked);
    if holds {
        checked.entry(file.to_string()).or_default().insert(place);
    }
    holds
}
