//! What a call of a global of the table makes (REDUCE / NEWOBJ), and the storages persistent
//! ids name (BINPERSID). An argument that is not one a state dict passes is an error naming
//! it, never dropped.

use super::globals::Global;
use super::machine::Machine;
use super::{Called, Fault, MAX_RANK, Node, Storage, TensorView, fault};

impl Machine<'_> {
    /// An integer node's value (a bool is 0 or 1).
    fn int(&self, id: usize) -> Option<i64> {
        match self.nodes[id] {
            Node::Int(v) => Some(v),
            Node::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    /// `('storage', type, key, location, numel[, (view_key, offset, size)])`.
    pub(super) fn persistent(&self, pid: usize) -> Result<Storage, Fault> {
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
    pub(super) fn call(&mut self, callable: usize, args: usize) -> Result<Called, Fault> {
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
