//! What the writer writes: named tensors whose bytes are in hand or produced on demand.

use burn::tensor::{Bytes, DType};

use crate::format::TensorInfo;

use super::error::{ProviderError, WriteError};

type Provider = Box<dyn FnOnce() -> Result<Bytes, ProviderError> + Send + 'static>;

pub(crate) enum Source {
    Resident(Bytes),
    Lent(Lent),
    Deferred {
        len: u64,
        provider: Provider,
    },
    /// Already in the file (a staged write's earlier stage): only the length is left.
    #[cfg_attr(not(feature = "optim"), allow(dead_code))]
    Written(u64),
}

/// Bytes lent by their owner (a parameter's storage), held, not copied, until written.
/// Only the `flex` / `ndarray` features lend (see `module::host`).
#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
pub(crate) enum Lent {
    /// The first `.1` bytes of a shared buffer (how flex keeps a tensor's storage): holding
    /// it costs a reference count, no allocation.
    Prefix(std::sync::Arc<Bytes>, usize),
    /// Any other owner that can show its bytes.
    #[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
    Owner(Box<dyn AsRef<[u8]> + Send + Sync>),
}

impl std::ops::Deref for Lent {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Lent::Prefix(buffer, len) => &buffer[..*len],
            Lent::Owner(owner) => owner.as_ref().as_ref(),
        }
    }
}

/// An entry's bytes once produced: Burn [`Bytes`] or a lent storage.
pub(crate) enum Data {
    Bytes(Bytes),
    Lent(Lent),
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Bytes(bytes) => bytes,
            Data::Lent(lent) => lent,
        }
    }
}

/// One tensor to write: name, dtype, shape, optional parameter id, and its little-endian bytes,
/// either resident or deferred.
///
/// A deferred entry declares its length up front and produces its bytes only when the writer
/// reaches its slot; the bytes are written and dropped before the worker takes another entry,
/// so a save holds at most one materialized entry per worker thread.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::write::Entry;
/// let resident = Entry::resident("bias", DType::F32, vec![2], Bytes::from_elems(vec![0.5f32, 1.5]));
/// let deferred = Entry::deferred("weight", DType::F32, vec![2, 2], 16, || {
///     Ok(Bytes::from_elems(vec![1.0f32; 4]))
/// })
/// .with_param_id(7);
/// assert_eq!(resident.len(), 8);
/// assert_eq!(deferred.param_id(), Some(7));
/// ```
pub struct Entry {
    pub(crate) name: String,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) param_id: Option<u64>,
    pub(crate) source: Source,
    /// The checksum of the bytes, where whoever made the entry computed it already (an
    /// incremental save, from the content hash): the writer records it rather than hashing
    /// the bytes again. Dropped by anything that changes the bytes (a cast).
    pub(crate) known_checksum: Option<u64>,
}

crate::format::tensor_description!(Entry);

impl Entry {
    /// An entry whose bytes are already in hand (they may still be lazy, e.g. file-backed).
    pub fn resident(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<usize>,
        bytes: Bytes,
    ) -> Self {
        Self::new(name.into(), dtype, shape, Source::Resident(bytes))
    }

    /// An entry whose bytes a parameter's storage lends (module saves on CPU backends).
    pub(crate) fn lent(name: String, dtype: DType, shape: Vec<usize>, lent: Lent) -> Self {
        Self::new(name, dtype, shape, Source::Lent(lent))
    }

    /// An entry of `len` bytes produced by `provider` when the writer reaches it.
    ///
    /// The provider runs at most once, on a writer thread. If it fails, panics or returns a
    /// length other than `len`, the write fails with an error naming this entry (and an atomic
    /// write leaves the destination untouched).
    pub fn deferred(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<usize>,
        len: u64,
        provider: impl FnOnce() -> Result<Bytes, ProviderError> + Send + 'static,
    ) -> Self {
        let provider = Box::new(provider);
        Self::new(
            name.into(),
            dtype,
            shape,
            Source::Deferred { len, provider },
        )
    }

    fn new(name: String, dtype: DType, shape: Vec<usize>, source: Source) -> Self {
        Self {
            name,
            dtype,
            shape,
            param_id: None,
            source,
            known_checksum: None,
        }
    }

    /// The entry that writes a stored tensor again: `info`'s name, dtype, shape and parameter
    /// id, with `bytes` (as a reader hands them out: windows into a mapping are not copied
    /// until written). The one conversion from a read tensor to a written one.
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7])).with_param_id(3)])
    ///     .into_bytes()
    ///     .unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// let info = reader.tensor("w").unwrap();
    /// let again = Entry::from_stored(info, reader.read(info).unwrap()).renamed("model.w");
    /// assert_eq!((again.name(), again.param_id(), again.len()), ("model.w", Some(3), 1));
    /// ```
    #[must_use]
    pub fn from_stored(info: &TensorInfo, bytes: Bytes) -> Self {
        let entry = Self::resident(info.name(), info.dtype(), info.shape().to_vec(), bytes);
        match info.param_id() {
            Some(id) => entry.with_param_id(id),
            None => entry,
        }
    }

    /// The same entry under another name.
    #[must_use]
    pub fn renamed(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Attaches a parameter id (a module parameter's `ParamId`).
    #[must_use]
    pub fn with_param_id(mut self, id: u64) -> Self {
        self.param_id = Some(id);
        self
    }

    /// The same entry under `prefix` + its name (a namespace such as a checkpoint's `model.`).
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// let e = burnpack::write::Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![1]));
    /// assert_eq!(e.prefixed("model.").name(), "model.w");
    /// ```
    #[must_use]
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.name.insert_str(0, prefix);
        self
    }

    /// Byte length (declared, for a deferred entry).
    #[must_use]
    pub fn len(&self) -> u64 {
        match &self.source {
            Source::Resident(bytes) => bytes.len() as u64,
            Source::Lent(lent) => lent.len() as u64,
            Source::Deferred { len, .. } | Source::Written(len) => *len,
        }
    }

    /// What is left of the entry once its bytes are in the file: name, dtype, shape, id and
    /// length, for the head that is planned after every stage of a staged write.
    #[cfg_attr(not(feature = "optim"), allow(dead_code))]
    pub(crate) fn husk(&self) -> Self {
        Self {
            name: self.name.clone(),
            dtype: self.dtype,
            shape: self.shape.clone(),
            param_id: self.param_id,
            source: Source::Written(self.len()),
            known_checksum: None,
        }
    }

    /// Whether the entry has no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes will be produced at write time.
    #[must_use]
    pub fn is_deferred(&self) -> bool {
        matches!(self.source, Source::Deferred { .. })
    }
}

#[cfg(feature = "optim")]
impl Entry {
    /// The entry with its bytes in hand: a deferred one's provider called (its failure an
    /// error naming the entry); resident and lent ones as they are.
    pub(crate) fn materialized(self) -> Result<Self, WriteError> {
        if !self.is_deferred() {
            return Ok(self);
        }
        let (name, dtype, shape, param_id, self_known) = (
            self.name.clone(),
            self.dtype,
            self.shape.clone(),
            self.param_id,
            self.known_checksum,
        );
        let source = match materialize(self)? {
            Data::Bytes(bytes) => Source::Resident(bytes),
            Data::Lent(lent) => Source::Lent(lent),
        };
        Ok(Self {
            name,
            dtype,
            shape,
            param_id,
            source,
            known_checksum: self_known,
        })
    }

    /// The storage a lent entry borrows from a CPU tensor (the shared buffer and the length
    /// used), `None` for any other entry: what lets an incremental checkpoint prove that a
    /// tensor's bytes did not change (the same buffer, never written since, see
    /// `checkpoint::incremental`).
    pub(crate) fn shared_storage(&self) -> Option<(&std::sync::Arc<Bytes>, usize)> {
        match &self.source {
            Source::Lent(Lent::Prefix(buffer, len)) => Some((buffer, *len)),
            _ => None,
        }
    }

    /// The bytes of a resident or lent entry (`None` for a deferred or written one).
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match &self.source {
            Source::Resident(bytes) => Some(bytes),
            Source::Lent(lent) => Some(lent),
            Source::Deferred { .. } | Source::Written(_) => None,
        }
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("param_id", &self.param_id)
            .field("len", &self.len())
            .field("deferred", &self.is_deferred())
            .finish_non_exhaustive()
    }
}

/// Produces an entry's bytes, turning a failing, panicking or lying provider into an error
/// that names the entry.
pub(crate) fn materialize(entry: Entry) -> Result<Data, WriteError> {
    let Entry { name, source, .. } = entry;
    match source {
        Source::Resident(bytes) => Ok(Data::Bytes(bytes)),
        Source::Lent(lent) => Ok(Data::Lent(lent)),
        Source::Deferred { len, provider } => match crate::panic::catch_quiet(provider) {
            Ok(Ok(bytes)) if bytes.len() as u64 == len => Ok(Data::Bytes(bytes)),
            Ok(Ok(bytes)) => Err(WriteError::ProviderLength {
                tensor: name,
                declared: len,
                produced: bytes.len() as u64,
            }),
            Ok(Err(source)) => Err(WriteError::Provider {
                tensor: name,
                source,
            }),
            Err(message) => Err(WriteError::ProviderPanicked {
                tensor: name,
                message,
            }),
        },
        Source::Written(_) => Err(WriteError::Pipeline(format!(
            "tensor '{name}' is already written"
        ))),
    }
}
