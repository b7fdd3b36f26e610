//! The shapes the next rooms build on: any `TensorSource` loads into a module, a pack may
//! declare the namespace of its module parameters, and writing options nest in `SaveOptions`.

use burn::module::{Module, Param};
use burn::tensor::{Bytes, Device, Tensor};
use burnpack::format::{NAMESPACE_KEY, TensorInfo};
use burnpack::module::{LoadOptions, PackModule, SaveOptions};
use burnpack::read::Reader;
use burnpack::source::{ReadError, TensorSource};
use burnpack::write::WriteOptions;
use burnpack::{Entry, Writer};

#[derive(Module, Debug)]
struct Tiny {
    w: Param<Tensor<1>>,
}

impl Tiny {
    fn new(values: [f32; 2], device: &Device) -> Self {
        Self {
            w: Param::from_data(values, device),
        }
    }
}

fn values(model: &Tiny) -> Vec<f32> {
    model.w.val().into_data().try_to_vec().unwrap()
}

/// A pack holding `w` twice: at the top level (2, 3) and under `ema.` (20, 30), with
/// `namespace` declared when given.
fn two_copies(namespace: Option<&str>) -> Bytes {
    let entry = |name: &str, v: [f32; 2]| {
        Entry::resident(
            name,
            burn::tensor::DType::F32,
            vec![2],
            Bytes::from_elems(v.to_vec()),
        )
    };
    let writer = Writer::new(vec![entry("w", [2.0, 3.0]), entry("ema.w", [20.0, 30.0])]);
    match namespace {
        Some(ns) => writer.with_metadata(NAMESPACE_KEY, ns),
        None => writer,
    }
    .into_bytes()
    .unwrap()
}

#[test]
fn a_declared_namespace_is_what_the_module_loader_reads() {
    let device = Device::flex();
    let loaded = Tiny::new([0.0; 2], &device)
        .load_pack_bytes(two_copies(Some("ema.")), &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), [20.0, 30.0]);
    // Without the declaration every tensor is a parameter: `ema.w` is unused.
    let err = Tiny::new([0.0; 2], &device)
        .load_pack_bytes(two_copies(None), &LoadOptions::new())
        .unwrap_err();
    assert!(err.to_string().contains("1 unused: ema.w"), "{err}");
}

/// Another source of tensors, in a few lines: a reader seen under a namespace chosen by the
/// caller (what a safetensors or remote source does with its own table).
struct Scoped<'a> {
    reader: &'a Reader,
    namespace: &'a str,
}

impl TensorSource for Scoped<'_> {
    fn file(&self) -> &str {
        "scoped"
    }
    fn tensors(&self) -> &[TensorInfo] {
        self.reader.tensors()
    }
    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        self.reader.read(info)
    }
    fn namespace(&self) -> Option<&str> {
        Some(self.namespace)
    }
}

#[test]
fn any_tensor_source_loads_into_a_module_with_the_same_options() {
    let device = Device::flex();
    let reader = Reader::from_bytes(two_copies(None)).unwrap();
    let source = Scoped {
        reader: &reader,
        namespace: "ema.",
    };
    let loaded = Tiny::new([0.0; 2], &device)
        .load_from_source(&source, &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), [20.0, 30.0]);
    // Errors name the source.
    let err = Tiny::new([0.0; 2], &device)
        .load_from_source(
            &Scoped {
                reader: &reader,
                namespace: "none.",
            },
            &LoadOptions::new(),
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("scoped: "), "{err}");
    assert!(err.to_string().contains("missing: w"), "{err}");
}

#[test]
fn save_options_reach_every_write_option_including_burns_exact_bytes() {
    let device = Device::flex();
    let model = Tiny::new([1.0, 2.0], &device);
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.bpk");
    model
        .save_pack_with(
            &plain,
            &SaveOptions::new().write(WriteOptions::new().checksums(false).threads(1)),
        )
        .unwrap();
    let reader = Reader::open(&plain).unwrap();
    assert!(!reader.layout().has_checksums());
    assert!(
        !reader.metadata().contains_key("producer"),
        "no producer of ours on a file without checksums"
    );
    // Burn's writer, given the same tensor, writes the same bytes.
    let info = reader.tensor("w").unwrap();
    let burns = burn_pack::Writer::new(vec![burn_pack::Tensor::new(
        "w".to_string(),
        info.dtype(),
        info.shape().to_vec(),
        info.param_id(),
        reader.read(info).unwrap(),
    )])
    .into_bytes()
    .unwrap();
    assert_eq!(std::fs::read(&plain).unwrap(), burns.to_vec());
    // The default keeps checksums and the producer.
    let checked = dir.path().join("checked.bpk");
    model.save_pack_with(&checked, &SaveOptions::new()).unwrap();
    let reader = Reader::open(&checked).unwrap();
    assert!(reader.layout().has_checksums());
    assert_eq!(reader.metadata()["producer"], burnpack::module::PRODUCER);
    assert!(
        SaveOptions::new().checksums(false).write_options()
            == &WriteOptions::new().checksums(false)
    );
}

#[test]
fn checkpoints_written_before_the_namespace_key_still_load_as_models() {
    let device = Device::flex();
    let entry = Entry::resident(
        "model.w",
        burn::tensor::DType::F32,
        vec![2],
        Bytes::from_elems(vec![4.0f32, 5.0]),
    );
    let bytes = Writer::new(vec![entry])
        .with_metadata("burnpack.kind", "checkpoint")
        .with_scalar("progress.step", 3u64)
        .into_bytes()
        .unwrap();
    let loaded = Tiny::new([0.0; 2], &device)
        .load_pack_bytes(bytes, &LoadOptions::new())
        .unwrap();
    assert_eq!(values(&loaded), [4.0, 5.0]);
}
