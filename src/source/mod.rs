//! The source core: what every source of tensors is built on, whatever its format (a pack, a
//! checkpoint, safetensors, a `torch.save` file, GGUF, a Burn record, object storage).
//!
//! [`TensorSource`] is the one seam every container of tensors goes through: the module
//! loader, `PackStore` and `bpk` take any of them. A format builds its table with
//! [`TableBuilder`] (or [`assemble_shards`] when it splits files), opens with
//! [`OpenOptions`], returns [`SourceError`], describes itself with [`DescribedSource`], and is
//! held to the contract by [`assert_source_contract`]; its naming and layout rules are a
//! [`Convention`] value. Nothing here knows a format by name.
//!
//! ```
//! use burnpack::source::{OpenOptions, TensorSource};
//! let pack = burnpack::write::Writer::new(vec![]).into_bytes().unwrap();
//! let reader = burnpack::read::Reader::from_bytes(pack).unwrap();
//! assert!(reader.tensors().is_empty());
//! assert!(OpenOptions::new().key_name().is_none());
//! ```

mod by_name;
mod contract;
mod convention;
pub(crate) mod data;
mod describe;
mod error;
mod options;
mod range;
mod shards;
mod table;
mod tensor_source;
mod withheld;

pub use by_name::TensorSourceExt;
pub use contract::assert_source_contract;
pub use convention::{Convention, DimOrder, ParamPlace, PytorchConvention, TensorKind};
pub use data::bytes_from_vec;
pub use describe::{AsTensorSource, Checksums, DescribedSource, Description, Value, human_bytes};
pub use error::{ReadError, SourceError, SourceErrorKind};
pub use options::OpenOptions;
pub(crate) use range::{check_range, window};
pub use shards::{InShard, Routing, Sharded, assemble_shards};
pub(crate) use table::from_table;
pub use table::{SourceTable, TableBuilder};
pub use tensor_source::{CopyReason, PackSource, TensorSource};
pub(crate) use tensor_source::{check_checksum, refuse_withheld};
pub use withheld::Withheld;
