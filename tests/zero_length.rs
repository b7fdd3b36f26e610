//! Zero-length tensors (a shape with a 0) in every position of a pack, through every sink:
//! memory, files (atomic and in place, 1 to 4 threads, resident and deferred entries), module
//! saves and the safetensors writer. Without checksums the bytes are Burn's
//! `burn_pack::Writer`'s; with them the file verifies. (The object-store upload stream is in
//! `tests/object_store.rs`.)

mod common;

use burn::module::{Module, Param};
use burn::tensor::{Bytes, Device, Tensor, TensorData};
use burnpack::module::PackModule;
use burnpack::read::Reader;
use burnpack::{Entry, WriteMode, Writer};
use common::{Spec, burns, zero_length_cases};

fn entries(specs: &[Spec], deferred: bool) -> Vec<Entry> {
    specs
        .iter()
        .map(|s| {
            if deferred {
                s.deferred_entry()
            } else {
                s.entry()
            }
        })
        .collect()
}

#[test]
fn zero_length_tensors_in_every_position_write_burns_bytes_to_every_sink() {
    let dir = tempfile::tempdir().unwrap();
    for (case, specs) in zero_length_cases() {
        let expected = burns(&specs);
        for deferred in [false, true] {
            let label = format!("{case} (deferred: {deferred})");
            let memory = Writer::new(entries(&specs, deferred))
                .checksums(false)
                .into_bytes()
                .unwrap();
            assert!(memory[..] == expected[..], "{label}: memory");
            for mode in [WriteMode::Atomic, WriteMode::InPlace] {
                for threads in 1..=4 {
                    let path = dir.path().join("pack.bpk");
                    let written = Writer::new(entries(&specs, deferred))
                        .checksums(false)
                        .mode(mode)
                        .threads(threads)
                        .write_to_file(&path)
                        .unwrap_or_else(|e| panic!("{label}, {mode:?}, {threads} threads: {e}"));
                    assert_eq!(written, expected.len() as u64, "{label}");
                    assert!(
                        std::fs::read(&path).unwrap() == expected,
                        "{label}, {mode:?}, {threads} threads: bytes differ from Burn's"
                    );
                    // With checksums: written, and every checksum verifies.
                    Writer::new(entries(&specs, deferred))
                        .mode(mode)
                        .threads(threads)
                        .write_to_file(&path)
                        .unwrap_or_else(|e| panic!("{label}, {mode:?}, {threads} threads: {e}"));
                    let reader = Reader::open(&path).unwrap();
                    assert_eq!(reader.verify_all().unwrap(), specs.len(), "{label}");
                    for spec in &specs {
                        assert_eq!(reader.bytes(&spec.name).unwrap()[..], spec.data[..]);
                    }
                }
            }
        }
    }
}

#[derive(Module, Debug)]
struct WithEmpty {
    big: Param<Tensor<2>>,
    empty: Param<Tensor<1>>,
    after: Param<Tensor<1>>,
}

fn with_empty(device: &Device, seed: f32) -> WithEmpty {
    let big: Vec<f32> = (0..1024 * 1024).map(|i| i as f32 * 0.5 + seed).collect();
    WithEmpty {
        big: Param::from_tensor(Tensor::from_data(
            TensorData::new(big, [1024, 1024]),
            device,
        )),
        empty: Param::from_tensor(Tensor::from_data(
            TensorData::new(Vec::<f32>::new(), [0]),
            device,
        )),
        after: Param::from_data([seed, 2.0], device),
    }
}

#[test]
fn a_module_with_an_empty_parameter_after_a_large_one_saves_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    let device = Device::flex();
    let model = with_empty(&device, 1.0);
    model.save_pack(&path).unwrap();
    assert_eq!(Reader::open(&path).unwrap().verify_all().unwrap(), 3);
    let loaded = with_empty(&device, 0.0).load_pack(&path).unwrap();
    assert_eq!(loaded.empty.val().dims(), [0]);
    assert_eq!(
        loaded.big.val().into_data().as_bytes(),
        model.big.val().into_data().as_bytes()
    );
    assert_eq!(
        loaded.after.val().into_data().try_to_vec::<f32>().unwrap(),
        [1.0, 2.0]
    );
    // Burn loads it too.
    let burn = burn_pack::Reader::from_bytes(Bytes::from_bytes_vec(std::fs::read(&path).unwrap()))
        .unwrap()
        .into_tensors()
        .unwrap();
    assert_eq!(burn.len(), 3);
}

#[cfg(feature = "safetensors")]
#[test]
fn zero_length_tensors_convert_to_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    for (case, specs) in zero_length_cases() {
        let pack = dir.path().join("pack.bpk");
        let out = dir.path().join("pack.safetensors");
        Writer::new(entries(&specs, true))
            .write_to_file(&pack)
            .unwrap();
        burnpack::interop::safetensors::burnpack_to_safetensors(&pack, &out)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let bytes = std::fs::read(&out).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.len(), specs.len(), "{case}");
        for spec in &specs {
            let view = st.tensor(&spec.name).unwrap();
            assert_eq!(view.shape(), &spec.shape[..], "{case}: {}", spec.name);
            assert_eq!(view.data(), &spec.data[..], "{case}: {}", spec.name);
        }
    }
    // A module straight to safetensors.
    let model = with_empty(&Device::flex(), 1.0);
    burnpack::interop::safetensors::save_safetensors(&model, out_path(&dir), None).unwrap();
    let bytes = std::fs::read(out_path(&dir)).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("empty").unwrap().shape(), [0]);
}

#[cfg(feature = "safetensors")]
fn out_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("module.safetensors")
}
