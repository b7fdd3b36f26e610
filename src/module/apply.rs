//! Load side: map a module's parameters to zero-copy views of a reader's tensors.

use std::borrow::Cow;

use burn::module::{ModuleMapper, Param, ParamId, Parameter};
use burn::tensor::quantization::quantizable;
use burn::tensor::{Bool, BoolStore, DType, Float, Int, Tensor, kind::Basic};

use super::error::{KindMismatch, Mismatch, ShapeMismatch};
use super::lookup::Pending;
use super::options::{DTypePolicy, LoadOptions};
use super::report::LoadReport;
use crate::format::TensorInfo;
use crate::panic::catch_quiet;
use crate::source::{CopyReason, ReadError, TensorSource};
use crate::source::{DimOrder, ParamPlace, TensorKind};

/// Replaces each parameter found in the reader with a tensor built from its bytes on the
/// parameter's own device, and records everything that did not match.
pub(crate) struct Applier<'a> {
    source: &'a dyn TensorSource,
    options: &'a LoadOptions,
    walk: Walk,
    /// File tensors by (renamed) path, only those the filter accepts; removed when used.
    pending: Pending<'a>,
    pub(crate) mismatch: Mismatch,
    report: LoadReport,
    /// Table paths the convention matched with another path: `(table path, parameter path)`.
    lookups: Vec<(String, String)>,
}

impl<'a> Applier<'a> {
    pub(crate) fn new(source: &'a dyn TensorSource, options: &'a LoadOptions) -> Self {
        let mut mismatch = Mismatch::default();
        let pending = Pending::build(source, options, &mut mismatch);
        Self {
            source,
            options,
            walk: Walk::new(options.skip_enum_variants),
            pending,
            mismatch,
            report: LoadReport::default(),
            lookups: Vec::new(),
        }
    }

    /// Finishes the walk: what did not match (with what the file held that nothing used),
    /// and what was loaded.
    pub(crate) fn finish(mut self) -> (Mismatch, LoadReport) {
        let renamed = self.pending.renamed();
        self.report.set_renamed(renamed, self.lookups);
        let unused = self.pending.untaken();
        if !self.options.allow_unused {
            self.mismatch.unused.clone_from(&unused);
            // Known extras of the format (PyTorch's `num_batches_tracked`).
            if let Some(convention) = &self.options.convention {
                self.mismatch
                    .unused
                    .retain(|name| !convention.ignores(name));
            }
        }
        self.report.set_unused(unused);
        if self.options.allow_partial {
            self.mismatch.missing.clear();
            self.mismatch.unloadable.clear();
        }
        (self.mismatch, self.report)
    }

    fn load<const D: usize, K: Basic>(
        &mut self,
        param: Param<Tensor<D, K>>,
        kind: TensorKind,
    ) -> Param<Tensor<D, K>>
    where
        Tensor<D, K>: Parameter,
    {
        let Some((info, transpose)) = self.find(D, kind) else {
            return param;
        };
        let path = self.walk.path();
        // Lazy shape and device: an uninitialized parameter is filled without running its
        // initializer. A transposed tensor is compared as Burn will hold it.
        let expected = param.lazy_shape();
        if let Some(found) = shape_as_held(expected.as_slice(), info.shape(), transpose) {
            self.mismatch.shapes.push(ShapeMismatch {
                path: path.to_string(),
                expected: expected.to_vec(),
                found,
            });
            return param;
        }
        // A tensor of another kind (integers into a float parameter, floats into a bool one)
        // is not a dtype question that a cast answers: refused before any backend sees it.
        let stored = info.dtype();
        if TensorKind::of(stored) != kind {
            self.mismatch.kinds.push(KindMismatch {
                path: path.to_string(),
                expected: kind,
                found: stored,
            });
            return param;
        }
        let dtype = match self.options.dtype {
            DTypePolicy::CastToModule => param.val().dtype(),
            DTypePolicy::CastFloatsTo(dtype) if kind == TensorKind::Float => dtype,
            DTypePolicy::AsStored | DTypePolicy::CastFloatsTo(_) => stored,
        };
        if TensorKind::of(dtype) != kind || (dtype != stored && matches!(dtype, DType::QFloat(_))) {
            self.mismatch.failed.push((
                path.to_string(),
                format!(
                    "the dtype policy asks for {dtype:?}, which a {kind} parameter holding \
                     {stored:?} cannot be cast to"
                ),
            ));
            return param;
        }
        let bytes = match self.read_checked(info) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.mismatch.failed.push((path.to_string(), e.to_string()));
                return param;
            }
        };
        let device = param.lazy_device();
        let dtype = bool_store_of(&device, dtype);
        let hint = if kind == TensorKind::Float {
            "DTypePolicy::CastFloatsTo"
        } else {
            "DTypePolicy::CastToModule"
        };
        // `supports_dtype` asks for storage *and* arithmetic; quantized tensors only need
        // storage, which backends such as flex have for every scheme Burn can quantize with
        // (they answer `false` here all the same).
        let holds = device.supports_dtype(dtype)
            || matches!(dtype, DType::QFloat(scheme) if quantizable(&scheme));
        if !holds {
            self.mismatch.failed.push((
                path.to_string(),
                format!("{dtype:?} is not supported on {device:?}; load with {hint}"),
            ));
            return param;
        }
        // Host copies, by backend, of the window handed over here (read from Burn 0.22.1 /
        // cubecl 0.11.3 sources; the CPU cases are measured by tests/zero_copy.rs):
        // - flex keeps the `Bytes` as it is: none; ndarray borrows a non-`Native`, aligned
        //   window: none (the page cache is the tensor's memory).
        // - wgpu/CUDA: the mapping has `AllocationProperty::File`, which cubecl's
        //   `ComputeClient::staging` treats as a staging candidate: the pages are copied once
        //   into a (pinned, where the backend has it) staging buffer that the device reads by
        //   DMA. That one copy is the minimum Burn allows; no intermediate `Vec` is made here.
        let (bytes, shape, transpose, copied) =
            match self.lay_out(info, bytes, dtype, transpose, &device) {
                Ok(laid) => laid,
                Err(why) => {
                    self.mismatch.failed.push((path.to_string(), why));
                    return param;
                }
            };
        let (data, dtype, to_transpose) =
            super::quantized::stored_data(bytes, &shape, stored, dtype, transpose);
        let copied = (transpose != to_transpose)
            .then_some(CopyReason::Transposed)
            .or(copied);
        // Kinds, shapes and lengths were checked above. A backend can still refuse a dtype it
        // says it supports (Burn 0.22's cubecl backends, wgpu and CUDA, for Flex32): that
        // panic is caught without reaching the user's stderr and reported with the others.
        match catch_quiet(|| Tensor::<D, K>::from_data(data, (&device, dtype))) {
            Ok(tensor) => {
                // PyTorch's `[out, in]` as Burn's `[in, out]`: a view by strides, no copy
                // (but on ndarray, whose strided views need an array of their own).
                let tensor = if to_transpose {
                    reversed(tensor)
                } else {
                    tensor
                };
                self.report.record(path, copied, stored, dtype);
                let id = info.param_id().map_or(param.id, ParamId::from);
                param.transform_for_load(tensor, id)
            }
            Err(why) => {
                self.mismatch.failed.push((
                    path.to_string(),
                    format!(
                        "{dtype:?} is not supported on {device:?} (the backend refused it: \
                         {why}); load with {hint}"
                    ),
                ));
                param
            }
        }
    }
}

/// A parameter's bytes on their way in: the bytes, their shape, whether a transpose is left
/// to make, and why they are a copy if they are.
type Laid<'i> = (
    burn::tensor::Bytes,
    Cow<'i, [usize]>,
    bool,
    Option<CopyReason>,
);

/// The stored shape as Burn will hold it (reversed when transposed), when it is not `expected`.
fn shape_as_held(expected: &[usize], stored: &[usize], transpose: bool) -> Option<Vec<usize>> {
    let mut found = stored.to_vec();
    if transpose {
        found.reverse();
    }
    (found != expected).then_some(found)
}

/// `tensor` with its dimensions in reverse order: a transpose for a matrix, a permutation
/// otherwise (both by strides).
fn reversed<const D: usize, K: Basic>(tensor: Tensor<D, K>) -> Tensor<D, K> {
    match D {
        0 | 1 => tensor,
        2 => tensor.transpose(),
        _ => tensor.permute(std::array::from_fn::<usize, D, _>(|i| D - 1 - i)),
    }
}

/// Whether `device`'s backend copies a tensor made from borrowed bytes to transpose it:
/// ndarray's strided views need an array of their own (measured by `tests/zero_copy.rs`);
/// flex and the GPU backends transpose by strides.
#[cfg_attr(not(feature = "ndarray"), allow(unused_variables))]
fn transposes_by_copy(device: &burn::tensor::Device) -> bool {
    #[cfg(feature = "ndarray")]
    if matches!(
        device.as_dispatch(),
        burn::backend::DispatchDevice::NdArray(_)
    ) {
        return true;
    }
    false
}

/// Booleans are stored natively (one byte), as u8 or as u32 depending on the backend: the
/// values are the same, so a backend without the file's store gets its own.
fn bool_store_of(device: &burn::tensor::Device, dtype: DType) -> DType {
    match dtype {
        DType::Bool(_) if !device.supports_dtype(dtype) => {
            [BoolStore::Native, BoolStore::U8, BoolStore::U32]
                .into_iter()
                .map(DType::Bool)
                .find(|d| device.supports_dtype(*d))
                .unwrap_or(dtype)
        }
        other => other,
    }
}

impl<'a> Applier<'a> {
    /// Why the parameter loaded from `info` as `dtype` (transposed or not) on `device` is a
    /// copy rather than a view of the source, if it is: the first of the source's reason, a
    /// cast, a transpose the backend makes by copying.
    fn copy_reason(
        &self,
        info: &TensorInfo,
        dtype: DType,
        transpose: bool,
        device: &burn::tensor::Device,
    ) -> Option<CopyReason> {
        let stored = info.dtype();
        self.source
            .copy_reason(info)
            .or((dtype != stored).then_some(CopyReason::Cast {
                from: stored,
                to: dtype,
            }))
            .or((transpose && transposes_by_copy(device)).then_some(CopyReason::Transposed))
    }

    /// A matrix to transpose laid out contiguous here, where the options ask for it or the
    /// backend would copy it to transpose it anyway: its bytes, shape (Burn's) and `false`
    /// (nothing left to transpose). Anything else as it came. With either, why the parameter
    /// is a copy, if it is ([`copy_reason`](Self::copy_reason), or the transpose here). An
    /// error saying so when the memory for it is refused.
    fn lay_out<'i>(
        &self,
        info: &'i TensorInfo,
        bytes: burn::tensor::Bytes,
        dtype: DType,
        transpose: bool,
        device: &burn::tensor::Device,
    ) -> Result<Laid<'i>, String> {
        if let Some(why) = super::quantized::fp8_refused_on(device, dtype) {
            return Err(why);
        }
        let copied = self.copy_reason(info, dtype, transpose, device);
        let wanted = transpose && (self.options.contiguous || transposes_by_copy(device));
        match wanted
            .then(|| super::transpose::contiguous(&bytes, info.shape(), info.dtype()))
            .flatten()
        {
            Some(Ok((laid, shape))) => Ok((
                laid,
                Cow::Owned(shape.to_vec()),
                false,
                copied.or(Some(CopyReason::Transposed)),
            )),
            Some(Err(e)) => Err(format!(
                "cannot lay the transposed matrix out contiguous: {e}"
            )),
            None => Ok((bytes, Cow::Borrowed(info.shape()), transpose, copied)),
        }
    }

    /// The source's tensor for the current parameter (of rank `rank` and kind `kind`), with
    /// whether its dimensions are reversed, taken from the table; `None` when the filter
    /// skips the parameter or the source has no tensor for it (both recorded).
    fn find(&mut self, rank: usize, kind: TensorKind) -> Option<(&'a TensorInfo, bool)> {
        let path = self.walk.path();
        if !self.options.accepts(path) {
            self.report.record_skipped(path);
            return None;
        }
        let place = self.walk.place(rank, kind);
        let Some((key, info, transpose)) = take(self.options, &mut self.pending, &place) else {
            self.missed(rank, kind);
            return None;
        };
        if key != path {
            self.lookups.push((key.into_owned(), path.to_string()));
        }
        Some((info, transpose))
    }

    /// Records the current parameter (of rank `rank` and kind `kind`), which found no
    /// tensor: missing, or refused by name when the source lists its tensor but cannot hand
    /// it out (FP8).
    fn missed(&mut self, rank: usize, kind: TensorKind) {
        let place = self.walk.place(rank, kind);
        let path = place.path().to_string();
        if let Some(withheld) = lookup(self.options, &mut self.pending, &place)
            .and_then(|key| self.pending.take_withheld(&key))
        {
            let why = withheld.error(self.source.file()).to_string();
            self.report.record_missing(&path, Some(why.clone()));
            self.mismatch.unloadable.push((path, why));
        } else {
            self.report.record_missing(&path, None);
            self.mismatch.missing.push(path);
        }
    }

    /// The bytes of `info`, checked against its checksum when the options ask for it.
    fn read_checked(&self, info: &TensorInfo) -> Result<burn::tensor::Bytes, ReadError> {
        let bytes = self.source.read(info)?;
        if self.options.verify {
            self.source.check(info, &bytes)?;
        }
        Ok(bytes)
    }

    /// The tensors a walk of `module` will read, found without reading any parameter (lazy
    /// ones stay uninitialized): what a remote source fetches ahead of the walk.
    pub(crate) fn wanted<M: burn::module::Module>(&mut self, module: &M) -> Vec<&'a TensorInfo> {
        let mut wanted = Wanted {
            options: self.options,
            pending: &mut self.pending,
            walk: Walk::new(self.options.skip_enum_variants),
            found: Vec::new(),
        };
        module.visit(&mut wanted);
        wanted.found
    }
}

/// Where a walk over a module is: the current path, segments joined with `.`, and the
/// container types along it (`Struct:Linear`, `Vec`...), as Burn names them in
/// `enter_module`. Both are one buffer each, grown and cut back as the walk enters and leaves
/// modules: no allocation per parameter.
///
/// Under [`skip_enum_variants`](LoadOptions::skip_enum_variants) the segments that enum
/// modules enter (their variant's name, with the `Enum:...` container type) are left out of
/// both.
struct Walk {
    path: String,
    /// The container types, each ended by `\n`.
    containers: String,
    /// Where each entered module's segment starts in `path` (after its `.`) and its
    /// container type in `containers`.
    marks: Vec<(usize, usize)>,
    /// Whether enum variants' segments are skipped.
    skip_enums: bool,
    /// How many skipped segments are entered and not exited, innermost last: the exits
    /// that match them cut nothing.
    skipped: Vec<usize>,
}

impl Walk {
    fn new(skip_enums: bool) -> Self {
        Self {
            path: String::new(),
            containers: String::new(),
            marks: Vec::new(),
            skip_enums,
            skipped: Vec::new(),
        }
    }

    fn enter(&mut self, name: &str, container_type: &str) {
        if self.skip_enums && container_type.starts_with("Enum:") {
            // Remembered by depth: the exit at this depth is this segment's.
            self.skipped.push(self.marks.len());
            return;
        }
        if !self.marks.is_empty() {
            self.path.push('.');
        }
        self.marks.push((self.path.len(), self.containers.len()));
        self.path.push_str(name);
        self.containers.push_str(container_type);
        self.containers.push('\n');
    }

    fn exit(&mut self) {
        if self.skipped.last() == Some(&self.marks.len()) {
            self.skipped.pop();
            return;
        }
        if let Some((path, containers)) = self.marks.pop() {
            // The separator before the segment goes with it.
            self.path
                .truncate(path.saturating_sub(usize::from(!self.marks.is_empty())));
            self.containers.truncate(containers);
        }
    }

    /// The current parameter's path, segments joined with `.`.
    fn path(&self) -> &str {
        &self.path
    }

    /// The current parameter, of rank `rank` and kind `kind`, as a convention sees it.
    fn place(&self, rank: usize, kind: TensorKind) -> ParamPlace<'_> {
        let leaf_start = self.marks.last().map_or(0, |&(start, _)| start);
        ParamPlace::new(&self.path, leaf_start, &self.containers, rank, kind)
    }
}

/// The name to look up for the parameter at `place`: its path, or under a
/// [convention](LoadOptions::convention) the first of the convention's candidates that the
/// source has (the first one when it has none; `None` when the convention proposes none).
fn lookup<'p>(
    options: &LoadOptions,
    pending: &mut Pending<'_>,
    place: &ParamPlace<'p>,
) -> Option<Cow<'p, str>> {
    let Some(convention) = &options.convention else {
        return Some(Cow::Borrowed(place.path()));
    };
    let mut candidates = convention.candidates(place);
    if candidates.len() > 1
        && let Some(found) = candidates
            .iter()
            .position(|c| pending.get(c).is_some())
            .or_else(|| candidates.iter().position(|c| pending.is_withheld(c)))
    {
        return Some(candidates.swap_remove(found));
    }
    candidates.into_iter().next()
}

/// Takes the source tensor for the parameter at `place` (see [`lookup`]), with the name it
/// was found under and whether the convention says its dimensions are reversed (`PyTorch`'s
/// `[out, in]` linear weights).
fn take<'a, 'p>(
    options: &LoadOptions,
    pending: &mut Pending<'a>,
    place: &ParamPlace<'p>,
) -> Option<(Cow<'p, str>, &'a TensorInfo, bool)> {
    let key = lookup(options, pending, place)?;
    let info = pending.take(&key)?;
    let reversed = options
        .convention
        .as_ref()
        .is_some_and(|c| c.dim_order(place, info) == DimOrder::Reversed);
    Some((key, info, reversed))
}

/// Collects the tensors a load will read (see [`Applier::wanted`]).
struct Wanted<'s, 'a> {
    options: &'s LoadOptions,
    pending: &'s mut Pending<'a>,
    walk: Walk,
    found: Vec<&'a TensorInfo>,
}

impl Wanted<'_, '_> {
    fn want(&mut self, rank: usize, kind: TensorKind) {
        if !self.options.accepts(self.walk.path()) {
            return;
        }
        let place = self.walk.place(rank, kind);
        if let Some(key) = lookup(self.options, self.pending, &place)
            && let Some(info) = self.pending.peek(&key)
        {
            self.found.push(info);
        }
    }
}

impl burn::module::ModuleVisitor for Wanted<'_, '_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.walk.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.walk.exit();
    }

    fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D, Float>>) {
        self.want(D, TensorKind::Float);
    }

    fn visit_int<const D: usize>(&mut self, _param: &Param<Tensor<D, Int>>) {
        self.want(D, TensorKind::Int);
    }

    fn visit_bool<const D: usize>(&mut self, _param: &Param<Tensor<D, Bool>>) {
        self.want(D, TensorKind::Bool);
    }
}

impl ModuleMapper for Applier<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.walk.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.walk.exit();
    }

    fn map_float<const D: usize>(
        &mut self,
        param: Param<Tensor<D, Float>>,
    ) -> Param<Tensor<D, Float>> {
        self.load(param, TensorKind::Float)
    }

    fn map_int<const D: usize>(&mut self, param: Param<Tensor<D, Int>>) -> Param<Tensor<D, Int>> {
        self.load(param, TensorKind::Int)
    }

    fn map_bool<const D: usize>(
        &mut self,
        param: Param<Tensor<D, Bool>>,
    ) -> Param<Tensor<D, Bool>> {
        self.load(param, TensorKind::Bool)
    }
}
