//! Finding the state dict in a pickle's object graph and flattening it into named tensors,
//! with the walk's bounds.

use std::collections::HashMap;

use super::pickle::{Node, Pickle};
use crate::format::Limits;

/// The keys under which checkpoints keep their state dict, tried in this order when the top
/// holds no tensor itself.
pub(super) const WELL_KNOWN_KEYS: [&str; 3] = ["state_dict", "model_state_dict", "model"];

/// One storage, one type: two types over the same bytes would read them two ways.
pub(super) fn check_storage_types(pickle: &Pickle) -> Result<(), String> {
    let mut kinds: HashMap<&str, &str> = HashMap::new();
    for storage in pickle.storages() {
        let kind = *kinds.entry(&storage.key).or_insert(storage.kind.name);
        if kind != storage.kind.name {
            return Err(format!(
                "storage '{}' is named as torch.{kind} and as torch.{}: its bytes cannot be both",
                storage.key, storage.kind.name
            ));
        }
    }
    Ok(())
}

/// When the state dict was found under the well-known key `chosen`: the other top-level keys
/// whose values hold tensors (an optimizer's state, an EMA copy), which are not read and are
/// said ([`PytorchSource::unread_keys`]).
pub(super) fn unread_keys(pickle: &Pickle, chosen: Option<&str>, limits: &Limits) -> Vec<String> {
    let (Some(chosen), Node::Dict(entries)) = (chosen, pickle.node(pickle.root)) else {
        return Vec::new();
    };
    let mut unread = Vec::new();
    for &(k, v) in entries {
        let Node::Str(k) = pickle.node(k) else {
            continue;
        };
        if &**k == chosen {
            continue;
        }
        let mut other = Walker::new(pickle, limits);
        if other.walk(v, &mut k.to_string(), 1).is_err() || !other.out.is_empty() {
            unread.push(k.to_string());
        }
    }
    unread
}

/// The keys of a dict node that are strings, the first 16, for errors.
pub(super) fn top_keys(p: &Pickle, id: usize) -> Vec<&str> {
    match p.node(id) {
        Node::Dict(entries) => entries
            .iter()
            .filter_map(|&(name, _)| match p.node(name) {
                Node::Str(s) => Some(&**s),
                _ => None,
            })
            .take(16)
            .collect(),
        _ => Vec::new(),
    }
}

/// The state dict: under `key` when given, else the top, or the first well-known key holding
/// a dict when the top holds no tensor itself.
pub(super) fn state_dict(p: &Pickle, key: Option<&str>) -> Result<(usize, Option<String>), String> {
    let entries = match p.node(p.root) {
        Node::Dict(entries) => entries.as_slice(),
        _ => &[],
    };
    let lookup = |k: &str| {
        entries
            .iter()
            .find(|&&(name, _)| matches!(p.node(name), Node::Str(s) if &**s == k))
            .map(|&(_, value)| value)
    };
    if let Some(k) = key {
        return lookup(k).map(|v| (v, Some(k.to_string()))).ok_or_else(|| {
            format!(
                "no key '{k}' at the top level (its keys: {:?})",
                top_keys(p, p.root)
            )
        });
    }
    if !entries
        .iter()
        .any(|&(_, v)| matches!(p.node(v), Node::Tensor(_)))
    {
        for k in WELL_KNOWN_KEYS {
            if let Some(v) = lookup(k)
                && matches!(p.node(v), Node::Dict(_))
            {
                return Ok((v, Some(k.to_string())));
            }
        }
    }
    Ok((p.root, None))
}

/// Longest tensor name (a dotted path) the walk builds.
const MAX_NAME: usize = 64 << 10;

/// The walk of a state dict's graph, with its bounds: nodes visited (a graph can share nodes,
/// so a walk could otherwise revisit them exponentially), depth, tensors found, and the bytes
/// of names and shapes handed out (at most 8 per byte of the pickle, plus 1 MiB), each checked
/// before the work it bounds.
pub(super) struct Walker<'p> {
    p: &'p Pickle,
    visits: usize,
    max_visits: usize,
    max_depth: usize,
    max_tensors: usize,
    held: usize,
    max_held: usize,
    copied: usize,
    max_copied: usize,
    /// Each tensor found: its dotted name and its node.
    pub(super) out: Vec<(String, usize)>,
}

impl<'p> Walker<'p> {
    pub(super) fn new(p: &'p Pickle, limits: &Limits) -> Self {
        Self {
            p,
            visits: 0,
            max_visits: limits.max_tensor_count.saturating_mul(64).max(1 << 16),
            max_depth: limits.max_cbor_depth,
            max_tensors: limits.max_tensor_count,
            held: 0,
            max_held: p.len.saturating_mul(8).saturating_add(1 << 20),
            copied: 0,
            max_copied: p.len.saturating_mul(64).saturating_add(64 << 20),
            out: Vec::new(),
        }
    }

    /// Every tensor under `id`, named by its dotted path (dict keys, list indices). A tensor
    /// the walk cannot name (under a key that is not a string or an integer, in a set) is an
    /// error naming where it is, never dropped; so is a storage that is not a tensor's.
    pub(super) fn walk(
        &mut self,
        id: usize,
        name: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        self.visits += 1;
        if self.visits > self.max_visits {
            return Err(format!(
                "the pickle's object graph has more than {} nodes to walk (shared or cyclic)",
                self.max_visits
            ));
        }
        if depth > self.max_depth {
            return Err(format!(
                "nested deeper than {} levels at '{name}'",
                self.max_depth
            ));
        }
        let p = self.p;
        for &value in p.side(id) {
            self.unnamed(
                name,
                value,
                depth,
                "the state or extra arguments of an object (a BUILD state, a tensor's hooks or \
                 metadata, a parameter's state)",
            )?;
        }
        match p.node(id) {
            Node::Tensor(view) => {
                if name.is_empty() {
                    return Err("the file holds one tensor, not a dict of named tensors".into());
                }
                if self.out.len() >= self.max_tensors {
                    return Err(format!(
                        "more than {} tensors (the tensor-count limit)",
                        self.max_tensors
                    ));
                }
                self.held = self
                    .held
                    .saturating_add(name.len() + 16 * view.shape.len() + 64);
                if self.held > self.max_held {
                    return Err(format!(
                        "the tensors' names and shapes would take more than {} bytes (8 per \
                         byte of the pickle, plus 1 MiB): the graph is shared to blow up, at \
                         '{name}'",
                        self.max_held
                    ));
                }
                self.out.push((name.clone(), id));
            }
            Node::Dict(entries) => {
                for &(k, v) in entries {
                    match p.node(k) {
                        Node::Str(s) => self.child(name, s, v, depth)?,
                        Node::Int(i) => self.child(name, &i.to_string(), v, depth)?,
                        // As Python's `str()` writes them.
                        Node::Bool(true) => self.child(name, "True", v, depth)?,
                        Node::Bool(false) => self.child(name, "False", v, depth)?,
                        other => {
                            let kind = other.kind();
                            self.unnamed(name, v, depth, &format!("a dict key that is a {kind}"))?;
                        }
                    }
                }
            }
            Node::List(items) | Node::Tuple(items) => {
                for (i, &v) in items.iter().enumerate() {
                    self.child(name, &i.to_string(), v, depth)?;
                }
            }
            Node::Set(items) => {
                for &v in items {
                    self.unnamed(name, v, depth, "a set")?;
                }
            }
            Node::Storage(s) => {
                return Err(format!(
                    "'{name}' is a bare storage ('{}', torch.{}), not a tensor: nothing names \
                     its shape",
                    s.key, s.kind.name
                ));
            }
            // Numbers, text, bytes, None, globals: values of a checkpoint that are not tensors.
            Node::None
            | Node::Bool(_)
            | Node::Int(_)
            | Node::BigInt(_)
            | Node::Float
            | Node::Str(_)
            | Node::Bytes
            | Node::Global(_) => {}
        }
        Ok(())
    }

    fn child(
        &mut self,
        name: &mut String,
        segment: &str,
        value: usize,
        depth: usize,
    ) -> Result<(), String> {
        // Every byte of name built is counted: a long key shared by many paths costs its
        // length each time.
        self.copied = self.copied.saturating_add(segment.len() + 1);
        if self.copied > self.max_copied {
            return Err(format!(
                "walking the state dict would build more than {} bytes of names (64 per byte \
                 of the pickle, plus 64 MiB): the graph is shared to blow up",
                self.max_copied
            ));
        }
        if name.len() + 1 + segment.len() > MAX_NAME {
            return Err(format!(
                "a tensor name longer than {MAX_NAME} bytes under '{}'",
                &name[..name.floor_char_boundary(200)]
            ));
        }
        let len = name.len();
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(segment);
        let result = self.walk(value, name, depth + 1);
        name.truncate(len);
        result
    }

    /// A value the walk cannot name a tensor under: walked, and an error if it holds one.
    fn unnamed(
        &mut self,
        name: &mut String,
        value: usize,
        depth: usize,
        what: &str,
    ) -> Result<(), String> {
        let before = self.out.len();
        self.child(name, "?", value, depth)?;
        if self.out.len() > before {
            return Err(format!(
                "tensor '{}' is under {what}, which gives it no name: not a state dict this \
                 reader can name",
                self.out[before].0
            ));
        }
        Ok(())
    }
}
