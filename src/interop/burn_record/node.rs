//! The values one walk over a record keeps: the small nodes of its tree, the tensors found in
//! it and where their bytes are, and the numbers optimizer and scheduler records hold.

/// Where a tensor's bytes are.
#[derive(Debug)]
pub(super) enum Payload {
    /// At this offset of the input (`MessagePack` `bin`, read in place).
    At(usize),
    /// Decoded into bytes of their own (JSON's arrays of numbers, or a deserializer that
    /// does not lend its input).
    Owned(Vec<u8>),
}

/// A `TensorData` as the record holds it.
#[derive(Debug)]
pub(super) struct RawTensor {
    pub payload: Payload,
    pub len: usize,
    pub shape: Vec<u64>,
    /// The dtype as serde wrote it: `"F32"`, or a one-entry map such as `{"Bool": "Native"}`.
    pub dtype: Node,
}

/// A tensor found in the record: its dotted path (as Burn 0.22 names module parameters) and
/// the parameter id string of its `ParamSerde`, if it had one.
#[derive(Debug)]
pub(super) struct Found {
    pub path: String,
    pub id: Option<String>,
    pub tensor: RawTensor,
}

/// A number or boolean of the record, under its dotted path: the state that optimizer and
/// scheduler records keep beside their tensors (Adam's `time`, a scheduler's step).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Leaf {
    UInt(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// A small value of the tree: what a tensor's fields and the record's metadata are made of.
/// Maps and sequences of anything else are walked and dropped (`Other`).
#[derive(Debug)]
pub(super) enum Node {
    Str(String),
    UInt(u64),
    /// Another number or a boolean: nothing a tensor or the metadata is made of.
    Scalar,
    Nil,
    /// Bytes: a `MessagePack` `bin`, or a sequence of numbers 0..=255 (JSON writes bytes so).
    Bytes(Payload, usize),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
    Tensor(Box<RawTensor>),
    Other,
}

impl Node {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn is_small(&self) -> bool {
        !matches!(self, Node::Other | Node::Tensor(_))
    }
}
