//! How a source is opened, the same for every format.

use burn::tensor::DType;

use crate::format::Limits;

/// How a source is opened: every format's `open_with(path, &OpenOptions)` and
/// `from_bytes(bytes, &OpenOptions)`, and the registry's
/// [`open_any_with`](crate::interop::open_any_with).
///
/// ```
/// use burnpack::format::Limits;
/// use burnpack::source::OpenOptions;
/// let options = OpenOptions::new()
///     .key("ema_state_dict")
///     .limits(Limits::default().with_max_file_size(1 << 40))
///     .verify(true);
/// assert_eq!(options.key_name(), Some("ema_state_dict"));
/// ```
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub(crate) key: Option<String>,
    pub(crate) limits: Limits,
    pub(crate) verify: bool,
    pub(crate) keep_quantized: bool,
    pub(crate) dequantize_to: DType,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            key: None,
            limits: Limits::default(),
            verify: false,
            keep_quantized: false,
            dequantize_to: DType::F32,
        }
    }
}

impl OpenOptions {
    /// The defaults: the state dict of a `torch.save` file at the top or under a well-known
    /// key, the default [`Limits`], mapped files.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `torch.save` files: the key of the top-level dict that holds the state dict (an error
    /// if it is not there).
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Bounds checked before anything is allocated for the input (for a `torch.save` file: its
    /// size, the pickle's size as `max_metadata_size`, the number of tensors, one tensor's
    /// size, the nesting of the state dict).
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Opens for a verification that will read every byte: a pack, safetensors files, a GGUF
    /// file and a `torch.save` zip archive are read with ordinary reads instead of mapped (a
    /// damaged file, or one cut while it is read, is then an error to report, never a fault
    /// of a mapping), and a pack on object storage is fetched whole. A Burn record and a
    /// legacy `torch.save` file are still parsed through their mapping.
    #[must_use]
    pub fn verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Keeps quantized blocks quantized where one of Burn's quantization schemes holds them
    /// exactly, instead of dequantizing them when read: GGUF's `Q8_0`, `Q4_0`, `Q5_0`,
    /// `IQ4_NL`, `IQ4_XS`, `Q3_K`, `Q6_K`, `TQ1_0`, `TQ2_0`, `MXFP4`, `NVFP4` and the grid
    /// types `IQ2_*`, `IQ3_*`, `IQ1_*` (small integers or table entries times a scale per
    /// block) become Burn `QFloat` tensors (`Q8F` values
    /// one `i8` each, per-block `F16` or `F32` scales), whose dequantization gives llama.cpp's
    /// values bit for bit. Types no Burn scheme holds exactly (those with a per-block offset,
    /// `Q4_K`, `Q5_K`, `Q2_K`, `Q4_1`, `Q5_1`) are dequantized as without it, into
    /// [`dequantize_to`](Self::dequantize_to)'s dtype.
    ///
    /// ```
    /// let options = burnpack::source::OpenOptions::new().keep_quantized(true);
    /// assert!(options.keeps_quantized());
    /// ```
    #[must_use]
    pub fn keep_quantized(mut self, keep: bool) -> Self {
        self.keep_quantized = keep;
        self
    }

    /// The dtype quantized tensors are dequantized into when read (GGUF's block types that are
    /// not kept quantized, and safetensors' FP8 tensors, with their folded scales): `F32` (the
    /// default), `F16` or `BF16`, each value computed in `f32` as the reference computes it
    /// (llama.cpp; `ml_dtypes` for FP8), then rounded to nearest-even. Opening with any
    /// other dtype is an error ([`SourceError::Unsupported`](crate::source::SourceError)
    /// naming the file).
    ///
    /// ```
    /// use burn::tensor::DType;
    /// let options = burnpack::source::OpenOptions::new()
    ///     .keep_quantized(true)
    ///     .dequantize_to(DType::F16);
    /// assert_eq!(options.dequantized_dtype(), DType::F16);
    /// ```
    #[must_use]
    pub fn dequantize_to(mut self, dtype: DType) -> Self {
        self.dequantize_to = dtype;
        self
    }

    /// The dtype set with [`dequantize_to`](Self::dequantize_to).
    #[must_use]
    pub fn dequantized_dtype(&self) -> DType {
        self.dequantize_to
    }

    /// The dtype set with [`dequantize_to`](Self::dequantize_to), checked for the source
    /// opened at `path`: `F32`, `F16` or `BF16`, else the error every source gives.
    pub(crate) fn dequantize_into(
        &self,
        path: &std::path::Path,
    ) -> Result<DType, super::error::SourceError> {
        let dtype = self.dequantize_to;
        if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            Ok(dtype)
        } else {
            Err(super::error::SourceError::Unsupported {
                path: path.to_path_buf(),
                reason: format!(
                    "dequantize_to({dtype:?}): quantized tensors dequantize into F32, F16 or BF16"
                ),
            })
        }
    }

    /// Whether [`keep_quantized`](Self::keep_quantized) is set.
    #[must_use]
    pub fn keeps_quantized(&self) -> bool {
        self.keep_quantized
    }

    /// The key set with [`key`](Self::key).
    #[must_use]
    pub fn key_name(&self) -> Option<&str> {
        self.key.as_deref()
    }
}
