//! The table of globals a state dict needs: each name, what it stands for, and the storage
//! types. A name outside it is refused (nothing is ever imported).

use burn::tensor::{BoolStore, DType};

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

/// The names a state dict needs.
pub(super) fn global(module: &str, name: &str) -> Option<Global> {
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
