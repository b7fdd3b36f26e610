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
    /// The source's names that the convention, the rename rules or the index renumbering
    /// changed, with their path: `(from, to)`, in the source's order.
    renamed: Vec<(String, String)>,
}

impl<'a> Pending<'a> {
    /// The table of `source`'s tensors under `options`: the source's namespace stripped, each
    /// name read through the options' convention, then their rename rules, then (under
    /// [`map_indices_contiguous`](LoadOptions::map_indices_contiguous)) with its indices
    /// renumbered, only what the filter accepts. Renames that map several tensors onto one
    /// name keep the later one (in name order) and report the collision in `mismatch`. Every
    /// name changed on the way (namespace aside) is kept for the load report
    /// ([`renamed`](Self::renamed)).
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
        let mut path_of = |name: &'a str| -> Option<(&'a str, Cow<'a, str>)> {
            let name = match namespace {
                Some(prefix) => name.strip_prefix(prefix)?,
                None => name,
            };
            let path = match convention {
                Some(convention) => convention.source_name(name),
                None => Cow::Borrowed(name),
            };
            let path = match path {
                Cow::Borrowed(name) => options.renamed(name),
                Cow::Owned(name) => {
                    converted = true;
                    Cow::Owned(options.renamed(&name).into_owned())
                }
            };
            Some((name, path))
        };
        let mut named: Vec<(&'a str, Cow<'a, str>)> = Vec::with_capacity(source.tensors().len());
        let mut infos: Vec<&'a TensorInfo> = Vec::with_capacity(source.tensors().len());
        for info in source.tensors() {
            if let Some(pair) = path_of(info.name()) {
                named.push(pair);
                infos.push(info);
            }
        }
        // Tensors the source lists but cannot hand out, by the same paths: refused by name
        // where a parameter wants one.
        let mut withheld_named: Vec<(&'a str, Cow<'a, str>)> = Vec::new();
        let mut withheld_of: Vec<&'a Withheld> = Vec::new();
        for w in source.withheld() {
            if let Some(pair) = path_of(&w.name) {
                withheld_named.push(pair);
                withheld_of.push(w);
            }
        }
        // Indices renumbered over every name of the source (burn-store's semantics: before
        // the filter, which selects module paths).
        let mut renumbered = false;
        if options.map_indices_contiguous {
            let mapped: Vec<Option<String>> = {
                let paths = || {
                    named
                        .iter()
                        .chain(&withheld_named)
                        .map(|(_, path)| path.as_ref())
                };
                let indices = super::contiguous::Indices::of(paths());
                paths().map(|path| indices.map(path)).collect()
            };
            for ((_, path), mapped) in named.iter_mut().chain(&mut withheld_named).zip(mapped) {
                if let Some(mapped) = mapped {
                    *path = Cow::Owned(mapped);
                    renumbered = true;
                }
            }
        }
        let renamed: Vec<(String, String)> = named
            .iter()
            .chain(&withheld_named)
            .filter(|(name, path)| name != path)
            .map(|(name, path)| ((*name).to_string(), path.to_string()))
            .collect();
        let mut accepted = Vec::with_capacity(named.len());
        for ((_, path), info) in named.into_iter().zip(infos) {
            if options.accepts(&path) {
                accepted.push((path, info));
            }
        }
        let mut withheld = foldhash::HashMap::default();
        for ((_, path), w) in withheld_named.into_iter().zip(withheld_of) {
            if options.accepts(&path) {
                withheld.insert(path, w);
            }
        }
        // Distinct file names are distinct paths unless renames map two onto one.
        if converted || renumbered || !options.renames.is_empty() {
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
        pending.renamed = renamed;
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
            renamed: Vec::new(),
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

    /// The names changed on their way to a path (see [`build`](Self::build)): `(from, to)`.
    pub(crate) fn renamed(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.renamed)
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
