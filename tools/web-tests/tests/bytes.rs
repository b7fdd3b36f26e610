//! burnpack through bytes only, as a web page or a WASI program uses it: no file system, no
//! threads of its own. Built for `wasm32-wasip1` and run under wasmtime by `.ci/run`; the same
//! tests run on the host.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Bytes, DType, Device, Tensor, TensorData};
use burnpack::module::DTypePolicy;
use burnpack::read::Reader;
use burnpack::module::{LoadOptions, PackModule};

#[derive(Module, Debug)]
struct Tiny {
    linear: Linear,
    scale: Param<Tensor<1>>,
}

impl Tiny {
    fn new(device: &Device) -> Self {
        Self {
            linear: LinearConfig::new(4, 3).init(device),
            scale: Param::from_data([0.5f32, 1.5, 2.5], device),
        }
    }

    /// A fixed model (the same bytes on every target).
    fn fixed(device: &Device) -> Self {
        let weight: Vec<f32> = (0..12).map(|i| i as f32 / 8.0 - 0.75).collect();
        let mut tiny = Self::new(device);
        tiny.linear.weight = Param::from_data(TensorData::new(weight, [4, 3]), device);
        tiny.linear.bias = Some(Param::from_data([0.25f32, -0.5, 1.0], device));
        tiny
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.linear.forward(x) * self.scale.val().unsqueeze()
    }
}

fn values(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn input(device: &Device) -> Tensor<2> {
    Tensor::from_data([[1.0f32, -2.0, 0.5, 3.0]], device)
}

#[test]
fn a_model_round_trips_through_bytes() {
    let device = Device::flex();
    let model = Tiny::fixed(&device);
    let bytes = model.to_pack_bytes().unwrap();
    let loaded = Tiny::new(&device)
        .load_pack_bytes(bytes.clone(), &LoadOptions::new().verify_checksums(true))
        .unwrap();
    assert_eq!(
        values(loaded.forward(input(&device))),
        values(model.forward(input(&device)))
    );
    // Every tensor checksummed, and the checksums verified as they are read.
    let reader = Reader::from_bytes(bytes).unwrap();
    for info in reader.tensors() {
        let data = reader.read(info).unwrap();
        assert!(reader.check(info, &data).unwrap(), "{}", info.name());
    }
}

#[test]
fn damaged_bytes_are_errors_naming_what_is_wrong() {
    let device = Device::flex();
    let bytes = Tiny::fixed(&device).to_pack_bytes().unwrap();
    let reader = Reader::from_bytes(bytes.clone()).unwrap();
    let scale = reader.tensor("scale").unwrap();
    let at = scale.offset() as usize;
    // A flipped bit in a tensor: its checksum names it.
    let mut flipped = bytes.to_vec();
    flipped[at] ^= 1;
    let err = Tiny::new(&device)
        .load_pack_bytes(
            Bytes::from_bytes_vec(flipped),
            &LoadOptions::new().verify_checksums(true),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("scale") && err.contains("checksum"), "{err}");
    // A flipped bit in the header or metadata: refused when opened.
    for at in [1, 40] {
        let mut flipped = bytes.to_vec();
        flipped[at] ^= 0x10;
        assert!(
            Reader::from_bytes(Bytes::from_bytes_vec(flipped)).is_err(),
            "byte {at}"
        );
    }
    // Cut short.
    let cut = Bytes::from_bytes_vec(bytes[..bytes.len() - 3].to_vec());
    assert!(Reader::from_bytes(cut).is_err());
}

#[test]
fn the_loaders_options_work_on_bytes() {
    let device = Device::flex();
    let bytes = Tiny::fixed(&device).to_pack_bytes().unwrap();
    // Strict: a model with another shape is named.
    #[derive(Module, Debug)]
    struct Other {
        linear: Linear,
    }
    let other = Other {
        linear: LinearConfig::new(5, 3).init(&device),
    };
    let err = other
        .load_pack_bytes(bytes.clone(), &LoadOptions::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("linear.weight") && err.contains("scale"),
        "{err}"
    );
    // Cast to half precision on the way in.
    let half = Tiny::new(&device)
        .load_pack_bytes(
            bytes,
            &LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::F16)),
        )
        .unwrap();
    assert_eq!(half.scale.val().dtype(), DType::F16);
}

/// The pack the embedded-weights test includes, written here on the host on request.
const TINY: &[u8] = burnpack::include_pack!("../tiny.bpk");

#[test]
fn an_embedded_pack_loads_as_views_of_the_program() {
    let device = Device::flex();
    let written = Tiny::fixed(&device).to_pack_bytes().unwrap();
    if std::env::var_os("BURNPACK_WRITE_TINY").is_some() {
        std::fs::write(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tiny.bpk"),
            &written[..],
        )
        .unwrap();
    }
    assert_eq!(TINY.as_ptr() as usize % 256, 0);
    let reader = Reader::from_static(TINY).unwrap();
    // The committed pack holds the model written here (parameter ids aside: they are new on
    // every run).
    let fresh = Reader::from_bytes(written).unwrap();
    assert_eq!(reader.tensors().len(), fresh.tensors().len());
    for info in fresh.tensors() {
        let stored = reader
            .tensor(info.name())
            .expect("tiny.bpk is stale: BURNPACK_WRITE_TINY=1 cargo test");
        assert_eq!(
            (stored.dtype(), stored.shape()),
            (info.dtype(), info.shape())
        );
        assert!(
            reader.read(stored).unwrap()[..] == fresh.read(info).unwrap()[..],
            "tiny.bpk is stale"
        );
    }
    let (model, report) = Tiny::new(&device)
        .load_from_source_with_report(&reader, &LoadOptions::new())
        .unwrap();
    assert_eq!(report.copied(), &[], "every tensor a view");
    assert_eq!(
        values(model.forward(input(&device))),
        values(Tiny::fixed(&device).forward(input(&device)))
    );
    // The parameter's bytes are the program's own (the tensor, taken out of its parameter, is
    // handed back without a copy).
    let data = model.scale.into_value().into_data();
    let at = data.as_bytes().as_ptr() as usize;
    let range = TINY.as_ptr() as usize..TINY.as_ptr() as usize + TINY.len();
    assert!(range.contains(&at), "{at:x} outside {range:x?}");
}

#[test]
fn safetensors_bytes_load_into_a_module() {
    let device = Device::flex();
    let weight: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let bias = [1.0f32, 2.0, 3.0];
    let scale = [0.5f32, 1.5, 2.5];
    let raw = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (w, b, s) = (raw(&weight), raw(&bias), raw(&scale));
    let views = [
        (
            "linear.weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 3], &w).unwrap(),
        ),
        (
            "linear.bias",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3], &b).unwrap(),
        ),
        (
            "scale",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3], &s).unwrap(),
        ),
    ];
    let bytes = safetensors::serialize(views, None).unwrap();
    let source = burnpack::interop::safetensors::SafetensorsSource::from_bytes(
        Bytes::from_bytes_vec(bytes),
        &burnpack::source::OpenOptions::new(),
    )
    .unwrap();
    let model = Tiny::new(&device)
        .load_from_source(&source, &LoadOptions::new())
        .unwrap();
    assert_eq!(
        model
            .linear
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        weight
    );
    assert_eq!(
        model.scale.val().into_data().try_to_vec::<f32>().unwrap(),
        scale
    );
}

/// A WASI program has files but no threads and no memory maps: saving runs its writers on the
/// calling thread, loading reads the file.
#[test]
fn a_model_saves_to_and_loads_from_a_file() {
    let device = Device::flex();
    let model = Tiny::fixed(&device);
    let path = std::path::Path::new("web-tests-save.bpk");
    let written = model.save_pack(path);
    let loaded = written.and_then(|_| Tiny::new(&device).load_pack(path));
    let _ = std::fs::remove_file(path);
    let loaded = loaded.unwrap();
    assert_eq!(
        values(loaded.forward(input(&device))),
        values(model.forward(input(&device)))
    );
}

/// Bytes a web page fetched (a `Vec<u8>`, or a JavaScript buffer copied into one) load
/// without a second copy (`read::bytes_from_vec`): the parameters are windows of that vector.
#[test]
fn fetched_bytes_load_without_a_second_copy() {
    let device = Device::flex();
    let fetched: Vec<u8> = Tiny::fixed(&device).to_pack_bytes().unwrap().to_vec();
    let range = fetched.as_ptr_range();
    let (start, end) = (range.start as usize, range.end as usize);
    let model = Tiny::new(&device)
        .load_pack_bytes(burnpack::source::bytes_from_vec(fetched), &LoadOptions::new())
        .unwrap();
    let data = model.scale.into_value().into_data();
    let at = data.as_bytes().as_ptr() as usize;
    assert!(
        (start..end).contains(&at),
        "{at:x} outside {start:x}..{end:x}"
    );
}
