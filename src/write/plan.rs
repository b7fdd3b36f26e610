//! The layout of a pack, computed from entry lengths alone.

use std::collections::BTreeMap;

use burn::tensor::DType;

use super::entry::Entry;
use super::error::WriteError;
use crate::format::{
    Blob, DescriptorRef, HEADER_SIZE, Header, Scalar, align_up, byte_len_of, metadata_checksum,
};

/// Where one entry's bytes go: absolute file offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Absolute offset in the file (a multiple of 256).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The complete layout of a pack: the header and metadata bytes, one [`Slot`] per entry (in
/// entry order), and the total size. It is a plain value computed before any entry's bytes
/// exist; every destination (file, buffer) is written from it.
///
/// Slots follow the entries' order, each at the next multiple of 256 after the previous one
/// ends; the metadata map is sorted by name. Given the same entries, metadata and scalars, the
/// bytes are identical to Burn 0.22's `burn_pack::Writer`.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::write::{Entry, Writer};
/// let entries = vec![
///     Entry::resident("b", DType::U8, vec![3], Bytes::from_bytes_vec(vec![1, 2, 3])),
///     Entry::resident("a", DType::U8, vec![1], Bytes::from_bytes_vec(vec![9])),
/// ];
/// let plan = Writer::new(entries).plan().unwrap();
/// assert_eq!(plan.slots()[0].offset, plan.data_start());
/// assert_eq!(plan.slots()[1].offset, plan.data_start() + 256);
/// assert_eq!(plan.total_size(), plan.data_start() + 257);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    head: Vec<u8>,
    data_start: u64,
    slots: Vec<Slot>,
    total_size: u64,
    /// Entry index → position in the (name-sorted) tensors map, where its checksum goes.
    ranks: Vec<usize>,
    checksums: bool,
}

impl Plan {
    /// Lays out `entries` with the given string metadata and scalars, reserving room for
    /// per-tensor checksums when `checksums` is set (filled in by [`Plan::seal`]).
    ///
    /// # Errors
    /// [`WriteError::DuplicateName`], [`WriteError::LengthMismatch`] (a non-quantized entry
    /// whose length is not shape × dtype size) or [`WriteError::Layout`].
    pub fn new(
        entries: &[Entry],
        metadata: &BTreeMap<String, String>,
        scalars: &BTreeMap<String, Scalar>,
        checksums: bool,
    ) -> Result<Self, WriteError> {
        let (mut slots, next) = lay_out(entries, 0)?;
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_unstable_by(|&a, &b| entries[a].name.cmp(&entries[b].name));
        if let Some(pair) = order
            .windows(2)
            .find(|w| entries[w[0]].name == entries[w[1]].name)
        {
            return Err(WriteError::DuplicateName {
                tensor: entries[pair[0]].name.clone(),
            });
        }
        // A pack this crate (or Burn) would refuse to open is not written: each map's entries
        // within the readers' default limit (the metadata counted with its `producer`).
        let max = crate::format::Limits::default().max_tensor_count;
        for (count, what) in [
            (entries.len(), "tensors"),
            (metadata.len(), "metadata entries"),
            (scalars.len(), "scalars"),
        ] {
            if count > max {
                return Err(WriteError::Layout(format!(
                    "{count} {what}, over the {max} readers accept (Limits::max_tensor_count)"
                )));
            }
        }
        let mut ranks = vec![0; order.len()];
        for (rank, &entry) in order.iter().enumerate() {
            ranks[entry] = rank;
        }
        let zeros = checksums.then(|| vec![0; (entries.len() + 1) * 8]);
        let blob = Blob {
            tensors: Tensors {
                entries,
                order: &order,
                slots: &slots,
            },
            metadata: (!metadata.is_empty()).then_some(metadata),
            scalars: (!scalars.is_empty()).then_some(scalars),
            checksums: zeros.as_deref(),
        };
        // About 60 bytes per tensor besides its name.
        let capacity = HEADER_SIZE + entries.iter().map(|e| e.name.len() + 72).sum::<usize>();
        let mut head = Vec::with_capacity(capacity);
        head.resize(HEADER_SIZE, 0);
        blob.encode_into(&mut head)?;
        let encoded = head.len() - HEADER_SIZE;
        let metadata_size = u32::try_from(encoded).map_err(|_| {
            WriteError::Layout(format!(
                "metadata is {encoded} bytes; the format allows at most {}",
                u32::MAX
            ))
        })?;
        // A pack this crate (or Burn) would refuse to open is not written.
        let limit = crate::format::Limits::default().max_metadata_size;
        if metadata_size > limit {
            let largest = metadata
                .iter()
                .max_by_key(|(k, v)| k.len() + v.len())
                .map(|(k, v)| format!("; the largest metadata entry is '{k}' ({} bytes)", v.len()))
                .unwrap_or_default();
            return Err(WriteError::Layout(format!(
                "metadata is {encoded} bytes, over the {limit} bytes readers accept \
                 (Limits::max_metadata_size){largest}"
            )));
        }
        let header = Header::new(metadata_size);
        let data_start = header.data_start();
        head[..HEADER_SIZE].copy_from_slice(&header.to_bytes());
        for slot in &mut slots {
            slot.offset += data_start;
        }
        let total_size = data_start
            .checked_add(next)
            .ok_or_else(|| WriteError::Layout("total size overflows u64".into()))?;
        Ok(Self {
            head,
            data_start,
            slots,
            total_size,
            ranks,
            checksums,
        })
    }

    /// The plan of [`new`](Self::new) with its data section at exactly `data_start` (a
    /// multiple of 256 reserved before the entries were written, as a staged write does): the
    /// metadata is padded with [`PADDING_KEY`] (spaces) until the head ends in the 256 bytes
    /// before `data_start`. `None` when the head does not fit in front of `data_start` (nor
    /// any padding: the data must move).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[cfg_attr(not(feature = "optim"), allow(dead_code))]
    pub(crate) fn with_data_start(
        entries: &[Entry],
        metadata: &BTreeMap<String, String>,
        scalars: &BTreeMap<String, Scalar>,
        checksums: bool,
        data_start: u64,
    ) -> Result<Option<Self>, WriteError> {
        let natural = Self::new(entries, metadata, scalars, checksums)?;
        if natural.data_start == data_start {
            return Ok(Some(natural));
        }
        let mut padded = metadata.clone();
        let mut pad = 0usize;
        // The head must end in (data_start - 256, data_start]; each round moves the padding by
        // the distance still to go (a text's length header grows by a few bytes at 24, 256 and
        // 65,536), so a few rounds land in that window.
        for _ in 0..8 {
            padded.insert(PADDING_KEY.to_string(), " ".repeat(pad));
            let plan = Self::new(entries, &padded, scalars, checksums)?;
            let end = plan.head.len() as u64;
            if plan.data_start == data_start {
                return Ok(Some(plan));
            }
            if end > data_start {
                if pad == 0 {
                    return Ok(None);
                }
                pad = pad.saturating_sub(usize::try_from(end - data_start).unwrap_or(usize::MAX));
            } else {
                pad += usize::try_from(data_start - end).unwrap_or(0);
            }
        }
        Ok(None)
    }

    /// Whether the plan stores checksums.
    #[must_use]
    pub fn has_checksums(&self) -> bool {
        self.checksums
    }

    /// Where entry `index`'s checksum goes among the stored checksums.
    pub(crate) fn rank(&self, index: usize) -> usize {
        self.ranks[index]
    }

    /// The final head: header and metadata with the checksums (in tensor-map order) written
    /// into the bytes reserved for them, then the checksum of everything before it (header
    /// and metadata); together they end the metadata blob.
    pub(crate) fn seal(&self, checksums: &[u64]) -> Vec<u8> {
        let mut head = self.head.clone();
        if self.checksums {
            let end = head.len() - 8;
            let start = end - checksums.len() * 8;
            for (slot, sum) in head[start..end].chunks_exact_mut(8).zip(checksums) {
                slot.copy_from_slice(&sum.to_le_bytes());
            }
            let sum = metadata_checksum(&head[..HEADER_SIZE], &head[HEADER_SIZE..end]);
            head[end..].copy_from_slice(&sum.to_le_bytes());
        }
        head
    }

    /// Header plus CBOR metadata: the first bytes of the file.
    #[must_use]
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Absolute offset of the data section.
    #[must_use]
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// One slot per entry, in entry order (ascending offsets).
    #[must_use]
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Size of the whole file in bytes.
    #[must_use]
    pub fn total_size(&self) -> u64 {
        self.total_size
    }
}

/// The tensors map, serialized straight from the entries in name order (slot offsets still
/// relative to the data section).
struct Tensors<'a> {
    entries: &'a [Entry],
    order: &'a [usize],
    slots: &'a [Slot],
}

impl serde::Serialize for Tensors<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.order.len()))?;
        for &i in self.order {
            let (entry, slot) = (&self.entries[i], self.slots[i]);
            map.serialize_entry(
                &entry.name,
                &DescriptorRef {
                    dtype: entry.dtype,
                    shape: &entry.shape,
                    data_offsets: (slot.offset, slot.offset + slot.len),
                    param_id: entry.param_id,
                },
            )?;
        }
        map.end()
    }
}

/// Metadata key of the spaces that fill a staged write's reserved head (see
/// [`Plan::with_data_start`]).
#[cfg_attr(not(feature = "optim"), allow(dead_code))]
pub(crate) const PADDING_KEY: &str = "burnpack.padding";

/// Slots for `entries` laid out after relative offset `from` (each at the next multiple of
/// 256), relative to the data section, and the offset where the last one ends. Checks each
/// entry's length against its shape and dtype.
pub(crate) fn lay_out(entries: &[Entry], from: u64) -> Result<(Vec<Slot>, u64), WriteError> {
    let mut slots = Vec::with_capacity(entries.len());
    let mut next = from;
    for entry in entries {
        let len = entry.len();
        check_len(entry, len)?;
        let start = align_up(next).ok_or_else(|| overflow(&entry.name))?;
        let end = start
            .checked_add(len)
            .ok_or_else(|| overflow(&entry.name))?;
        slots.push(Slot { offset: start, len });
        next = end;
    }
    Ok((slots, next))
}

fn overflow(name: &str) -> WriteError {
    WriteError::Layout(format!("tensor '{name}': offsets overflow u64"))
}

fn check_len(entry: &Entry, len: u64) -> Result<(), WriteError> {
    if matches!(entry.dtype, DType::QFloat(_)) {
        return Ok(());
    }
    let expected =
        byte_len_of(entry.dtype, entry.shape.iter().map(|&d| d as u64)).ok_or_else(|| {
            WriteError::Layout(format!(
                "tensor '{}': shape {:?} overflows u64 bytes",
                entry.name, entry.shape
            ))
        })?;
    if expected == len {
        Ok(())
    } else {
        Err(WriteError::LengthMismatch {
            tensor: entry.name.clone(),
            dtype: entry.dtype,
            shape: entry.shape.clone(),
            len,
            expected,
        })
    }
}
