//! The source core: the table every [`TensorSource`](super::TensorSource) is built on. A source
//! declares rows (a [`TensorInfo`] and where its bytes are, a value of the source's own type);
//! the [`TableBuilder`] enforces the [`Limits`] (count and size, checked as each row comes, so
//! a hostile file stops before its table grows), the length rule (bytes = dtype size ×
//! elements), sorts by name and refuses two rows of one name, naming both places; the
//! [`SourceTable`] looks tensors up by name and answers "not mine" the same way for every
//! source.

use std::path::{Path, PathBuf};

use super::error::{ReadError, SourceError};
use crate::format::{Limits, TensorInfo};

/// Every tensor of a source, sorted by name, each with where its bytes are (`P`: an offset in
/// one file, a shard and an offset, a storage and strides...).
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::format::{Limits, TensorInfo};
/// use burnpack::source::TableBuilder;
///
/// let mut rows = TableBuilder::new("weights.bin", &Limits::default());
/// rows.push(TensorInfo::external("b".into(), DType::F32, vec![2], 8, 8), "second")?;
/// rows.push(TensorInfo::external("a".into(), DType::F32, vec![2], 0, 8), "first")?;
/// let table = rows.finish(|place| place.to_string())?;
/// assert_eq!(table.tensors()[0].name(), "a");
/// let info = table.get("b").unwrap();
/// assert_eq!(table.place(info)?, &"second");
/// // A description that is not this table's own is refused, never read as whatever it says.
/// let foreign = TensorInfo::external("b".into(), DType::F32, vec![2], 0, 8);
/// assert!(table.place(&foreign).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SourceTable<P> {
    file: String,
    tensors: Vec<TensorInfo>,
    places: Vec<P>,
}

impl<P> SourceTable<P> {
    /// Every tensor, sorted by name.
    ///
    /// ```
    /// # use burnpack::source::TableBuilder;
    /// let table = TableBuilder::<()>::new("empty", &Default::default()).finish(|()| String::new()).unwrap();
    /// assert!(table.tensors().is_empty());
    /// ```
    #[must_use]
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`.
    ///
    /// ```
    /// # use burnpack::source::TableBuilder;
    /// let table = TableBuilder::<()>::new("empty", &Default::default()).finish(|()| String::new()).unwrap();
    /// assert!(table.get("w").is_none());
    /// ```
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        crate::format::position(&self.tensors, name).map(|i| &self.tensors[i])
    }

    /// The position of `info` in [`tensors`](Self::tensors) and its place, when `info` is one
    /// of this table's own (same name, dtype, shape and byte range).
    ///
    /// # Errors
    /// [`ReadError::NotMine`] naming the tensor: every source answers a foreign description
    /// so.
    pub fn owner(&self, info: &TensorInfo) -> Result<(usize, &P), ReadError> {
        crate::format::owned(&self.tensors, info)
            .map(|i| (i, &self.places[i]))
            .ok_or_else(|| ReadError::NotMine {
                file: self.file.clone(),
                tensor: info.name().to_string(),
            })
    }

    /// Where `info`'s bytes are, when `info` is one of this table's own.
    ///
    /// # Errors
    /// As [`owner`](Self::owner).
    pub fn place(&self, info: &TensorInfo) -> Result<&P, ReadError> {
        self.owner(info).map(|(_, place)| place)
    }

    /// Every place, in the order of [`tensors`](Self::tensors).
    #[must_use]
    pub fn places(&self) -> &[P] {
        &self.places
    }

    /// The file named in errors.
    #[must_use]
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The `Debug` of a source built on this table: its `kind`, file, shards and tensors.
    ///
    /// ```
    /// use burnpack::source::{SourceTable, TableBuilder};
    /// struct Mine(SourceTable<()>);
    /// impl std::fmt::Debug for Mine {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         self.0.fmt_source(f, "Mine", 1)
    ///     }
    /// }
    /// let table = TableBuilder::<()>::new("m.bin", &Default::default()).finish(|()| String::new()).unwrap();
    /// assert!(format!("{:?}", Mine(table)).contains("m.bin"));
    /// ```
    ///
    /// # Errors
    /// The formatter's.
    pub fn fmt_source(
        &self,
        f: &mut std::fmt::Formatter<'_>,
        kind: &str,
        shards: usize,
    ) -> std::fmt::Result {
        f.debug_struct(kind)
            .field("file", &self.file)
            .field("shards", &shards)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }

    /// The same tensors with each place changed by `f`.
    #[must_use]
    pub fn map<Q>(self, f: impl FnMut(P) -> Q) -> SourceTable<Q> {
        SourceTable {
            file: self.file,
            tensors: self.tensors,
            places: self.places.into_iter().map(f).collect(),
        }
    }
}

/// The part of a [`TensorSource`](super::TensorSource) that every source states the same way,
/// written once: inside its `impl TensorSource`, `from_table!(file, table);` (the fields
/// holding the name errors use and the sorted rows: a [`SourceTable`], or a pack's
/// [`Layout`](crate::format::Layout)) gives [`file`](super::TensorSource::file) and
/// [`tensors`](super::TensorSource::tensors); [`tensor`](super::TensorSource::tensor) (a
/// lookup in those rows) and [`check`](super::TensorSource::check) are the trait's own. The
/// source states only what differs: how a tensor is read, why it is a copy, what it withholds
/// or prefetches.
macro_rules! from_table {
    ($file:ident, $table:ident) => {
        fn file(&self) -> &str {
            &self.$file
        }

        fn tensors(&self) -> &[$crate::format::TensorInfo] {
            self.$table.tensors()
        }
    };
}
pub(crate) use from_table;

/// Collects a source's rows under its [`Limits`]; [`finish`](Self::finish) sorts them and
/// refuses duplicates. See [`SourceTable`].
#[derive(Debug)]
pub struct TableBuilder<P> {
    path: PathBuf,
    limits: Limits,
    rows: Vec<(TensorInfo, P)>,
}

impl<P> TableBuilder<P> {
    /// An empty table of the file `path` (named in errors), checked against `limits`.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>, limits: &Limits) -> Self {
        Self {
            path: path.into(),
            limits: *limits,
            rows: Vec::new(),
        }
    }

    /// The file named in errors.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows pushed so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row was pushed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds a tensor and its place. Checked before it is kept: the count limit, the size
    /// limit, and (for every dtype but Burn's quantized ones, whose packed length is Burn's
    /// own) that its byte length is its dtype's size times its elements.
    ///
    /// ```
    /// use burn::tensor::DType;
    /// use burnpack::format::{Limits, TensorInfo};
    /// use burnpack::source::TableBuilder;
    /// let mut rows = TableBuilder::new("m.bin", &Limits::default());
    /// let wrong = TensorInfo::external("w".into(), DType::F32, vec![3], 0, 8);
    /// let err = rows.push(wrong, ()).unwrap_err();
    /// assert!(err.to_string().contains("'w'"));
    /// ```
    ///
    /// # Errors
    /// [`SourceError::Invalid`] over the count limit; [`SourceError::Tensor`] naming the
    /// tensor for its size or length.
    pub fn push(&mut self, info: TensorInfo, place: P) -> Result<(), SourceError> {
        if self.rows.len() >= self.limits.max_tensor_count {
            return Err(SourceError::Invalid {
                path: self.path.clone(),
                reason: format!(
                    "more than {} tensors, the tensor-count limit",
                    self.limits.max_tensor_count
                ),
            });
        }
        let tensor_error = |reason: String| SourceError::Tensor {
            path: self.path.clone(),
            tensor: info.name().to_string(),
            reason,
        };
        if info.len() > self.limits.max_tensor_size {
            return Err(tensor_error(format!(
                "{} bytes, over the tensor-size limit of {}",
                info.len(),
                self.limits.max_tensor_size
            )));
        }
        // Quantized tensors' packed length is Burn's own (checked by their source); their
        // element count must still be addressable.
        let quantized = matches!(info.dtype(), burn::tensor::DType::QFloat(_));
        let dtype = if quantized {
            burn::tensor::DType::U8
        } else {
            info.dtype()
        };
        // A zero-size tensor's other dimensions must be addressable too: a shape such as
        // `[0, 2^64 - 1, 2^64 - 1]` holds no bytes but overflows whatever computes its
        // strides in bytes (numpy refuses it too).
        let nonzero = info
            .shape()
            .iter()
            .filter(|&&d| d != 0)
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .filter(|&n| i64::try_from(n).is_ok());
        match nonzero.and_then(|_| crate::format::byte_len_of(dtype, shape_of(&info))) {
            None => {
                return Err(tensor_error(format!(
                    "shape {:?} is too large to address",
                    info.shape()
                )));
            }
            Some(expected) if !quantized && expected != info.len() => {
                return Err(tensor_error(format!(
                    "{} bytes, but {:?} of shape {:?} needs {expected}",
                    info.len(),
                    info.dtype(),
                    info.shape()
                )));
            }
            Some(_) => {}
        }
        self.rows.push((info, place));
        Ok(())
    }

    /// Sorts the rows by name into a [`SourceTable`]; two rows of one name are refused,
    /// naming both places as `describe` tells them.
    ///
    /// # Errors
    /// [`SourceError::Tensor`] naming the repeated tensor and both places.
    pub fn finish(
        mut self,
        describe: impl Fn(&P) -> String,
    ) -> Result<SourceTable<P>, SourceError> {
        if let Some((a, b)) = crate::format::sort_unique(&mut self.rows, |r| r.0.name()) {
            let (first, second) = (describe(&self.rows[a].1), describe(&self.rows[b].1));
            let reason = if first.is_empty() && second.is_empty() {
                "two tensors of this name".to_string()
            } else {
                format!("two tensors of this name ({first} and {second})")
            };
            return Err(SourceError::Tensor {
                path: self.path,
                tensor: self.rows[a].0.name().to_string(),
                reason,
            });
        }
        let (tensors, places) = self.rows.into_iter().unzip();
        Ok(SourceTable {
            file: self.path.display().to_string(),
            tensors,
            places,
        })
    }
}

fn shape_of(info: &TensorInfo) -> impl Iterator<Item = u64> + '_ {
    info.shape().iter().map(|&d| d as u64)
}
