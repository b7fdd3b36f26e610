//! `torch.save` files: every file of `tests/data/pytorch/` (written by PyTorch's own
//! `torch.save`, from Burn's test data; see its README) read here and compared tensor by tensor
//! with what burn-store's `PytorchReader` (the reader behind `PytorchStore`) reads from the same
//! file; model-shaped ones loaded into Burn modules; hostile files made here refused clearly.
#![allow(deprecated)] // ndarray: deprecated in Burn 0.22, still a backend users load onto

mod common;

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::{LoadOptions, PackModule};
use common::torch::{Pickler, StorageSpec, View, ZipOptions, save, write_zip};

use burn::tensor::DType;
use burn_store::pytorch_reader::PytorchReader;
use burnpack::interop::pytorch::{PytorchError, PytorchFormat, PytorchSource};
use burnpack::source::OpenOptions;
use burnpack::source::{CopyReason, TensorSource};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/pytorch")
        .join(name)
}

fn shared_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pt"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 54);
    files
}

fn burn_dtype(dtype: burn_store::pytorch_reader::DType) -> DType {
    use burn_store::pytorch_reader::DType as T;
    match dtype {
        T::F64 => DType::F64,
        T::F32 => DType::F32,
        T::F16 => DType::F16,
        T::BF16 => DType::BF16,
        T::I64 => DType::I64,
        T::I32 => DType::I32,
        T::I16 => DType::I16,
        T::I8 => DType::I8,
        T::U64 => DType::U64,
        T::U32 => DType::U32,
        T::U16 => DType::U16,
        T::U8 => DType::U8,
        T::Bool => DType::Bool(burn::tensor::BoolStore::Native),
    }
}

#[test]
fn every_file_torch_save_wrote_reads_as_burn_stores_reader_reads_it() {
    let mut compared = 0;
    for path in shared_files() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let ours = PytorchSource::open(&path);
        if name.contains("broken") {
            let err = ours.unwrap_err();
            assert!(err.to_string().contains(&name), "{err}");
            assert!(PytorchReader::new(&path).is_err());
            continue;
        }
        let ours = ours.unwrap_or_else(|e| panic!("{name}: {e}"));
        let oracle = match ours.key() {
            Some(key) => PytorchReader::with_top_level_key(&path, key),
            None => PytorchReader::new(&path),
        }
        .unwrap_or_else(|e| panic!("{name}: burn-store: {e}"));
        let mut theirs: Vec<&String> = oracle.tensors().keys().collect();
        theirs.sort();
        let mine: Vec<&str> = ours.tensors().iter().map(|t| t.name()).collect();
        assert_eq!(mine, theirs, "{name}: names");
        for info in ours.tensors() {
            let want = oracle.get(info.name()).unwrap();
            assert_eq!(
                info.dtype(),
                burn_dtype(want.dtype()),
                "{name}: {}",
                info.name()
            );
            assert_eq!(info.shape(), want.shape(), "{name}: {}", info.name());
            let bytes = ours.read(info).unwrap();
            assert_eq!(
                &bytes[..],
                &want.read().unwrap()[..],
                "{name}: {}",
                info.name()
            );
            compared += 1;
        }
    }
    assert!(compared > 100, "{compared}");
}

/// Zip files of PyTorch 2 align every storage to 64 bytes: each tensor of them is a window of
/// the mapping (no copy); legacy files put storages anywhere, so their f32 tensors are copied
/// and say why.
#[test]
fn tensors_of_aligned_storages_are_views_of_the_mapping() {
    for path in shared_files() {
        let Ok(source) = PytorchSource::open(&path) else {
            continue;
        };
        for info in source.tensors() {
            let reason = source.copy_reason(info);
            match source.format() {
                PytorchFormat::Zip => assert_eq!(reason, None, "{path:?}: {}", info.name()),
                _ => assert!(
                    reason.is_none() || matches!(reason, Some(CopyReason::Unaligned { .. })),
                    "{path:?}: {reason:?}"
                ),
            }
            let bytes = source.read(info).unwrap();
            if reason.is_none() {
                assert_eq!(
                    bytes.as_ptr() as usize % burnpack::format::element_align(info.dtype()),
                    0
                );
            }
        }
    }
}

#[test]
fn opened_for_a_verification_a_zip_is_read_not_mapped_and_a_cut_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.pt");
    let a: Vec<f32> = (0..1 << 18).map(|i| i as f32).collect();
    let b: Vec<f32> = a.iter().map(|v| -v).collect();
    save(
        &path,
        &[StorageSpec::f32(&a), StorageSpec::f32(&b)],
        &[
            View::whole("a", 0, &[1 << 18]),
            View::whole("b", 1, &[1 << 18]),
        ],
    );
    let options = OpenOptions::new().verify(true);
    let source = PytorchSource::open_file(&path, &options).unwrap();
    let (first, second) = (&source.tensors()[0], &source.tensors()[1]);
    assert_eq!(source.copy_reason(first), Some(CopyReason::Buffered));
    assert_eq!(values(&source.read(first).unwrap()), a);
    // Cut while open: through a mapping the next read would fault (SIGBUS) and end this
    // process; read with ordinary reads it is an error naming the file.
    common::cut(&path, 4096);
    let err = source.read(second).unwrap_err().to_string();
    assert!(
        err.contains("cut.pt") && err.contains("tensor 'b'"),
        "{err}"
    );
    // Opened for loading, the same archive (whole again) is mapped.
    save(
        &path,
        &[StorageSpec::f32(&a), StorageSpec::f32(&b)],
        &[
            View::whole("a", 0, &[1 << 18]),
            View::whole("b", 1, &[1 << 18]),
        ],
    );
    let source = PytorchSource::open(&path).unwrap();
    assert_eq!(source.copy_reason(&source.tensors()[0]), None);
}

fn values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// One storage of 12 values viewed four ways: whole (3x4), transposed as saved by
/// `w.t()` (4x3, strides [1, 4]), a row at an offset, and every other column (strides [4, 2]).
fn views_file(dir: &Path) -> PathBuf {
    let path = dir.join("views.pt");
    let storage = StorageSpec::f32(&(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let views = [
        View::whole("whole", 0, &[3, 4]),
        View {
            name: "transposed".into(),
            storage: 0,
            offset: 0,
            shape: vec![4, 3],
            stride: vec![1, 4],
        },
        View {
            name: "row".into(),
            storage: 0,
            offset: 4,
            shape: vec![4],
            stride: vec![1],
        },
        View {
            name: "even_columns".into(),
            storage: 0,
            offset: 0,
            shape: vec![3, 2],
            stride: vec![4, 2],
        },
    ];
    save(&path, &[storage], &views);
    path
}

#[test]
fn views_offsets_shared_storages_and_strides_read_as_pytorch_lays_them_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = views_file(dir.path());
    let source = PytorchSource::open(&path).unwrap();
    let oracle = PytorchReader::new(&path).unwrap();
    let read = |name: &str| values(&source.read(source.tensor(name).unwrap()).unwrap());
    assert_eq!(read("whole"), (0..12).map(|v| v as f32).collect::<Vec<_>>());
    assert_eq!(
        read("transposed"),
        [0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]
    );
    assert_eq!(read("row"), [4., 5., 6., 7.]);
    assert_eq!(read("even_columns"), [0., 2., 4., 6., 8., 10.]);
    for info in source.tensors() {
        let want = oracle.get(info.name()).unwrap().read().unwrap();
        assert_eq!(
            &source.read(info).unwrap()[..],
            &want[..],
            "{}",
            info.name()
        );
        let strided = ["transposed", "even_columns"].contains(&info.name());
        assert_eq!(
            source.copy_reason(info),
            strided.then_some(CopyReason::Strided),
            "{}",
            info.name()
        );
    }
}

#[derive(Module, Debug)]
struct Net {
    fc1: Linear,
}

/// PyTorch's Linear weight is `[out, in]`; `pytorch(true)` loads it into Burn's `[in, out]`.
#[test]
fn a_pytorch_linear_loads_into_a_burn_module_in_one_call() {
    let path = data("linear__linear_with_bias.pt");
    let oracle = PytorchReader::new(&path).unwrap();
    let weight = values(&oracle.get("fc1.weight").unwrap().read().unwrap());
    let bias = values(&oracle.get("fc1.bias").unwrap().read().unwrap());
    let source = PytorchSource::open(&path).unwrap();
    let devices = [Device::flex(), Device::ndarray()];
    for (device, contiguous) in devices.iter().flat_map(|d| [(d, false), (d, true)]) {
        let options = LoadOptions::new().pytorch(true).contiguous(contiguous);
        let (net, report) = Net {
            fc1: LinearConfig::new(2, 3).init(device),
        }
        .load_from_source_with_report(&source, &options)
        .unwrap_or_else(|e| panic!("{device:?}: {e}"));
        assert_eq!(report.loaded(), 2);
        if *device == Device::flex() && !contiguous {
            // Windows of the mapped file, the weight transposed by its strides: no copy.
            assert_eq!(report.views(), 2, "{report}");
        } else {
            // Laid out contiguous at load (asked for, or ndarray, which would copy anyway);
            // the bias stays a window of the mapping.
            assert_eq!(report.views(), 1, "{report}");
            assert_eq!(report.copied()[0].path, "fc1.weight");
            assert_eq!(report.copied()[0].reason, CopyReason::Transposed);
        }
        let got = net
            .fc1
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        // [3, 2] transposed to [2, 3].
        let want: Vec<f32> = (0..2)
            .flat_map(|i| (0..3).map(move |o| (i, o)))
            .map(|(i, o)| weight[o * 2 + i])
            .collect();
        assert_eq!(got, want, "{device:?}");
        let got = net
            .fc1
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(got, bias);
    }
    // Without the PyTorch conventions the shapes do not match: one error naming the weight.
    let err = Net {
        fc1: LinearConfig::new(2, 3).init(&Device::flex()),
    }
    .load_from_source(&source, &LoadOptions::new())
    .unwrap_err();
    assert!(err.to_string().contains("fc1.weight"), "{err}");
}

/// A weight saved transposed (`w.t()` as is) is gathered once, in parallel with the others,
/// and the report says why.
#[test]
fn a_weight_saved_with_its_strides_loads_gathered_and_reported() {
    #[derive(Module, Debug)]
    struct Two {
        a: Linear,
        b: Linear,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strided.pt");
    // Burn's [in, out] = [2, 3] weights stored as PyTorch's [out, in] storage, viewed transposed.
    let storages = [
        StorageSpec::f32(&[1., 2., 3., 4., 5., 6.]),
        StorageSpec::f32(&[7., 8., 9., 10., 11., 12.]),
    ];
    let view = |name: &str, storage| View {
        name: name.into(),
        storage,
        offset: 0,
        shape: vec![2, 3],
        stride: vec![1, 2],
    };
    save(
        &path,
        &storages,
        &[view("a.weight", 0), view("b.weight", 1)],
    );
    let source = PytorchSource::open(&path).unwrap();
    let device = Device::flex();
    let (two, report) = Two {
        a: LinearConfig::new(2, 3).with_bias(false).init(&device),
        b: LinearConfig::new(2, 3).with_bias(false).init(&device),
    }
    .load_from_source_with_report(&source, &LoadOptions::new())
    .unwrap();
    assert_eq!(
        two.a.weight.val().into_data().try_to_vec::<f32>().unwrap(),
        [1., 3., 5., 2., 4., 6.]
    );
    assert_eq!(
        two.b.weight.val().into_data().try_to_vec::<f32>().unwrap(),
        [7., 9., 11., 8., 10., 12.]
    );
    assert_eq!(report.copied().len(), 2, "{report}");
    assert!(
        report
            .copied()
            .iter()
            .all(|c| c.reason == CopyReason::Strided),
        "{report}"
    );
}

/// A matrix of several MiB laid out contiguous at load (in bands on every core) holds the
/// values the view by strides holds, in Burn's layout, whether its storage is its own or
/// shared with a bias.
#[test]
fn contiguous_loads_lay_out_large_matrices_as_the_views_hold_them() {
    #[derive(Module, Debug)]
    struct Two {
        a: Linear,
        b: Linear,
    }
    let (inputs, outputs) = (1000, 700);
    let values = |seed: usize| -> Vec<f32> {
        (0..inputs * outputs)
            .map(|i| ((i * 7919 + seed) % 10007) as f32 * 0.5)
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.pt");
    // `a` a storage of its own; `b`'s weight and bias two views of one storage.
    let mut shared = values(1);
    shared.extend((0..outputs).map(|i| i as f32));
    let storages = [StorageSpec::f32(&values(0)), StorageSpec::f32(&shared)];
    let dims = [outputs as u64, inputs as u64];
    let views = [
        View::whole("a.weight", 0, &dims),
        View::whole("b.weight", 1, &dims),
        View {
            offset: (inputs * outputs) as u64,
            ..View::whole("b.bias", 1, &[outputs as u64])
        },
    ];
    save(&path, &storages, &views);
    let source = PytorchSource::open(&path).unwrap();
    let device = Device::flex();
    let load = |contiguous: bool| {
        Two {
            a: LinearConfig::new(inputs, outputs)
                .with_bias(false)
                .init(&device),
            b: LinearConfig::new(inputs, outputs).init(&device),
        }
        .load_from_source_with_report(
            &source,
            &LoadOptions::new().pytorch(true).contiguous(contiguous),
        )
        .unwrap()
    };
    let ((viewed, by_strides), (laid, at_load)) = (load(false), load(true));
    // Windows of the mapping (a view of a shared storage too), but for the two weights.
    assert_eq!(by_strides.views(), 3, "{by_strides}");
    assert_eq!(at_load.views(), 1, "{at_load}");
    let weights = |two: Two| {
        [two.a.weight, two.b.weight].map(|w| w.val().into_data().try_to_vec::<f32>().unwrap())
    };
    let (want, got) = (weights(viewed), weights(laid));
    assert_eq!(got, want);
    // Burn's [in, out]: element (i, o) is PyTorch's (o, i).
    let stored = values(0);
    assert_eq!(got[0][3 * outputs + 5], stored[5 * inputs + 3]);
}

#[test]
fn the_state_dict_is_found_under_a_key_or_the_named_one() {
    // `checkpoint`: {'epoch', 'model_state_dict', 'optimizer_state_dict', ...}
    let source = PytorchSource::open(data("reader__test_data__checkpoint.pt")).unwrap();
    assert_eq!(source.key(), Some("model_state_dict"));
    assert!(source.tensor("fc1.weight").is_some());
    // A key of the user's.
    let path = data("top_level_key__top_level_key.pt");
    let source = PytorchSource::open_with(&path, &OpenOptions::new().key("my_state_dict")).unwrap();
    assert_eq!(source.key(), Some("my_state_dict"));
    assert!(source.tensor("conv1.weight").is_some());
    let err = PytorchSource::open_with(&path, &OpenOptions::new().key("nope")).unwrap_err();
    assert!(matches!(err, PytorchError::Invalid { .. }), "{err}");
    assert!(
        err.to_string().contains("no key 'nope'") && err.to_string().contains("my_state_dict"),
        "{err}"
    );
}

/// Opening `path` fails naming the file and saying `what`.
fn refused(path: &Path, what: &str) -> PytorchError {
    let err = PytorchSource::open(path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(what), "'{text}' does not say '{what}'");
    err
}

#[test]
fn hostile_files_are_clear_errors_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    let storage = || vec![StorageSpec::f32(&[1., 2., 3., 4.])];
    let zip = |name: &str, pickle: Vec<u8>| {
        write_zip(&file(name), &pickle, &storage(), ZipOptions::default());
        file(name)
    };
    // The classic: `os.system("...")` (posix.system in a pickle written on Linux).
    let pickle = Pickler::new()
        .global("posix", "system")
        .str("touch /tmp/burnpack-pwned")
        .op(b"\x85R")
        .finish();
    let err = refused(&zip("system.pt", pickle), "posix.system");
    assert!(matches!(err, PytorchError::Refused { ref global, .. } if global == "posix.system"));
    // Another module's callable inside an otherwise real state dict.
    let pickle = Pickler::new()
        .global("collections", "OrderedDict")
        .op(b")R(")
        .str("w")
        .global("builtins", "eval")
        .op(b"u")
        .finish();
    refused(&zip("eval.pt", pickle), "builtins.eval");
    // A memo bomb: a list, then the same list put into a tuple twice, over and over. The graph
    // is shared (no copies); walking it would take 2^40 steps and is cut off.
    let mut p = Pickler::new();
    p.op(b"]q\x00");
    for _ in 0..40 {
        p.op(b"h\x00h\x00\x86q\x00");
    }
    refused(&zip("memo-bomb.pt", p.finish()), "nodes to walk");
    // Deep nesting: 1,000 lists, each inside the next (past the depth limit of 128; 100,000
    // such lists, one node per byte, are refused by the unpickler's memory bound first).
    let mut p = Pickler::new();
    for _ in 0..1_000 {
        p.op(b"(");
    }
    for _ in 0..1_000 {
        p.op(b"l");
    }
    refused(&zip("deep.pt", p.finish()), "nested deeper than");
    // A storage shorter than its tensor: 4 values stored, 10 declared.
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b")R(").str("w");
    let view = View::whole("w", 0, &[10]);
    p.tensor(&view, "FloatStorage", 10).op(b"u");
    refused(&zip("short.pt", p.finish()), "declares 10 elements");
    // An offset past the end of the storage.
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b")R(").str("w");
    let view = View {
        offset: 3,
        ..View::whole("w", 0, &[2])
    };
    p.tensor(&view, "FloatStorage", 4).op(b"u");
    refused(&zip("offset.pt", p.finish()), "past the end of its storage");
    // A compressed storage, and a zip bomb (64 MiB of zeros deflated as the pickle): refused
    // before anything is decompressed.
    let pickle = Pickler::new()
        .state_dict(&storage(), &[View::whole("w", 0, &[4])])
        .finish();
    let compressed = file("compressed.pt");
    let deflate = ZipOptions {
        deflate_storages: true,
        ..ZipOptions::default()
    };
    write_zip(&compressed, &pickle, &storage(), deflate);
    refused(&compressed, "is compressed");
    let bomb = file("bomb.pt");
    let zeros = vec![0u8; 64 << 20];
    let deflate = ZipOptions {
        deflate_pickle: true,
        ..ZipOptions::default()
    };
    write_zip(&bomb, &zeros, &storage(), deflate);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20);
    refused(&bomb, "archive/data.pkl' is compressed");
    // Not a torch.save file at all; a truncated one.
    std::fs::write(file("text.pt"), b"hello").unwrap();
    refused(&file("text.pt"), "neither a zip archive");
    let whole = std::fs::read(data("linear__linear.pt")).unwrap();
    std::fs::write(file("cut.pt"), &whole[..whole.len() / 2]).unwrap();
    refused(&file("cut.pt"), "zip");
    // The legacy format: the same unpickler, reached after the magic number, the protocol
    // and the system information.
    let mut legacy = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec();
    legacy.extend_from_slice(b"\x80\x02M\xe9\x03.\x80\x02}.");
    legacy.extend(
        Pickler::new()
            .global("posix", "system")
            .str("touch /tmp/burnpack-pwned")
            .op(b"\x85R")
            .finish(),
    );
    std::fs::write(file("legacy-system.pt"), &legacy).unwrap();
    refused(&file("legacy-system.pt"), "posix.system");
    assert!(!Path::new("/tmp/burnpack-pwned").exists());
}

#[test]
fn sharded_checkpoints_load_through_their_index() {
    let dir = tempfile::tempdir().unwrap();
    let a = [StorageSpec::f32(&[1., 2.])];
    let b = [StorageSpec::f32(&[3., 4., 5.])];
    save(
        &dir.path().join("pytorch_model-00001-of-00002.bin"),
        &a,
        &[View::whole("x.weight", 0, &[2])],
    );
    save(
        &dir.path().join("pytorch_model-00002-of-00002.bin"),
        &b,
        &[View::whole("y.weight", 0, &[3])],
    );
    let index = dir.path().join("pytorch_model.bin.index.json");
    std::fs::write(
        &index,
        r#"{"metadata": {"total_size": 20}, "weight_map": {"x.weight": "pytorch_model-00001-of-00002.bin", "y.weight": "pytorch_model-00002-of-00002.bin"}}"#,
    )
    .unwrap();
    let source = PytorchSource::open(&index).unwrap();
    assert_eq!(source.shards().count(), 2);
    assert_eq!(
        values(&source.read(source.tensor("y.weight").unwrap()).unwrap()),
        [3., 4., 5.]
    );
    // An index that routes a tensor to the wrong shard.
    std::fs::write(
        &index,
        r#"{"weight_map": {"x.weight": "pytorch_model-00002-of-00002.bin", "y.weight": "pytorch_model-00002-of-00002.bin"}}"#,
    )
    .unwrap();
    refused(&index, "which does not hold it");
}

/// The model-shaped files load into the Burn modules their names promise, with PyTorch's
/// conventions, every value equal to what burn-store's reader reads (weights of Linear
/// transposed, norms' weight/bias as gamma/beta).
#[test]
fn model_shaped_files_load_into_burn_modules() {
    use burn::nn::conv::{Conv2d, Conv2dConfig};
    use burn::nn::{
        BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig,
    };

    #[derive(Module, Debug)]
    struct Convs {
        conv1: Conv2d,
        conv2: Conv2d,
    }
    #[derive(Module, Debug)]
    struct Norm {
        norm1: BatchNorm,
    }
    #[derive(Module, Debug)]
    struct Embed {
        embed: Embedding,
    }
    #[derive(Module, Debug)]
    struct Layer {
        norm1: LayerNorm,
    }
    #[derive(Module, Debug)]
    struct Mlp {
        fc1: Linear,
        fc2: Linear,
    }
    /// Loads `file` into `module` and checks every parameter against the oracle's tensor of
    /// the PyTorch name `torch_name(path)`, transposed when `transposed(path)`.
    fn check<M: Module>(
        file: &str,
        module: M,
        torch_name: impl Fn(&str) -> String,
        transposed: impl Fn(&str) -> bool,
    ) {
        let path = data(file);
        let source = PytorchSource::open(&path).unwrap();
        let oracle = PytorchReader::new(&path).unwrap();
        let loaded = module
            .load_from_source(&source, &LoadOptions::new().pytorch(true))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let held = common::held::held(&loaded);
        assert!(!held.is_empty());
        for (name, _, _, got) in &held {
            let want = oracle
                .get(&torch_name(name))
                .unwrap_or_else(|| panic!("{file}: {name}"));
            let values = values(&want.read().unwrap());
            let want: Vec<f64> = if transposed(name) {
                let (rows, cols) = (want.shape()[0], want.shape()[1]);
                (0..cols)
                    .flat_map(|c| (0..rows).map(move |r| (r, c)))
                    .map(|(r, c)| f64::from(values[r * cols + c]))
                    .collect()
            } else {
                values.into_iter().map(f64::from).collect()
            };
            assert_eq!(got, &want, "{file}: {name}");
        }
    }
    let device = Device::flex();
    let same = |p: &str| p.to_string();
    let norms = |p: &str| p.replace("gamma", "weight").replace("beta", "bias");
    check(
        "conv2d__conv2d.pt",
        Convs {
            conv1: Conv2dConfig::new([2, 2], [2, 2]).init(&device),
            conv2: Conv2dConfig::new([2, 2], [2, 2])
                .with_bias(false)
                .init(&device),
        },
        same,
        |_| false,
    );
    check(
        "batch_norm__batch_norm2d.pt",
        Norm {
            norm1: BatchNormConfig::new(5).init(&device),
        },
        norms,
        |_| false,
    );
    check(
        "embedding__embedding.pt",
        Embed {
            embed: EmbeddingConfig::new(10, 3).init(&device),
        },
        same,
        |_| false,
    );
    check(
        "layer_norm__layer_norm.pt",
        Layer {
            norm1: LayerNormConfig::new(2).init(&device),
        },
        norms,
        |_| false,
    );
    check(
        "linear__linear.pt",
        Mlp {
            fc1: LinearConfig::new(2, 3).init(&device),
            fc2: LinearConfig::new(3, 4).with_bias(false).init(&device),
        },
        same,
        |p| p.ends_with("weight"),
    );
}

/// Dtypes Burn has no equivalent for and big-endian files are errors naming what they are.
#[test]
fn unsupported_dtypes_and_byte_orders_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("complex.pt");
    let storage = StorageSpec {
        kind: "ComplexFloatStorage",
        element: 8,
        bytes: vec![0; 16],
    };
    save(&path, &[storage], &[View::whole("z", 0, &[2])]);
    let err = refused(&path, "torch.ComplexFloatStorage");
    assert!(
        matches!(err, PytorchError::Tensor { ref tensor, .. } if tensor == "z"),
        "{err}"
    );
    // The same archive with its byte order said to be big-endian.
    let mut bytes = std::fs::read(data("linear__linear.pt")).unwrap();
    let at = bytes.windows(6).position(|w| w == b"little").unwrap();
    bytes[at..at + 6].copy_from_slice(b"bigend");
    let path = dir.path().join("big.pt");
    std::fs::write(&path, bytes).unwrap();
    refused(&path, "only little-endian files are read");
}

/// A flipped bit in a storage or in the pickle of a zip archive is caught by a verified load
/// (and `bpk verify`) through the archive's CRC-32; an unverified load reads what is there.
#[test]
fn bit_flips_in_zip_archives_fail_verified_loads() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(data("linear__linear_with_bias.pt")).unwrap();
    let source = PytorchSource::open(data("linear__linear_with_bias.pt")).unwrap();
    let weight = source.tensor("fc1.weight").unwrap();
    for (what, at) in [
        ("a storage", weight.offset() as usize + 5),
        (
            "the pickle",
            bytes.windows(8).position(|w| w == b"fc1.bias").unwrap() + 2,
        ),
    ] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x10;
        let path = dir.path().join("flipped.pt");
        std::fs::write(&path, &flipped).unwrap();
        let Ok(source) = PytorchSource::open(&path) else {
            // A flip in a name can make the pickle unreadable: refused, as it should be.
            continue;
        };
        let load = |verify| {
            Net {
                fc1: LinearConfig::new(2, 3).init(&Device::flex()),
            }
            .load_from_source(
                &source,
                &LoadOptions::new().pytorch(true).verify_checksums(verify),
            )
        };
        let err = load(true).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{what}: {err}");
        if what == "a storage" {
            assert!(load(false).is_ok());
        }
    }
}

/// `nn.Parameter`s and tensor subclasses pickle as wrappers around the tensor
/// (`_rebuild_parameter`, `_rebuild_parameter_with_state`, `_rebuild_from_type_v2`): each
/// unwraps to its tensor; the globals they use are listed.
#[test]
fn parameter_and_subclass_wrappers_unwrap_to_their_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrapped.pt");
    let storages = [StorageSpec::f32(&[1., 2., 3., 4.])];
    let view = View::whole("", 0, &[4]);
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b")R(");
    // A parameter.
    p.str("param")
        .global("torch._utils", "_rebuild_parameter")
        .op(b"(");
    p.tensor(&view, "FloatStorage", 4)
        .op(b"\x89")
        .global("collections", "OrderedDict")
        .op(b")RtR");
    // A parameter with state.
    p.str("stateful")
        .global("torch._utils", "_rebuild_parameter_with_state")
        .op(b"(");
    p.tensor(&view, "FloatStorage", 4)
        .op(b"\x89")
        .global("collections", "OrderedDict")
        .op(b")R}tR");
    // A tensor subclass rebuilt by type.
    p.str("typed")
        .global("torch._tensor", "_rebuild_from_type_v2")
        .op(b"(")
        .global("torch._utils", "_rebuild_tensor_v2")
        .global("torch.nn.parameter", "Parameter");
    p.tensor_args(&view, "FloatStorage", 4).op(b"}tR");
    p.op(b"u");
    write_zip(&path, &p.finish(), &storages, ZipOptions::default());
    let source = PytorchSource::open(&path).unwrap();
    for name in ["param", "stateful", "typed"] {
        let info = source.tensor(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(values(&source.read(info).unwrap()), [1., 2., 3., 4.]);
    }
    for global in [
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",
        "torch._tensor._rebuild_from_type_v2",
        "torch.nn.parameter.Parameter",
    ] {
        assert!(source.globals().iter().any(|g| g == global), "{global}");
    }
    // burn-store's reader agrees on the same file.
    let oracle = PytorchReader::new(&path).unwrap();
    assert_eq!(oracle.tensors().len(), 3);
}
