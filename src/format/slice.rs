//! [`PackSlice`]: a validated pack over bytes in memory, with nothing but `core` and `alloc`:
//! what a `no_std` program (a microcontroller's firmware with a model compiled in) reads.

#[allow(unused_imports)]
use super::prelude::*;

use alloc::string::ToString;

use super::{FormatError, Layout, Limits, TensorInfo, checksum};

/// A pack held in memory (`include_bytes!`, a buffer received over a link), validated when
/// made: header, metadata (and its checksum), every tensor's place inside the bytes, all
/// within the [`Limits`], before anything is allocated for a number the bytes hold. Tensors
/// are handed out as windows of the bytes, each checked against its stored checksum on
/// request. Needs neither `std` nor a Burn backend: it builds with `default-features = false`
/// for bare-metal targets.
///
/// ```
/// use burnpack::format::{Limits, PackSlice};
/// # let pack = burnpack::write::Writer::new(vec![burnpack::write::Entry::resident(
/// #     "w", burn::tensor::DType::F32, vec![2], burn::tensor::Bytes::from_elems(vec![1.0f32, 2.0]),
/// # )]).into_bytes().unwrap();
/// let pack = PackSlice::new(&pack, &Limits::default())?;
/// let w = pack.tensor("w").unwrap();
/// let bytes = pack.checked(w)?;
/// assert_eq!(bytes, [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
/// # Ok::<(), burnpack::format::FormatError>(())
/// ```
#[derive(Debug)]
pub struct PackSlice<'a> {
    bytes: &'a [u8],
    layout: Layout,
}

impl<'a> PackSlice<'a> {
    /// Validates `bytes` as a pack within `limits`.
    ///
    /// # Errors
    /// Any [`FormatError`]: what is wrong, naming the tensor where one is at fault.
    pub fn new(bytes: &'a [u8], limits: &Limits) -> Result<Self, FormatError> {
        let layout = Layout::from_bytes(bytes, limits)?;
        Ok(Self { bytes, layout })
    }

    /// The validated layout: metadata, scalars, every tensor.
    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every tensor, sorted by name.
    #[must_use]
    pub fn tensors(&self) -> &[TensorInfo] {
        self.layout.tensors()
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.layout.tensor(name)
    }

    /// `info`'s bytes, a window of the pack (no copy; not checked against the checksum).
    ///
    /// # Errors
    /// [`FormatError::PastEnd`] for a tensor that is not this pack's (its place is outside
    /// the bytes).
    pub fn data(&self, info: &TensorInfo) -> Result<&'a [u8], FormatError> {
        let past_end = || FormatError::PastEnd {
            tensor: info.name().to_string(),
            end: info.offset().saturating_add(info.len()),
            file_len: self.bytes.len() as u64,
        };
        let start = usize::try_from(info.offset()).map_err(|_| past_end())?;
        let len = usize::try_from(info.len()).map_err(|_| past_end())?;
        let end = start.checked_add(len).ok_or_else(past_end)?;
        self.bytes.get(start..end).ok_or_else(past_end)
    }

    /// `info`'s bytes, checked against the checksum the pack stores for it (packs written
    /// without checksums are handed out unchecked: see [`Layout::has_checksums`]).
    ///
    /// # Errors
    /// As [`data`](Self::data), and [`FormatError::TensorChecksum`] when the bytes are not
    /// those that were written.
    pub fn checked(&self, info: &TensorInfo) -> Result<&'a [u8], FormatError> {
        let data = self.data(info)?;
        if let Some(expected) = info.checksum() {
            let actual = checksum(data);
            if actual != expected {
                return Err(FormatError::TensorChecksum {
                    tensor: info.name().to_string(),
                    expected,
                    actual,
                });
            }
        }
        Ok(data)
    }
}
