//! burn-store's remapping options on `LoadOptions`: `skip_enum_variants` (a Burn enum
//! module's variant in the path) and `map_indices_contiguous` (`nn.Sequential` indices with
//! gaps, Burn issue #4149). Burn's own `PyTorch` fixtures for them (`tests/data/pytorch/`, see
//! its README) are loaded into Burn modules of the shapes burn-store's tests give them, and a
//! forward pass is compared with the same module loaded by burn-store's `PytorchStore` (the
//! oracle); then the same tensors, written here as a pack and as a safetensors file, load the
//! same way.
#![allow(deprecated)] // ndarray: deprecated in Burn 0.22, still a backend users load onto

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_store::{ModuleSnapshot, PytorchStore};
use burnpack::interop::pytorch::PytorchSource;
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::module::{LoadOptions, LoadReport, ModuleError, PackModule};
use burnpack::read::Reader;
use burnpack::source::TensorSource;
use burnpack::write::{Entry, Writer};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pytorch")
        .join(name)
}

/// Burn's `enum_module` test model: PyTorch's `Model(depthwise)` is a plain `Conv2d` or a
/// depthwise separable pair, held by one field `conv`.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
enum Conv {
    DwsConv(DwsConv),
    Conv(Conv2d),
}

#[derive(Module, Debug)]
struct DwsConv {
    dconv: Conv2d,
    pconv: Conv2d,
}

#[derive(Module, Debug)]
struct EnumNet {
    conv: Conv,
}

impl EnumNet {
    fn new(depthwise: bool, device: &Device) -> Self {
        let conv = if depthwise {
            Conv::DwsConv(DwsConv {
                dconv: Conv2dConfig::new([2, 2], [3, 3])
                    .with_groups(2)
                    .init(device),
                pconv: Conv2dConfig::new([2, 2], [1, 1]).init(device),
            })
        } else {
            Conv::Conv(Conv2dConfig::new([2, 2], [3, 3]).init(device))
        };
        Self { conv }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        match &self.conv {
            Conv::DwsConv(dws) => dws.pconv.forward(dws.dconv.forward(x)),
            Conv::Conv(conv) => conv.forward(x),
        }
    }
}

/// burn-store's `SequentialConvModel`: five `Conv2d`s where PyTorch's `nn.Sequential` has
/// them at 0, 2, 4, 6, 8 between activations.
#[derive(Module, Debug)]
struct SequentialNet {
    fc: Vec<Conv2d>,
}

impl SequentialNet {
    fn new(device: &Device) -> Self {
        Self {
            fc: (0..5)
                .map(|_| Conv2dConfig::new([2, 2], [3, 3]).init(device))
                .collect(),
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        self.fc.iter().fold(x, |x, conv| conv.forward(x))
    }
}

/// A fixed input of `[1, 2, side, side]`.
fn input(side: usize, device: &Device) -> Tensor<4> {
    let n = 2 * side * side;
    #[allow(clippy::cast_precision_loss)]
    let values: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.5).collect();
    Tensor::from_data(TensorData::new(values, [1, 2, side, side]), device)
}

fn values(t: Tensor<4>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// The fixture's tensors written here as a pack and as a safetensors file, with their names.
fn rewritten(source: &PytorchSource, dir: &Path) -> (Reader, SafetensorsSource) {
    let read: Vec<(String, burn::tensor::DType, Vec<usize>, burn::tensor::Bytes)> = source
        .tensors()
        .iter()
        .map(|info| {
            (
                info.name().to_string(),
                info.dtype(),
                info.shape().to_vec(),
                source.read(info).unwrap(),
            )
        })
        .collect();
    let pack = Writer::new(
        read.iter()
            .map(|(name, dtype, shape, bytes)| {
                Entry::resident(name.clone(), *dtype, shape.clone(), bytes.clone())
            })
            .collect(),
    )
    .into_bytes()
    .unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = read
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            assert_eq!(*dtype, burn::tensor::DType::F32, "{name}");
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                    .unwrap();
            (name.clone(), view)
        })
        .collect();
    let st = dir.join("fixture.safetensors");
    safetensors::serialize_to_file(views, None, &st).unwrap();
    (
        Reader::from_bytes(pack).unwrap(),
        SafetensorsSource::open(&st).unwrap(),
    )
}

/// Loads `model` from each of `sources` with `options`, returning each model with its report.
fn load_each<M: Module>(
    fresh: impl Fn() -> M,
    sources: &[&dyn TensorSource],
    options: &LoadOptions,
) -> Vec<(M, LoadReport)> {
    sources
        .iter()
        .map(|source| {
            fresh()
                .load_from_source_with_report(*source, options)
                .unwrap_or_else(|e| panic!("{}: {e}", source.file()))
        })
        .collect()
}

#[test]
fn enum_modules_load_pytorch_files_with_skip_enum_variants_as_pytorch_store_does() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    for (depthwise, file, variant) in [
        (false, "enum_module__enum_depthwise_false.pt", "Conv"),
        (true, "enum_module__enum_depthwise_true.pt", "DwsConv"),
    ] {
        let path = data(file);
        // The oracle: PytorchStore skips enum variants by default.
        let mut oracle = EnumNet::new(depthwise, &device);
        let result = oracle
            .load_from(&mut PytorchStore::from_file(&path).skip_enum_variants(true))
            .unwrap();
        assert!(result.missing.is_empty(), "{file}: {result}");
        let x = input(5, &device);
        let want = values(oracle.forward(x.clone()));

        let source = PytorchSource::open(&path).unwrap();
        // Without the option the walk asks for `conv.<variant>.…`: every parameter missing,
        // every tensor of the file unused, all listed at once.
        let err = EnumNet::new(depthwise, &device)
            .load_from_source(&source, &LoadOptions::new().pytorch(true))
            .unwrap_err();
        let ModuleError::Mismatch { mismatch, .. } = &err else {
            panic!("{err}")
        };
        let n = if depthwise { 4 } else { 2 };
        assert_eq!(mismatch.missing.len(), n, "{err}");
        assert_eq!(mismatch.unused.len(), n, "{err}");
        assert!(
            mismatch
                .missing
                .iter()
                .all(|p| p.starts_with(&format!("conv.{variant}."))),
            "{err}"
        );

        let (pack, st) = rewritten(&source, dir.path());
        let options = LoadOptions::new().pytorch(true).skip_enum_variants(true);
        let sources: [&dyn TensorSource; 3] = [&source, &pack, &st];
        for (net, report) in load_each(|| EnumNet::new(depthwise, &device), &sources, &options) {
            assert_eq!(values(net.forward(x.clone())), want, "{file}");
            // Paths without the variant, as the file names them.
            let mut applied = report.applied().to_vec();
            applied.sort();
            let mut names: Vec<String> = source
                .tensors()
                .iter()
                .map(|i| i.name().to_string())
                .collect();
            names.sort();
            assert_eq!(applied, names, "{file}");
            assert!(report.missing().is_empty() && report.unused().is_empty());
            assert!(report.renamed().is_empty(), "{report:#}");
        }
        // The option also reaches the filter, which sees the same paths.
        let filtered = options.clone().filter_regex(r"\.bias$").unwrap();
        let (_, report) = EnumNet::new(depthwise, &device)
            .load_from_source_with_report(&source, &filtered.allow_unused(true))
            .unwrap();
        assert!(report.applied().iter().all(|p| p.ends_with(".bias")));
        assert!(report.skipped().iter().all(|p| p.ends_with(".weight")));
        assert_eq!(report.skipped().len(), n / 2, "{report:#}");
    }
}

#[test]
fn gappy_sequential_indices_load_with_map_indices_contiguous_as_pytorch_store_does() {
    let device = Device::flex();
    let path = data("non_contiguous_indexes__non_contiguous_indexes.pt");
    let mut oracle = SequentialNet::new(&device);
    let result = oracle
        .load_from(&mut PytorchStore::from_file(&path).map_indices_contiguous(true))
        .unwrap();
    assert!(result.missing.is_empty(), "{result}");
    assert_eq!(result.applied.len(), 10);
    let x = input(13, &device);
    let want = values(oracle.forward(x.clone()));

    let source = PytorchSource::open(&path).unwrap();
    // Without the option: fc.1 and fc.3 missing, fc.6 and fc.8 unused, one error.
    let err = SequentialNet::new(&device)
        .load_from_source(&source, &LoadOptions::new().pytorch(true))
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        mismatch.missing,
        ["fc.1.weight", "fc.1.bias", "fc.3.weight", "fc.3.bias"],
        "{err}"
    );
    assert_eq!(
        mismatch.unused,
        ["fc.6.bias", "fc.6.weight", "fc.8.bias", "fc.8.weight"],
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (pack, st) = rewritten(&source, dir.path());
    let options = LoadOptions::new()
        .pytorch(true)
        .map_indices_contiguous(true);
    let sources: [&dyn TensorSource; 3] = [&source, &pack, &st];
    for (net, report) in load_each(|| SequentialNet::new(&device), &sources, &options) {
        assert_eq!(values(net.forward(x.clone())), want);
        assert_eq!(report.loaded(), 10);
        // Each renumbered name in the report: fc.2 -> fc.1, fc.4 -> fc.2, ...
        let mut renamed: Vec<(String, String)> = report
            .renamed()
            .iter()
            .map(|r| (r.from.clone(), r.to.clone()))
            .collect();
        renamed.sort();
        let mut want_renamed = Vec::new();
        for (from, to) in [(2, 1), (4, 2), (6, 3), (8, 4)] {
            for leaf in ["bias", "weight"] {
                want_renamed.push((format!("fc.{from}.{leaf}"), format!("fc.{to}.{leaf}")));
            }
        }
        want_renamed.sort();
        assert_eq!(renamed, want_renamed, "{report:#}");
        assert!(report.to_string().contains("fc.2.weight -> fc.1.weight"));
    }
}

/// The renumbering is per place and uses the source's own prefixes, as burn-store's does:
/// nested lists with gaps at both levels.
#[test]
fn nested_gaps_are_renumbered_per_level() {
    #[derive(Module, Debug)]
    struct Block {
        convs: Vec<Conv2d>,
    }
    #[derive(Module, Debug)]
    struct Nested {
        layers: Vec<Block>,
    }
    let device = Device::flex();
    let net = |device: &Device| Nested {
        layers: (0..2)
            .map(|_| Block {
                convs: (0..2)
                    .map(|_| Conv2dConfig::new([1, 1], [1, 1]).init(device))
                    .collect(),
            })
            .collect(),
    };
    // Written with the gaps of `Sequential(conv, relu, conv)` inside `Sequential(block,
    // relu, block)`.
    let saved = net(&device);
    let entries: Vec<Entry> = saved
        .pack_entries()
        .unwrap()
        .into_iter()
        .map(|entry| {
            let gappy = entry
                .name()
                .replace("layers.1.", "layers.2.")
                .replace("convs.1.", "convs.4.");
            entry.renamed(gappy)
        })
        .collect();
    let reader = Reader::from_bytes(Writer::new(entries).into_bytes().unwrap()).unwrap();
    let options = LoadOptions::new().map_indices_contiguous(true);
    let (loaded, report) = net(&device)
        .load_from_source_with_report(&reader, &options)
        .unwrap();
    assert_eq!(report.loaded(), 8);
    assert!(
        report
            .renamed()
            .iter()
            .any(|r| r.from == "layers.2.convs.4.weight" && r.to == "layers.1.convs.1.weight"),
        "{report:#}"
    );
    let x = Tensor::<4>::ones([1, 1, 2, 2], &device);
    for (a, b) in saved.layers.iter().zip(&loaded.layers) {
        for (a, b) in a.convs.iter().zip(&b.convs) {
            assert_eq!(values(a.forward(x.clone())), values(b.forward(x.clone())));
        }
    }
}
