//! A writer of everything a source holds: the one way a conversion into a pack is made, for
//! any [`DescribedSource`] (a pack, a checkpoint, a file of another format).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::format::TensorInfo;
use crate::source::{DescribedSource, ReadError};

use super::entry::Entry;
use super::writer::Writer;

impl Writer {
    /// A writer of everything `source` holds, its tensors read now: a pack's tensors,
    /// scalars and metadata as they are (each tensor checked against its checksum); another
    /// format's tensors with its [`Description::metadata`] (never its `producer`, which
    /// names the writer of the file that holds it).
    ///
    /// ```
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
    ///     .scalar("epoch", 2u64)
    ///     .into_bytes()
    ///     .unwrap();
    /// let copy = Writer::from_described(&Reader::from_bytes(pack).unwrap()).unwrap().into_bytes().unwrap();
    /// assert_eq!(Reader::from_bytes(copy).unwrap().scalars().len(), 1);
    /// ```
    ///
    /// # Errors
    /// A tensor could not be read, or failed its checksum; a metadata key could not be
    /// carried (see [`DescribedSource::carried_metadata`]).
    pub fn from_described<S: DescribedSource + ?Sized>(source: &S) -> Result<Self, ReadError> {
        if let Some(pack) = source.as_pack() {
            return Self::from_part(pack, "");
        }
        let metadata = carried(source)?;
        let mut writer = Self::from_source(source.as_tensor_source())?;
        for (k, v) in metadata {
            writer = writer.metadata(k, v);
        }
        Ok(writer)
    }

    /// What [`from_described`](Self::from_described) writes, its tensors read only when the
    /// writer reaches them: each one a deferred [`Entry`] whose provider reads it from `source`
    /// (checked against its checksum where the source has one, dequantized where the source
    /// stores it quantized), written and dropped before the worker takes the next. A conversion
    /// then holds at most one tensor per writer thread (plus the safetensors writer's copy of
    /// the one it writes), never the whole model: what `bpk convert` does.
    ///
    /// A pack (or a checkpoint) is copied with its scalars and metadata. Another format's
    /// metadata ([`DescribedSource::carried_metadata`]) is carried without its `producer` (it
    /// names the writer of the file that holds it), and a key that would mean something to a
    /// pack's reader ([`is_reserved_key`](crate::format::is_reserved_key): `burnpack.kind`,
    /// `burnpack.namespace`...) is kept under the source's format name (`gguf.burnpack.kind`),
    /// never with that meaning.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use burn::tensor::{Bytes, DType};
    /// use burnpack::read::Reader;
    /// use burnpack::source::DescribedSource;
    /// use burnpack::write::{Entry, Writer};
    /// let pack = Writer::new(vec![Entry::resident("w", DType::U8, vec![1], Bytes::from_bytes_vec(vec![7]))])
    ///     .scalar("epoch", 2u64)
    ///     .into_bytes()
    ///     .unwrap();
    /// let source: Arc<dyn DescribedSource> = Arc::new(Reader::from_bytes(pack).unwrap());
    /// let copy = Writer::streaming(&source).unwrap().into_bytes().unwrap();
    /// let copy = Reader::from_bytes(copy).unwrap();
    /// assert_eq!((copy.tensors().len(), copy.scalars().len()), (1, 1));
    /// ```
    ///
    /// # Errors
    /// The source withholds a tensor (FP8 in safetensors: the conversion would drop it), named;
    /// a prefetch failed; a metadata key could not be carried (its prefixed form is taken).
    /// A tensor that cannot be read fails the write, naming it.
    pub fn streaming(source: &Arc<dyn DescribedSource>) -> Result<Self, ReadError> {
        crate::source::refuse_withheld(source.as_tensor_source())?;
        if let Some(pack) = source.as_pack() {
            let layout = pack.layout();
            let wanted: Vec<TensorInfo> = layout.tensors_by_position().cloned().collect();
            let mut writer = Self::new(deferred(source, wanted)?);
            for (k, v) in layout.scalars() {
                writer = writer.scalar(k.clone(), *v);
            }
            for (k, v) in layout.metadata() {
                writer = writer.metadata(k.clone(), v.clone());
            }
            return Ok(writer);
        }
        let metadata = carried(source.as_ref())?;
        let mut wanted: Vec<TensorInfo> = source.tensors().to_vec();
        wanted.sort_by_key(TensorInfo::offset);
        let mut writer = Self::new(deferred(source, wanted)?);
        for (k, v) in metadata {
            writer = writer.metadata(k, v);
        }
        Ok(writer)
    }
}

impl Writer {
    /// The writer with its entries replaced by what `edit` makes of them (a conversion's
    /// filter and renames), metadata, scalars and options kept.
    pub(crate) fn edit_entries<E>(
        mut self,
        edit: impl FnOnce(Vec<Entry>) -> Result<Vec<Entry>, E>,
    ) -> Result<Self, E> {
        self.entries = edit(std::mem::take(&mut self.entries))?;
        Ok(self)
    }
}

/// `wanted` (tensors of `source`, in write order) as deferred entries reading them from
/// `source`; fetched first when the source wants it.
fn deferred(
    source: &Arc<dyn DescribedSource>,
    wanted: Vec<TensorInfo>,
) -> Result<Vec<Entry>, ReadError> {
    if source.wants_prefetch() {
        source.prefetch(&wanted.iter().collect::<Vec<_>>())?;
    }
    Ok(wanted
        .into_iter()
        .map(|info| {
            let shared = Arc::clone(source);
            let (name, dtype, shape) = (info.name().to_string(), info.dtype(), info.shape());
            let (shape, len, id) = (shape.to_vec(), info.len(), info.param_id());
            let entry = Entry::deferred(name, dtype, shape, len, move || {
                let bytes = shared.read(&info)?;
                shared.check(&info, &bytes)?;
                Ok(bytes)
            });
            match id {
                Some(id) => entry.with_param_id(id),
                None => entry,
            }
        })
        .collect())
}

/// The metadata a conversion of `source` (not a pack) carries into a pack: its
/// [`carried_metadata`](DescribedSource::carried_metadata) without `producer`, each reserved
/// key under the format's name; refused, naming both, where that name is taken too.
fn carried<S: DescribedSource + ?Sized>(source: &S) -> Result<BTreeMap<String, String>, ReadError> {
    let format = source.describe().format;
    let mut out = BTreeMap::new();
    let mut moved = Vec::new();
    for (k, v) in source.carried_metadata() {
        if k == "producer" {
            continue;
        }
        if crate::format::is_reserved_key(&k) {
            moved.push((format!("{format}.{k}"), k, v));
        } else {
            out.insert(k, v);
        }
    }
    for (to, from, v) in moved {
        if out.contains_key(&to) {
            return Err(ReadError::Conversion {
                file: source.file().to_string(),
                reason: format!(
                    "metadata key '{from}' has a meaning in a pack, and '{to}', where it would \
                     be kept, is taken too"
                ),
            });
        }
        out.insert(to, v);
    }
    Ok(out)
}
