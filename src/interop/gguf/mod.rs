//! llama.cpp's GGUF files as a [`TensorSource`](crate::source::TensorSource) (feature `gguf`):
//! versions 2 and 3, little-endian (a big-endian file is recognised and refused by name), one
//! file or a split set (`model-00001-of-00003.gguf` and its parts, through the shared shard
//! assembly).
//!
//! A GGUF file is a header (magic, version, counts), typed key/value metadata, a tensor table
//! and an aligned data section (`general.alignment`, 32 by default). The header is read with
//! ordinary reads and checked before anything is allocated for it: counts and string lengths
//! against what the file still holds and the [`Limits`](crate::format::Limits), arrays nested
//! no deeper than `max_cbor_depth`, a key given twice refused. Every tensor's bytes are its
//! type's whole blocks ([`GgmlType`]), aligned, inside the data section and clear of every other
//! tensor's, checked before the file is mapped and built into a table by the shared source
//! core. GGUF lists dimensions fastest first: shapes come out in Burn's row-major order.
//!
//! `F32`, `F16`, `BF16`, `F64`, `I8`, `I16`, `I32` and `I64` tensors are zero-copy windows of
//! the mapping. Quantized tensors are `F32` tensors of the table, dequantized in parallel when
//! read, bit for bit as `gguf.quants.dequantize` (llama.cpp's Python reference) computes them:
//! `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q8_1`, `Q2_K`, `Q3_K`, `Q4_K`, `Q5_K`, `Q6_K`,
//! `Q8_K`, `TQ1_0`, `TQ2_0`, `MXFP4`, `NVFP4`, `IQ4_NL`, `IQ4_XS` and the grid-based `IQ2_XXS`,
//! `IQ2_XS`, `IQ2_S`, `IQ3_XXS`, `IQ3_S`, `IQ1_S` and `IQ1_M`. A tensor of another type
//! (`Q1_0`, a type ggml does not have yet) does not spoil the file: it is listed, and reading
//! it is an error naming the tensor and the type.
//!
//! With [`OpenOptions::keep_quantized`](crate::source::OpenOptions::keep_quantized), the types
//! that are small integers (or entries of an integer table) times a scale per block stay
//! quantized: `Q8_0`, `Q4_0`, `Q5_0`, `IQ4_NL`, `IQ4_XS`, `Q3_K`, `Q6_K`, `TQ1_0`, `TQ2_0`,
//! `MXFP4`, `NVFP4` and the grid types (`IQ2_XXS`, `IQ2_XS`, `IQ2_S`, `IQ3_XXS`, `IQ3_S`,
//! `IQ1_S`, `IQ1_M`) are Burn `QFloat` tensors (`Q8F` values one `i8` each, per-block `f16`
//! or `f32` scales), whose dequantization by Burn gives the reference's values exactly. The
//! types with a per-block offset (`Q4_1`, `Q5_1`, `Q2_K`, `Q4_K`, `Q5_K`) have no such scheme
//! and are dequantized, into `f32` or the dtype of
//! [`OpenOptions::dequantize_to`](crate::source::OpenOptions::dequantize_to) (`f16`, `bf16`:
//! the `f32` value rounded to nearest-even).
//!
//! ```no_run
//! use burnpack::interop::gguf::GgufSource;
//! use burnpack::source::TensorSource;
//! let source = GgufSource::open("qwen2-0.5b-q8_0.gguf")?;
//! println!("{:?}", source.get("general.architecture"));
//! for info in source.tensors() {
//!     println!("{} {:?} {:?}", info.name(), source.ggml_type(info), info.shape());
//! }
//! # Ok::<(), burnpack::source::SourceError>(())
//! ```

mod container;
mod convention;
mod dequant;
mod describe;
mod grid;
mod grid_kept;
mod header;
mod quantized;
mod source;
mod split;
mod types;
mod value;

pub(crate) use container::CONTAINER;
pub use convention::LlamaCppConvention;
pub use source::GgufSource;
pub use types::GgmlType;
pub use value::{Array, Value};
