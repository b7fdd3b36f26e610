//! `PackStore` in place of burn-store's `BurnpackStore`: each behaviour of Burn's store
//! (round trips, bytes mode, filters, remapping, the PyTorch adapters, partial loads, unused
//! tensors, validation) is run through both stores and must report the same `ApplyResult` and
//! load the same values; files interchange both ways; every error path names its file.

mod common;

use burn::module::{Module, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::store::{
    ApplyResult, BurnToPyTorchAdapter, BurnpackStore, KeyRemapper, ModuleSnapshot, ModuleStore,
    PyTorchToBurnAdapter,
};
use burn::tensor::{Device, Tensor};
use burnpack::read::Reader;
use burnpack::store::{PackStore, StoreError};
use common::model::{Block, Net, snapshot, trained};

/// The same builder calls on both stores: `(ours, burn's)`.
macro_rules! stores {
    ($ctor:ident($($arg:expr),*) $(.$m:ident($($a:expr),*))*) => {
        (
            PackStore::$ctor($($arg.clone()),*)$(.$m($($a.clone()),*))*,
            BurnpackStore::$ctor($($arg.clone()),*)$(.$m($($a.clone()),*))*,
        )
    };
}

/// An `ApplyResult` in a comparable form: sorted lists, errors as text.
fn report(result: &ApplyResult) -> [Vec<String>; 5] {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    [
        sorted(&result.applied),
        sorted(&result.skipped),
        sorted(
            &result
                .missing
                .iter()
                .map(|(p, c)| format!("{p} in {c}"))
                .collect::<Vec<_>>(),
        ),
        sorted(&result.unused),
        result.errors.iter().map(|e| format!("{e:?}")).collect(),
    ]
}

fn device() -> Device {
    Device::flex()
}

/// What a module holds without the parameter ids: burn-store's applier restores the stored
/// `ParamId` of parameters but not of running states (BatchNorm's statistics), whichever
/// store feeds it.
fn values<M: Module>(module: &M) -> Vec<(String, burn::tensor::DType, Vec<usize>, Vec<u8>)> {
    snapshot(module)
        .into_iter()
        .map(|(path, (_, dtype, shape, bytes))| (path, dtype, shape, bytes))
        .collect()
}

#[test]
fn files_interchange_with_burnpack_store_both_ways() {
    let device = device();
    let model = trained(&device);
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = (dir.path().join("ours.bpk"), dir.path().join("theirs.bpk"));
    model.save_into(&mut PackStore::from_file(&ours)).unwrap();
    model
        .save_into(&mut BurnpackStore::from_file(&theirs))
        .unwrap();

    // Same tensors (names, dtypes, shapes, param ids, bytes) in both files.
    let (a, b) = (Reader::open(&ours).unwrap(), Reader::open(&theirs).unwrap());
    assert_eq!(a.tensors().len(), b.tensors().len());
    for (x, y) in a.tensors().iter().zip(b.tensors()) {
        assert_eq!(
            (x.name(), x.dtype(), x.shape(), x.param_id()),
            (y.name(), y.dtype(), y.shape(), y.param_id())
        );
        assert_eq!(
            a.read(x).unwrap()[..],
            b.read(y).unwrap()[..],
            "{}",
            x.name()
        );
    }
    assert_eq!(
        a.verify_all().unwrap(),
        a.tensors().len(),
        "ours carry checksums"
    );

    // Each store loads the other's file, with the same report.
    let mut by_burn = Net::new(&device);
    let mut by_us = by_burn.clone();
    let burn_result = by_burn
        .load_from(&mut BurnpackStore::from_file(&ours))
        .unwrap();
    let our_result = by_us.load_from(&mut PackStore::from_file(&theirs)).unwrap();
    assert_eq!(report(&our_result), report(&burn_result));
    assert!(our_result.errors.is_empty() && our_result.missing.is_empty());
    assert_eq!(snapshot(&by_us), snapshot(&by_burn));
    assert_eq!(values(&by_us), values(&model));
    assert_eq!(
        snapshot(&by_us)["blocks.1.linear.weight"].0,
        snapshot(&model)["blocks.1.linear.weight"].0,
        "the stored ParamId is restored"
    );
}

#[test]
fn bytes_mode_and_keys() {
    let device = device();
    let model = trained(&device);
    let (mut ours, mut theirs) = stores!(from_bytes(None::<burn::tensor::Bytes>));
    model.save_into(&mut ours).unwrap();
    model.save_into(&mut theirs).unwrap();
    let (bytes, burn_bytes) = (ours.get_bytes().unwrap(), theirs.get_bytes().unwrap());

    let mut ours = PackStore::from_bytes(Some(burn_bytes));
    let mut theirs = BurnpackStore::from_bytes(Some(bytes));
    assert_eq!(ours.keys().unwrap(), theirs.keys().unwrap());
    let key = "blocks.1.linear.weight";
    let (x, y) = (
        ours.get_tensor(key).unwrap().unwrap().clone(),
        theirs.get_tensor(key).unwrap().unwrap().clone(),
    );
    assert_eq!(
        (x.dtype, &x.shape, x.param_id),
        (y.dtype, &y.shape, y.param_id)
    );
    assert_eq!(x.to_bytes().unwrap()[..], y.to_bytes().unwrap()[..]);
    assert_eq!(
        ours.get_all_tensors().unwrap().len(),
        theirs.get_all_tensors().unwrap().len()
    );

    let mut loaded = Net::new(&device);
    loaded.load_from(&mut ours).unwrap();
    assert_eq!(values(&loaded), values(&model));
    assert!(matches!(
        PackStore::from_bytes(None).keys(),
        Err(StoreError::NoBytes)
    ));
}

#[test]
fn filters_on_save_and_on_load_match_burns() {
    let device = device();
    let model = trained(&device);
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.bpk");
    model.save_into(&mut PackStore::from_file(&full)).unwrap();

    // Save side: only the filtered parameters are written.
    let (a, b) = (dir.path().join("a.bpk"), dir.path().join("b.bpk"));
    let (mut ours, _) = stores!(from_file(a).with_regex(r"^blocks\."));
    let (_, mut theirs) = stores!(from_file(b).with_regex(r"^blocks\."));
    model.save_into(&mut ours).unwrap();
    model.save_into(&mut theirs).unwrap();
    let names = |p| -> Vec<String> {
        Reader::open(p)
            .unwrap()
            .tensors()
            .iter()
            .map(|t| t.name().to_string())
            .collect()
    };
    assert_eq!(names(&a), names(&b));
    assert_eq!(names(&a).len(), 8);

    // Load side: the filter skips, and a partial file misses, as in Burn.
    for (file, partial) in [(&full, false), (&a, true)] {
        let (mut ours, mut theirs) = stores!(
            from_file(file)
                .with_full_path("embed.weight")
                .with_regex(r"^blocks\.0\.")
                .allow_partial(partial)
        );
        let mut x = Net::new(&device);
        let mut y = x.clone();
        let ours = x.load_from(&mut ours).unwrap();
        let theirs = y.load_from(&mut theirs).unwrap();
        assert_eq!(report(&ours), report(&theirs));
        assert!(!ours.skipped.is_empty());
        assert_eq!(snapshot(&x), snapshot(&y));
    }

    // Without allow_partial, a file missing parameters is refused by both, naming them.
    let err = Net::new(&device)
        .load_from(&mut PackStore::from_file(&a))
        .unwrap_err();
    assert!(
        Net::new(&device)
            .load_from(&mut BurnpackStore::from_file(&a))
            .is_err()
    );
    let message = err.to_string();
    assert!(
        message.contains("a.bpk")
            && message.contains("Missing tensors")
            && message.contains("embed.weight"),
        "{message}"
    );
    let (mut ours, mut theirs) = stores!(from_file(a).allow_partial(true));
    let mut x = Net::new(&device);
    let mut y = x.clone();
    let (ours, theirs) = (
        x.load_from(&mut ours).unwrap(),
        y.load_from(&mut theirs).unwrap(),
    );
    assert_eq!(snapshot(&x), snapshot(&y));
    assert_eq!(report(&ours), report(&theirs));
    assert!(!ours.missing.is_empty());
}

#[derive(Module, Debug)]
struct OneBlock {
    blocks: Vec<Block>,
}

#[derive(Module, Debug)]
struct Renamed {
    layers: Vec<Block>,
}

fn blocks(device: &Device) -> Vec<Block> {
    (0..2)
        .map(|_| Block {
            linear: LinearConfig::new(4, 4).init(device),
            norm: LayerNormConfig::new(4).init(device),
        })
        .collect()
}

#[test]
fn unused_tensors_and_remapping_match_burns() {
    let device = device();
    let model = trained(&device);
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.bpk");
    model.save_into(&mut PackStore::from_file(&full)).unwrap();

    // A smaller module: everything else in the file is unused.
    let (mut ours, mut theirs) = stores!(from_file(full));
    let mut x = OneBlock {
        blocks: blocks(&device),
    };
    let mut y = x.clone();
    let (r1, r2) = (
        x.load_from(&mut ours).unwrap(),
        y.load_from(&mut theirs).unwrap(),
    );
    assert_eq!(report(&r1), report(&r2));
    assert!(r1.unused.contains(&"embed.weight".to_string()));
    assert_eq!(snapshot(&x), snapshot(&y));

    // Remapping `blocks.` to `layers.`.
    let remap = KeyRemapper::new()
        .add_pattern(r"^blocks\.", "layers.")
        .unwrap();
    let (mut ours, mut theirs) = stores!(from_file(full).remap(remap));
    let mut x = Renamed {
        layers: blocks(&device),
    };
    let mut y = x.clone();
    let (r1, r2) = (
        x.load_from(&mut ours).unwrap(),
        y.load_from(&mut theirs).unwrap(),
    );
    assert_eq!(report(&r1), report(&r2));
    assert!(r1.applied.contains(&"layers.1.norm.gamma".to_string()));
    assert_eq!(snapshot(&x), snapshot(&y));
    let expected = &snapshot(&model)["blocks.1.linear.weight"].3;
    assert_eq!(&snapshot(&x)["layers.1.linear.weight"].3, expected);
    // The builder's pattern form too (an invalid pattern is an error, not a panic).
    let mut store = PackStore::from_file(&full)
        .with_remap_pattern(r"^blocks\.", "layers.")
        .unwrap();
    assert!(
        store
            .keys()
            .unwrap()
            .iter()
            .any(|k| k.starts_with("layers."))
    );
    assert!(
        PackStore::from_file(&full)
            .with_remap_pattern("(", "x")
            .is_err()
    );
}

#[derive(Module, Debug)]
struct Torchish {
    fc: Linear,
    ln: LayerNorm,
}

#[test]
fn pytorch_adapters_match_burns() {
    let device = device();
    let model = Torchish {
        fc: LinearConfig::new(3, 5).init(&device),
        ln: LayerNormConfig::new(5).init(&device),
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.bpk"), dir.path().join("b.bpk"));
    let (mut ours, _) = stores!(from_file(a).with_to_adapter(BurnToPyTorchAdapter));
    let (_, mut theirs) = stores!(from_file(b).with_to_adapter(BurnToPyTorchAdapter));
    model.save_into(&mut ours).unwrap();
    model.save_into(&mut theirs).unwrap();
    let (ra, rb) = (Reader::open(&a).unwrap(), Reader::open(&b).unwrap());
    let names: Vec<_> = ra.tensors().iter().map(|t| t.name().to_string()).collect();
    assert_eq!(
        names,
        ["fc.bias", "fc.weight", "ln.bias", "ln.weight"],
        "PyTorch's names"
    );
    for (x, y) in ra.tensors().iter().zip(rb.tensors()) {
        assert_eq!((x.name(), x.shape()), (y.name(), y.shape()));
        assert_eq!(
            ra.read(x).unwrap()[..],
            rb.read(y).unwrap()[..],
            "{}",
            x.name()
        );
    }
    assert_eq!(
        ra.tensor("fc.weight").unwrap().shape(),
        [5, 3],
        "[out, in] as PyTorch has it"
    );

    // And back into Burn's layout.
    let fresh = || Torchish {
        fc: LinearConfig::new(3, 5).init(&device),
        ln: LayerNormConfig::new(5).init(&device),
    };
    let (mut ours, mut theirs) = stores!(from_file(a).with_from_adapter(PyTorchToBurnAdapter));
    let mut x = fresh();
    let mut y = x.clone();
    let (r1, r2) = (
        x.load_from(&mut ours).unwrap(),
        y.load_from(&mut theirs).unwrap(),
    );
    assert_eq!(report(&r1), report(&r2));
    assert_eq!(snapshot(&x), snapshot(&y));
    let values = |m: &Torchish| {
        snapshot(m)
            .into_iter()
            .map(|(k, v)| (k, v.3))
            .collect::<Vec<_>>()
    };
    assert_eq!(values(&x), values(&model));
}

#[derive(Module, Debug)]
struct Wide {
    w: Param<Tensor<2>>,
}

#[test]
fn errors_name_the_file_and_what_was_wrong() {
    let device = device();
    let dir = tempfile::tempdir().unwrap();
    let model = Wide {
        w: Param::from_data([[1.0f32, 2.0, 3.0]], &device),
    };

    // Missing file.
    let missing = dir.path().join("nowhere.bpk");
    let err = Wide {
        w: Param::from_data([[0.0f32; 3]], &device),
    }
    .load_from(&mut PackStore::from_file(&missing))
    .unwrap_err();
    assert!(
        matches!(err, StoreError::Read(_)) && err.to_string().contains("nowhere.bpk"),
        "{err}"
    );

    // No overwrite by default; allowed when asked. The extension is added as Burn's store does.
    let path = dir.path().join("wide");
    model.save_into(&mut PackStore::from_file(&path)).unwrap();
    assert!(dir.path().join("wide.bpk").exists());
    let err = model
        .save_into(&mut PackStore::from_file(&path))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists(_)) && err.to_string().contains("wide.bpk"),
        "{err}"
    );
    model
        .save_into(&mut PackStore::from_file(&path).overwrite(true))
        .unwrap();
    let exact = dir.path().join("exact");
    model
        .save_into(&mut PackStore::from_file(&exact).auto_extension(false))
        .unwrap();
    assert!(exact.exists());

    // A shape mismatch is an error with validation, reported in the result without.
    let file = dir.path().join("wide.bpk");
    let mut narrow = Wide {
        w: Param::from_data([[0.0f32; 2]], &device),
    };
    let err = narrow
        .load_from(&mut PackStore::from_file(&file))
        .unwrap_err();
    assert!(
        err.to_string().contains("wide.bpk") && err.to_string().contains("ShapeMismatch"),
        "{err}"
    );
    let (mut ours, mut theirs) = stores!(from_file(file).validate(false));
    let mut other = Wide {
        w: Param::from_data([[0.0f32; 2]], &device),
    };
    let (r1, r2) = (
        narrow.load_from(&mut ours).unwrap(),
        other.load_from(&mut theirs).unwrap(),
    );
    assert_eq!(report(&r1), report(&r2));
    assert_eq!(r1.errors.len(), 1);

    // Unverified (the default, as for `load_pack`), a flipped data byte goes unnoticed;
    // verified, it fails its checksum, naming the file and the tensor.
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x08;
    std::fs::write(&file, bytes).unwrap();
    let mut unverified = Wide {
        w: Param::from_data([[0.0f32; 3]], &device),
    };
    unverified
        .load_from(&mut PackStore::from_file(&file))
        .unwrap();
    let err = Wide {
        w: Param::from_data([[0.0f32; 3]], &device),
    }
    .load_from(&mut PackStore::from_file(&file).verify_checksums(true))
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("wide.bpk")
            && message.contains("tensor 'w'")
            && message.contains("checksum mismatch"),
        "{message}"
    );
}

/// Hugging Face / PyTorch weights in safetensors through `PackStore::from_source` and
/// burn-store's `PyTorchToBurnAdapter`, beside burn-store's own `SafetensorsStore`.
#[cfg(feature = "safetensors")]
#[test]
fn pytorch_safetensors_through_a_source_match_safetensors_store() {
    use burn::store::SafetensorsStore;
    use burnpack::interop::safetensors::SafetensorsSource;
    let device = device();
    let model = Torchish {
        fc: LinearConfig::new(3, 5).init(&device),
        ln: LayerNormConfig::new(5).init(&device),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torch.safetensors");
    // Written in PyTorch's layout and names ([out, in], weight/bias) by burn-store.
    model
        .save_into(&mut SafetensorsStore::from_file(&path).with_to_adapter(BurnToPyTorchAdapter))
        .unwrap();
    let source = SafetensorsSource::open(&path).unwrap();
    assert_eq!(
        burnpack::source::TensorSource::tensors(&source)
            .iter()
            .find(|t| t.name() == "fc.weight")
            .unwrap()
            .shape(),
        [5, 3]
    );
    let fresh = || Torchish {
        fc: LinearConfig::new(3, 5).init(&device),
        ln: LayerNormConfig::new(5).init(&device),
    };
    let mut x = fresh();
    let mut y = x.clone();
    let mut ours = PackStore::from_source(source).with_from_adapter(PyTorchToBurnAdapter);
    let r1 = x.load_from(&mut ours).unwrap();
    let r2 = y
        .load_from(&mut SafetensorsStore::from_file(&path).with_from_adapter(PyTorchToBurnAdapter))
        .unwrap();
    assert_eq!(report(&r1), report(&r2));
    assert_eq!(values(&x), values(&model));
    assert_eq!(snapshot(&x), snapshot(&y));
    // Such a store is read-only.
    let err = model.save_into(&mut ours).unwrap_err();
    assert!(
        matches!(err, StoreError::ReadOnly(_)) && err.to_string().contains("torch.safetensors"),
        "{err}"
    );
}

/// `PackStore`'s files name this crate as producer (with checksums on), and every single-bit
/// flip in their header and metadata is noticed.
#[test]
fn pack_store_files_name_the_producer_and_every_flip_is_detected() {
    let model = trained(&device());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.bpk");
    model.save_into(&mut PackStore::from_file(&path)).unwrap();
    common::assert_written_here("PackStore::from_file", &std::fs::read(&path).unwrap());
    let mut bytes = PackStore::from_bytes(None).clear_metadata();
    model.save_into(&mut bytes).unwrap();
    common::assert_written_here("PackStore::from_bytes", &bytes.get_bytes().unwrap());
}

#[test]
fn overwrite_is_one_knob_that_save_options_do_not_turn_on() {
    use burnpack::module::SaveOptions;
    let device = device();
    let model = trained(&device);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("once.bpk");
    model.save_into(&mut PackStore::from_file(&path)).unwrap();
    // Options that would overwrite do not: the store's knob is off until it is turned on.
    let err = model
        .save_into(
            &mut PackStore::from_file(&path).save_options(SaveOptions::new().overwrite(true)),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists(_)), "{err}");
    // Turned on, before or after the save options, it holds.
    for mut store in [
        PackStore::from_file(&path)
            .overwrite(true)
            .save_options(SaveOptions::new().threads(1)),
        PackStore::from_file(&path)
            .save_options(SaveOptions::new().threads(1))
            .overwrite(true),
    ] {
        model.save_into(&mut store).unwrap();
    }
}
