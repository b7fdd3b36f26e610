//! ONNX models' initializers as a [`TensorSource`](crate::source::TensorSource) (feature
//! `onnx`): the weights of a `.onnx` file without its graph, for Burn modules whose code
//! exists (burn-onnx's generated code, or a hand-written model with `PyTorch`'s names).
//!
//! The file is mapped and its protobuf walked with a bounded decoder ([`prost`]'s varints and
//! derive, the messages written by hand from `onnx.proto`, no `protoc`): the model's metadata
//! is decoded, each initializer's `TensorProto` without its data, and the nodes are stepped
//! over (only their attributes' graphs are entered, for the initializers of `If`/`Loop`/`Scan`
//! bodies), so no node list is ever held. Lengths are checked against what their message
//! holds, nesting against `max_cbor_depth`, counts and sizes against the
//! [`Limits`](crate::format::Limits), before anything is kept.
//!
//! `FLOAT`, `DOUBLE`, `FLOAT16`, `BFLOAT16`, `INT8`-`INT64`, `UINT8`-`UINT64` and `BOOL`
//! tensors are read; another type (`STRING`, `COMPLEX64`, the 8-, 4- and 2-bit types) is an
//! error naming the tensor and the type. `raw_data` is a zero-copy window of the mapping where
//! it is aligned for its dtype (a copy, reported by `copy_reason`, where it is not); the typed
//! fields (`float_data`, `int32_data`, ...) are decoded when read; external data
//! (`data_location = EXTERNAL`, as `onnx.save_model(..., save_as_external_data=True)` writes)
//! is a window of the mapping of the named file, which must be a regular file in the model's
//! folder (no `..`, no absolute path, links followed and checked). Metadata: `ir_version`,
//! `opset_import`, `producer_name`/`producer_version`, `domain`, `model_version`,
//! `doc_string` (abridged) and `metadata_props` (each as `metadata_props.<key>`, never in
//! the place of the model's own fields; a key given twice is refused, as onnx's checker
//! refuses it).
//!
//! Initializers keep their names as stored. A name held by more than one graph (the two
//! branches of an `If`, or a nested graph's initializer shadowing an outer one: valid ONNX)
//! is qualified in the nested graphs by their scope, `<node>/<attribute>/<name>`
//! (`If_0/then_branch/w`; `#<index>` for a node without a name). A `BOOL` byte other than 0
//! or 1 is refused when read, from `raw_data` as from the typed fields.
//!
//! ```no_run
//! use burnpack::interop::onnx::OnnxSource;
//! use burnpack::source::TensorSource;
//! let source = OnnxSource::open("resnet18.onnx")?;
//! for info in source.tensors() {
//!     println!("{} {:?} {:?}", info.name(), info.dtype(), info.shape());
//! }
//! # Ok::<(), burnpack::source::SourceError>(())
//! ```

mod container;
mod initializer;
mod model;
mod proto;
mod source;
mod types;
mod wire;

pub(crate) use container::CONTAINER;
pub use source::OnnxSource;
