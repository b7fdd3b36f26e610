//! How a source is opened, the same for every format.

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
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub(crate) key: Option<String>,
    pub(crate) limits: Limits,
    pub(crate) verify: bool,
    pub(crate) keep_quantized: bool,
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
    /// exactly, instead of dequantizing them when read: GGUF's `Q8_0` (symmetric 8-bit, blocks
    /// of 32 along a row, an `f16` scale each) becomes a Burn `QFloat` tensor (`Q8F` values,
    /// per-block `[32]` `F16` scales), whose dequantization gives llama.cpp's values bit for
    /// bit. Types no Burn scheme holds exactly are dequantized as without it.
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
