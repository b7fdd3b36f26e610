//! A `ModelProto` walked field by field: the model's metadata decoded, every initializer of
//! its graph and of the graphs nested in its nodes' attributes (`If`, `Loop`, `Scan` bodies)
//! found as a place in the file, and nothing else held: nodes, value infos and functions are
//! stepped over without being decoded. Nesting is bounded by
//! [`Limits::max_cbor_depth`](crate::format::Limits), counts and metadata by the other limits,
//! each checked before what it counts is kept.

use std::fmt::Write as _;
use std::sync::Arc;

use prost::Message;

use super::proto::{OperatorSetId, StringStringEntry};
use super::wire::{Wire, count_varints, fields};
use crate::format::Limits;

/// What a model's doc string is cut to in its metadata (with its length, short enough for
/// `bpk inspect` to show whole).
const DOC_ABRIDGED: usize = 96;

/// The model's metadata and the places of its initializers.
#[derive(Debug, Default)]
#[allow(clippy::struct_field_names)] // `model_version`: ONNX's own name
pub(super) struct Model {
    pub ir_version: Option<i64>,
    pub producer_name: Option<String>,
    pub producer_version: Option<String>,
    pub domain: Option<String>,
    pub model_version: Option<i64>,
    /// The doc string, abridged.
    pub doc_string: Option<String>,
    pub opset_import: Vec<(String, i64)>,
    pub metadata_props: Vec<(String, String)>,
    /// Each initializer: its message's absolute offset and length, the graph holding it (in
    /// errors), and, for a nested graph, its scope (`If_0/then_branch`: the path of nodes and
    /// attributes from the main graph; `None` for the main graph).
    /// Both shared by the graph's initializers (one string a graph, never one a tensor).
    pub initializers: Vec<(u64, usize, Arc<str>, Option<Arc<str>>)>,
    /// Whether a graph was found.
    pub has_graph: bool,
}

struct Walk<'l> {
    limits: &'l Limits,
    /// Metadata bytes kept so far.
    kept: u64,
}

impl Walk<'_> {
    fn keep(&mut self, what: &str, len: usize) -> Result<(), String> {
        self.kept += len as u64;
        if self.kept > u64::from(self.limits.max_metadata_size) {
            return Err(format!(
                "{what} takes the metadata past its limit of {} bytes",
                self.limits.max_metadata_size
            ));
        }
        Ok(())
    }

    fn string(&mut self, value: Wire<'_>, what: &str) -> Result<String, String> {
        let s = value.string(what, self.limits.max_metadata_size as usize)?;
        self.keep(what, s.len())?;
        Ok(s)
    }

    fn count(&self, what: &str, n: usize) -> Result<(), String> {
        if n >= self.limits.max_tensor_count {
            return Err(format!(
                "more than {} {what}, the tensor-count limit",
                self.limits.max_tensor_count
            ));
        }
        Ok(())
    }
}

/// Walks the `ModelProto` that is all of `data` (the file).
pub(super) fn read(data: &[u8], limits: &Limits) -> Result<Model, String> {
    let mut walk = Walk { limits, kept: 0 };
    let mut model = Model::default();
    for field in fields(data, 0) {
        let (number, value) = field?;
        match number {
            1 => model.ir_version = Some(value.varint("ir_version")?.cast_signed()),
            2 => model.producer_name = Some(walk.string(value, "producer_name")?),
            3 => model.producer_version = Some(walk.string(value, "producer_version")?),
            4 => model.domain = Some(walk.string(value, "domain")?),
            5 => model.model_version = Some(value.varint("model_version")?.cast_signed()),
            6 => {
                let (doc, _) = value.bytes("doc_string")?;
                let text = String::from_utf8_lossy(&doc[..doc.len().min(DOC_ABRIDGED * 4)]);
                let mut short: String = text.chars().take(DOC_ABRIDGED).collect();
                if short.len() < doc.len() {
                    let _ = write!(short, "... ({} bytes)", doc.len());
                }
                walk.keep("doc_string", short.len())?;
                model.doc_string = Some(short);
            }
            7 => {
                if model.has_graph {
                    return Err("the model holds two graphs (field 7 given twice)".into());
                }
                model.has_graph = true;
                let (graph, at) = value.bytes("graph")?;
                walk_graph(
                    &mut walk,
                    &mut model,
                    graph,
                    at,
                    0,
                    &Arc::from("graph"),
                    None,
                )?;
            }
            8 => {
                walk.count("opset imports", model.opset_import.len())?;
                let (entry, _) = value.bytes("opset_import")?;
                walk.keep("opset_import", entry.len())?;
                let entry = OperatorSetId::decode(entry)
                    .map_err(|e| format!("an opset_import entry: {}", super::proto::plain(&e)))?;
                let domain = entry.domain.unwrap_or_default();
                // `""` and `ai.onnx` are one domain; a domain imported twice is refused (which
                // version would an operator of it be?).
                let same = |d: &str| {
                    d == domain
                        || (d.is_empty() && domain == "ai.onnx")
                        || (d == "ai.onnx" && domain.is_empty())
                };
                if model.opset_import.iter().any(|(d, _)| same(d)) {
                    return Err(format!("opset_import imports the domain '{domain}' twice"));
                }
                model
                    .opset_import
                    .push((domain, entry.version.unwrap_or_default()));
            }
            14 => {
                walk.count("metadata_props entries", model.metadata_props.len())?;
                let (entry, _) = value.bytes("metadata_props")?;
                walk.keep("metadata_props", entry.len())?;
                let entry = StringStringEntry::decode(entry)
                    .map_err(|e| format!("a metadata_props entry: {}", super::proto::plain(&e)))?;
                let key = entry.key.unwrap_or_default();
                // onnx's checker refuses a key given twice: another reader could take either.
                if model.metadata_props.iter().any(|(k, _)| *k == key) {
                    return Err(format!("metadata_props key '{key}' given twice"));
                }
                model
                    .metadata_props
                    .push((key, entry.value.unwrap_or_default()));
            }
            // Training info, functions, device configurations: stepped over.
            _ => {}
        }
    }
    Ok(model)
}

/// A `GraphProto`: its initializers kept as places, its nodes walked for nested graphs
/// (`scope`: the graph's path from the main graph, `None` for the main graph).
fn walk_graph(
    walk: &mut Walk<'_>,
    model: &mut Model,
    graph: &[u8],
    base: u64,
    depth: usize,
    name: &Arc<str>,
    scope: Option<&Arc<str>>,
) -> Result<(), String> {
    if depth > walk.limits.max_cbor_depth {
        return Err(format!(
            "graphs nested more than {} deep (in {name})",
            walk.limits.max_cbor_depth
        ));
    }
    let mut nodes = 0usize;
    for field in fields(graph, base) {
        let (number, value) = field?;
        match number {
            1 => {
                let (node, at) = value.bytes("a node")?;
                walk_node(walk, model, node, at, depth, name, (scope, nodes))?;
                nodes += 1;
            }
            5 => {
                walk.count("initializers", model.initializers.len())?;
                let (tensor, at) = value.bytes("an initializer")?;
                model
                    .initializers
                    .push((at, tensor.len(), name.clone(), scope.cloned()));
            }
            15 => {
                let (sparse, at) = value.bytes("a sparse initializer")?;
                return Err(format!(
                    "{name} holds a sparse initializer (SparseTensorProto at byte {at}{}), \
                     which this crate does not read",
                    sparse_name(sparse, at)
                        .map(|n| format!(", values '{n}'"))
                        .unwrap_or_default()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The name of a sparse initializer's values, for the error that refuses it.
fn sparse_name(sparse: &[u8], at: u64) -> Option<String> {
    let values = fields(sparse, at)
        .filter_map(Result::ok)
        .find(|(n, _)| *n == 1)?
        .1
        .bytes("values")
        .ok()?;
    let header = super::proto::TensorHeader::decode(values.0).ok()?;
    header.name
}

/// A `NodeProto`: its attributes' graphs (`g`, `graphs`) walked one level deeper, each
/// scoped `<scope>/<node name>/<attribute name>` (`#<index>` for a node without a name, the
/// index in `graphs` after the attribute's name for a list of graphs).
fn walk_node(
    walk: &mut Walk<'_>,
    model: &mut Model,
    node: &[u8],
    base: u64,
    depth: usize,
    parent: &str,
    (scope, index): (Option<&Arc<str>>, usize),
) -> Result<(), String> {
    let mut node_name = None;
    for field in fields(node, base) {
        let (number, value) = field?;
        if number == 3 {
            node_name = Some(value.string("a node's name", 1 << 16)?);
        }
    }
    let node_name = node_name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("#{index}"));
    for field in fields(node, base) {
        let (number, value) = field?;
        if number != 5 {
            continue;
        }
        let (attribute, at) = value.bytes("an attribute")?;
        let mut attribute_name = String::new();
        for field in fields(attribute, at) {
            let (number, value) = field?;
            if number == 1 {
                attribute_name = value.string("an attribute's name", 1 << 16)?;
            }
        }
        let mut listed = 0usize;
        for field in fields(attribute, at) {
            let (number, value) = field?;
            if number == 6 || number == 11 {
                let (graph, at) = value.bytes("an attribute's graph")?;
                let name: Arc<str> = Arc::from(format!("{parent}/subgraph@{at}"));
                let mut inner = match scope {
                    Some(scope) => format!("{scope}/{node_name}/{attribute_name}"),
                    None => format!("{node_name}/{attribute_name}"),
                };
                if number == 11 {
                    let _ = write!(inner, "/{listed}");
                    listed += 1;
                }
                // Each nested graph's label and scope are kept (and qualify names): counted
                // as metadata, so that long node names over many graphs stop at the limit.
                walk.keep("the nested graphs' scopes", name.len() + inner.len())?;
                let inner: Arc<str> = Arc::from(inner);
                walk_graph(walk, model, graph, at, depth + 1, &name, Some(&inner))?;
            }
        }
    }
    Ok(())
}

/// Where a tensor's values are, as its data fields say.
#[derive(Debug, Default)]
pub(super) struct DataFields {
    /// `raw_data`: absolute offset and length.
    pub raw: Option<(u64, u64)>,
    /// The typed field holding values, and how many it holds.
    pub typed: Option<(u32, u64)>,
}

/// Finds the data fields of the `TensorProto` `tensor` (at absolute offset `base`) without
/// decoding them: `raw_data`'s place, or the typed field and its count of values. Two kinds
/// of field, or `string_data`, are refused.
pub(super) fn data_fields(tensor: &[u8], base: u64) -> Result<DataFields, String> {
    let mut found = DataFields::default();
    for field in fields(tensor, base) {
        let (number, value) = field?;
        let count = match (number, value) {
            (9, Wire::Bytes(data, at)) => {
                if found.raw.replace((at, data.len() as u64)).is_some() {
                    return Err("raw_data given twice".into());
                }
                continue;
            }
            (6, _) => return Err("string_data (a STRING tensor)".into()),
            (4, Wire::Fixed32(_)) | (5 | 7 | 11, Wire::Varint(_)) | (10, Wire::Fixed64(_)) => 1,
            (4 | 10, Wire::Bytes(data, _)) => {
                let size = if number == 4 { 4 } else { 8 };
                if data.len() % size != 0 {
                    return Err(format!(
                        "{} holds {} bytes, not whole values of {size}",
                        super::types::field_name(number),
                        data.len()
                    ));
                }
                (data.len() / size) as u64
            }
            (5 | 7 | 11, Wire::Bytes(data, _)) => count_varints(data)?,
            (4 | 5 | 7 | 9 | 10 | 11, _) => {
                return Err(format!(
                    "{} has the wrong wire type",
                    super::types::field_name(number)
                ));
            }
            _ => continue,
        };
        match &mut found.typed {
            Some((f, n)) if *f == number => *n += count,
            Some((f, _)) => {
                return Err(format!(
                    "values in both {} and {}",
                    super::types::field_name(*f),
                    super::types::field_name(number)
                ));
            }
            None => found.typed = Some((number, count)),
        }
    }
    Ok(found)
}
