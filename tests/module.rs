//! Saving and loading Burn modules: round trips on flex and ndarray, interop with Burn 0.22's
//! `save_file` / `load_file` and burn-store's `BurnpackStore` in both directions, strict
//! matching and every load option.

mod common;

use burn::module::{Module, Param, ParamId};
use burn::tensor::{DType, Device, Tensor};
use burnpack::module::{DTypePolicy, LoadOptions, ModuleError, PackModule, SaveOptions};
use burnpack::read::Reader;
use burnpack::source::CopyReason;
use common::model::{Net, Snapshot, snapshot, trained, trained_with};

#[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported and tested
fn devices() -> [Device; 2] {
    [Device::flex(), Device::ndarray()]
}

fn assert_same(a: &Snapshot, b: &Snapshot) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (path, (id, dtype, shape, bytes)) in a {
        let other = &b[path];
        // Burn's `RunningState` keeps its own id whatever a mapper returns, so BatchNorm's
        // running statistics cannot take the file's id (they are no optimizer targets).
        if !path.contains(".running_") {
            assert_eq!(id, &other.0, "{path}: param id");
        }
        assert_eq!((dtype, shape), (&other.1, &other.2), "{path}");
        assert_eq!(bytes, &other.3, "{path}: values differ");
    }
}

#[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported and tested
#[test]
fn round_trip_on_each_backend_and_across_them() {
    let dir = tempfile::tempdir().unwrap();
    for save_on in devices() {
        for load_on in devices() {
            // Half-precision parameters only where both backends hold them.
            let half = save_on.supports_dtype(DType::F16) && load_on.supports_dtype(DType::F16);
            let model = trained_with(&save_on, half);
            let expected = snapshot(&model);
            let path = dir.path().join("net.bpk");
            model.save_pack(&path).unwrap();
            let fresh = Net::new_with(&load_on, half);
            assert_ne!(
                snapshot(&fresh).get("embed.weight"),
                expected.get("embed.weight")
            );
            let loaded = fresh.load_pack(&path).unwrap();
            assert_same(&expected, &snapshot(&loaded));
            // Parameters live on the target device.
            assert_eq!(loaded.blocks[0].linear.weight.val().device(), load_on);
        }
    }
}

#[test]
fn names_ids_and_dtypes_match_burns_save_file() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = trained(&device);
    let ours = dir.path().join("ours.bpk");
    let theirs = dir.path().join("theirs.bpk");
    model.save_pack(&ours).unwrap();
    model.clone().save_file(&theirs).unwrap();
    let (a, b) = (Reader::open(&ours).unwrap(), Reader::open(&theirs).unwrap());
    assert_eq!(a.tensors().len(), snapshot(&model).len());
    for (x, y) in a.tensors().iter().zip(b.tensors()) {
        assert_eq!(
            (x.name(), x.dtype(), x.shape(), x.param_id()),
            (y.name(), y.dtype(), y.shape(), y.param_id())
        );
        assert_eq!(
            &a.read(x).unwrap()[..],
            &b.read(y).unwrap()[..],
            "{}",
            x.name()
        );
    }
    // Same write order, so the same offsets: only the metadata (our `producer`) differs.
    let order = |r: &Reader| {
        r.tensors_by_position()
            .map(|t| t.name().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&a), order(&b));
    assert!(
        a.tensor("head.Dense.weight").is_some(),
        "enum variants are named like Burn does"
    );
    assert!(
        a.tensor("extra.weight").is_some()
            && a.tensors().iter().all(|t| !t.name().starts_with("absent"))
    );
    assert_eq!(a.metadata()["producer"], burnpack::module::PRODUCER);
}

#[test]
fn loads_files_written_by_burn() {
    let dir = tempfile::tempdir().unwrap();
    for device in devices() {
        let model = trained(&device);
        let expected = snapshot(&model);
        let path = dir.path().join("burn.bpk");
        model.save_file(&path).unwrap();
        assert_same(
            &expected,
            &snapshot(&Net::new(&device).load_pack(&path).unwrap()),
        );

        // burn-store's BurnpackStore too.
        use burn_store::{BurnpackStore, ModuleSnapshot};
        let model = trained(&device);
        let expected = snapshot(&model);
        let store_path = dir
            .path()
            .join(format!("store-{device:?}.bpk").replace(['(', ')', ' '], ""));
        model
            .save_into(&mut BurnpackStore::from_file(&store_path))
            .unwrap();
        assert_same(
            &expected,
            &snapshot(&Net::new(&device).load_pack(&store_path).unwrap()),
        );
    }
}

#[test]
fn burn_loads_files_written_here() {
    let dir = tempfile::tempdir().unwrap();
    for device in devices() {
        let model = trained(&device);
        let expected = snapshot(&model);
        let path = dir.path().join("ours.bpk");
        model.save_pack(&path).unwrap();
        let loaded = Net::new(&device).try_load_file(&path).unwrap();
        assert_same(&expected, &snapshot(&loaded));

        use burn_store::{BurnpackStore, ModuleSnapshot};
        let mut target = Net::new(&device);
        let result = target
            .load_from(&mut BurnpackStore::from_file(&path))
            .unwrap();
        assert!(result.errors.is_empty(), "{:?}", result.errors);
        assert_same(&expected, &snapshot(&target));
    }
}

#[test]
fn bytes_and_static_round_trips() {
    let device = Device::flex();
    let model = trained(&device);
    let expected = snapshot(&model);
    let bytes = model.to_pack_bytes().unwrap();
    let leaked: &'static [u8] = Box::leak(bytes[..].to_vec().into_boxed_slice());
    let options = LoadOptions::new();
    assert_same(
        &expected,
        &snapshot(&Net::new(&device).load_pack_bytes(bytes, &options).unwrap()),
    );
    assert_same(
        &expected,
        &snapshot(
            &Net::new(&device)
                .load_pack_static(leaked, &options)
                .unwrap(),
        ),
    );
}

#[test]
fn buffered_mode_loads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    #[allow(deprecated)]
    let device = Device::ndarray();
    let model = trained(&device);
    let expected = snapshot(&model);
    let path = dir.path().join("net.bpk");
    model
        .save_pack_with(&path, &SaveOptions::new().threads(3).metadata("run", "7"))
        .unwrap();
    let loaded = Net::new(&device)
        .load_pack_with(&path, &LoadOptions::new().buffered(true))
        .unwrap();
    assert_same(&expected, &snapshot(&loaded));
    assert_eq!(Reader::open(&path).unwrap().metadata()["run"], "7");
    // The report: every tensor read into memory of its own when buffered, none when mapped.
    let buffered = Reader::open_buffered(&path).unwrap();
    let (_, report) = Net::new(&device)
        .load_from_source_with_report(&buffered, &LoadOptions::new())
        .unwrap();
    assert!(report.loaded() > 0);
    assert_eq!(report.copied().len(), report.loaded(), "{report}");
    assert!(
        report
            .copied()
            .iter()
            .all(|c| c.reason == CopyReason::Buffered)
    );
    let mapped = Reader::open(&path).unwrap();
    let (_, report) = Net::new(&device)
        .load_from_source_with_report(&mapped, &LoadOptions::new())
        .unwrap();
    assert_eq!(report.views(), report.loaded(), "{report}");
}

#[derive(Module, Debug)]
struct Wide {
    layers: Vec<burn::nn::Linear>,
}

fn wide(device: &Device) -> Wide {
    Wide {
        layers: (0..6)
            .map(|_| burn::nn::LinearConfig::new(1024, 1024).init(device))
            .collect(),
    }
}

/// Past 16 MiB of copies, a buffered load reads ahead of the walk on every core: the same
/// values as a mapped load, every tensor reported as read into its own memory, a corrupt byte
/// still found by a verified load and named, and a module that reads only part of the file
/// (a filter) still loads what it asks for.
#[test]
fn buffered_loads_read_ahead_on_every_core_and_load_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = wide(&device);
    let expected: Vec<Vec<f32>> = model
        .layers
        .iter()
        .map(|l| l.weight.val().into_data().try_to_vec::<f32>().unwrap())
        .collect();
    let path = dir.path().join("wide.bpk");
    model.save_pack(&path).unwrap();
    let buffered = Reader::open_buffered(&path).unwrap();
    let (loaded, report) = wide(&device)
        .load_from_source_with_report(&buffered, &LoadOptions::new())
        .unwrap();
    assert_eq!(report.copied().len(), report.loaded(), "{report}");
    for (layer, want) in loaded.layers.iter().zip(&expected) {
        assert_eq!(
            &layer.weight.val().into_data().try_to_vec::<f32>().unwrap(),
            want
        );
    }
    // Only the weights of the even layers: the walk reads what it wants, in its order.
    let options = LoadOptions::new()
        .buffered(true)
        .allow_partial(true)
        .filter(|name| name.ends_with("weight") && name.contains(".2."));
    let partial = wide(&device).load_pack_with(&path, &options).unwrap();
    assert_eq!(
        &partial.layers[2]
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        &expected[2]
    );
    // A flipped byte in the fourth layer's weight: a verified buffered load names it.
    let reader = Reader::open(&path).unwrap();
    let info = reader.tensor("layers.3.weight").unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[usize::try_from(info.offset()).unwrap() + 12345] ^= 0x10;
    drop(reader);
    std::fs::write(&path, &bytes).unwrap();
    let err = wide(&device)
        .load_pack_with(
            &path,
            &LoadOptions::new().buffered(true).verify_checksums(true),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layers.3.weight") && err.contains("checksum"),
        "{err}"
    );
}

#[derive(Module, Debug)]
struct Other {
    embed: burn::nn::Embedding,
    blocks: Vec<common::model::Block>,
    surplus: Param<Tensor<1>>,
}

#[test]
fn strict_loading_reports_every_problem_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let path = dir.path().join("net.bpk");
    trained(&device).save_pack(&path).unwrap();
    let other = Other {
        embed: burn::nn::EmbeddingConfig::new(11, 4).init(&device),
        blocks: vec![],
        surplus: Param::from_data([1.0, 2.0], &device),
    };
    let err = other.load_pack(&path).unwrap_err();
    let ModuleError::Mismatch { file, mismatch } = &err else {
        panic!("{err}")
    };
    assert_eq!(file, &path.display().to_string());
    assert_eq!(mismatch.missing, ["surplus"]);
    assert!(
        mismatch
            .unused
            .contains(&"blocks.0.linear.weight".to_string())
    );
    assert!(mismatch.unused.contains(&"bn.running_mean".to_string()));
    assert_eq!(mismatch.shapes.len(), 1);
    assert_eq!(
        (
            mismatch.shapes[0].path.as_str(),
            &mismatch.shapes[0].expected[..],
            &mismatch.shapes[0].found[..]
        ),
        ("embed.weight", &[11, 4][..], &[10, 4][..])
    );
    let message = err.to_string();
    assert!(
        message.contains("surplus")
            && message.contains("embed.weight")
            && message.contains("blocks.1.norm.gamma"),
        "{message}"
    );
}

#[test]
fn partial_unused_filter_and_rename_options() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let source = trained(&device);
    let expected = snapshot(&source);
    let path = dir.path().join("net.bpk");
    source.save_pack(&path).unwrap();

    // Filter: only the blocks are loaded, everything else keeps its value.
    let fresh = Net::new(&device);
    let before = snapshot(&fresh);
    let loaded = fresh
        .load_pack_with(
            &path,
            &LoadOptions::new().filter_regex(r"^blocks\.").unwrap(),
        )
        .unwrap();
    let after = snapshot(&loaded);
    for (k, v) in &after {
        let reference = if k.starts_with("blocks.") {
            &expected[k]
        } else {
            &before[k]
        };
        assert_eq!(v, reference, "{k}");
    }
    // A predicate filter works the same way.
    let loaded = Net::new(&device)
        .load_pack_with(
            &path,
            &LoadOptions::new().filter(|p| p.starts_with("conv.")),
        )
        .unwrap();
    assert_eq!(snapshot(&loaded)["conv.weight"], expected["conv.weight"]);

    // Partial and unused: a model with a surplus parameter and missing ones.
    let other = || Other {
        embed: burn::nn::EmbeddingConfig::new(10, 4).init(&device),
        blocks: (0..2)
            .map(|_| common::model::Block {
                linear: burn::nn::LinearConfig::new(4, 4).init(&device),
                norm: burn::nn::LayerNormConfig::new(4).init(&device),
            })
            .collect(),
        surplus: Param::from_data([1.0, 2.0], &device),
    };
    assert!(
        other()
            .load_pack_with(&path, &LoadOptions::new().allow_unused(true))
            .is_err()
    );
    assert!(
        other()
            .load_pack_with(&path, &LoadOptions::new().allow_partial(true))
            .is_err()
    );
    let loaded = other()
        .load_pack_with(
            &path,
            &LoadOptions::new().allow_partial(true).allow_unused(true),
        )
        .unwrap();
    assert_eq!(snapshot(&loaded)["embed.weight"], expected["embed.weight"]);
    assert_eq!(
        snapshot(&loaded)["surplus"].3,
        snapshot(&other())["surplus"].3
    );

    // Rename: a file saved under a prefix loads after stripping it.
    #[derive(Module, Debug)]
    struct Wrapped {
        model: Net,
    }
    let wrapped_path = dir.path().join("wrapped.bpk");
    Wrapped {
        model: trained(&device),
    }
    .save_pack(&wrapped_path)
    .unwrap();
    let strict = Net::new(&device).load_pack(&wrapped_path).unwrap_err();
    assert!(matches!(strict, ModuleError::Mismatch { .. }));
    let loaded = Net::new(&device)
        .load_pack_with(
            &wrapped_path,
            &LoadOptions::new().rename(r"^model\.", "").unwrap(),
        )
        .unwrap();
    let reader = Reader::open(&wrapped_path).unwrap();
    assert_eq!(
        snapshot(&loaded)["embed.weight"].0,
        reader
            .tensor("model.embed.weight")
            .unwrap()
            .param_id()
            .unwrap()
    );
    // Two names renamed onto one are reported.
    let err = Net::new(&device)
        .load_pack_with(
            &path,
            &LoadOptions::new()
                .rename(r"^blocks\.\d+\.", "blocks.0.")
                .unwrap(),
        )
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = err else {
        panic!()
    };
    assert!(
        mismatch
            .collisions
            .contains(&"blocks.0.linear.weight".to_string()),
        "{mismatch}"
    );
}

#[test]
fn dtype_policies() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let path = dir.path().join("net.bpk");
    trained(&device).save_pack(&path).unwrap();

    let stored = Net::new(&device).load_pack(&path).unwrap();
    assert_eq!(stored.half.val().dtype(), DType::F16);
    assert_eq!(stored.bhalf.val().dtype(), DType::BF16);

    let cast = Net::new(&device)
        .load_pack_with(
            &path,
            &LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::F32)),
        )
        .unwrap();
    assert_eq!(cast.half.val().dtype(), DType::F32);
    assert_eq!(
        cast.half.val().into_data().try_to_vec::<f32>().unwrap(),
        stored
            .half
            .val()
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap()
    );
    assert_eq!(
        cast.counts.val().dtype(),
        stored.counts.val().dtype(),
        "ints keep their dtype"
    );

    // Cast to the module: a module whose `half` is F32 gets F32.
    let mut target = Net::new(&device);
    target.half = Param::from_data([[0.0f32; 2]; 2], &device);
    let loaded = target
        .load_pack_with(&path, &LoadOptions::new().dtype(DTypePolicy::CastToModule))
        .unwrap();
    assert_eq!(loaded.half.val().dtype(), DType::F32);
    assert_eq!(loaded.bhalf.val().dtype(), DType::BF16);
}

#[test]
fn lazy_parameters_are_filled_without_running_their_initializer() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let path = dir.path().join("w.bpk");
    #[derive(Module, Debug)]
    struct One {
        w: Param<Tensor<2>>,
    }
    let source = One {
        w: Param::from_data([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device),
    };
    source.save_pack(&path).unwrap();
    let lazy = One {
        w: Param::uninitialized(
            ParamId::new(),
            |_, _| panic!("the initializer ran"),
            device.clone(),
            false,
            [2, 3].into(),
        ),
    };
    assert!(!lazy.w.is_initialized());
    let loaded = lazy.load_pack(&path).unwrap();
    assert_eq!(
        loaded.w.val().into_data().try_to_vec::<f32>().unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    assert_eq!(loaded.w.id, source.w.id);
}

#[test]
fn save_mappers_are_honoured_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let path = dir.path().join("mapped.bpk");
    #[derive(Module, Debug)]
    struct Mapped {
        w: Param<Tensor<1>>,
    }
    let model = Mapped {
        w: Param::from_data([1.0, 2.0], &device)
            .save_mapper(|t| t.mul_scalar(10.0))
            .load_mapper(|t| t.div_scalar(10.0)),
    };
    model.save_pack(&path).unwrap();
    let stored: Vec<f32> = bytemuck_f32(&Reader::open(&path).unwrap().bytes("w").unwrap());
    assert_eq!(stored, [10.0, 20.0]);
    let target = Mapped {
        w: Param::from_data([0.0, 0.0], &device).load_mapper(|t| t.div_scalar(10.0)),
    };
    assert_eq!(
        target
            .load_pack(&path)
            .unwrap()
            .w
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        [1.0, 2.0]
    );
}

fn bytemuck_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn save_errors_leave_the_old_file_and_load_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let path = dir.path().join("net.bpk");
    trained(&device).save_pack(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let err = trained(&device)
        .save_pack_with(&path, &SaveOptions::new().overwrite(false))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModuleError::Write(burnpack::WriteError::AlreadyExists { .. })
        ),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);

    let garbage = dir.path().join("garbage.bpk");
    std::fs::write(&garbage, b"not a pack at all").unwrap();
    let err = Net::new(&device).load_pack(&garbage).unwrap_err();
    assert!(matches!(err, ModuleError::Read(_)));
    assert!(err.to_string().contains("garbage.bpk"), "{err}");
}

#[test]
fn a_dtype_the_device_cannot_hold_is_a_clear_error_or_cast() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.bpk");
    let flex = Device::flex();
    let source = trained_with(&flex, true);
    let want = source
        .half
        .val()
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap();
    source.save_pack(&path).unwrap();
    #[allow(deprecated)]
    let ndarray = Device::ndarray();
    assert!(!ndarray.supports_dtype(DType::F16));
    let err = Net::new_with(&ndarray, false).load_pack(&path).unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}")
    };
    let failed: Vec<_> = mismatch.failed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(failed, ["half", "bhalf"]);
    assert!(err.to_string().contains("F16"), "{err}");
    // The documented way out: cast floats on load.
    let loaded = Net::new_with(&ndarray, false)
        .load_pack_with(
            &path,
            &LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::F32)),
        )
        .unwrap();
    assert_eq!(
        loaded.half.val().into_data().try_to_vec::<f32>().unwrap(),
        want
    );
}
