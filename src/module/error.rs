//! Errors of saving and loading modules.

use crate::read::ReadError;
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
    /// File tensors (after renaming) no parameter used.
    pub unused: Vec<String>,
    /// Parameters whose shape differs.
    pub shapes: Vec<ShapeMismatch>,
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
            && self.unused.is_empty()
            && self.shapes.is_empty()
            && self.failed.is_empty()
            && self.collisions.is_empty()
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!(
                "{} missing: {}",
                self.missing.len(),
                self.missing.join(", ")
            ));
        }
        if !self.unused.is_empty() {
            parts.push(format!(
                "{} unused: {}",
                self.unused.len(),
                self.unused.join(", ")
            ));
        }
        if !self.shapes.is_empty() {
            let list: Vec<String> = self
                .shapes
                .iter()
                .map(|s| format!("{} (module {:?}, file {:?})", s.path, s.expected, s.found))
                .collect();
            parts.push(format!(
                "{} shape mismatches: {}",
                list.len(),
                list.join(", ")
            ));
        }
        if !self.failed.is_empty() {
            let list: Vec<String> = self
                .failed
                .iter()
                .map(|(p, why)| format!("{p} ({why})"))
                .collect();
            parts.push(format!("{} failed: {}", list.len(), list.join(", ")));
        }
        if !self.collisions.is_empty() {
            parts.push(format!(
                "renamed onto the same name: {}",
                self.collisions.join(", ")
            ));
        }
        f.write_str(&parts.join("; "))
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
}
