//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`), shared with the corpus replay
//! test (`tests/fuzz_corpus.rs`): one per source, each opening arbitrary bytes from memory
//! (no temporary file) and holding whatever opens to the source contract
//! ([`assert_source_contract`]). Any panic is a bug; errors are the expected outcome. Not
//! part of the API.

use burn::tensor::Bytes;

use crate::format::Limits;
use crate::read::Reader;
use crate::source::assert_source_contract;

fn bytes(data: &[u8]) -> Bytes {
    Bytes::from_bytes_vec(data.to_vec())
}

/// Bytes as a pack, through the reader and through the `no_std` `PackSlice`, which must agree
/// on whether the bytes are a pack and hand out the same tensor bytes.
pub fn reader(data: &[u8]) {
    let slice = crate::format::PackSlice::new(data, &Limits::default());
    let reader = Reader::from_bytes(bytes(data));
    assert_eq!(
        slice.is_ok(),
        reader.is_ok(),
        "PackSlice and Reader disagree"
    );
    if let (Ok(reader), Ok(slice)) = (reader, slice) {
        assert_source_contract(&reader);
        for info in slice.tensors() {
            let read = crate::source::TensorSource::read(&reader, info);
            let native_bool = matches!(
                info.dtype(),
                burn::tensor::DType::Bool(burn::tensor::BoolStore::Native)
            );
            match (&read, slice.data(info)) {
                // The reader hands on no bool byte but 0 and 1 (a flipped one is damage or no
                // bool); `PackSlice` gives the raw bytes, which then hold another.
                (
                    Err(
                        crate::source::ReadError::Unsupported { .. }
                        | crate::source::ReadError::Checksum { .. },
                    ),
                    Ok(raw),
                ) if native_bool => {
                    assert!(raw.iter().any(|&b| b > 1), "{}", info.name());
                }
                (read, raw) => assert_eq!(raw.ok(), read.as_deref().ok(), "{}", info.name()),
            }
            let _ = slice.checked(info);
        }
        let _ = reader.verify_all();
    }
}

/// Bytes as the index of a sharded safetensors or `PyTorch` model (`*.index.json`): parsed
/// and checked (shard names, counts), whatever it holds; every tensor it routes goes to one of
/// its shards.
#[cfg(any(feature = "safetensors", feature = "pytorch"))]
pub fn index(data: &[u8]) {
    let path = std::path::Path::new("fuzz/model.safetensors.index.json");
    let max = Limits::default().max_tensor_count;
    if let Ok(index) = super::index::ShardIndex::parse(data, path, "safetensors", max) {
        let routed: usize = (0..index.shards.len()).map(|i| index.routed(i)).sum();
        assert!(routed > 0 && routed <= max, "{routed} tensors routed");
        for shard in &index.shards {
            assert_eq!(shard.parent(), path.parent(), "{}", shard.display());
        }
    }
}

/// Bytes as a safetensors file.
#[cfg(feature = "safetensors")]
pub fn safetensors(data: &[u8]) {
    if let Ok(source) = super::safetensors::SafetensorsSource::from_bytes(
        bytes(data),
        &crate::source::OpenOptions::new(),
    ) {
        assert_source_contract(&source);
    }
}

/// Bytes as a `torch.save` file (zip or legacy).
#[cfg(feature = "pytorch")]
pub fn pytorch(data: &[u8]) {
    let options = crate::source::OpenOptions::new();
    if let Ok(source) = super::pytorch::PytorchSource::from_bytes(bytes(data), &options) {
        assert_source_contract(&source);
        let _ = crate::source::TensorSource::verify_structure(&source);
    }
}

/// Bytes as a record of Burn 0.14-0.21 (format told by the content).
#[cfg(feature = "legacy")]
pub fn burn_record(data: &[u8]) {
    if let Ok(source) = super::burn_record::LegacySource::from_bytes(
        bytes(data),
        &crate::source::OpenOptions::new(),
    ) {
        assert_source_contract(&source);
    }
}

/// Bytes as a GGUF file.
#[cfg(feature = "gguf")]
pub fn gguf(data: &[u8]) {
    // Dequantized, and with the blocks Burn holds exactly kept quantized.
    for keep in [false, true] {
        let options = crate::source::OpenOptions::new().keep_quantized(keep);
        if let Ok(source) = super::gguf::GgufSource::from_bytes(bytes(data), &options) {
            assert_source_contract(&source);
            let _ = crate::source::DescribedSource::describe(&source);
        }
    }
}

/// Bytes as a NumPy `.npy` array or `.npz` archive.
#[cfg(feature = "numpy")]
pub fn numpy(data: &[u8]) {
    // The default limits, and a small inflation bound (a deflated member of the corpus is
    // over it).
    let small = Limits::default().with_max_inflation(1);
    for limits in [Limits::default(), small] {
        let options = crate::source::OpenOptions::new().limits(limits);
        if let Ok(source) = super::numpy::NumpySource::from_bytes(bytes(data), &options) {
            assert_source_contract(&source);
            let _ = crate::source::DescribedSource::describe(&source);
        }
    }
}

/// Bytes as an ONNX model (its initializers).
#[cfg(feature = "onnx")]
pub fn onnx(data: &[u8]) {
    if let Ok(source) =
        super::onnx::OnnxSource::from_bytes(bytes(data), &crate::source::OpenOptions::new())
    {
        assert_source_contract(&source);
        let _ = crate::source::DescribedSource::describe(&source);
    }
}

/// Bytes of any format, through the container registry.
pub fn any(data: &[u8]) {
    let options = crate::source::OpenOptions::new().limits(Limits::default());
    if let Ok(source) = super::open_bytes_any(bytes(data), &options) {
        assert_source_contract(source.as_tensor_source());
        let _ = source.describe();
    }
}

/// Bytes as a pack on (in-memory) object storage, opened with ranged requests; a tensor that
/// fails its checksum as it arrives is an error, any other must read whole.
#[cfg(feature = "object-store")]
pub fn object_source(data: &[u8]) {
    use std::sync::Arc;

    use super::object_store::{Bucket, ObjectLocation, ObjectSource};
    use crate::source::TensorSource;
    let store = Arc::new(::object_store::memory::InMemory::new());
    let location = ObjectLocation::new(store as Arc<dyn Bucket>, "fuzz.bpk");
    if location.put_all(data.to_vec()).is_err() {
        return;
    }
    if let Ok(source) = ObjectSource::open(&location) {
        for info in source.tensors() {
            if let Ok(read) = source.read(info) {
                assert_eq!(read.len() as u64, info.len(), "{}", info.name());
            }
        }
    }
}

/// Bytes as the references of an incremental checkpoint (`burnpack.refs`): a manifest carrying
/// them is opened against an in-memory storage that holds two data files (`model.w`, 8 bytes;
/// `model.v`, empty); whatever opens reads, verifies and checks every tensor, and each one it
/// lists is a tensor of those files.
#[cfg(feature = "optim")]
pub fn manifest(data: &[u8]) {
    use crate::checkpoint::{Checkpoint, DATA_KIND, INCREMENTAL_KEY, KIND, KIND_KEY, REFS_KEY};
    use crate::write::{Entry, Writer};
    use burn::tensor::DType;

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let storage = memory::Memory::default();
    let data_file = |name: &str, entries: Vec<Entry>| {
        let bytes = Writer::new(entries)
            .metadata(KIND_KEY, DATA_KIND)
            .into_bytes()
            .expect("a pack of two tensors");
        storage.put(name, bytes);
    };
    data_file(
        "data-00000000000000000001-0000000000000001.bpk",
        vec![Entry::resident(
            "model.w",
            DType::F32,
            vec![2],
            bytes(&[1, 0, 0, 0, 2, 0, 0, 0]),
        )],
    );
    data_file(
        "data-00000000000000000002-0000000000000002.bpk",
        vec![Entry::resident("model.v", DType::U8, vec![0], bytes(&[]))],
    );
    let Ok(manifest) = Writer::new(Vec::new())
        .metadata(KIND_KEY, KIND)
        .metadata(INCREMENTAL_KEY, "1")
        .metadata(REFS_KEY, text)
        .into_bytes()
    else {
        return;
    };
    let Ok(source) = Reader::from_bytes(manifest) else {
        return;
    };
    let source = source.with_name("ckpt-00000000000000000003.bpk".to_string());
    if let Ok(checkpoint) = Checkpoint::from_storage(&storage, source) {
        let chain = checkpoint
            .chain()
            .expect("an incremental checkpoint opens as a chain");
        assert_source_contract(chain);
        for (name, file) in chain.locations() {
            assert!(
                file.starts_with("data-0000000000000000000"),
                "{name}: {file}"
            );
        }
        let _ = checkpoint.verify();
    }
}

/// A [`Storage`](crate::checkpoint::Storage) in memory, for the manifest target.
#[cfg(feature = "optim")]
mod memory {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex, PoisonError};

    use burn::tensor::Bytes;

    use crate::checkpoint::{CheckpointError, Storage};
    use crate::read::Reader;
    use crate::write::Writer;

    #[derive(Clone, Default)]
    pub(super) struct Memory(Arc<Mutex<BTreeMap<String, Bytes>>>);

    impl Memory {
        pub(super) fn put(&self, name: &str, bytes: Bytes) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name.to_string(), bytes);
        }
    }

    impl Storage for Memory {
        type Location = String;
        type Source = Reader;
        type Entry = String;
        fn location(&self, name: &str) -> String {
            name.to_string()
        }
        fn names(&self) -> Result<Vec<String>, CheckpointError> {
            Ok(self
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .cloned()
                .collect())
        }
        fn open(&self, at: &String) -> Result<Reader, CheckpointError> {
            let bytes = self
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(at)
                .cloned()
                .ok_or_else(|| CheckpointError::Invalid {
                    file: at.clone(),
                    what: "no such object".into(),
                })?;
            Ok(Reader::from_bytes(bytes)?.with_name(at.clone()))
        }
        fn write(&self, at: &String, writer: Writer) -> Result<(), CheckpointError> {
            self.put(at, writer.into_bytes()?);
            Ok(())
        }
        fn delete(&self, at: &String) -> Result<(), CheckpointError> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(at);
            Ok(())
        }
        fn describe(&self) -> String {
            "memory".into()
        }
        fn describe_location(&self, at: &String) -> String {
            at.clone()
        }
        fn entry(_: u64, at: String) -> String {
            at
        }
    }
}
