//! The lookup table of a load: the source's tensors a walk may take, by the name it matches
//! them with (after the source's namespace, the convention's and the options' renames).

use std::borrow::Cow;
use std::collections::hash_map::Entry;

use super::error::Mismatch;
use super::options::LoadOptions;
use crate::format::TensorInfo;
use crate::source::{TensorSource, Withheld};

/// The file's tensors that a walk may take, by (renamed) path, in file order.
///
/// Writers of packs (this crate's and Burn's) and of safetensors files lay parameters out in
/// the order a walk of the module meets them, so each lookup first tries the tensor after the
/// one taken last: one comparison, no hashing. Only a lookup that misses builds the index by
/// name (foldhash: fast on the short, shared-prefix names of a module, and seeded per process,
/// so names crafted in a file cannot be chosen to collide).
pub(crate) struct Pending<'a> {
    /// Every tensor the filter accepts, in file order; `None` once taken.
    order: Vec<(Cow<'a, str>, Option<&'a TensorInfo>)>,
    /// Where the next lookup looks first.
    next: usize,
    /// Path -> place in `order`, built at the first miss.
    index: Option<foldhash::HashMap<Cow<'a, str>, usize>>,
    /// The tensors the source withholds (see `TensorSource::withheld`), by path; removed when
    /// a parameter asks for one.
    withheld: foldhash::HashMap<Cow<'a, str>, &'a Withheld>,
}

impl<'a> Pending<'a> {
    /// The table of `source`'s tensors under `options`: the source's namespace stripped, each
    /// name read through the options' convention and then their rename rules, only what the
    /// filter accepts. Renames that map several tensors onto one name keep the later one (in
    /// name order) and report the collision in `mismatch`.
    pub(crate) fn build(
        source: &'a dyn TensorSource,
        options: &LoadOptions,
        mismatch: &mut Mismatch,
    ) -> Self {
        // A source that holds more than a module (a checkpoint) declares the namespace of its
        // parameters.
        let namespace = source.namespace();
        let convention = options.convention.as_deref();
        let mut converted = false;
        let mut path_of = |name: &'a str| -> Option<Cow<'a, str>> {
            let name = match namespace {
                Some(prefix) => name.strip_prefix(prefix)?,
                None => name,
            };
            let name = match convention {
                Some(convention) => convention.source_name(name),
                None => Cow::Borrowed(name),
            };
            let path = match name {
                Cow::Borrowed(name) => options.renamed(name),
                Cow::Owned(name) => {
                    converted = true;
                    Cow::Owned(options.renamed(&name).into_owned())
                }
            };
            options.accepts(&path).then_some(path)
        };
        let mut accepted = Vec::with_capacity(source.tensors().len());
        for info in source.tensors() {
            if let Some(path) = path_of(info.name()) {
                accepted.push((path, info));
            }
        }
        // Tensors the source lists but cannot hand out, by the same paths: refused by name
        // where a parameter wants one.
        let mut withheld = foldhash::HashMap::default();
        for w in source.withheld() {
            if let Some(path) = path_of(&w.name) {
                withheld.insert(path, w);
            }
        }
        // Distinct file names are distinct paths unless renames map two onto one.
        if converted || !options.renames.is_empty() {
            let mut seen: foldhash::HashMap<Cow<'a, str>, usize> = foldhash::HashMap::default();
            let mut kept: Vec<Option<(Cow<'a, str>, &'a TensorInfo)>> = Vec::new();
            for (path, info) in accepted {
                match seen.entry(path.clone()) {
                    Entry::Occupied(at) => {
                        mismatch.collisions.push(at.key().to_string());
                        kept[*at.get()] = Some((path, info));
                    }
                    Entry::Vacant(free) => {
                        free.insert(kept.len());
                        kept.push(Some((path, info)));
                    }
                }
            }
            accepted = kept.into_iter().flatten().collect();
        }
        let mut pending = Self::new(accepted);
        pending.withheld = withheld;
        pending
    }

    /// The tensors in `accepted` (unique paths), put in file order.
    fn new(mut accepted: Vec<(Cow<'a, str>, &'a TensorInfo)>) -> Self {
        // Stable: tensors at one offset (zero-length ones) keep their name order.
        accepted.sort_by_key(|(_, info)| info.offset());
        Self {
            order: accepted
                .into_iter()
                .map(|(path, info)| (path, Some(info)))
                .collect(),
            next: 0,
            index: None,
            withheld: foldhash::HashMap::default(),
        }
    }

    /// Where `path` is in `order`, taken or not.
    fn position(&mut self, path: &str) -> Option<usize> {
        if let Some((key, _)) = self.order.get(self.next)
            && key == path
        {
            return Some(self.next);
        }
        let order = &self.order;
        self.index
            .get_or_insert_with(|| {
                let mut index = foldhash::HashMap::with_capacity_and_hasher(
                    order.len(),
                    foldhash::fast::RandomState::default(),
                );
                index.extend(
                    order
                        .iter()
                        .enumerate()
                        .map(|(i, (key, _))| (key.clone(), i)),
                );
                index
            })
            .get(path)
            .copied()
    }

    /// The tensor at `path`, if it is there and not taken yet.
    pub(crate) fn get(&mut self, path: &str) -> Option<&'a TensorInfo> {
        let i = self.position(path)?;
        self.order[i].1
    }

    /// The tensor at `path`, if it is there and not taken yet, the next lookup looking after
    /// it first (for a walk that reads without taking).
    pub(crate) fn peek(&mut self, path: &str) -> Option<&'a TensorInfo> {
        let i = self.position(path)?;
        self.next = i + 1;
        self.order[i].1
    }

    /// Takes the tensor at `path`: a second take of the same path finds nothing.
    pub(crate) fn take(&mut self, path: &str) -> Option<&'a TensorInfo> {
        let i = self.position(path)?;
        self.next = i + 1;
        self.order[i].1.take()
    }

    /// Whether the source withholds the tensor at `path` (and no parameter asked for it yet).
    pub(crate) fn is_withheld(&self, path: &str) -> bool {
        self.withheld.contains_key(path)
    }

    /// Takes the withheld tensor at `path`, if the source lists one there.
    pub(crate) fn take_withheld(&mut self, path: &str) -> Option<&'a Withheld> {
        self.withheld.remove(path)
    }

    /// The paths of the tensors nobody took (withheld ones included), sorted.
    pub(crate) fn untaken(self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .order
            .into_iter()
            .filter(|(_, info)| info.is_some())
            .map(|(path, _)| path.into_owned())
            .chain(self.withheld.into_keys().map(Cow::into_owned))
            .collect();
        paths.sort();
        paths
    }
}
