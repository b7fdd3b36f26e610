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
//! the copies a call makes) is counted before it is taken, against [`MEMORY_PER_BYTE`] bytes
//! per byte of the pickle plus [`MEMORY_SLACK`]: a pickle that would need more is an error.
//! `None`, booleans, small integers and the empty tuple are shared nodes. Cycles are possible
//! in a hostile pickle and are the walker's to bound ([`Pickle::node`] does not recurse).

use std::collections::HashMap;

use burn::tensor::{BoolStore, DType};

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

/// The globals a state dict needs, and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Global {
    /// `collections.OrderedDict`: called with no arguments, an empty dict.
    OrderedDict,
    /// `builtins.set` / `frozenset`.
    Set,
    /// `_codecs.encode(text, "latin1")`: how protocol 2 writes `bytes`.
    CodecsEncode,
    /// `torch.Size(tuple)`: the tuple.
    TorchSize,
    /// `torch._utils._rebuild_tensor(storage, offset, size, stride)`.
    RebuildTensor,
    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_parameter(data, requires_grad, hooks)`: the data.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state(data, requires_grad, hooks, state)`.
    RebuildParameterWithState,
    /// `torch._tensor._rebuild_from_type_v2(func, type, args, state)`: `func(*args)`.
    RebuildFromTypeV2,
    /// `torch.Tensor` or `torch.nn.parameter.Parameter`, as the type argument above.
    TensorType,
    /// A `torch.<Name>Storage` type: its element type, if Burn has one.
    Storage(&'static StorageType),
}

/// A `torch.<Name>Storage` type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StorageType {
    /// The type's name (`FloatStorage`), for errors.
    pub name: &'static str,
    /// Burn's dtype for its elements; `None` for those Burn has none for (complex, quantized).
    pub dtype: Option<DType>,
    /// Bytes per element (what a legacy file's storage records are sized in).
    pub element_size: u64,
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

/// Most entries in the memo (a state dict uses a few per tensor).
const MAX_MEMO: usize = 1 << 22;

/// Bytes of graph (nodes, their contents, memo entries, copies made by calls) the machine may
/// hold per byte of the pickle. A `torch.save` state dict needs far less (measured on every
/// file of the tests); a pickle of a million empty lists needs more.
pub(crate) const MEMORY_PER_BYTE: usize = 32;

/// Bytes of graph any pickle may hold beyond [`MEMORY_PER_BYTE`].
pub(crate) const MEMORY_SLACK: usize = 1 << 20;

/// What one memo entry costs (the hash map's slot and its share of spare capacity).
const MEMO_ENTRY: usize = 32;

/// The nodes every pickle starts with, shared: `None`, `False`, `True`, the empty tuple and
/// the integers 0 to 255 (what `BININT1` pushes), which nothing can change.
const SHARED_NONE: usize = 0;
const SHARED_FALSE: usize = 1;
const SHARED_TRUE: usize = 2;
const SHARED_EMPTY_TUPLE: usize = 3;
const SHARED_INTS: usize = 4;

/// Most dimensions of a tensor (`PyTorch` allows 64 at most, Burn's formats fewer).
pub(crate) const MAX_RANK: usize = 64;

/// The names a state dict needs.
fn global(module: &str, name: &str) -> Option<Global> {
    Some(match (module, name) {
        ("collections", "OrderedDict") => Global::OrderedDict,
        ("builtins" | "__builtin__", "set" | "frozenset") => Global::Set,
        ("_codecs", "encode") => Global::CodecsEncode,
        ("torch", "Size") => Global::TorchSize,
        ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
        ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
        ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
        ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
        ("torch._tensor", "_rebuild_from_type_v2") => Global::RebuildFromTypeV2,
        ("torch", "Tensor") | ("torch.nn.parameter", "Parameter") => Global::TensorType,
        ("torch", storage) => Global::Storage(storage_type(storage)?),
        _ => return None,
    })
}

/// `torch.<name>`, a storage type.
fn storage_type(name: &str) -> Option<&'static StorageType> {
    const fn t(name: &'static str, dtype: Option<DType>, element_size: u64) -> StorageType {
        StorageType {
            name,
            dtype,
            element_size,
        }
    }
    static TYPES: [StorageType; 16] = [
        t("FloatStorage", Some(DType::F32), 4),
        t("DoubleStorage", Some(DType::F64), 8),
        t("HalfStorage", Some(DType::F16), 2),
        t("BFloat16Storage", Some(DType::BF16), 2),
        t("LongStorage", Some(DType::I64), 8),
        t("IntStorage", Some(DType::I32), 4),
        t("ShortStorage", Some(DType::I16), 2),
        t("CharStorage", Some(DType::I8), 1),
        t("ByteStorage", Some(DType::U8), 1),
        t("BoolStorage", Some(DType::Bool(BoolStore::Native)), 1),
        t("ComplexFloatStorage", None, 8),
        t("ComplexDoubleStorage", None, 16),
        t("QInt8Storage", None, 1),
        t("QUInt8Storage", None, 1),
        t("QInt32Storage", None, 4),
        t("UntypedStorage", None, 1),
    ];
    TYPES.iter().find(|t| t.name == name)
}

struct Machine<'a> {
    input: &'a [u8],
    at: usize,
    nodes: Vec<Node>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: HashMap<u32, usize>,
    globals: Vec<String>,
    /// Bytes of graph held so far (the most allowed grows with the bytes read).
    held: usize,
    /// Values a node carries that no tensor is made of (a BUILD state, a tensor's hooks and
    /// metadata, a parameter's state), as (node, value): the walk checks them for tensors.
    side: Vec<(usize, usize)>,
    /// The extra arguments of the call being made, for the node it makes.
    pending: Vec<usize>,
}

/// What a call of a global makes: a new node, or a node that already exists.
enum Called {
    New(Node),
    Same(usize),
}

/// Reads one pickle from the start of `input`; returns it and the bytes it took (the legacy
/// format is several pickles in a row).
pub(crate) fn load(input: &[u8]) -> Result<(Pickle, usize), PickleError> {
    let mut nodes = vec![
        Node::None,
        Node::Bool(false),
        Node::Bool(true),
        Node::Tuple(Vec::new()),
    ];
    nodes.extend((0..=255).map(Node::Int));
    let mut m = Machine {
        input,
        at: 0,
        nodes,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        globals: Vec::new(),
        held: 0,
        side: Vec::new(),
        pending: Vec::new(),
    };
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

type Fault = (String, Option<String>);

fn fault(reason: impl Into<String>) -> Fault {
    (reason.into(), None)
}

impl Machine<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Fault> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.input.len())
            .ok_or_else(|| {
                fault(format!(
                    "{n} bytes announced, {} left",
                    self.input.len() - self.at
                ))
            })?;
        let bytes = &self.input[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, Fault> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], Fault> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A length of `N` little-endian bytes, checked against what is left.
    fn len<const N: usize>(&mut self) -> Result<usize, Fault> {
        let mut wide = [0u8; 8];
        wide[..N].copy_from_slice(&self.le::<N>()?);
        let n = u64::from_le_bytes(wide);
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.input.len() - self.at)
            .ok_or_else(|| fault(format!("a length of {n} bytes, past the end of the pickle")))
    }

    fn line(&mut self) -> Result<String, Fault> {
        let rest = &self.input[self.at..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| fault("a GLOBAL without its newline"))?;
        let text = std::str::from_utf8(&rest[..end])
            .map_err(|_| fault("a GLOBAL name that is not UTF-8"))?
            .to_string();
        self.at += end + 1;
        Ok(text)
    }

    /// Counts `bytes` more of graph, or fails when that would pass the budget: at any
    /// moment, [`MEMORY_PER_BYTE`] per byte of the pickle read so far, plus [`MEMORY_SLACK`].
    fn charge(&mut self, bytes: usize) -> Result<(), Fault> {
        self.held = self.held.saturating_add(bytes);
        let budget = self
            .at
            .saturating_mul(MEMORY_PER_BYTE)
            .saturating_add(MEMORY_SLACK);
        if self.held > budget {
            return Err(fault(format!(
                "its object graph would take more than {budget} bytes ({MEMORY_PER_BYTE} per \
                 byte of the pickle read, plus {MEMORY_SLACK}): not a state dict"
            )));
        }
        Ok(())
    }

    /// `value` rides on `node` (see `side`), counted.
    fn attach(&mut self, node: usize, value: usize) -> Result<(), Fault> {
        self.charge(16)?;
        self.side.push((node, value));
        Ok(())
    }

    /// A new node on the stack. The node table and the stack grow by doubling, and each
    /// growth is counted before it is made, so what is counted is what is allocated.
    fn push(&mut self, node: Node) -> Result<(), Fault> {
        if self.nodes.len() == self.nodes.capacity() {
            let more = self.nodes.capacity().max(1024);
            self.charge(more * std::mem::size_of::<Node>())?;
            self.nodes.reserve_exact(more);
        }
        self.nodes.push(node);
        self.push_shared(self.nodes.len() - 1)
    }

    /// A node that exists already (shared, or the result of a call) on the stack.
    fn push_shared(&mut self, id: usize) -> Result<(), Fault> {
        if self.stack.len() == self.stack.capacity() {
            let more = self.stack.capacity().max(1024);
            self.charge(more * std::mem::size_of::<usize>())?;
            self.stack.reserve_exact(more);
        }
        self.stack.push(id);
        Ok(())
    }

    fn pop(&mut self) -> Result<usize, Fault> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(fault("a value taken from below a MARK"));
        }
        self.stack.pop().ok_or_else(|| fault("the stack is empty"))
    }

    fn top(&self) -> Result<usize, Fault> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| fault("the stack is empty"))
    }

    /// Everything above the last MARK, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<usize>, Fault> {
        let mark = self.marks.pop().ok_or_else(|| fault("no MARK to pop to"))?;
        let items = self.stack.split_off(mark.min(self.stack.len()));
        // What moves into a container stays: counted (the stack itself is transient).
        self.charge(items.len() * 8)?;
        Ok(items)
    }

    /// A string node of `n` bytes of the input, counted before it is copied.
    fn text(&mut self, n: usize) -> Result<Node, Fault> {
        self.charge(n)?;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(|s| Node::Str(s.into()))
            .map_err(|_| fault("a string that is not UTF-8"))
    }

    fn int(&self, id: usize) -> Option<i64> {
        match self.nodes[id] {
            Node::Int(v) => Some(v),
            Node::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    fn memo_put(&mut self, key: u32) -> Result<(), Fault> {
        let top = self.top()?;
        if !self.memo.contains_key(&key) {
            if self.memo.len() >= MAX_MEMO {
                return Err(fault(format!("more than {MAX_MEMO} memo entries")));
            }
            self.charge(MEMO_ENTRY)?;
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn memo_get(&mut self, key: u32) -> Result<(), Fault> {
        let id = *self
            .memo
            .get(&key)
            .ok_or_else(|| fault(format!("memo entry {key} was never stored")))?;
        self.push_shared(id)
    }

    fn global(&mut self, module: &str, name: &str) -> Result<(), Fault> {
        let full = format!("{module}.{name}");
        let Some(global) = global(module, name) else {
            return Err((
                format!(
                    "it references the global `{full}`, which a state dict never needs: refused \
                     (nothing in the file is ever run)"
                ),
                Some(full),
            ));
        };
        if !self.globals.contains(&full) {
            self.globals.push(full);
        }
        self.push(Node::Global(global))
    }

    /// One opcode after another until STOP: one arm an opcode, as the pickle protocol lists
    /// them.
    #[allow(clippy::too_many_lines)]
    fn run(&mut self) -> Result<usize, Fault> {
        loop {
            let op = self.byte()?;
            match op {
                0x80 => {
                    let proto = self.byte()?;
                    if proto > 5 {
                        return Err(fault(format!("pickle protocol {proto}")));
                    }
                }
                0x95 => {
                    self.le::<8>()?;
                }
                b'.' => {
                    let root = self.pop()?;
                    return Ok(root);
                }
                b'(' => {
                    if self.marks.len() == self.marks.capacity() {
                        let more = self.marks.capacity().max(1024);
                        self.charge(more * std::mem::size_of::<usize>())?;
                        self.marks.reserve_exact(more);
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top()?;
                    self.push_shared(top)?;
                }
                b'N' => self.push_shared(SHARED_NONE)?,
                0x88 => self.push_shared(SHARED_TRUE)?,
                0x89 => self.push_shared(SHARED_FALSE)?,
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Node::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.byte()?;
                    self.push_shared(SHARED_INTS + usize::from(v))?;
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Node::Int(i64::from(v)))?;
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        usize::from(self.byte()?)
                    } else {
                        self.len::<4>()?
                    };
                    self.charge(n)?;
                    let node = long(self.take(n)?);
                    self.push(node)?;
                }
                b'G' => {
                    self.le::<8>()?;
                    self.push(Node::Float)?;
                }
                b'X' | 0x8c | 0x8d => {
                    let n = match op {
                        b'X' => self.len::<4>()?,
                        0x8c => usize::from(self.byte()?),
                        _ => self.len::<8>()?,
                    };
                    let node = self.text(n)?;
                    self.push(node)?;
                }
                b'U' | b'T' => {
                    // Python 2 `str`: bytes, read as Latin-1 text.
                    let n = if op == b'U' {
                        usize::from(self.byte()?)
                    } else {
                        self.len::<4>()?
                    };
                    self.charge(n.saturating_mul(2))?;
                    let text: String = self.take(n)?.iter().map(|&b| char::from(b)).collect();
                    self.push(Node::Str(text.into()))?;
                }
                b'C' | b'B' | 0x8e => {
                    let n = match op {
                        b'C' => usize::from(self.byte()?),
                        b'B' => self.len::<4>()?,
                        _ => self.len::<8>()?,
                    };
                    self.take(n)?;
                    self.push(Node::Bytes)?;
                }
                b')' => self.push_shared(SHARED_EMPTY_TUPLE)?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items))?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n
                        || self.marks.last().is_some_and(|&m| m > self.stack.len() - n)
                    {
                        return Err(fault("a TUPLE of more values than the stack holds"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.charge(n * 8)?;
                    self.push(Node::Tuple(items))?;
                }
                b']' => self.push(Node::List(Vec::new()))?,
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items))?;
                }
                b'a' => {
                    let item = self.pop()?;
                    self.charge(8)?;
                    self.extend(vec![item])?;
                }
                // APPENDS, and ADDITEMS onto a set.
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    self.extend(items)?;
                }
                b'}' => self.push(Node::Dict(Vec::new()))?,
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = pairs(&items)?;
                    self.push(Node::Dict(pairs))?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    self.charge(16)?;
                    self.set_items(vec![(key, value)])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let pairs = pairs(&items)?;
                    self.set_items(pairs)?;
                }
                0x8f => self.push(Node::Set(Vec::new()))?,
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Node::Set(items))?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(&module, &name)?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Node::Str(module), Node::Str(name)) =
                        (&self.nodes[module], &self.nodes[name])
                    else {
                        return Err(fault("a STACK_GLOBAL whose names are not strings"));
                    };
                    let (module, name) = (module.to_string(), name.to_string());
                    self.global(&module, &name)?;
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    self.pending.clear();
                    match self.call(callable, args)? {
                        Called::New(node) => self.push(node)?,
                        Called::Same(id) => self.push_shared(id)?,
                    }
                    let made = self.top()?;
                    for value in std::mem::take(&mut self.pending) {
                        self.attach(made, value)?;
                    }
                }
                b'b' => {
                    // State set on an object (an OrderedDict's `_metadata`, a tensor's
                    // attributes): not an item of a state dict, so it rides on the object and
                    // the walk makes sure no tensor hides in it.
                    let state = self.pop()?;
                    let target = self.top()?;
                    self.attach(target, state)?;
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let storage = self.persistent(pid)?;
                    self.charge(std::mem::size_of::<Storage>() + storage.key.len())?;
                    self.push(Node::Storage(Box::new(storage)))?;
                }
                b'q' => {
                    let key = self.byte()?;
                    self.memo_put(u32::from(key))?;
                }
                b'r' => {
                    let key = u32::from_le_bytes(self.le()?);
                    self.memo_put(key)?;
                }
                0x94 => {
                    let key = u32::try_from(self.memo.len()).map_err(|_| fault("memo full"))?;
                    self.memo_put(key)?;
                }
                b'h' => {
                    let key = self.byte()?;
                    self.memo_get(u32::from(key))?;
                }
                b'j' => {
                    let key = u32::from_le_bytes(self.le()?);
                    self.memo_get(key)?;
                }
                other => {
                    return Err(fault(format!(
                        "opcode 0x{other:02x} ({}), which a torch.save pickle does not use",
                        opcode_name(other)
                    )));
                }
            }
        }
    }

    /// APPEND / APPENDS / ADDITEMS onto the list or set on the stack.
    fn extend(&mut self, items: Vec<usize>) -> Result<(), Fault> {
        let target = self.top()?;
        match &mut self.nodes[target] {
            Node::List(list) | Node::Set(list) => {
                list.extend(items);
                Ok(())
            }
            other => Err(fault(format!("APPEND to a {}, not a list", other.kind()))),
        }
    }

    /// SETITEM / SETITEMS onto the dict on the stack.
    fn set_items(&mut self, pairs: Vec<(usize, usize)>) -> Result<(), Fault> {
        let target = self.top()?;
        match &mut self.nodes[target] {
            Node::Dict(entries) => {
                entries.extend(pairs);
                Ok(())
            }
            other => Err(fault(format!("SETITEM on a {}, not a dict", other.kind()))),
        }
    }

    /// `('storage', type, key, location, numel[, (view_key, offset, size)])`.
    fn persistent(&self, pid: usize) -> Result<Storage, Fault> {
        let bad = || fault("a persistent id that is not a storage of torch.save");
        let Node::Tuple(items) = &self.nodes[pid] else {
            return Err(bad());
        };
        if !(5..=6).contains(&items.len()) {
            return Err(bad());
        }
        let is = |i: usize, s: &str| matches!(&self.nodes[items[i]], Node::Str(t) if &**t == s);
        if !is(0, "storage") {
            return Err(bad());
        }
        let Node::Global(Global::Storage(&kind)) = self.nodes[items[1]] else {
            return Err(bad());
        };
        let key = match &self.nodes[items[2]] {
            Node::Str(s) => s.to_string(),
            Node::Int(v) => v.to_string(),
            _ => return Err(bad()),
        };
        let numel = self
            .int(items[4])
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(bad)?;
        let mut storage = Storage {
            kind,
            key,
            numel,
            view_offset: 0,
            view_len: None,
        };
        if items.len() == 6 {
            // A legacy view of the storage `key`: (view_key, offset, size); `None` for none.
            let view = match &self.nodes[items[5]] {
                Node::None => return Ok(storage),
                Node::Tuple(view) => view,
                other => {
                    return Err(fault(format!(
                        "a storage's view that is a {}, not a tuple (view key, offset, size)",
                        other.kind()
                    )));
                }
            };
            if view.len() != 3 {
                return Err(fault(format!(
                    "a storage's view of {} items, not 3 (view key, offset, size)",
                    view.len()
                )));
            }
            // A legacy view of the storage `key`: (view_key, offset, size).
            let (Some(offset), Some(size)) = (
                view.get(1).and_then(|&i| self.int(i)),
                view.get(2).and_then(|&i| self.int(i)),
            ) else {
                return Err(bad());
            };
            let (Ok(offset), Ok(size)) = (u64::try_from(offset), u64::try_from(size)) else {
                return Err(bad());
            };
            if offset.checked_add(size).is_none_or(|end| end > numel) {
                return Err(fault("a storage view past the end of its storage"));
            }
            storage.view_offset = offset;
            storage.view_len = Some(size);
        }
        Ok(storage)
    }

    /// A tensor's size or stride: a tuple or list of non-negative integers, copied (and
    /// counted) once.
    fn ints(&mut self, id: usize, what: &str) -> Result<Vec<u64>, Fault> {
        let (Node::Tuple(items) | Node::List(items)) = &self.nodes[id] else {
            return Err(fault(format!(
                "a tensor's {what} that is a {}, not a tuple",
                self.nodes[id].kind()
            )));
        };
        if items.len() > MAX_RANK {
            return Err(fault(format!(
                "a tensor's {what} of {} dimensions (at most {MAX_RANK})",
                items.len()
            )));
        }
        let n = items.len();
        self.charge(n * 8)?;
        let (Node::Tuple(items) | Node::List(items)) = &self.nodes[id] else {
            unreachable!("matched above")
        };
        items
            .iter()
            .map(|&i| self.int(i).and_then(|v| u64::try_from(v).ok()))
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| {
                fault(format!(
                    "a tensor's {what} that is not non-negative integers"
                ))
            })
    }

    /// `OrderedDict(...)`: empty, or built from a dict or from a list (or tuple) of
    /// `(key, value)` pairs, each a tuple or list of two; anything else is an error naming it.
    fn ordered_dict(&mut self, args: &[usize]) -> Result<Called, Fault> {
        let source = match args {
            [] => return Ok(Called::New(Node::Dict(Vec::new()))),
            [one] => *one,
            more => {
                return Err(fault(format!(
                    "collections.OrderedDict called with {} arguments (a state dict passes at \
                     most one: its items)",
                    more.len()
                )));
            }
        };
        let pairs = match &self.nodes[source] {
            Node::Dict(entries) => entries.clone(),
            Node::List(items) | Node::Tuple(items) => {
                let mut pairs = Vec::with_capacity(items.len().min(1 << 16));
                for (i, &item) in items.iter().enumerate() {
                    match &self.nodes[item] {
                        Node::Tuple(kv) | Node::List(kv) if kv.len() == 2 => {
                            pairs.push((kv[0], kv[1]));
                        }
                        other => {
                            return Err(fault(format!(
                                "collections.OrderedDict called with a list whose item {i} is a \
                                 {}{}, not a (key, value) pair",
                                other.kind(),
                                match other {
                                    Node::Tuple(kv) | Node::List(kv) => format!(" of {}", kv.len()),
                                    _ => String::new(),
                                }
                            )));
                        }
                    }
                }
                pairs
            }
            other => {
                return Err(fault(format!(
                    "collections.OrderedDict called with a {}, not a dict or a list of (key, \
                     value) pairs",
                    other.kind()
                )));
            }
        };
        self.charge(pairs.len() * 16)?;
        Ok(Called::New(Node::Dict(pairs)))
    }

    /// `_rebuild_tensor(_v2)(storage, offset, size, stride, ...)`: a [`TensorView`]; the
    /// arguments past the stride (`requires_grad`, hooks, metadata) ride on it.
    fn rebuild_tensor(&mut self, args: &[usize]) -> Result<Called, Fault> {
        let arg = |i: usize| {
            args.get(i).copied().ok_or_else(|| {
                fault(format!(
                    "_rebuild_tensor_v2 called with {} arguments",
                    args.len()
                ))
            })
        };
        let storage = arg(0)?;
        if !matches!(self.nodes[storage], Node::Storage(_)) {
            return Err(fault(format!(
                "a tensor rebuilt from a {}, not a storage",
                self.nodes[storage].kind()
            )));
        }
        let offset = self
            .int(arg(1)?)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| fault("a tensor's storage offset that is not a count"))?;
        let shape = self.ints(arg(2)?, "size")?;
        let stride = self.ints(arg(3)?, "stride")?;
        if shape.len() != stride.len() {
            return Err(fault(format!(
                "a tensor of {} dimensions with {} strides",
                shape.len(),
                stride.len()
            )));
        }
        self.charge(std::mem::size_of::<TensorView>())?;
        // requires_grad, backward hooks, metadata: checked by the walk for tensors.
        self.pending.extend(args.iter().skip(4));
        Ok(Called::New(Node::Tensor(Box::new(TensorView {
            storage,
            offset,
            shape,
            stride,
        }))))
    }

    /// `_rebuild_from_type_v2(func, type, args, state)`: `func(*args)` for a tensor type of
    /// the table; the state rides on the result.
    fn rebuild_from_type(&mut self, args: &[usize]) -> Result<Called, Fault> {
        let arg = |i: usize| {
            args.get(i).copied().ok_or_else(|| {
                fault(format!(
                    "_rebuild_from_type_v2 called with {} arguments",
                    args.len()
                ))
            })
        };
        let (func, kind, inner) = (arg(0)?, arg(1)?, arg(2)?);
        if !matches!(self.nodes[kind], Node::Global(Global::TensorType)) {
            return Err(fault(
                "a tensor subclass other than torch.Tensor or Parameter",
            ));
        }
        if !matches!(
            self.nodes[func],
            Node::Global(
                Global::RebuildTensor
                    | Global::RebuildTensorV2
                    | Global::RebuildParameter
                    | Global::RebuildParameterWithState
            )
        ) {
            return Err(fault(
                "_rebuild_from_type_v2 of something other than a tensor",
            ));
        }
        // The state set on the result: checked by the walk for tensors.
        self.pending.extend(args.iter().skip(3));
        self.call(func, inner)
    }

    /// REDUCE / NEWOBJ with a global of the table.
    fn call(&mut self, callable: usize, args: usize) -> Result<Called, Fault> {
        let Node::Global(global) = self.nodes[callable] else {
            return Err(fault(format!(
                "a call of a {}, which is not a global",
                self.nodes[callable].kind()
            )));
        };
        let Node::Tuple(args) = &self.nodes[args] else {
            return Err(fault(format!(
                "a call of {global:?} whose arguments are a {}, not a tuple",
                self.nodes[args].kind()
            )));
        };
        let args = args.clone();
        self.charge(args.len() * 8)?;
        let arg = |i: usize| {
            args.get(i)
                .copied()
                .ok_or_else(|| fault(format!("{global:?} called with {} arguments", args.len())))
        };
        match global {
            Global::OrderedDict => self.ordered_dict(&args),
            Global::Set if args.len() > 1 => Err(fault(format!(
                "set() called with {} arguments (it takes one)",
                args.len()
            ))),
            Global::Set => match args.first().map(|&i| &self.nodes[i]) {
                None => Ok(Called::New(Node::Set(Vec::new()))),
                Some(Node::List(items) | Node::Tuple(items) | Node::Set(items)) => {
                    let items = items.clone();
                    self.charge(items.len() * 8)?;
                    Ok(Called::New(Node::Set(items)))
                }
                Some(other) => Err(fault(format!("set() of a {}, not a list", other.kind()))),
            },
            Global::CodecsEncode
                if args.len() > 2
                    || args
                        .get(1)
                        .is_some_and(|&e| !matches!(self.nodes[e], Node::Str(_))) =>
            {
                Err(fault(
                    "_codecs.encode called with other arguments than (text, encoding)",
                ))
            }
            Global::CodecsEncode => match &self.nodes[arg(0)?] {
                Node::Str(_) => Ok(Called::New(Node::Bytes)),
                other => Err(fault(format!(
                    "_codecs.encode of a {}, not text",
                    other.kind()
                ))),
            },
            // The tuple itself: a `torch.Size` is one.
            Global::TorchSize if args.len() != 1 => Err(fault(format!(
                "torch.Size called with {} arguments (it takes one tuple)",
                args.len()
            ))),
            Global::TorchSize => match &self.nodes[arg(0)?] {
                Node::Tuple(_) | Node::List(_) => Ok(Called::Same(arg(0)?)),
                other => Err(fault(format!(
                    "torch.Size of a {}, not a tuple",
                    other.kind()
                ))),
            },
            Global::RebuildTensor | Global::RebuildTensorV2 => self.rebuild_tensor(&args),
            // The tensor itself: a parameter's data is its tensor.
            Global::RebuildParameter | Global::RebuildParameterWithState => {
                let data = arg(0)?;
                match &self.nodes[data] {
                    Node::Tensor(_) => {
                        // requires_grad, hooks, state: checked by the walk for tensors.
                        self.pending.extend(args.iter().skip(1));
                        Ok(Called::Same(data))
                    }
                    other => Err(fault(format!(
                        "a parameter rebuilt from a {}, not a tensor",
                        other.kind()
                    ))),
                }
            }
            Global::RebuildFromTypeV2 => self.rebuild_from_type(&args),
            Global::TensorType | Global::Storage(_) => Err(fault(format!(
                "a call of {global:?}, which a state dict never calls"
            ))),
        }
    }
}

/// Key-value pairs from a flat list (DICT / SETITEMS).
fn pairs(items: &[usize]) -> Result<Vec<(usize, usize)>, Fault> {
    if !items.len().is_multiple_of(2) {
        return Err(fault("a dict of an odd number of items"));
    }
    Ok(items.chunks_exact(2).map(|p| (p[0], p[1])).collect())
}

/// LONG1 / LONG4: little-endian two's complement.
fn long(bytes: &[u8]) -> Node {
    if bytes.is_empty() {
        return Node::Int(0);
    }
    if bytes.len() <= 8 {
        let fill = if bytes[bytes.len() - 1] & 0x80 != 0 {
            0xff
        } else {
            0
        };
        let mut wide = [fill; 8];
        wide[..bytes.len()].copy_from_slice(bytes);
        return Node::Int(i64::from_le_bytes(wide));
    }
    Node::BigInt(bytes.into())
}

/// An opcode's name, for errors.
fn opcode_name(op: u8) -> &'static str {
    match op {
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'P' => "PERSID",
        b'g' => "GET",
        b'p' => "PUT",
        b'i' => "INST",
        b'o' => "OBJ",
        0x82..=0x84 => "EXT",
        0x92 => "NEWOBJ_EX",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown",
    }
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
