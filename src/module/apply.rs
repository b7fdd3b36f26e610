//! Load side: map a module's parameters to zero-copy views of a reader's tensors.

use std::borrow::Cow;
use std::collections::hash_map::Entry;

use burn::module::{ModuleMapper, Param, ParamId, Parameter};
use burn::tensor::quantization::quantizable;
use burn::tensor::{Bool, BoolStore, DType, Float, Int, Tensor, TensorData, kind::Basic};

use super::error::{KindMismatch, Mismatch, ShapeMismatch, TensorKind};
use super::options::{DTypePolicy, LoadOptions};
use super::report::LoadReport;
use crate::format::TensorInfo;
use crate::panic::catch_quiet;
use crate::read::{CopyReason, ReadError, TensorSource};

/// The file's tensors that a walk may take, by (renamed) path, in file order.
///
/// Writers of packs (this crate's and Burn's) and of safetensors files lay parameters out in
/// the order a walk of the module meets them, so each lookup first tries the tensor after the
/// one taken last: one comparison, no hashing. Only a lookup that misses builds the index by
/// name (foldhash: fast on the short, shared-prefix names of a module, and seeded per process,
/// so names crafted in a file cannot be chosen to collide).
struct Pending<'a> {
    /// Every tensor the filter accepts, in file order; `None` once taken.
    order: Vec<(Cow<'a, str>, Option<&'a TensorInfo>)>,
    /// Where the next lookup looks first.
    next: usize,
    /// Path -> place in `order`, built at the first miss.
    index: Option<foldhash::HashMap<Cow<'a, str>, usize>>,
}

impl<'a> Pending<'a> {
    /// The tensors in `accepted` (unique paths), put in file order.
    fn new(mut accepted: Vec<(Cow<'a, str>, &'a TensorInfo)>) -> Self {
        // Stable: tensors at one offset (zero-length ones) keep their name order.
        accepted.sort_by_key(|(_, info)| info.offset());
        Self {
            order: accepted
                .into_iter()
                .map(|(path, info)| (path, Some(info)))
                .collect(),
            next: 0,
            index: None,
        }
    }

    /// Where `path` is in `order`, taken or not.
    fn position(&mut self, path: &str) -> Option<usize> {
        if let Some((key, _)) = self.order.get(self.next)
            && key == path
        {
            return Some(self.next);
        }
        let order = &self.order;
        self.index
            .get_or_insert_with(|| {
                let mut index = foldhash::HashMap::with_capacity_and_hasher(
                    order.len(),
                    foldhash::fast::RandomState::default(),
                );
                index.extend(
                    order
                        .iter()
                        .enumerate()
                        .map(|(i, (key, _))| (key.clone(), i)),
                );
                index
            })
            .get(path)
            .copied()
    }

    /// The tensor at `path`, if it is there and not taken yet.
    fn get(&mut self, path: &str) -> Option<&'a TensorInfo> {
        let i = self.position(path)?;
        self.order[i].1
    }

    /// The tensor at `path`, if it is there and not taken yet, the next lookup looking after
    /// it first (for a walk that reads without taking).
    fn peek(&mut self, path: &str) -> Option<&'a TensorInfo> {
        let i = self.position(path)?;
        self.next = i + 1;
        self.order[i].1
    }

    /// Takes the tensor at `path`: a second take of the same path finds nothing.
    fn take(&mut self, path: &str) -> Option<&'a TensorInfo> {
        let i = self.position(path)?;
        self.next = i + 1;
        self.order[i].1.take()
    }

    /// The paths of the tensors nobody took, sorted.
    fn untaken(self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .order
            .into_iter()
            .filter(|(_, info)| info.is_some())
            .map(|(path, _)| path.into_owned())
            .collect();
        paths.sort();
        paths
    }
}

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
}

impl<'a> Applier<'a> {
    pub(crate) fn new(source: &'a dyn TensorSource, options: &'a LoadOptions) -> Self {
        let mut mismatch = Mismatch::default();
        // A source that holds more than a module (a checkpoint) declares the namespace of its
        // parameters.
        let namespace = source.namespace();
        let mut accepted = Vec::with_capacity(source.tensors().len());
        for info in source.tensors() {
            let name = match namespace {
                Some(prefix) => match info.name().strip_prefix(prefix) {
                    Some(name) => name,
                    None => continue,
                },
                None => info.name(),
            };
            let path = options.renamed(name);
            if options.accepts(&path) {
                accepted.push((path, info));
            }
        }
        // Distinct file names are distinct paths unless renames map two onto one: the later
        // one (in name order) is kept, and the collision reported.
        if !options.renames.is_empty() {
            let mut seen: foldhash::HashMap<Cow<'a, str>, usize> = foldhash::HashMap::default();
            let mut kept: Vec<Option<(Cow<'a, str>, &'a TensorInfo)>> = Vec::new();
            for (path, info) in accepted {
                match seen.entry(path.clone()) {
                    Entry::Occupied(at) => {
                        mismatch.collisions.push(at.key().to_string());
                        kept[*at.get()] = Some((path, info));
                    }
                    Entry::Vacant(free) => {
                        free.insert(kept.len());
                        kept.push(Some((path, info)));
                    }
                }
            }
            accepted = kept.into_iter().flatten().collect();
        }
        let pending = Pending::new(accepted);
        Self {
            source,
            options,
            walk: Walk::default(),
            pending,
            mismatch,
            report: LoadReport::default(),
        }
    }

    /// Finishes the walk: what did not match (with what the file held that nothing used),
    /// and what was loaded.
    pub(crate) fn finish(mut self) -> (Mismatch, LoadReport) {
        if !self.options.allow_unused {
            self.mismatch.unused = self.pending.untaken();
            // PyTorch's BatchNorm counts its batches in a buffer Burn's has no counterpart of.
            if self.options.pytorch {
                self.mismatch
                    .unused
                    .retain(|name| !name.ends_with("num_batches_tracked"));
            }
        }
        if self.options.allow_partial {
            self.mismatch.missing.clear();
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
        let path = self.walk.path();
        if !self.options.accepts(path) {
            return param;
        }
        let (key, transpose) = self.walk.lookup(self.options, &mut self.pending, D);
        let Some(info) = self.pending.take(&key) else {
            self.mismatch.missing.push(path.to_string());
            return param;
        };
        // Lazy shape and device: an uninitialized parameter is filled without running its
        // initializer. A transposed tensor is compared as Burn will hold it.
        let expected = param.lazy_shape();
        let stored_shape = info.shape();
        let same = if transpose {
            expected.as_slice().iter().eq(stored_shape.iter().rev())
        } else {
            expected.as_slice() == stored_shape
        };
        if !same {
            let mut found = stored_shape.to_vec();
            if transpose {
                found.reverse();
            }
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
        let copied = self.copy_reason(info, dtype, transpose, &device);
        let data = TensorData::from_bytes(bytes, info.shape().iter().copied(), stored);
        // Kinds, shapes and lengths were checked above. A backend can still refuse a dtype it
        // says it supports (Burn 0.22's cubecl backends, wgpu and CUDA, for Flex32): that
        // panic is caught without reaching the user's stderr and reported with the others.
        match catch_quiet(|| Tensor::<D, K>::from_data(data, (&device, dtype))) {
            Ok(tensor) => {
                // PyTorch's `[out, in]` as Burn's `[in, out]`: a view by strides, no copy
                // (but on ndarray, whose strided views need an array of their own).
                let tensor = if transpose {
                    tensor.transpose()
                } else {
                    tensor
                };
                self.report.record(path, copied);
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
            walk: Walk::default(),
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
#[derive(Default)]
struct Walk {
    path: String,
    /// The container types, each ended by `\n`.
    containers: String,
    /// Where each entered module's segment starts in `path` (after its `.`) and its
    /// container type in `containers`.
    marks: Vec<(usize, usize)>,
}

impl Walk {
    fn enter(&mut self, name: &str, container_type: &str) {
        if !self.marks.is_empty() {
            self.path.push('.');
        }
        self.marks.push((self.path.len(), self.containers.len()));
        self.path.push_str(name);
        self.containers.push_str(container_type);
        self.containers.push('\n');
    }

    fn exit(&mut self) {
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

    /// The file name to look up for the parameter at the current path (of rank `rank`), and
    /// whether it is a `Linear` weight stored transposed. The path itself, but under
    /// [`LoadOptions::pytorch`] (mirroring burn-store's `PyTorchToBurnAdapter`, where the
    /// innermost user-defined container decides) a normalization's `gamma` / `beta` is read
    /// from `weight` / `bias` when the file lacks Burn's name.
    fn lookup(
        &self,
        options: &LoadOptions,
        pending: &mut Pending<'_>,
        rank: usize,
    ) -> (Cow<'_, str>, bool) {
        let path = self.path.as_str();
        if !options.pytorch {
            return (Cow::Borrowed(path), false);
        }
        let module = self
            .containers
            .split_terminator('\n')
            .rev()
            .find(|c| c.starts_with("Struct:") || c.starts_with("Enum:"))
            .unwrap_or("");
        let leaf = self.marks.last().map_or("", |&(start, _)| &path[start..]);
        if module == "Struct:Linear" && leaf == "weight" && rank == 2 {
            return (Cow::Borrowed(path), true);
        }
        let norm = matches!(
            module,
            "Struct:BatchNorm" | "Struct:LayerNorm" | "Struct:GroupNorm" | "Struct:RmsNorm"
        );
        let pytorch_name = match leaf {
            "gamma" => "weight",
            "beta" => "bias",
            _ => "",
        };
        if norm && !pytorch_name.is_empty() && pending.get(path).is_none() {
            let parent = &path[..path.len() - leaf.len()];
            return (Cow::Owned(format!("{parent}{pytorch_name}")), false);
        }
        (Cow::Borrowed(path), false)
    }
}

/// Collects the tensors a load will read (see [`Applier::wanted`]).
struct Wanted<'s, 'a> {
    options: &'s LoadOptions,
    pending: &'s mut Pending<'a>,
    walk: Walk,
    found: Vec<&'a TensorInfo>,
}

impl Wanted<'_, '_> {
    fn want(&mut self, rank: usize) {
        if !self.options.accepts(self.walk.path()) {
            return;
        }
        let (key, _) = self.walk.lookup(self.options, self.pending, rank);
        if let Some(info) = self.pending.peek(&key) {
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
        self.want(D);
    }

    fn visit_int<const D: usize>(&mut self, _param: &Param<Tensor<D, Int>>) {
        self.want(D);
    }

    fn visit_bool<const D: usize>(&mut self, _param: &Param<Tensor<D, Bool>>) {
        self.want(D);
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
