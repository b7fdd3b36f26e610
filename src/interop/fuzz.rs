//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`), shared with the corpus replay
//! test (`tests/fuzz_corpus.rs`): one per source, each opening arbitrary bytes from memory
//! (no temporary file) and holding whatever opens to the source contract
//! ([`assert_source_contract`]). Any panic is a bug; errors are the expected outcome. Not
//! part of the API.

use burn::tensor::Bytes;

use crate::format::Limits;
use crate::read::{Reader, assert_source_contract};

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
            let read = crate::read::TensorSource::read(&reader, info);
            assert_eq!(
                slice.data(info).ok(),
                read.as_deref().ok(),
                "{}",
                info.name()
            );
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
    if let Ok(source) = super::safetensors::SafetensorsSource::from_bytes(bytes(data)) {
        assert_source_contract(&source);
    }
}

/// Bytes as a `torch.save` file (zip or legacy).
#[cfg(feature = "pytorch")]
pub fn pytorch(data: &[u8]) {
    let options = super::pytorch::PytorchOptions::new();
    if let Ok(source) = super::pytorch::PytorchSource::from_bytes(bytes(data), &options) {
        assert_source_contract(&source);
        let _ = crate::read::TensorSource::verify_structure(&source);
    }
}

/// Bytes as a record of Burn 0.14-0.21 (format told by the content).
#[cfg(feature = "legacy")]
pub fn burn_record(data: &[u8]) {
    let limits = Limits::default();
    if let Ok(source) = super::burn_record::LegacySource::from_bytes(bytes(data), &limits) {
        assert_source_contract(&source);
    }
}

/// Bytes as a GGUF file.
#[cfg(feature = "gguf")]
pub fn gguf(data: &[u8]) {
    // Dequantized, and with the blocks Burn holds exactly kept quantized.
    for keep in [false, true] {
        let options = super::OpenOptions::new().keep_quantized(keep);
        if let Ok(source) = super::gguf::GgufSource::from_bytes(bytes(data), &options) {
            assert_source_contract(&source);
            let _ = crate::read::DescribedSource::describe(&source);
        }
    }
}

/// Bytes of any format, through the container registry.
pub fn any(data: &[u8]) {
    let options = super::OpenOptions::new().limits(Limits::default());
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
    use crate::read::TensorSource;
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
