//! One walk over a Burn 0.14-0.21 record, through serde, for every self-describing recorder
//! format (named `MessagePack`, JSON): the record tree's map keys and sequence indices become
//! the path, and every `TensorData` map (`bytes`, `shape`, `dtype`) is taken out as it is met,
//! under its `ParamSerde` (`id`, `param`) when it has one. Nothing else of the tree is kept:
//! memory is the tensors' bytes (none for `MessagePack` read in place) and a few small values.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::node::{Found, Leaf, Node, Payload, RawTensor};
use super::tensor_data::{not_a_tensor, tensor_data};

/// The walk's state, shared by every level.
pub(super) struct Walk<'i> {
    /// The input, for telling borrowed bytes' offsets.
    input: &'i [u8],
    path: Vec<String>,
    depth: usize,
    max_depth: usize,
    max_tensors: usize,
    /// For each open container, whether it is a sequence.
    in_sequence: Vec<bool>,
    pub found: Vec<Found>,
    /// Numbers and booleans that are values of map entries (or the whole item), by path.
    pub leaves: Vec<(String, Leaf)>,
    /// Bytes of paths handed out so far, and the most allowed.
    name_bytes: usize,
    max_name_bytes: usize,
}

/// Longest path (a tensor's or a number's dotted name).
const MAX_NAME: usize = 64 << 10;

/// Bytes of paths the walk may hand out per byte of the record.
const NAME_BYTES_PER_BYTE: usize = 4;

/// Maps and sequences with more entries than this keep no small values (a tensor's fields and
/// the record's metadata have a handful).
const SMALL: usize = 64;

impl<'i> Walk<'i> {
    pub fn new(input: &'i [u8], max_depth: usize, max_tensors: usize) -> Self {
        Self {
            name_bytes: 0,
            max_name_bytes: input
                .len()
                .saturating_mul(NAME_BYTES_PER_BYTE)
                .saturating_add(1 << 20),
            input,
            path: Vec::new(),
            depth: 0,
            max_depth,
            max_tensors,
            in_sequence: Vec::new(),
            found: Vec::new(),
            leaves: Vec::new(),
        }
    }

    /// The record's `metadata` and the number of tensors found in its `item`.
    pub fn record<'de, D: Deserializer<'de>>(&mut self, deserializer: D) -> Result<Node, D::Error>
    where
        'i: 'de,
    {
        NodeSeed { walk: self }.deserialize(deserializer)
    }

    fn emit<E: de::Error>(
        &mut self,
        path: String,
        id: Option<String>,
        tensor: RawTensor,
    ) -> Result<(), E> {
        if self.found.len() >= self.max_tensors {
            return Err(E::custom(format!(
                "more than {} tensors (the tensor-count limit)",
                self.max_tensors
            )));
        }
        self.found.push(Found { path, id, tensor });
        Ok(())
    }

    /// A `ParamSerde` (`id`, `param`) at the current path: its tensor taken out under the
    /// path. Every parameter of a Burn 0.14-0.21 record is a `TensorData`: anything else
    /// under `param` is refused, never walked past (that would drop the parameter).
    fn param_serde<E: de::Error>(&mut self, entries: Vec<(String, Node)>) -> Result<(), E> {
        let mut id = None;
        let mut tensor = None;
        let mut not_tensor = None;
        for (key, value) in entries {
            match (key.as_str(), value) {
                ("id", Node::Str(s)) => id = Some(s),
                ("param", Node::Tensor(t)) => tensor = Some(t),
                ("param", other) => not_tensor = Some(not_a_tensor(&other)),
                _ => {}
            }
        }
        let path = self.joined(None)?;
        if let Some(what) = not_tensor {
            return Err(E::custom(format!(
                "parameter '{path}': its value is {what}, not a tensor (a TensorData of bytes, \
                 shape and dtype), so it cannot be read (never dropped)"
            )));
        }
        match tensor {
            Some(tensor) => self.emit(path, id, *tensor),
            None => Ok(()),
        }
    }

    /// The current path: segments joined by `.`, the record's top-level `item` left out.
    /// Its length is counted before it is built: one path is at most [`MAX_NAME`] bytes, and
    /// all the paths handed out at most [`NAME_BYTES_PER_BYTE`] per byte of the input (plus
    /// 1 MiB), so a record of long keys nested deep cannot make gigabytes of names.
    fn joined<E: de::Error>(&mut self, last: Option<&str>) -> Result<String, E> {
        let skip = usize::from(self.path.first().map(String::as_str) == Some("item"));
        let segments = || self.path.iter().skip(skip).map(String::as_str).chain(last);
        let len = segments().map(|s| s.len() + 1).sum::<usize>();
        if len > MAX_NAME {
            return Err(E::custom(format!(
                "a path longer than {MAX_NAME} bytes (keys nested too deep or too long)"
            )));
        }
        self.name_bytes = self.name_bytes.saturating_add(len);
        if self.name_bytes > self.max_name_bytes {
            return Err(E::custom(format!(
                "the paths of its tensors and numbers would take more than {} bytes \
                 ({NAME_BYTES_PER_BYTE} per byte of the record, plus 1 MiB)",
                self.max_name_bytes
            )));
        }
        let mut out = String::with_capacity(len);
        for segment in segments() {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
        Ok(out)
    }

    /// Records a number met as a map entry's value (or as the whole item); numbers in
    /// sequences are elements (a tensor's bytes or shape in JSON), not state.
    fn leaf<E: de::Error>(&mut self, leaf: Leaf) -> Result<(), E> {
        let in_sequence = self.in_sequence.last().copied().unwrap_or(false);
        if !in_sequence && self.leaves.len() < self.max_tensors {
            let path = self.joined(None)?;
            self.leaves.push((path, leaf));
        }
        Ok(())
    }

    fn offset_of(&self, bytes: &[u8]) -> Option<usize> {
        let start = self.input.as_ptr() as usize;
        let at = bytes.as_ptr() as usize;
        (at >= start && at + bytes.len() <= start + self.input.len()).then(|| at - start)
    }
}

struct NodeSeed<'w, 'i> {
    walk: &'w mut Walk<'i>,
}

impl<'de, 'i: 'de> DeserializeSeed<'de> for NodeSeed<'_, 'i> {
    type Value = Node;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        if self.walk.depth >= self.walk.max_depth {
            return Err(de::Error::custom(format!(
                "nested deeper than {} levels",
                self.walk.max_depth
            )));
        }
        self.walk.depth += 1;
        let node = deserializer.deserialize_any(NodeVisitor {
            walk: &mut *self.walk,
        });
        self.walk.depth -= 1;
        node
    }
}

struct NodeVisitor<'w, 'i> {
    walk: &'w mut Walk<'i>,
}

impl<'de, 'i: 'de> Visitor<'de> for NodeVisitor<'_, 'i> {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Burn record")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        self.walk.leaf(Leaf::Bool(v))?;
        Ok(Node::Scalar)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        self.walk.leaf(Leaf::Int(v))?;
        Ok(u64::try_from(v).map_or(Node::Scalar, Node::UInt))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        self.walk.leaf(Leaf::UInt(v))?;
        Ok(Node::UInt(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        self.walk.leaf(Leaf::Float(v))?;
        Ok(Node::Scalar)
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Nil)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Nil)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        NodeSeed { walk: self.walk }.deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        NodeSeed { walk: self.walk }.deserialize(d)
    }
    fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Node, E> {
        Ok(match self.walk.offset_of(v) {
            Some(at) => Node::Bytes(Payload::At(at), v.len()),
            None => Node::Bytes(Payload::Owned(v.to_vec()), v.len()),
        })
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Node, E> {
        Ok(Node::Bytes(Payload::Owned(v.to_vec()), v.len()))
    }
    fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Node, E> {
        let len = v.len();
        Ok(Node::Bytes(Payload::Owned(v), len))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        // Numbers 0..=255 gather as bytes (JSON's form of a tensor's bytes) until something
        // else comes; growth follows what was read, never a declared length.
        let mut bytes: Option<Vec<u8>> = Some(Vec::new());
        let mut items: Vec<Node> = Vec::new();
        let mut count = 0usize;
        loop {
            self.walk.path.push(count.to_string());
            self.walk.in_sequence.push(true);
            let next = seq.next_element_seed(NodeSeed {
                walk: &mut *self.walk,
            });
            self.walk.in_sequence.pop();
            self.walk.path.pop();
            let Some(item) = next? else { break };
            match (&mut bytes, &item) {
                (Some(b), Node::UInt(v)) if *v <= 255 => {
                    #[allow(clippy::cast_possible_truncation)] // checked just above
                    b.push(*v as u8);
                }
                _ => {
                    // Past `SMALL` items a sequence is not kept (it is nothing a tensor's
                    // fields or the metadata are made of): memory stays a few nodes.
                    if let Some(b) = bytes.take()
                        && b.len() <= SMALL
                    {
                        items.extend(b.into_iter().map(|v| Node::UInt(u64::from(v))));
                    }
                    let item = if let Node::Tensor(tensor) = item {
                        let path = self.walk.joined(Some(&count.to_string()))?;
                        self.walk.emit(path, None, *tensor)?;
                        Node::Other
                    } else {
                        item
                    };
                    if count < SMALL {
                        items.push(item);
                    }
                }
            }
            count += 1;
        }
        Ok(match bytes {
            Some(b) if count > 0 => {
                let len = b.len();
                Node::Bytes(Payload::Owned(b), len)
            }
            // An empty sequence: no bytes (a zero-sized tensor's) or an empty shape (a
            // scalar's), told apart by the key it is under.
            Some(_) => Node::Seq(Vec::new()),
            None if count > SMALL || !items.iter().all(Node::is_small) => Node::Other,
            None => Node::Seq(items),
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        let mut count = 0usize;
        while let Some(key) = map.next_key::<KeyString>()? {
            let key = key.0;
            self.walk.path.push(key.clone());
            self.walk.in_sequence.push(false);
            let value = map.next_value_seed(NodeSeed {
                walk: &mut *self.walk,
            });
            self.walk.in_sequence.pop();
            self.walk.path.pop();
            let value = value?;
            count += 1;
            // A tensor under any key but `param` (a `ParamSerde`'s) is taken out at once; so
            // is one under `param` in a map too large to be a `ParamSerde`.
            let value = match value {
                Node::Tensor(tensor) if key != "param" || count > SMALL => {
                    let path = self.walk.joined(Some(&key))?;
                    self.walk.emit(path, None, *tensor)?;
                    Node::Other
                }
                other => other,
            };
            if count <= SMALL {
                entries.push((key, value));
            }
        }
        if count > SMALL {
            // Too large to keep: the tensors among the entries kept are taken out first.
            for (key, value) in entries {
                if let Node::Tensor(tensor) = value {
                    let path = self.walk.joined(Some(&key))?;
                    self.walk.emit(path, None, *tensor)?;
                }
            }
            return Ok(Node::Other);
        }
        match tensor_data(&mut entries) {
            Ok(Some(tensor)) => return Ok(Node::Tensor(Box::new(tensor))),
            Ok(None) => {}
            Err(reason) => {
                let path = self.walk.joined::<A::Error>(None)?;
                return Err(de::Error::custom(format!(
                    "tensor '{path}': {reason} (a TensorData this reader does not understand \
                     is an error, never dropped)"
                )));
            }
        }
        // Serde, and so Burn, refuses a key given twice; one of them would be lost. (A
        // `TensorData` with a key twice was refused above, in its own words.)
        if let Some((_, (key, _))) = entries
            .iter()
            .enumerate()
            .find(|(i, (k, _))| entries[..*i].iter().any(|(other, _)| other == k))
        {
            let path = self.walk.joined::<A::Error>(None)?;
            let at = if path.is_empty() {
                "at the top of the record".to_string()
            } else {
                format!("at '{path}'")
            };
            return Err(de::Error::custom(format!(
                "the key '{key}' is given twice in the map {at}"
            )));
        }
        // A `ParamSerde`: `id` and `param`, the tensor taken out under this map's path.
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        if keys.len() == 2 && keys.contains(&"id") && keys.contains(&"param") {
            self.walk.param_serde(entries)?;
            return Ok(Node::Other);
        }
        // A `param` tensor outside a `ParamSerde`: taken out under its own key.
        for (key, value) in &mut entries {
            if matches!(value, Node::Tensor(_)) {
                let Node::Tensor(tensor) = std::mem::replace(value, Node::Other) else {
                    unreachable!("matched above")
                };
                let path = self.walk.joined(Some(key))?;
                self.walk.emit(path, None, *tensor)?;
            }
        }
        // The record's root keeps its entries (`metadata` beside the walked `item`).
        Ok(
            if self.walk.depth == 1 || entries.iter().all(|(_, v)| v.is_small()) {
                Node::Map(entries)
            } else {
                Node::Other
            },
        )
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Node, A::Error> {
        use de::VariantAccess;
        let (variant, access) = data.variant::<KeyString>()?;
        self.walk.path.push(variant.0.clone());
        self.walk.in_sequence.push(false);
        let value = access.newtype_variant_seed(NodeSeed {
            walk: &mut *self.walk,
        });
        self.walk.in_sequence.pop();
        self.walk.path.pop();
        let value = value?;
        Ok(if value.is_small() {
            Node::Map(vec![(variant.0, value)])
        } else {
            if let Node::Tensor(tensor) = value {
                let path = self.walk.joined(Some(&variant.0))?;
                self.walk.emit(path, None, *tensor)?;
            }
            Node::Other
        })
    }
}

/// A map key: a string (`MessagePack` and JSON records key every map by field or variant name),
/// or a number written as its decimal text (maps keyed by integers).
struct KeyString(String);

impl<'de> de::Deserialize<'de> for KeyString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyString, E> {
                Ok(KeyString(v.to_string()))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<KeyString, E> {
                std::str::from_utf8(v)
                    .map(|s| KeyString(s.to_string()))
                    .map_err(|_| E::custom("a map key that is not UTF-8"))
            }
        }
        d.deserialize_any(V)
    }
}
