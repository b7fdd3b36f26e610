//! A record's `TensorData` maps (`bytes`, `shape`, `dtype`) told apart from everything else
//! the walk meets, and what a value that should have been one is, in words.

use super::node::{Node, Payload, RawTensor};

/// What a parameter's value is when it is not a tensor, in words (Burn 0.13's
/// `DataSerialize`, `value` and `shape`, named as such).
pub(super) fn not_a_tensor(node: &Node) -> String {
    match node {
        Node::Map(entries)
            if entries.iter().any(|(k, _)| k == "value")
                && entries.iter().any(|(k, _)| k == "shape") =>
        {
            "a tensor in Burn 0.13's format (value and shape; this reader reads records of \
             Burn 0.14-0.21)"
                .to_string()
        }
        Node::Map(entries) => {
            let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
            format!("a map of keys {keys:?}")
        }
        other => other.describe().to_string(),
    }
}

/// A `TensorData` map: exactly `bytes`, `shape` and `dtype`. `None` for a map of other keys;
/// an error for one of these keys whose values are not a tensor's (a negative or fractional
/// dimension, bytes that are not bytes).
pub(super) fn tensor_data(entries: &mut [(String, Node)]) -> Result<Option<RawTensor>, String> {
    let position = |name: &str| entries.iter().position(|(k, _)| k == name);
    let (b, s, d) = (position("bytes"), position("shape"), position("dtype"));
    // `bytes` beside a shape or a dtype is a tensor's: anything but exactly the three keys,
    // once each, is an error rather than a map walked past.
    let looks_like_tensor =
        (b.is_some() && (s.is_some() || d.is_some())) || (s.is_some() && d.is_some());
    if !looks_like_tensor {
        return Ok(None);
    }
    let (Some(b), Some(s), Some(d)) = (b, s, d) else {
        let missing = if b.is_none() {
            "bytes"
        } else if s.is_none() {
            "shape"
        } else {
            "dtype"
        };
        return Err(format!(
            "a tensor's map without its {missing} (TensorData has bytes, shape and dtype)"
        ));
    };
    if entries.len() != 3 {
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        return Err(format!(
            "a tensor's map of keys {keys:?} (TensorData has exactly bytes, shape and dtype)"
        ));
    }
    let shape = match &entries[s].1 {
        Node::Seq(items) => items
            .iter()
            .map(|n| match n {
                Node::UInt(v) => Ok(*v),
                _ => Err(format!(
                    "its shape holds {}, not a dimension (a non-negative integer)",
                    n.describe()
                )),
            })
            .collect::<Result<Vec<u64>, String>>()?,
        Node::Bytes(Payload::Owned(v), _) => v.iter().map(|&x| u64::from(x)).collect(),
        other => return Err(format!("its shape is {}, not a list", other.describe())),
    };
    let (payload, len) = match std::mem::replace(&mut entries[b].1, Node::Nil) {
        Node::Bytes(payload, len) => (payload, len),
        Node::Seq(items) if items.is_empty() => (Payload::Owned(Vec::new()), 0),
        other => {
            return Err(format!(
                "its bytes are {}, not bytes (numbers 0 to 255)",
                other.describe()
            ));
        }
    };
    let dtype = std::mem::replace(&mut entries[d].1, Node::Nil);
    Ok(Some(RawTensor {
        payload,
        len,
        shape,
        dtype,
    }))
}

impl Node {
    /// What a value is, for errors.
    pub(super) fn describe(&self) -> &'static str {
        match self {
            Node::Str(_) => "a string",
            Node::UInt(_) => "a number",
            Node::Scalar => "a negative, fractional or boolean value",
            Node::Nil => "nil",
            Node::Bytes(..) => "bytes",
            Node::Seq(_) => "a sequence of values that are not all 0 to 255",
            Node::Map(_) => "a map",
            Node::Tensor(_) => "a tensor",
            Node::Other => "a large structure",
        }
    }
}
