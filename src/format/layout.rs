//! Validation of a parsed header and metadata against the file they came from.

#[allow(unused_imports)]
use super::prelude::*;

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use core::convert::Infallible;
use core::ops::Range;

use super::dtype::metadata_checksum;
use super::error::FormatError;
use super::header::{HEADER_SIZE, Header};
use super::keys::{NAMESPACE_KEY, is_ours};
use super::layout_checks::{cut_inside, decode_metadata, has_checksums_entry};
use super::limits::Limits;
use super::metadata::{Extras, into_map};
use super::scalar::Scalar;
use super::tensor::TensorInfo;

/// Why [`Layout::read`] could not open a pack.
///
/// ```
/// use burnpack::format::{FormatError, OpenError};
/// let e: OpenError<std::io::Error> = OpenError::Invalid(FormatError::Metadata { reason: "x".into() });
/// assert!(matches!(e, OpenError::Invalid(_)));
/// ```
#[derive(Debug)]
pub enum OpenError<E> {
    /// The source could not be read.
    Read(E),
    /// The bytes are not a valid pack within the limits.
    Invalid(FormatError),
}

/// A validated burnpack file: header, tensors (by name and by position), metadata, scalars.
///
/// Building one checks everything the format allows checking without reading tensor data,
/// and nothing is allocated in proportion to a number from the file before the limit for that
/// number has been checked.
///
/// ```
/// use burnpack::format::{Layout, Limits};
/// let bytes = burnpack::write::Writer::new(vec![]).metadata("k", "v").into_bytes().unwrap();
/// let layout = Layout::from_bytes(&bytes, &Limits::default()).unwrap();
/// assert_eq!(layout.metadata()["k"], "v");
/// assert_eq!(layout.tensors().len(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct Layout {
    header: Header,
    file_len: u64,
    /// Sorted by name.
    tensors: Vec<TensorInfo>,
    /// Indices into `tensors`, sorted by offset (`None`: ordered when asked; not compared).
    by_position: Option<Vec<usize>>,
    metadata: BTreeMap<String, String>,
    scalars: BTreeMap<String, Scalar>,
    /// The metadata carries the `checksums` string (one per tensor, possibly none).
    checksums: bool,
    /// What decoding read past, as Burn's reader does.
    extras: Extras,
    /// The blob holds the bytes of a `checksums` entry that decoding did not find as the
    /// top-level key: a damaged file of this crate.
    checksums_elsewhere: bool,
    /// The header and metadata checksum, verified (files of this crate with checksums).
    head_checksum: Option<u64>,
}

/// Equal layouts describe the same file: the order by position is derived from the tensors.
impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.header == other.header
            && self.file_len == other.file_len
            && self.tensors == other.tensors
            && self.metadata == other.metadata
            && self.scalars == other.scalars
            && self.checksums == other.checksums
            && self.extras == other.extras
            && self.checksums_elsewhere == other.checksums_elsewhere
            && self.head_checksum == other.head_checksum
    }
}

impl Layout {
    /// Checks a parsed header against the file it starts: file size and metadata size limits,
    /// and that the metadata fits in the file. Call before reading the metadata.
    ///
    /// # Errors
    /// [`FormatError::LimitExceeded`] or [`FormatError::Truncated`].
    pub fn check_header(
        header: &Header,
        file_len: u64,
        limits: &Limits,
    ) -> Result<(), FormatError> {
        if file_len > limits.max_file_size {
            return Err(FormatError::LimitExceeded {
                what: "file size",
                size: file_len,
                limit: limits.max_file_size,
            });
        }
        if header.metadata_size > limits.max_metadata_size {
            return Err(FormatError::LimitExceeded {
                what: "metadata size",
                size: header.metadata_size.into(),
                limit: limits.max_metadata_size.into(),
            });
        }
        let needed = HEADER_SIZE as u64 + u64::from(header.metadata_size);
        if needed > file_len {
            return Err(FormatError::Truncated {
                what: "metadata",
                needed,
                available: file_len,
            });
        }
        Ok(())
    }

    /// Validates a whole file held in memory (through [`read`](Self::read), without a copy).
    ///
    /// # Errors
    /// Any [`FormatError`].
    pub fn from_bytes(file: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let len = file.len() as u64;
        let window = |range: Range<u64>| {
            let start = usize::try_from(range.start.min(len)).unwrap_or(file.len());
            let end = usize::try_from(range.end.min(len)).unwrap_or(file.len());
            Ok::<_, Infallible>((Cow::Borrowed(&file[start..end]), len))
        };
        Self::read(limits, window).map_err(|e| match e {
            OpenError::Invalid(e) => e,
            OpenError::Read(never) => match never {},
        })
    }

    /// The one open routine of every source of packs (files mapped or buffered, bytes, object
    /// storage), so that "validate before allocating" is written once: reads the header,
    /// checks it, the file size and the metadata size against `limits`, and only then asks for
    /// the metadata, decodes it and validates every tensor. Pure: it does no I/O of its own.
    /// `read` answers a byte range with the bytes of it that exist (fewer at the end of the
    /// source) and the source's total length; it is asked for the header (`0..10`), then for
    /// the metadata.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use burnpack::format::{Layout, Limits};
    /// let file = burnpack::write::Writer::new(vec![]).metadata("k", "v").into_bytes().unwrap();
    /// let mut asked = Vec::new();
    /// let layout = Layout::read(&Limits::default(), |range| {
    ///     asked.push(range.clone());
    ///     let end = (range.end as usize).min(file.len());
    ///     Ok::<_, std::io::Error>((Cow::Borrowed(&file[range.start as usize..end]), file.len() as u64))
    /// })
    /// .unwrap();
    /// assert_eq!(layout.metadata()["k"], "v");
    /// assert_eq!(asked.len(), 2);
    /// ```
    ///
    /// # Errors
    /// [`OpenError::Read`] with `read`'s error, [`OpenError::Invalid`] with what is wrong.
    pub fn read<'a, E>(
        limits: &Limits,
        mut read: impl FnMut(Range<u64>) -> Result<(Cow<'a, [u8]>, u64), E>,
    ) -> Result<Self, OpenError<E>> {
        let (head, file_len) = read(0..HEADER_SIZE as u64).map_err(OpenError::Read)?;
        let header = Header::parse(&head).map_err(OpenError::Invalid)?;
        Self::check_header(&header, file_len, limits).map_err(OpenError::Invalid)?;
        let end = HEADER_SIZE as u64 + u64::from(header.metadata_size);
        let (metadata, _) = read(HEADER_SIZE as u64..end).map_err(OpenError::Read)?;
        if metadata.len() != header.metadata_size as usize {
            return Err(OpenError::Invalid(FormatError::Truncated {
                what: "metadata",
                needed: end,
                available: HEADER_SIZE as u64 + metadata.len() as u64,
            }));
        }
        Self::parse(header, &metadata, file_len, limits).map_err(OpenError::Invalid)
    }

    /// Decodes `metadata` (the bytes after `header`) and validates every tensor against
    /// `file_len` and `limits`: offsets that overflow, end before start, ranges past the end
    /// of the file, tensors over the size limit, byte length vs shape × dtype, overlapping
    /// ranges and duplicate names. `header` must have passed [`Layout::check_header`].
    ///
    /// # Errors
    /// The first problem found, as a [`FormatError`] naming the tensor.
    pub fn parse(
        header: Header,
        metadata: &[u8],
        file_len: u64,
        limits: &Limits,
    ) -> Result<Self, FormatError> {
        let (table, decoded, extras) = decode_metadata(metadata, limits)?;
        let data_start = header.data_start();
        let has_checksums = decoded.checksums.is_some();
        // Burn's reader decodes the map and ignores what follows it inside `metadata_size`;
        // so does this one, except in a file with this crate's checksums, whose writer ends
        // the metadata exactly with them: there, bytes after the map mean a damaged length.
        // A damaged length or key can also hide the `checksums` entry from the decoder (the
        // map ends before it, or it is read as part of another key): its bytes are still in
        // the blob, and the file is then taken for a damaged one of this crate.
        // Only asked where something was read past (the scan costs a pass over the metadata).
        let read_past = extras.trailing > 0 || !extras.unknown_keys.is_empty();
        let checksums_elsewhere = !has_checksums && read_past && has_checksums_entry(metadata);
        if extras.trailing > 0 && (has_checksums || checksums_elsewhere) {
            return Err(FormatError::Metadata {
                reason: super::metadata::trailing_reason(extras.trailing),
            });
        }
        let mut head_checksum = None;
        let checksums: Option<Vec<u64>> = match decoded.checksums {
            Some(bytes) if bytes.len() == (table.rows.len() + 1) * 8 => {
                let mut sums: Vec<u64> = bytes
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
                    .collect();
                // The last one covers the header and the metadata before it.
                let expected = sums.pop().unwrap_or_default();
                let covered = metadata.len().saturating_sub(8);
                let actual = metadata_checksum(&header.to_bytes(), &metadata[..covered]);
                if expected != actual {
                    return Err(FormatError::MetadataChecksum { expected, actual });
                }
                head_checksum = Some(expected);
                Some(sums)
            }
            // Files of earlier versions of this crate: tensor checksums only.
            Some(bytes) if bytes.len() == table.rows.len() * 8 => Some(
                bytes
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
                    .collect(),
            ),
            Some(bytes) => {
                return Err(FormatError::Checksums {
                    found: bytes.len() as u64,
                    tensors: table.rows.len() as u64,
                });
            }
            None => None,
        };
        // Burn's writer and this crate's pad the data section to its aligned start even
        // when there is no tensor: a file that ends before it was cut short.
        if file_len < data_start {
            return Err(FormatError::Truncated {
                what: "data section",
                needed: data_start,
                available: file_len,
            });
        }
        let (names, rows) = table.into_names();
        if let Some(cut) = cut_inside(&names, &rows, data_start, file_len) {
            return Err(cut);
        }
        let mut tensors = Vec::with_capacity(rows.len());
        for (i, row) in rows.into_iter().enumerate() {
            let mut info = TensorInfo::validate(&names, &row, data_start, file_len, limits)?;
            info.checksum = checksums.as_ref().map(|c| c[i]);
            tensors.push(info);
        }

        // Burn and this crate write the map sorted by name: checked in one pass, sorted
        // only when it is not (moving 10,000 descriptors costs more than comparing them).
        if let Some((first, _)) = super::sort_unique(&mut tensors, TensorInfo::name) {
            return Err(FormatError::DuplicateKey {
                map: "tensors",
                key: tensors[first].name.to_string(),
            });
        }

        let by_position = super::by_name::position_order(&tensors);
        let mut furthest: Option<usize> = None;
        for &i in &by_position {
            if tensors[i].len == 0 {
                continue;
            }
            if let Some(prev) = furthest {
                let prev_end = tensors[prev].start + tensors[prev].len;
                if tensors[i].start < prev_end {
                    return Err(FormatError::Overlap {
                        tensor: tensors[i].name.to_string(),
                        other: tensors[prev].name.to_string(),
                    });
                }
            }
            furthest = Some(i);
        }

        Ok(Self {
            header,
            file_len,
            tensors,
            by_position: Some(by_position),
            metadata: into_map("metadata", decoded.metadata)?,
            scalars: into_map("scalars", decoded.scalars)?,
            checksums: has_checksums,
            extras,
            checksums_elsewhere,
            head_checksum,
        })
    }

    /// The layout of a file whose header and metadata checksum is `head_checksum` (checked
    /// by the caller against the file's own bytes), holding `tensors` as a record made when
    /// the file was written describes them: no metadata of its own, only the tensors given
    /// (see `format::vouched`).
    #[cfg(feature = "optim")]
    pub(super) fn from_record(
        header: Header,
        file_len: u64,
        tensors: Vec<TensorInfo>,
        head_checksum: u64,
    ) -> Self {
        Self {
            header,
            file_len,
            checksums: tensors.iter().all(|t| t.checksum.is_some()),
            tensors,
            // Ordered when asked (an open from a record does not read by position).
            by_position: None,
            metadata: BTreeMap::new(),
            scalars: BTreeMap::new(),
            extras: Extras::default(),
            checksums_elsewhere: false,
            head_checksum: Some(head_checksum),
        }
    }

    /// The header and metadata checksum the file stores (the last of its `checksums`),
    /// verified when it was opened; `None` for files without it (Burn's, or written without
    /// checksums). It covers every descriptor: two files with the same one describe the same
    /// tensors at the same places.
    ///
    /// ```
    /// let pack = burnpack::write::Writer::new(vec![]).into_bytes().unwrap();
    /// let reader = burnpack::read::Reader::from_bytes(pack).unwrap();
    /// assert!(reader.layout().head_checksum().is_some());
    /// ```
    #[must_use]
    pub fn head_checksum(&self) -> Option<u64> {
        self.head_checksum
    }

    /// This layout's scalars and metadata (less the keys `drop`), with `tensors` in place of
    /// its own: the table of a pack assembled from several files (an incremental checkpoint,
    /// whose tensors live in data files). `tensors` need not be sorted; their names must be
    /// unique (the caller checked). Offsets are each tensor's own file's, so `by_position`
    /// orders by them only for the readers that group reads.
    #[cfg(feature = "optim")]
    pub(crate) fn assembled(&self, mut tensors: Vec<TensorInfo>, drop: &[&str]) -> Self {
        if !tensors.is_sorted_by(|a, b| a.name() <= b.name()) {
            tensors.sort_by(|a, b| a.name().cmp(b.name()));
        }
        // The entries kept, cloned (the dropped ones, an incremental checkpoint's references,
        // may be most of the metadata).
        let metadata = self
            .metadata
            .iter()
            .filter(|(k, _)| !drop.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            checksums: tensors.iter().all(|t| t.checksum.is_some()),
            tensors,
            // Ordered when asked: most opens of a checkpoint never read by position.
            by_position: None,
            metadata,
            header: self.header,
            file_len: self.file_len,
            scalars: self.scalars.clone(),
            extras: self.extras.clone(),
            checksums_elsewhere: self.checksums_elsewhere,
            head_checksum: None,
        }
    }

    /// The same layout, saying it has no checksums (an incremental checkpoint whose manifest
    /// carries none).
    #[cfg(feature = "optim")]
    pub(crate) fn without_checksums(self) -> Self {
        Self {
            checksums: false,
            head_checksum: None,
            ..self
        }
    }

    /// The file's header.
    #[must_use]
    pub fn header(&self) -> Header {
        self.header
    }

    /// Length of the file this layout was validated against.
    #[must_use]
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Absolute offset of the data section.
    #[must_use]
    pub fn data_start(&self) -> u64 {
        self.header.data_start()
    }

    /// Every tensor, sorted by name.
    #[must_use]
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Every tensor in the order its bytes appear in the file.
    #[must_use = "iterators are lazy"]
    pub fn tensors_by_position(&self) -> impl ExactSizeIterator<Item = &TensorInfo> {
        let order: Cow<'_, [usize]> = match &self.by_position {
            Some(order) => Cow::Borrowed(order),
            None => Cow::Owned(super::by_name::position_order(&self.tensors)),
        };
        (0..order.len()).map(move |k| &self.tensors[order[k]])
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        super::position(&self.tensors, name).map(|i| &self.tensors[i])
    }

    /// String metadata.
    #[must_use]
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Typed scalars.
    #[must_use]
    pub fn scalars(&self) -> &BTreeMap<String, Scalar> {
        &self.scalars
    }

    /// Whether the file stores checksums: one for every tensor and one for the header and
    /// metadata, which opening it has already checked (true for an empty pack written with
    /// checksums).
    #[must_use]
    pub fn has_checksums(&self) -> bool {
        self.checksums
    }

    /// The namespace the file declares for module parameters ([`NAMESPACE_KEY`]), if any.
    /// Checkpoints written before that key (metadata `burnpack.kind` = `checkpoint`) keep
    /// their parameters under `model.`.
    ///
    /// ```
    /// use burnpack::format::{Layout, Limits, NAMESPACE_KEY};
    /// let bytes = burnpack::write::Writer::new(vec![]).metadata(NAMESPACE_KEY, "model.").into_bytes().unwrap();
    /// assert_eq!(Layout::from_bytes(&bytes, &Limits::default()).unwrap().namespace(), Some("model."));
    /// ```
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        if let Some(namespace) = self.metadata.get(NAMESPACE_KEY) {
            return Some(namespace);
        }
        (self.metadata.get("burnpack.kind").map(String::as_str) == Some("checkpoint"))
            .then_some("model.")
    }

    /// What the metadata holds beyond what this crate reads, ignored on load as Burn's reader
    /// ignores it: unknown top-level keys, and bytes after the CBOR map inside
    /// `metadata_size` (only in files without checksums; with them such bytes are refused).
    ///
    /// ```
    /// use burnpack::format::{Layout, Limits};
    /// let bytes = burnpack::write::Writer::new(vec![]).into_bytes().unwrap();
    /// let layout = Layout::from_bytes(&bytes, &Limits::default()).unwrap();
    /// assert!(layout.extras().unknown_keys.is_empty());
    /// ```
    #[must_use]
    pub fn extras(&self) -> &Extras {
        &self.extras
    }

    /// Whether the `producer` metadata says this crate wrote the file.
    #[must_use]
    pub fn is_ours(&self) -> bool {
        self.metadata.get("producer").is_some_and(|p| is_ours(p))
    }

    /// Refuses what the metadata holds beyond what this crate reads ([`extras`](Self::extras))
    /// in a file of this crate, whose writer adds neither: an unknown top-level key there is a
    /// damaged one ([`FormatError::UnknownKey`]). A file is this crate's when its `producer`
    /// says so, or when its metadata holds the bytes of this crate's `checksums` entry that
    /// decoding did not find where the writer puts it (a damaged key or length took the
    /// `producer` along). In other writers' files the same things are only warnings, returned
    /// as text (damaged, or written by a newer version: Burn ignores them).
    ///
    /// ```
    /// use burnpack::format::{Layout, Limits};
    /// let bytes = burnpack::write::Writer::new(vec![]).into_bytes().unwrap();
    /// let layout = Layout::from_bytes(&bytes, &Limits::default()).unwrap();
    /// assert_eq!(layout.check_extras().unwrap(), Vec::<String>::new());
    /// ```
    ///
    /// # Errors
    /// [`FormatError::UnknownKey`] in a file whose producer is this crate.
    pub fn check_extras(&self) -> Result<Vec<String>, FormatError> {
        let producer = self.metadata.get("producer").filter(|p| is_ours(p));
        if let Some(key) = self.extras.unknown_keys.first()
            && (producer.is_some() || self.checksums_elsewhere)
        {
            return Err(FormatError::UnknownKey {
                key: key.clone(),
                producer: producer.map_or_else(
                    || "burnpack (its checksums entry is damaged)".to_string(),
                    Clone::clone,
                ),
            });
        }
        let mut warnings: Vec<String> = self
            .extras
            .unknown_keys
            .iter()
            .map(|key| {
                format!(
                    "unknown top-level metadata key '{key}' ignored (damaged, or written by a \
                     newer version; Burn ignores it too)"
                )
            })
            .collect();
        if self.extras.trailing > 0 {
            warnings.push(format!(
                "{} bytes after the end of the metadata map, inside metadata_size, ignored \
                 (padding, or a damaged length; Burn ignores them too)",
                self.extras.trailing
            ));
        }
        Ok(warnings)
    }

    /// Refuses a file whose `producer` says this crate wrote it but which carries no checksums
    /// (every file this crate writes with its default options has them, and a flipped bit in
    /// the `checksums` key would otherwise turn checking off). Files of other producers (Burn
    /// writes none) pass: their contents are simply unverified.
    ///
    /// ```
    /// use burnpack::format::{FormatError, Layout, Limits};
    /// let bytes = burnpack::write::Writer::new(vec![])
    ///     .metadata("producer", "burnpack 0.1.0")
    ///     .checksums(false)
    ///     .into_bytes()
    ///     .unwrap();
    /// let layout = Layout::from_bytes(&bytes, &Limits::default()).unwrap();
    /// assert!(matches!(layout.require_checksums(), Err(FormatError::MissingChecksums { .. })));
    /// ```
    ///
    /// # Errors
    /// [`FormatError::MissingChecksums`].
    pub fn require_checksums(&self) -> Result<(), FormatError> {
        match self.metadata.get("producer") {
            Some(producer) if !self.checksums && is_ours(producer) => {
                Err(FormatError::MissingChecksums {
                    producer: producer.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The ranges between the end of the metadata and the data section, and between
    /// consecutive tensors, that the format fills with zeros: `(start, end, what follows)`.
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    pub(crate) fn padding(&self) -> Vec<(u64, u64, &str)> {
        let mut out = Vec::new();
        let metadata_end = HEADER_SIZE as u64 + u64::from(self.header.metadata_size);
        let mut end = self.data_start();
        if metadata_end < end {
            out.push((metadata_end, end, "the data section"));
        }
        for t in self.tensors_by_position().filter(|t| t.len > 0) {
            if end < t.start {
                out.push((end, t.start, &*t.name));
            }
            end = end.max(t.start + t.len);
        }
        out
    }
}
