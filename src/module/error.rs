//! Errors of saving and loading modules.

use crate::source::ReadError;
use crate::source::TensorKind;
use crate::write::WriteError;

/// A parameter whose shape differs from the file's tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeMismatch {
    /// The parameter's path.
    pub path: String,
    /// The module's shape.
    pub expected: Vec<usize>,
    /// The file's shape.
    pub found: Vec<usize>,
}

/// A parameter whose file tensor is of another kind (an integer tensor for a float
/// parameter, say). No dtype policy changes a kind, so no cast is suggested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindMismatch {
    /// The parameter's path.
    pub path: String,
    /// The parameter's kind.
    pub expected: TensorKind,
    /// The file tensor's dtype.
    pub found: burn::tensor::DType,
}

/// Everything that kept a file from matching a module, collected over the whole module.
///
/// ```
/// use burnpack::module::Mismatch;
/// let m = Mismatch { missing: vec!["a.weight".into()], ..Mismatch::default() };
/// assert!(m.to_string().contains("missing: a.weight"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mismatch {
    /// Parameters with no tensor in the file.
    pub missing: Vec<String>,
    /// Parameters whose tensor the file lists but this crate cannot load (an FP8 tensor of a
    /// safetensors file: see [`TensorSource::withheld`](crate::source::TensorSource::withheld)),
    /// with the error naming the file, the tensor and its dtype. Like missing ones, they are
    /// left as they are under [`allow_partial`](super::LoadOptions::allow_partial).
    pub unloadable: Vec<(String, String)>,
    /// File tensors (after renaming) no parameter used.
    pub unused: Vec<String>,
    /// Parameters whose shape differs.
    pub shapes: Vec<ShapeMismatch>,
    /// Parameters whose file tensor is of another kind (int for float, float for bool...).
    pub kinds: Vec<KindMismatch>,
    /// Parameters whose tensor could not be read or built on the device, with the reason.
    pub failed: Vec<(String, String)>,
    /// Names that several file tensors were renamed to.
    pub collisions: Vec<String>,
}

impl Mismatch {
    /// Whether nothing is wrong.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unloadable.is_empty()
            && self.unused.is_empty()
            && self.shapes.is_empty()
            && self.kinds.is_empty()
            && self.failed.is_empty()
            && self.collisions.is_empty()
    }
}

/// A name from a file as printed in the error: escaped, cut past `LINE_CHARS` characters.
fn name(text: &str) -> String {
    super::shown::shown(text, true)
}

fn names(list: &[String]) -> String {
    list.iter().map(|n| name(n)).collect::<Vec<_>>().join(", ")
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!(
                "{} missing: {}",
                self.missing.len(),
                names(&self.missing)
            ));
        }
        if !self.unloadable.is_empty() {
            let list: Vec<String> = self
                .unloadable
                .iter()
                .map(|(p, why)| format!("{} ({})", name(p), super::shown::shown(why, false)))
                .collect();
            parts.push(format!("{} not loadable: {}", list.len(), list.join(", ")));
        }
        if !self.unused.is_empty() {
            parts.push(format!(
                "{} unused: {}",
                self.unused.len(),
                names(&self.unused)
            ));
        }
        if !self.shapes.is_empty() {
            let list: Vec<String> = self
                .shapes
                .iter()
                .map(|s| {
                    format!(
                        "{} (module {:?}, file {:?})",
                        name(&s.path),
                        s.expected,
                        s.found
                    )
                })
                .collect();
            parts.push(format!(
                "{} shape mismatches: {}",
                list.len(),
                list.join(", ")
            ));
        }
        if !self.kinds.is_empty() {
            let list: Vec<String> = self
                .kinds
                .iter()
                .map(|k| {
                    format!(
                        "{} (the module has a {} parameter, the file a {} tensor of {:?})",
                        name(&k.path),
                        k.expected,
                        TensorKind::of(k.found),
                        k.found
                    )
                })
                .collect();
            parts.push(format!(
                "{} of the wrong kind: {}",
                list.len(),
                list.join(", ")
            ));
        }
        if !self.failed.is_empty() {
            let list: Vec<String> = self
                .failed
                .iter()
                .map(|(p, why)| format!("{} ({})", name(p), super::shown::shown(why, false)))
                .collect();
            parts.push(format!("{} failed: {}", list.len(), list.join(", ")));
        }
        if !self.collisions.is_empty() {
            parts.push(format!(
                "renamed onto the same name: {}",
                names(&self.collisions)
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

impl ModuleError {
    /// This error as the error of a layer above the module's (a checkpoint's, the store's),
    /// one way: a read or a write error goes on as that layer's own `Read` or `Write` (through
    /// its `From`), never wrapped twice; only what is the module's own (a mismatch, a refused
    /// option) is wrapped by `module`. The one place where the adapters' errors are nested.
    #[cfg(any(feature = "optim", feature = "store"))]
    pub(crate) fn lift<E: From<ReadError> + From<WriteError>>(
        self,
        module: impl FnOnce(Self) -> E,
    ) -> E {
        match self {
            Self::Read(e) => e.into(),
            Self::Write(e) => e.into(),
            e => module(e),
        }
    }
}

/// Why saving or loading a module failed.
///
/// ```
/// use burnpack::module::ModuleError;
/// fn describe(e: &ModuleError) -> String { e.to_string() }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// The file could not be opened or is not a valid pack.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The pack could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The file does not match the module (all problems at once).
    #[error("{file}: does not match the module: {mismatch}")]
    Mismatch {
        /// The file (`"<memory>"` for bytes).
        file: String,
        /// What did not match.
        mismatch: Box<Mismatch>,
    },
    /// A load option that this way of loading cannot honour, refused rather than ignored
    /// ([`LoadOptions::limits`](super::LoadOptions::limits) or
    /// [`buffered`](super::LoadOptions::buffered) given to
    /// [`load_from_source`](super::PackModule::load_from_source)).
    #[error("LoadOptions::{option} cannot be honoured here: it {reason}")]
    Option {
        /// The option's name (its method of [`LoadOptions`](super::LoadOptions)).
        option: &'static str,
        /// Why, and where it applies.
        reason: String,
    },
}
