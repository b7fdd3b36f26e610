//! [`NumpySource`]: a `.npy` array or a `.npz` archive of them as a [`TensorSource`].

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::{AllocationProperty, Bytes};

use super::inflate::inflate_all;
use super::layout::{byte_swap, from_fortran};
use super::open::{Input, Stored, is_zip, npy_rows, npz_rows};
use super::zip::members;
use crate::format::{TensorInfo, element_align};
use crate::interop::read_hints::{Hinted, ReadHints, file_mapping};
use crate::source::data::{Source, aligned_words, zeroed_words};
use crate::source::{
    Checksums, CopyReason, Description, OpenOptions, ReadError, SourceError, SourceTable,
    TableBuilder, TensorSource, from_table, human_bytes,
};

/// A NumPy `.npy` array (one tensor, named `array`, from a path or from bytes alike) or a `.npz`
/// archive of them (`np.savez`, `np.savez_compressed`: one tensor per member, named by the
/// member without its `.npy`) as a [`TensorSource`].
///
/// Little-endian arrays in C order of stored members are zero-copy windows of the mapping
/// where aligned; big-endian arrays are swapped and Fortran-order arrays laid out in C order
/// when read, and deflated members inflated (and checked) when the file is opened, each into
/// memory of its own and reported by [`copy_reason`](TensorSource::copy_reason).
///
/// ```
/// use burnpack::interop::numpy::NumpySource;
/// use burnpack::source::TensorSource;
/// let mut npy = b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }".to_vec();
/// npy.resize(127, b' ');
/// npy.push(b'\n');
/// npy.extend(1.5f32.to_le_bytes().into_iter().chain(2.5f32.to_le_bytes()));
/// let source = NumpySource::from_bytes(burnpack::source::bytes_from_vec(npy), &Default::default())?;
/// let info = source.tensor("array").unwrap();
/// assert_eq!(info.shape(), &[2]);
/// assert_eq!(&source.read(info).unwrap()[..4], &1.5f32.to_le_bytes());
/// # Ok::<(), burnpack::source::SourceError>(())
/// ```
pub struct NumpySource {
    file: String,
    path: std::path::PathBuf,
    npz: bool,
    source: Source,
    table: SourceTable<Stored>,
    /// The deflated members' arrays, inflated (and checked) when the file was opened.
    inflated: Vec<Bytes>,
    /// A load's stored arrays read ahead through the mapping ([`TensorSource::prefetch`]).
    hints: ReadHints,
}

impl std::fmt::Debug for NumpySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table.fmt_source(f, "NumpySource", 1)
    }
}

impl NumpySource {
    /// Opens a `.npy` or `.npz` file (told by its content) with the default
    /// [`Limits`](crate::format::Limits).
    ///
    /// # Errors
    /// [`SourceError`] naming the file, and the tensor (member) where there is one.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// [`open`](Self::open) with options (the [`Limits`](crate::format::Limits); `verify`
    /// reads the file rather than mapping it).
    ///
    /// ```no_run
    /// use burnpack::interop::numpy::NumpySource;
    /// use burnpack::source::OpenOptions;
    /// let source = NumpySource::open_with("weights.npz", &OpenOptions::new().verify(true))?;
    /// # Ok::<(), burnpack::source::SourceError>(())
    /// ```
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SourceError> {
        Self::open_opened(path.as_ref(), None, options)
    }

    /// [`open_with`](Self::open_with), the file already opened (by the registry) when given.
    pub(crate) fn open_opened(
        path: &Path,
        file: Option<std::fs::File>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let (file, len) = crate::source::data::opened_within_limits(path, file, &options.limits)?;
        let input = Input::File(&file, len);
        let (npz, rows) = if is_zip(path, &input)? {
            let members = members(
                std::io::BufReader::new(&file),
                len,
                options.limits.max_tensor_count,
            )
            .map_err(SourceError::invalid(path))?;
            (true, npz_rows(path, &input, members, options)?)
        } else {
            (false, npy_rows(path, &input, options)?)
        };
        let (rows, inflated) = inflate_all(path, &input, rows)?;
        let source = crate::source::data::file_data(&file, options.verify)
            .map_err(|(action, e)| SourceError::io(path, action)(e))?;
        Self::assemble(path, npz, source, rows, inflated, options)
    }

    /// `.npy` or `.npz` bytes in memory, named `"<memory>"` in errors (a `.npy` array's tensor
    /// is named `array`).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_bytes(bytes: Bytes, options: &OpenOptions) -> Result<Self, SourceError> {
        let path = Path::new("<memory>");
        let bytes = crate::source::data::view_capable(bytes);
        crate::source::data::within_file_size(path, bytes.len() as u64, &options.limits)?;
        let input = Input::Memory(&bytes);
        let (npz, rows) = if is_zip(path, &input)? {
            let members = members(
                std::io::Cursor::new(&bytes[..]),
                bytes.len() as u64,
                options.limits.max_tensor_count,
            )
            .map_err(SourceError::invalid(path))?;
            (true, npz_rows(path, &input, members, options)?)
        } else {
            (false, npy_rows(path, &input, options)?)
        };
        let (rows, inflated) = inflate_all(path, &input, rows)?;
        Self::assemble(path, npz, Source::Memory(bytes), rows, inflated, options)
    }

    fn assemble(
        path: &Path,
        npz: bool,
        source: Source,
        rows: Vec<(String, Stored)>,
        inflated: Vec<Bytes>,
        options: &OpenOptions,
    ) -> Result<Self, SourceError> {
        let mut table = TableBuilder::new(path, &options.limits);
        for (name, stored) in rows {
            let h = &stored.header;
            let info = TensorInfo::external(
                name,
                h.dtype.dtype,
                h.shape.clone(),
                stored.start,
                h.data_len,
            );
            table.push(info, stored)?;
        }
        let table = table.finish(|s| {
            s.member
                .as_ref()
                .map_or_else(String::new, |m| format!("member '{}'", m.name))
        })?;
        Ok(Self {
            file: path.display().to_string(),
            path: path.to_path_buf(),
            npz,
            source,
            table,
            inflated,
            hints: ReadHints::default(),
        })
    }

    /// Whether this is a `.npz` archive (else one `.npy` array).
    #[must_use]
    pub fn is_npz(&self) -> bool {
        self.npz
    }

    /// The NumPy dtype string of `info` (a tensor of this source) as stored: `<f4`, `>i8`.
    #[must_use]
    pub fn descr(&self, info: &TensorInfo) -> Option<&str> {
        self.table.place(info).ok().map(|s| s.header.descr.as_str())
    }

    /// Whether `info` (a tensor of this source) is stored in Fortran (column-major) order.
    #[must_use]
    pub fn is_fortran(&self, info: &TensorInfo) -> bool {
        self.table.place(info).is_ok_and(|s| s.header.fortran)
    }

    fn io(&self, info: &TensorInfo) -> impl Fn(std::io::Error) -> ReadError {
        let file = self.file.clone();
        let name = info.name().to_string();
        move |e| ReadError::reading(file.clone(), &name, &e)
    }
}

impl TensorSource for NumpySource {
    from_table!(file, table);

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let bytes = self.read_stored(info)?;
        crate::source::data::checked_bools(&self.file, info, bytes, |b| self.check(info, b))
    }

    /// Only these bytes where the array is stored as Burn holds it (C order, little-endian,
    /// not deflated); otherwise the window of the whole array, laid out.
    fn read_range(
        &self,
        info: &TensorInfo,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, ReadError> {
        crate::source::check_range(&self.file, info, &range)?;
        let stored = self.table.place(info)?;
        let h = &stored.header;
        if stored.inflated.is_some() || h.dtype.big_endian || h.fortran {
            let whole = self.read(info)?;
            return crate::source::window(&self.file, info, whole, range);
        }
        self.source
            .read_window(&self.file, info, stored.start, range)
    }

    /// Reads the wanted arrays stored in the file ahead, in file order, through its mapping
    /// (a load's walk goes in the module's order, and an unaligned array's copy would fault
    /// its pages in one at a time): as the safetensors and `torch.save` sources do.
    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        let ranges = wanted
            .iter()
            .filter_map(|info| {
                let stored = self.table.place(info).ok()?;
                (stored.inflated.is_none())
                    .then(|| (0, stored.start, stored.start + stored.header.data_len))
            })
            .collect();
        self.hints
            .ask_shards(ranges, |_| file_mapping(&self.source).map(Hinted::Mapped));
        Ok(())
    }

    fn copy_reason(&self, info: &TensorInfo) -> Option<CopyReason> {
        let stored = self.table.place(info).ok()?;
        let h = &stored.header;
        if stored.member.as_ref().is_some_and(|m| m.deflated) {
            return Some(CopyReason::Decoded { format: "deflate" });
        }
        if h.fortran {
            return Some(CopyReason::Strided);
        }
        if h.dtype.big_endian {
            return Some(CopyReason::Decoded {
                format: "big-endian NumPy",
            });
        }
        self.source
            .copy_reason(stored.start, element_align(info.dtype()))
    }

    /// A stored `.npz` member's CRC-32 against its bytes (its header and `bytes`); a deflated
    /// member's is checked whenever it is inflated; `false` for a `.npy` file, which keeps
    /// none.
    fn check(&self, info: &TensorInfo, bytes: &[u8]) -> Result<bool, ReadError> {
        let stored = self.table.place(info)?;
        let Some(member) = &stored.member else {
            return Ok(false);
        };
        if member.deflated {
            // Checked against its CRC-32 when it was inflated, as the file was opened.
            return Ok(true);
        }
        let h = &stored.header;
        let whole = self
            .source
            .read(member.start, member.size, 1)
            .map_err(self.io(info))?;
        let plain = !h.dtype.big_endian && !h.fortran && bytes.len() as u64 == h.data_len;
        let mut crc = crc32fast::Hasher::new();
        if plain {
            crc.update(&whole[..h.data_start as usize]);
            crc.update(bytes);
        } else {
            crc.update(&whole);
        }
        let actual = crc.finalize();
        if actual == member.crc {
            Ok(true)
        } else {
            Err(ReadError::Checksum {
                file: self.file.clone(),
                tensor: info.name().to_string(),
                expected: u64::from(member.crc),
                actual: u64::from(actual),
            })
        }
    }

    fn shared(&self) -> Option<&(dyn TensorSource + Sync)> {
        Some(self)
    }
}

impl crate::source::DescribedSource for NumpySource {
    fn describe(&self) -> Description {
        let mut census: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        let mut versions = std::collections::BTreeSet::new();
        let (mut fortran, mut big, mut deflated) = (0usize, 0usize, 0usize);
        for stored in self.table.places() {
            let h = &stored.header;
            let entry = census.entry(h.descr.clone()).or_default();
            entry.0 += 1;
            entry.1 += h.data_len;
            versions.insert(format!("{}.{}", h.version.0, h.version.1));
            fortran += usize::from(h.fortran);
            big += usize::from(h.dtype.big_endian);
            deflated += usize::from(stored.member.as_ref().is_some_and(|m| m.deflated));
        }
        let types: Vec<String> = census
            .iter()
            .map(|(t, (n, bytes))| format!("{t} {n} ({})", human_bytes(*bytes)))
            .collect();
        let versions: Vec<String> = versions.into_iter().collect();
        let what = if self.npz {
            "NumPy .npz archive"
        } else {
            "NumPy .npy array"
        };
        let mut lines = vec![
            format!(".npy versions: {}", versions.join(", ")),
            format!("stored types: {}", types.join(", ")),
        ];
        if self.npz {
            lines.push(format!("deflated members: {deflated}"));
        }
        let mut notes = Vec::new();
        if fortran > 0 {
            notes.push(format!(
                "{fortran} arrays in Fortran order (laid out in C order when read)"
            ));
        }
        if big > 0 {
            notes.push(format!("{big} big-endian arrays (swapped when read)"));
        }
        Description {
            format: "numpy",
            summary: what.to_string(),
            valid: format!("{what} valid"),
            shards: vec![self.path.clone()],
            lines,
            fields: vec![
                ("npz", u64::from(self.npz).into()),
                ("versions", versions.into()),
                ("types", types.into()),
                ("fortran_order", (fortran as u64).into()),
                ("big_endian", (big as u64).into()),
                ("deflated", (deflated as u64).into()),
            ],
            notes,
            checksums: if self.npz {
                Checksums::ZipCrc32
            } else {
                Checksums::None
            },
            unverified: "no checksums in .npy files (contents unverified)".into(),
            column: Some("type"),
            ..Description::default()
        }
    }

    fn column(&self, info: &TensorInfo) -> Option<String> {
        let stored = self.table.place(info).ok()?;
        let mut text = stored.header.descr.clone();
        if stored.header.fortran {
            text.push_str(" F");
        }
        if stored.member.as_ref().is_some_and(|m| m.deflated) {
            text.push_str(" deflated");
        }
        Some(text)
    }
}

impl NumpySource {
    /// `info`'s bytes as stored, swapped or laid out in C order.
    fn read_stored(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        let stored = self.table.place(info)?;
        let h = &stored.header;
        let bytes = match stored.inflated {
            Some(i) => {
                let all = &self.inflated[i];
                all.view(0, all.len())
                    .unwrap_or_else(|_| crate::source::data::bytes_from_vec(all.to_vec()))
            }
            None if !h.dtype.big_endian && !h.fortran => {
                return self
                    .source
                    .read(stored.start, h.data_len, element_align(info.dtype()))
                    .map_err(self.io(info));
            }
            None => self
                .source
                .read(stored.start, h.data_len, 1)
                .map_err(self.io(info))?,
        };
        if !h.dtype.big_endian && !h.fortran {
            return Ok(bytes);
        }
        let len = bytes.len();
        let mut words = zeroed_words(len.div_ceil(8)).ok_or_else(|| {
            self.io(info)(std::io::Error::other(format!(
                "cannot allocate {len} bytes for tensor '{}'",
                info.name()
            )))
        })?;
        let out = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len];
        if h.fortran {
            from_fortran(&bytes, out, &h.shape, h.dtype.size);
        } else {
            out.copy_from_slice(&bytes);
        }
        if h.dtype.big_endian {
            byte_swap(out, h.dtype.size);
        }
        Ok(aligned_words(words, len, AllocationProperty::Native))
    }
}
