//! Resource limits applied to untrusted files before anything is allocated for them.

#[allow(unused_imports)]
use super::prelude::*;

/// Bounds the reader enforces before allocating anything sized by the file.
///
/// The defaults are Burn 0.22's own numbers, so a file Burn refuses is refused here too. A
/// caller that trusts its files raises them: models above 100 GiB and tensors above 10 GiB
/// exist.
///
/// ```
/// use burnpack::format::Limits;
/// let defaults = Limits::default();
/// assert_eq!(defaults.max_tensor_count, 100_000);
/// let big = Limits::default()
///     .with_max_file_size(1 << 40)
///     .with_max_tensor_size(64 << 30);
/// assert_eq!(big.max_tensor_size, 64 << 30);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest CBOR metadata blob, in bytes (Burn: 100 MiB).
    pub max_metadata_size: u32,
    /// Most tensors in one file, and most entries in each metadata map (Burn: 100,000).
    pub max_tensor_count: usize,
    /// Largest single tensor, in bytes (Burn: 10 GiB).
    pub max_tensor_size: u64,
    /// Deepest CBOR nesting (Burn: 128).
    pub max_cbor_depth: usize,
    /// Largest file, in bytes (Burn: 100 GiB).
    pub max_file_size: u64,
    /// How many times its own size a compressed file (a gzipped Burn record) may decompress
    /// to, plus 1 MiB: checked as it decompresses, so a small "bomb" stops there (default 32;
    /// weights compress little, so a real record is far below it).
    pub max_inflation: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_metadata_size: 100 * 1024 * 1024,
            max_tensor_count: 100_000,
            max_tensor_size: 10 * 1024 * 1024 * 1024,
            max_cbor_depth: 128,
            max_file_size: 100 * 1024 * 1024 * 1024,
            max_inflation: 32,
        }
    }
}

impl Limits {
    /// Limits for files you wrote yourself: every size bound at its format maximum. The CBOR
    /// depth stays bounded, since it guards the stack rather than memory.
    ///
    /// ```
    /// let limits = burnpack::format::Limits::trusted();
    /// assert_eq!(limits.max_file_size, u64::MAX);
    /// ```
    #[must_use]
    pub fn trusted() -> Self {
        Self {
            max_metadata_size: u32::MAX,
            max_tensor_count: usize::MAX,
            max_tensor_size: u64::MAX,
            max_cbor_depth: 128,
            max_file_size: u64::MAX,
            max_inflation: u64::MAX,
        }
    }

    /// Sets [`max_metadata_size`](Self::max_metadata_size).
    #[must_use]
    pub fn with_max_metadata_size(mut self, bytes: u32) -> Self {
        self.max_metadata_size = bytes;
        self
    }

    /// Sets [`max_tensor_count`](Self::max_tensor_count).
    #[must_use]
    pub fn with_max_tensor_count(mut self, count: usize) -> Self {
        self.max_tensor_count = count;
        self
    }

    /// Sets [`max_tensor_size`](Self::max_tensor_size).
    #[must_use]
    pub fn with_max_tensor_size(mut self, bytes: u64) -> Self {
        self.max_tensor_size = bytes;
        self
    }

    /// Sets [`max_cbor_depth`](Self::max_cbor_depth).
    #[must_use]
    pub fn with_max_cbor_depth(mut self, depth: usize) -> Self {
        self.max_cbor_depth = depth;
        self
    }

    /// Sets [`max_inflation`](Self::max_inflation).
    ///
    /// ```
    /// // A record of mostly zeros, from a source you trust.
    /// let limits = burnpack::format::Limits::default().with_max_inflation(1000);
    /// assert_eq!(limits.max_inflation, 1000);
    /// ```
    #[must_use]
    pub fn with_max_inflation(mut self, ratio: u64) -> Self {
        self.max_inflation = ratio;
        self
    }

    /// Sets [`max_file_size`](Self::max_file_size).
    #[must_use]
    pub fn with_max_file_size(mut self, bytes: u64) -> Self {
        self.max_file_size = bytes;
        self
    }
}
