//! The machine: its state and the opcode loop, one arm an opcode.

use std::collections::HashMap;

use super::globals::global;
use super::memory::Memory;
use super::opcodes::{self as op, opcode_name};
use super::{Called, Fault, Node, Storage, fault};

/// The nodes every pickle starts with, shared: `None`, `False`, `True`, the empty tuple and
/// the integers 0 to 255 (what `BININT1` pushes), which nothing can change.
const SHARED_NONE: usize = 0;
const SHARED_FALSE: usize = 1;
const SHARED_TRUE: usize = 2;
const SHARED_EMPTY_TUPLE: usize = 3;
const SHARED_INTS: usize = 4;

/// The machine: the input and how far it is read, the graph made so far, the stack, its
/// marks and the memo.
pub(super) struct Machine<'a> {
    pub(super) input: &'a [u8],
    pub(super) at: usize,
    pub(super) nodes: Vec<Node>,
    pub(super) stack: Vec<usize>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: HashMap<u32, usize>,
    pub(super) globals: Vec<String>,
    /// Bytes of graph held so far (the most allowed grows with the bytes read).
    pub(super) memory: Memory,
    /// Values a node carries that no tensor is made of (a BUILD state, a tensor's hooks and
    /// metadata, a parameter's state), as (node, value): the walk checks them for tensors.
    pub(super) side: Vec<(usize, usize)>,
    /// The extra arguments of the call being made, for the node it makes.
    pub(super) pending: Vec<usize>,
}

impl<'a> Machine<'a> {
    /// A machine at the start of `input`, holding the shared nodes only.
    pub(super) fn new(input: &'a [u8]) -> Self {
        let mut nodes = vec![
            Node::None,
            Node::Bool(false),
            Node::Bool(true),
            Node::Tuple(Vec::new()),
        ];
        nodes.extend((0..=255).map(Node::Int));
        Machine {
            input,
            at: 0,
            nodes,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            globals: Vec::new(),
            memory: Memory::default(),
            side: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// `value` rides on `node` (see `side`), counted.
    fn attach(&mut self, node: usize, value: usize) -> Result<(), Fault> {
        self.charge(16)?;
        self.side.push((node, value));
        Ok(())
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
    pub(super) fn run(&mut self) -> Result<usize, Fault> {
        loop {
            let code = self.byte()?;
            match code {
                op::PROTO => {
                    let proto = self.byte()?;
                    if proto > 5 {
                        return Err(fault(format!("pickle protocol {proto}")));
                    }
                }
                op::FRAME => {
                    self.le::<8>()?;
                }
                op::STOP => {
                    let root = self.pop()?;
                    return Ok(root);
                }
                op::MARK => self.mark()?,
                op::POP => {
                    self.pop()?;
                }
                op::POP_MARK => {
                    self.pop_mark()?;
                }
                op::DUP => {
                    let top = self.top()?;
                    self.push_shared(top)?;
                }
                op::NONE => self.push_shared(SHARED_NONE)?,
                op::NEWTRUE => self.push_shared(SHARED_TRUE)?,
                op::NEWFALSE => self.push_shared(SHARED_FALSE)?,
                op::BININT => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Node::Int(i64::from(v)))?;
                }
                op::BININT1 => {
                    let v = self.byte()?;
                    self.push_shared(SHARED_INTS + usize::from(v))?;
                }
                op::BININT2 => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Node::Int(i64::from(v)))?;
                }
                op::LONG1 | op::LONG4 => {
                    let n = if code == op::LONG1 {
                        usize::from(self.byte()?)
                    } else {
                        self.len::<4>()?
                    };
                    self.charge(n)?;
                    let node = long(self.take(n)?);
                    self.push(node)?;
                }
                op::BINFLOAT => {
                    self.le::<8>()?;
                    self.push(Node::Float)?;
                }
                op::BINUNICODE | op::SHORT_BINUNICODE | op::BINUNICODE8 => {
                    let n = match code {
                        op::BINUNICODE => self.len::<4>()?,
                        op::SHORT_BINUNICODE => usize::from(self.byte()?),
                        _ => self.len::<8>()?,
                    };
                    let node = self.text(n)?;
                    self.push(node)?;
                }
                op::SHORT_BINSTRING | op::BINSTRING => {
                    // Python 2 `str`: bytes, read as Latin-1 text.
                    let n = if code == op::SHORT_BINSTRING {
                        usize::from(self.byte()?)
                    } else {
                        self.len::<4>()?
                    };
                    self.charge(n.saturating_mul(2))?;
                    let text: String = self.take(n)?.iter().map(|&b| char::from(b)).collect();
                    self.push(Node::Str(text.into()))?;
                }
                op::SHORT_BINBYTES | op::BINBYTES | op::BINBYTES8 => {
                    let n = match code {
                        op::SHORT_BINBYTES => usize::from(self.byte()?),
                        op::BINBYTES => self.len::<4>()?,
                        _ => self.len::<8>()?,
                    };
                    self.take(n)?;
                    self.push(Node::Bytes)?;
                }
                op::EMPTY_TUPLE => self.push_shared(SHARED_EMPTY_TUPLE)?,
                op::TUPLE => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items))?;
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(code - op::TUPLE1) + 1;
                    if self.stack.len() < n
                        || self.marks.last().is_some_and(|&m| m > self.stack.len() - n)
                    {
                        return Err(fault("a TUPLE of more values than the stack holds"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.charge(n * 8)?;
                    self.push(Node::Tuple(items))?;
                }
                op::EMPTY_LIST => self.push(Node::List(Vec::new()))?,
                op::LIST => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items))?;
                }
                op::APPEND => {
                    let item = self.pop()?;
                    self.charge(8)?;
                    self.extend(vec![item])?;
                }
                // APPENDS, and ADDITEMS onto a set.
                op::APPENDS | op::ADDITEMS => {
                    let items = self.pop_mark()?;
                    self.extend(items)?;
                }
                op::EMPTY_DICT => self.push(Node::Dict(Vec::new()))?,
                op::DICT => {
                    let items = self.pop_mark()?;
                    let pairs = pairs(&items)?;
                    self.push(Node::Dict(pairs))?;
                }
                op::SETITEM => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    self.charge(16)?;
                    self.set_items(vec![(key, value)])?;
                }
                op::SETITEMS => {
                    let items = self.pop_mark()?;
                    let pairs = pairs(&items)?;
                    self.set_items(pairs)?;
                }
                op::EMPTY_SET => self.push(Node::Set(Vec::new()))?,
                op::FROZENSET => {
                    let items = self.pop_mark()?;
                    self.push(Node::Set(items))?;
                }
                op::GLOBAL => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(&module, &name)?;
                }
                op::STACK_GLOBAL => {
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
                op::REDUCE | op::NEWOBJ => {
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
                op::BUILD => {
                    // State set on an object (an OrderedDict's `_metadata`, a tensor's
                    // attributes): not an item of a state dict, so it rides on the object and
                    // the walk makes sure no tensor hides in it.
                    let state = self.pop()?;
                    let target = self.top()?;
                    self.attach(target, state)?;
                }
                op::BINPERSID => {
                    let pid = self.pop()?;
                    let storage = self.persistent(pid)?;
                    self.charge(std::mem::size_of::<Storage>() + storage.key.len())?;
                    self.push(Node::Storage(Box::new(storage)))?;
                }
                op::BINPUT => {
                    let key = self.byte()?;
                    self.memo_put(u32::from(key))?;
                }
                op::LONG_BINPUT => {
                    let key = u32::from_le_bytes(self.le()?);
                    self.memo_put(key)?;
                }
                op::MEMOIZE => {
                    let key = u32::try_from(self.memo.len()).map_err(|_| fault("memo full"))?;
                    self.memo_put(key)?;
                }
                op::BINGET => {
                    let key = self.byte()?;
                    self.memo_get(u32::from(key))?;
                }
                op::LONG_BINGET => {
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

impl Machine<'_> {
    /// Counts `bytes` more of graph, or fails when that would pass the budget (see
    /// [`Memory::charge`]).
    pub(super) fn charge(&mut self, bytes: usize) -> Result<(), Fault> {
        self.memory.charge(bytes, self.at)
    }
}
