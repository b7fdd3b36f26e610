//! ggml's tensor types as GGUF files name them: each type's block of elements and its bytes
//! (llama.cpp's `GGML_QUANT_SIZES`), and what this crate does with it.

use burn::tensor::DType;

/// A tensor type of a GGUF file (ggml's `ggml_type`).
///
/// ```
/// use burnpack::interop::gguf::GgmlType;
/// let q8 = GgmlType::from_id(8).unwrap();
/// assert_eq!((q8.name(), q8.block(), q8.block_bytes()), ("Q8_0", 32, 34));
/// assert!(GgmlType::from_id(1000).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType {
    id: u32,
    name: &'static str,
    block: u64,
    block_bytes: u64,
}

/// Every type llama.cpp's `gguf` package (0.19) knows: id, name, elements per block, bytes per
/// block.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    // ggml's `block_q8_1` (f16 d, f16 s, 32 int8); the package still lists the old 40.
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

/// The types `dequant.rs` dequantizes (a test holds the two lists equal).
pub(super) const DEQUANTIZED: [&str; 25] = [
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
    "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S",
    "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M",
];

impl GgmlType {
    /// The type of id `id`, when ggml has one.
    #[must_use]
    pub fn from_id(id: u32) -> Option<Self> {
        TYPES
            .iter()
            .find(|t| t.0 == id)
            .map(|&(id, name, block, block_bytes)| Self {
                id,
                name,
                block,
                block_bytes,
            })
    }

    /// ggml's id of the type.
    #[must_use]
    pub fn id(self) -> u32 {
        self.id
    }

    /// The type's name, as llama.cpp writes it (`Q4_K`).
    #[must_use]
    pub fn name(self) -> &'static str {
        self.name
    }

    /// Elements per block (1 for plain types).
    #[must_use]
    pub fn block(self) -> u64 {
        self.block
    }

    /// Bytes per block.
    #[must_use]
    pub fn block_bytes(self) -> u64 {
        self.block_bytes
    }

    /// The Burn dtype a tensor of this type is stored as without a copy, for plain types.
    #[must_use]
    pub fn plain_dtype(self) -> Option<DType> {
        Some(match self.name {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "F64" => DType::F64,
            "I8" => DType::I8,
            "I16" => DType::I16,
            "I32" => DType::I32,
            "I64" => DType::I64,
            _ => return None,
        })
    }

    /// Whether this crate dequantizes the type (into `f32`, as `gguf.quants.dequantize`
    /// computes it).
    #[must_use]
    pub fn is_dequantized(self) -> bool {
        DEQUANTIZED.contains(&self.name)
    }

    /// The bytes `elements` elements take, when they are whole blocks.
    #[must_use]
    pub fn bytes_of(self, elements: u64) -> Option<u64> {
        if !elements.is_multiple_of(self.block) {
            return None;
        }
        (elements / self.block).checked_mul(self.block_bytes)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}
