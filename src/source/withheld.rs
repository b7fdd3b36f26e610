//! Tensors a source lists but cannot hand out: a dtype that Burn has no equivalent of (FP8 in
//! a safetensors file). They are shown by tools, refused by name where a load or a
//! conversion wants them, and never dropped in silence.

use super::error::ReadError;

/// A tensor that a source lists but cannot hand out (see
/// [`TensorSource::withheld`](super::TensorSource::withheld)): its name, its dtype and shape in
/// the container's own words, and why it cannot be read.
///
/// ```
/// use burnpack::source::Withheld;
/// let fp8 = Withheld::new("w", "F8_E4M3", vec![2, 2], "FP8 is not loadable yet");
/// assert_eq!(fp8.to_string(), "w F8_E4M3 [2, 2] (FP8 is not loadable yet)");
/// assert!(fp8.error("m.safetensors").to_string().contains("m.safetensors: tensor 'w': F8_E4M3"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Withheld {
    /// The tensor's name in the file.
    pub name: String,
    /// Its dtype as the container names it (`F8_E4M3`).
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Why it cannot be read.
    pub reason: String,
}

impl Withheld {
    /// A withheld tensor.
    ///
    /// ```
    /// let w = burnpack::source::Withheld::new("w", "F8_E5M2", vec![4], "FP8 is not loadable yet");
    /// assert_eq!(w.dtype, "F8_E5M2");
    /// ```
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        dtype: impl Into<String>,
        shape: Vec<usize>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            dtype: dtype.into(),
            shape,
            reason: reason.into(),
        }
    }

    /// The error of wanting this tensor from `file`: names the file, the tensor, its dtype
    /// and the reason.
    ///
    /// ```
    /// let w = burnpack::source::Withheld::new("w", "F8_E4M3", vec![4], "FP8 is not loadable yet");
    /// assert_eq!(
    ///     w.error("m.safetensors").to_string(),
    ///     "m.safetensors: tensor 'w': F8_E4M3 [4]: FP8 is not loadable yet"
    /// );
    /// ```
    #[must_use]
    pub fn error(&self, file: &str) -> ReadError {
        ReadError::Unsupported {
            file: file.to_string(),
            tensor: self.name.clone(),
            reason: format!("{} {:?}: {}", self.dtype, self.shape, self.reason),
        }
    }
}

impl std::fmt::Display for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {:?} ({})",
            self.name, self.dtype, self.shape, self.reason
        )
    }
}
