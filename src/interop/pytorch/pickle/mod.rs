//! A restricted pickle machine: it reads the object graph a `torch.save` state dict is made of
//! and nothing else. It never imports or calls anything: a `GLOBAL` is looked up in a fixed
//! table of the names a state dict needs ([`Global`]), each with its meaning written here
//! (`collections.OrderedDict(pairs)` a dict of those pairs, `torch._utils._rebuild_tensor_v2(...)`
//! a [`TensorView`]); any other name is an error that names it, before anything else happens.
//! An argument a global of the table is called with that is not one it understands is an
//! error naming it too, never dropped.
//!
//! Bounded by the input: every opcode consumes at least one byte of the input and creates at
//! most one node; lengths in the input are checked against what is left of it before anything
//! is taken; containers refer to nodes by index (a memo "bomb" of repeated `GET`s adds
//! indices, never copies); `torch.Size(t)` and `_rebuild_parameter(t, ...)` are the node they
//! are given, not a copy of it. What the machine holds (nodes, their contents, memo entries,
//! the copies a call makes) is counted before it is taken, against
//! [`MEMORY_PER_BYTE`](memory::MEMORY_PER_BYTE) bytes per byte of the pickle plus
//! [`MEMORY_SLACK`](memory::MEMORY_SLACK): a pickle that would need more is an error.
//! `None`, booleans, small integers and the empty tuple are shared nodes. Cycles are possible
//! in a hostile pickle and are the walker's to bound ([`Pickle::node`] does not recurse).
//!
//! By concern: [`opcodes`] names the protocol's opcodes, [`machine`] runs them (reading the
//! input in [`input`], the stack, marks and memo in [`stack`]), [`memory`] counts what is
//! held, [`globals`] is the table of names and [`calls`] what calling one makes.

mod calls;
mod globals;
mod input;
mod machine;
mod memory;
mod opcodes;
mod stack;

use std::collections::HashMap;

pub(crate) use globals::{Global, StorageType};
use machine::Machine;

/// A node of the object graph. Containers hold indices of other nodes; the large variants
/// are boxed so that every node takes 32 bytes.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An integer wider than 64 bits, as its little-endian two's complement bytes.
    BigInt(Box<[u8]>),
    /// A float (its value is nothing a tensor is made of).
    Float,
    Str(Box<str>),
    /// Bytes (their contents are nothing a tensor is made of).
    Bytes,
    Tuple(Vec<usize>),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    Global(Global),
    Storage(Box<Storage>),
    Tensor(Box<TensorView>),
}

impl Node {
    /// What kind of value this is, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::None => "None",
            Node::Bool(_) => "bool",
            Node::Int(_) | Node::BigInt(_) => "int",
            Node::Float => "float",
            Node::Str(_) => "str",
            Node::Bytes => "bytes",
            Node::Tuple(_) => "tuple",
            Node::List(_) => "list",
            Node::Dict(_) => "dict",
            Node::Set(_) => "set",
            Node::Global(_) => "global",
            Node::Storage(_) => "storage",
            Node::Tensor(_) => "tensor",
        }
    }
}

/// A storage, as a persistent id names it: `('storage', type, key, location, numel[, view])`.
#[derive(Debug, Clone)]
pub(crate) struct Storage {
    pub kind: StorageType,
    pub key: String,
    /// Elements of the whole storage.
    pub numel: u64,
    /// A legacy storage view: its offset (elements) in the storage `key`.
    pub view_offset: u64,
    /// A legacy storage view: its length (elements); the tensor must lie inside it.
    pub view_len: Option<u64>,
}

/// A tensor: a view of a storage.
#[derive(Debug, Clone)]
pub(crate) struct TensorView {
    /// The node of its storage (a [`Node::Storage`]).
    pub storage: usize,
    /// Elements from the storage's start.
    pub offset: u64,
    pub shape: Vec<u64>,
    pub stride: Vec<u64>,
}

/// A pickle read: its graph and where its top object is.
pub(crate) struct Pickle {
    nodes: Vec<Node>,
    pub root: usize,
    /// Every global the pickle references, as `module.name`, in order of first use.
    pub globals: Vec<String>,
    /// The pickle's length in bytes (what the walks over its graph are bounded by).
    pub len: usize,
    /// The values each node carries beside what it is (see `Machine::side`).
    side: HashMap<usize, Vec<usize>>,
}

impl Pickle {
    pub fn node(&self, id: usize) -> &Node {
        &self.nodes[id]
    }

    /// The values `id` carries that no tensor of a state dict is made of (a BUILD state, a
    /// tensor's hooks, a parameter's state): a tensor among them would be dropped, so the
    /// walk looks.
    pub fn side(&self, id: usize) -> &[usize] {
        self.side.get(&id).map_or(&[], Vec::as_slice)
    }

    /// The storage a tensor views.
    pub fn storage_of(&self, view: &TensorView) -> &Storage {
        match &self.nodes[view.storage] {
            Node::Storage(s) => s,
            _ => unreachable!("a tensor's storage node is a storage (checked when it was made)"),
        }
    }

    /// Every storage the pickle names (a legacy file's storage records follow it, sized by
    /// their types).
    pub fn storages(&self) -> impl Iterator<Item = &Storage> {
        self.nodes.iter().filter_map(|n| match n {
            Node::Storage(s) => Some(&**s),
            _ => None,
        })
    }
}

/// What is wrong, and at which byte of the pickle.
#[derive(Debug)]
pub(crate) struct PickleError {
    pub offset: usize,
    pub reason: String,
    /// A global outside the table, as `module.name`.
    pub refused: Option<String>,
}

/// Most dimensions of a tensor (`PyTorch` allows 64 at most, Burn's formats fewer).
pub(crate) const MAX_RANK: usize = 64;

/// Reads one pickle from the start of `input`; returns it and the bytes it took (the legacy
/// format is several pickles in a row).
pub(crate) fn load(input: &[u8]) -> Result<(Pickle, usize), PickleError> {
    let mut m = Machine::new(input);
    let root = m.run().map_err(|(reason, refused)| PickleError {
        offset: m.at,
        reason,
        refused,
    })?;
    let mut side: HashMap<usize, Vec<usize>> = HashMap::new();
    for (node, value) in m.side {
        side.entry(node).or_default().push(value);
    }
    Ok((
        Pickle {
            nodes: m.nodes,
            root,
            globals: m.globals,
            len: m.at,
            side,
        },
        m.at,
    ))
}

/// What is wrong (the reason, and a global outside the table when that is it), without the
/// offset, which [`load`] adds.
type Fault = (String, Option<String>);

/// What a call of a global makes: a new node, or a node that already exists.
enum Called {
    New(Node),
    Same(usize),
}

fn fault(reason: impl Into<String>) -> Fault {
    (reason.into(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_take_32_bytes() {
        assert!(
            std::mem::size_of::<Node>() <= 32,
            "{}",
            std::mem::size_of::<Node>()
        );
    }

    #[test]
    fn a_small_state_dict_is_read() {
        // pickle.dumps(OrderedDict(a=1), protocol=2) with the global table's names only.
        let mut p = vec![0x80, 2];
        p.extend_from_slice(b"ccollections\nOrderedDict\nq\x00)R");
        p.extend_from_slice(b"q\x01X\x01\x00\x00\x00aK\x01s.");
        let (pickle, used) = load(&p).unwrap();
        assert_eq!(used, p.len());
        let Node::Dict(entries) = pickle.node(pickle.root) else {
            panic!()
        };
        assert_eq!(entries.len(), 1);
        assert!(matches!(pickle.node(entries[0].1), Node::Int(1)));
        assert_eq!(pickle.globals, ["collections.OrderedDict"]);
    }

    #[test]
    fn globals_outside_the_table_are_refused_by_name() {
        let p = b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00lsR.";
        let err = load(p).err().unwrap();
        assert_eq!(err.refused.as_deref(), Some("posix.system"));
        assert!(err.reason.contains("posix.system"), "{}", err.reason);
    }

    #[test]
    fn truncated_and_overlong_lengths_are_errors() {
        for p in [
            &b"\x80\x02X\xff\xff\xff\x7fab"[..],
            b"\x80\x02(",
            b"\x80\x02h\x05.",
            b"\x80\x02s.",
        ] {
            assert!(load(p).is_err(), "{p:?}");
        }
    }
}
