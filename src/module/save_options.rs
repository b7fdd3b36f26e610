//! Options for saving modules.

use std::collections::BTreeMap;

use burn::tensor::DType;

use crate::format::Scalar;
use crate::write::WriteOptions;

/// How a module is saved: extra metadata and scalars around the [`WriteOptions`] of the
/// writer (durability, overwrite, parallelism, checksums), as [`LoadOptions`] holds
/// [`ReadOptions`].
///
/// ```
/// use burnpack::module::SaveOptions;
/// use burnpack::write::WriteOptions;
/// use burnpack::write::WriteMode;
/// let options = SaveOptions::new()
///     .metadata("model", "mlp")
///     .scalar("epoch", 3u32)
///     .mode(WriteMode::InPlace)
///     .threads(4);
/// // Burn's exact bytes (no checksums, no `producer` entry of this crate):
/// let burn_bytes = SaveOptions::new().write(WriteOptions::new().checksums(false));
/// # let _ = (options, burn_bytes);
/// ```
#[derive(Debug, Clone, Default)]
pub struct SaveOptions {
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) scalars: BTreeMap<String, Scalar>,
    pub(crate) write: WriteOptions,
    pub(crate) float_dtype: Option<DType>,
}

impl SaveOptions {
    /// Atomic writes with checksums, a `producer` metadata entry, rayon's default thread count.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    crate::write::metadata_knobs!();

    /// Sets the writer's options at once.
    #[must_use]
    pub fn write(mut self, options: WriteOptions) -> Self {
        self.write = options;
        self
    }

    /// The writer's options.
    #[must_use]
    pub fn write_options(&self) -> &WriteOptions {
        &self.write
    }

    crate::write::write_knobs!(write);

    /// Saves float parameters (F64, F32, F16, BF16) as `dtype`: F16, BF16 or F32, as Burn
    /// 0.21's `HalfPrecisionSettings` saved in f16. Ints, bools and quantized parameters are
    /// saved as they are. The file records it in its metadata
    /// ([`FLOAT_DTYPE_KEY`](crate::format::FLOAT_DTYPE_KEY), `burnpack.float_dtype` = `F16`...).
    ///
    /// Every save door takes it: [`PackModule`](crate::module::PackModule)'s saves, a
    /// checkpoint's model (its optimizer state and records are kept as they are, to resume
    /// from), `PackStore`'s and `PackCheckpointer`'s save options. Each parameter is cast on a
    /// writer thread when the writer reaches its slot (see
    /// [`Writer::float_dtype`](crate::write::Writer::float_dtype)), rounded as Burn's
    /// `Tensor::cast` rounds (to nearest, ties to even); the module itself is untouched. Load
    /// such a file into an f32 module with [`DTypePolicy::CastToModule`] (or
    /// `CastFloatsTo(F32)`).
    ///
    /// ```
    /// use burn::module::Module;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{DType, Device};
    /// use burnpack::module::{DTypePolicy, LoadOptions, PackModule, SaveOptions};
    /// use burnpack::read::Reader;
    ///
    /// let device = Device::flex();
    /// let linear: Linear = LinearConfig::new(4, 2).init(&device);
    /// let options = SaveOptions::new().float_dtype(DType::F16).unwrap();
    /// let pack = linear.pack_writer(&options).unwrap().into_bytes().unwrap();
    /// let reader = Reader::from_bytes(pack).unwrap();
    /// assert_eq!(reader.tensor("weight").unwrap().dtype(), DType::F16);
    /// assert_eq!(reader.metadata()["burnpack.float_dtype"], "F16");
    /// let back: Linear = LinearConfig::new(4, 2).init(&device);
    /// let load = LoadOptions::new().dtype(DTypePolicy::CastToModule);
    /// let back = back.load_from_source(&reader, &load).unwrap();
    /// assert_eq!(back.weight.val().dtype(), DType::F32);
    /// assert!(SaveOptions::new().float_dtype(DType::I32).is_err());
    /// ```
    ///
    /// # Errors
    /// [`WriteError::FloatDtype`](crate::write::WriteError::FloatDtype) for any other dtype.
    pub fn float_dtype(mut self, dtype: DType) -> Result<Self, crate::write::WriteError> {
        let dtype = crate::write::cast::float_target(dtype)?;
        self.float_dtype = Some(dtype);
        self.metadata.insert(
            crate::format::FLOAT_DTYPE_KEY.to_string(),
            crate::write::cast::float_dtype_name(dtype),
        );
        Ok(self)
    }

    /// The float dtype parameters are saved in, if one was set
    /// ([`float_dtype`](Self::float_dtype)).
    ///
    /// ```
    /// use burn::tensor::DType;
    /// use burnpack::module::SaveOptions;
    /// let options = SaveOptions::new().float_dtype(DType::BF16).unwrap();
    /// assert_eq!(options.float_dtype_ref(), Some(DType::BF16));
    /// ```
    #[must_use]
    pub fn float_dtype_ref(&self) -> Option<DType> {
        self.float_dtype
    }

    /// Applies these options to `writer` (which adds the `producer` entry when checksums are
    /// on: see [`PRODUCER`](crate::format::PRODUCER)); float entries cast where
    /// [`float_dtype`](Self::float_dtype) says.
    pub(crate) fn configure(&self, mut writer: crate::write::Writer) -> crate::write::Writer {
        writer = writer.options(self.write);
        for (k, v) in &self.metadata {
            writer = writer.metadata(k.clone(), v.clone());
        }
        for (k, v) in &self.scalars {
            writer = writer.scalar(k.clone(), *v);
        }
        match self.float_dtype {
            Some(dtype) => writer.cast_floats_to(dtype),
            None => writer,
        }
    }

    /// `entries` (a module's parameters) with their floats cast where
    /// [`float_dtype`](Self::float_dtype) says: what a checkpoint does to its model's.
    #[cfg_attr(not(feature = "optim"), allow(dead_code))]
    pub(crate) fn cast(&self, entries: Vec<crate::write::Entry>) -> Vec<crate::write::Entry> {
        match self.float_dtype {
            Some(dtype) => entries.into_iter().map(|e| e.cast_float(dtype)).collect(),
            None => entries,
        }
    }
}
