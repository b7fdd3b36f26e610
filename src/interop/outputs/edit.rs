//! How a conversion writes its output ([`OutputOptions`]), and the edits it makes on the way:
//! tensors kept by a filter, renamed, floats cast, all before the plan, each tensor still read
//! (and cast) only when the writer reaches it.

use burn::tensor::DType;
use regex::Regex;

use crate::write::{Entry, WriteError, Writer};

/// How a conversion writes its output: shards, quantized blocks, and what it changes on the
/// way (a float dtype, a filter, renames, as [`LoadOptions`](crate::module::LoadOptions)
/// spells them).
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::interop::OutputOptions;
/// let options = OutputOptions::new().shard_size(Some(5_000_000_000));
/// assert_eq!(options.shard_size, Some(5_000_000_000));
/// let options = OutputOptions::new()
///     .float_dtype(DType::BF16)
///     .unwrap()
///     .filter_regex(r"^encoder\.")
///     .unwrap()
///     .rename(r"^encoder\.", "enc.")
///     .unwrap();
/// assert_eq!(options.float_dtype, Some(DType::BF16));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputOptions {
    /// Split into shards of at most this many bytes (sharded outputs only).
    pub shard_size: Option<u64>,
    /// Quantized blocks were kept quantized (outputs that keep them only).
    pub keep_quantized: bool,
    /// Float tensors written in this dtype (F16, BF16 or F32; see
    /// [`float_dtype`](Self::float_dtype)).
    pub float_dtype: Option<DType>,
    /// Only the tensors whose (renamed) name matches this pattern are written.
    pub filter: Option<String>,
    /// Rename rules `(pattern, replacement)`, applied in order to every tensor's name.
    pub renames: Vec<(String, String)>,
}

impl OutputOptions {
    /// No shards, quantized blocks dequantized, every tensor as it is.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Splits the output into shards of at most `bytes` (`None`: one file).
    #[must_use]
    pub fn shard_size(mut self, bytes: Option<u64>) -> Self {
        self.shard_size = bytes;
        self
    }

    /// Whether the source was opened keeping quantized blocks.
    #[must_use]
    pub fn keep_quantized(mut self, keep: bool) -> Self {
        self.keep_quantized = keep;
        self
    }

    /// Writes float tensors (F64, F32, F16, BF16) as `dtype` (F16, BF16 or F32), each cast
    /// as the writer reaches it with the cast of
    /// [`SaveOptions::float_dtype`](crate::module::SaveOptions::float_dtype) (Burn's
    /// rounding); ints, bools and quantized tensors as they are. A pack output records it
    /// (`burnpack.float_dtype`).
    ///
    /// ```
    /// use burn::tensor::DType;
    /// use burnpack::interop::OutputOptions;
    /// assert!(OutputOptions::new().float_dtype(DType::F16).is_ok());
    /// assert!(OutputOptions::new().float_dtype(DType::I8).is_err());
    /// ```
    ///
    /// # Errors
    /// [`WriteError::FloatDtype`] for any other dtype.
    pub fn float_dtype(mut self, dtype: DType) -> Result<Self, WriteError> {
        self.float_dtype = Some(crate::write::cast::float_target(dtype)?);
        Ok(self)
    }

    /// Writes only the tensors whose name (after the [`rename`](Self::rename) rules) matches
    /// `pattern`, as [`LoadOptions::filter_regex`](crate::module::LoadOptions::filter_regex)
    /// matches module paths after its renames.
    ///
    /// ```
    /// use burnpack::interop::OutputOptions;
    /// assert!(OutputOptions::new().filter_regex("(").is_err());
    /// ```
    ///
    /// # Errors
    /// The pattern does not compile.
    pub fn filter_regex(mut self, pattern: &str) -> Result<Self, regex::Error> {
        Regex::new(pattern)?;
        self.filter = Some(pattern.to_string());
        Ok(self)
    }

    /// Renames tensors: every rule is applied in order with [`Regex::replace_all`] (`$1`
    /// etc. refer to groups), as [`LoadOptions::rename`](crate::module::LoadOptions::rename)
    /// does. Two tensors renamed to one name are refused, naming both.
    ///
    /// ```
    /// use burnpack::interop::OutputOptions;
    /// let options = OutputOptions::new().rename(r"^model\.(.*)$", "$1").unwrap();
    /// assert_eq!(options.renames.len(), 1);
    /// ```
    ///
    /// # Errors
    /// The pattern does not compile.
    pub fn rename(
        mut self,
        pattern: &str,
        replacement: impl Into<String>,
    ) -> Result<Self, regex::Error> {
        Regex::new(pattern)?;
        self.renames.push((pattern.to_string(), replacement.into()));
        Ok(self)
    }

    /// Whether the conversion changes what it writes (a dtype, a filter, a rename): then an
    /// output in the input's own format is no copy.
    ///
    /// ```
    /// use burnpack::interop::OutputOptions;
    /// assert!(!OutputOptions::new().edits());
    /// assert!(OutputOptions::new().rename("a", "b").unwrap().edits());
    /// ```
    #[must_use]
    pub fn edits(&self) -> bool {
        self.float_dtype.is_some() || self.filter.is_some() || !self.renames.is_empty()
    }
}

/// `writer` with `options`' edits made: renamed, filtered, floats cast. The error says what
/// went wrong (a rename onto a taken name, naming both; a filter that keeps nothing).
pub(crate) fn edit(writer: Writer, options: &OutputOptions) -> Result<Writer, String> {
    let compile = |p: &str| Regex::new(p).map_err(|e| format!("pattern '{p}': {e}"));
    let renames = options
        .renames
        .iter()
        .map(|(p, r)| Ok((compile(p)?, r.as_str())))
        .collect::<Result<Vec<_>, String>>()?;
    let filter = options.filter.as_deref().map(compile).transpose()?;
    let writer = if renames.is_empty() && filter.is_none() {
        writer
    } else {
        writer.edit_entries(|entries| {
            let total = entries.len();
            let mut taken = std::collections::HashMap::<String, String>::new();
            let mut kept = Vec::with_capacity(total);
            for entry in entries {
                let name = renames
                    .iter()
                    .fold(entry.name().to_string(), |name, (re, to)| {
                        re.replace_all(&name, *to).into_owned()
                    });
                if filter.as_ref().is_some_and(|f| !f.is_match(&name)) {
                    continue;
                }
                if let Some(other) = taken.insert(name.clone(), entry.name().to_string()) {
                    return Err(format!(
                        "tensors '{other}' and '{}' are both renamed to '{name}'",
                        entry.name()
                    ));
                }
                kept.push(renamed(entry, name));
            }
            if kept.is_empty() && total > 0 {
                return Err(format!(
                    "the filter '{}' keeps none of the {total} tensors",
                    options.filter.as_deref().unwrap_or_default()
                ));
            }
            Ok(kept)
        })?
    };
    match options.float_dtype {
        Some(dtype) => writer.float_dtype(dtype).map_err(|e| e.to_string()),
        None => Ok(writer),
    }
}

/// `entry` under `name` (itself where the name did not change).
fn renamed(entry: Entry, name: String) -> Entry {
    if entry.name() == name {
        entry
    } else {
        entry.renamed(name)
    }
}
