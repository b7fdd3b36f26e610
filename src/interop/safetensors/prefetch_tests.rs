//! A mapped safetensors file's prefetch: the wanted tensors are read ahead through the mapping
//! (in the file's order, whatever the load's), and stay readable with the source gone.

use super::SafetensorsSource;
use crate::platform::ColdFile;
use crate::source::TensorSource;

#[test]
fn wanted_tensors_are_read_ahead_through_the_mapping() {
    let len = 6usize << 20; // 24 MiB of f32 per tensor: more than a readahead window apart
    let values: Vec<Vec<u8>> = (0..3u32)
        .map(|t| {
            let first = t << 28;
            (0..u32::try_from(len).unwrap())
                .flat_map(|i| (first + i).to_le_bytes())
                .collect()
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = values
        .iter()
        .enumerate()
        .map(|(t, bytes)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![len], bytes);
            (format!("t.{t}"), view.unwrap())
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    safetensors::serialize_to_file(views, None, &path).unwrap();
    let cold = ColdFile::new(&path);
    let source = SafetensorsSource::open(&path).unwrap();
    assert!(source.wants_prefetch(), "a mapped file reads ahead");
    let middle = |name: &str| {
        let info = source.tensor(name).unwrap();
        info.offset() + info.len() / 2
    };
    // The tensor not wanted lies first: the kernel's readahead goes on past a range's end
    // (windows of up to the device's cap), and before its start only by half a window.
    let (wanted, skipped) = ([middle("t.2"), middle("t.1")], middle("t.0"));
    if wanted.iter().chain([&skipped]).any(|&at| cold.cached(at)) {
        return; // tmpfs: its pages cannot be dropped, nothing to show
    }
    // Asked in another order than the file's.
    let infos = [source.tensor("t.2").unwrap(), source.tensor("t.1").unwrap()];
    source.prefetch(&infos).unwrap();
    let bytes = source.read(infos[0]).unwrap();
    let gap = infos[1].offset() - skipped;
    // The hints go on after the source is dropped (where the kernel populates mappings; where
    // it does not, they stop with the source, kept then).
    let _held = if cold.populates() {
        drop(source);
        None
    } else {
        Some(source)
    };
    assert!(
        cold.wait_cached(&wanted),
        "the wanted tensors were read ahead"
    );
    if cold.beyond_readahead(gap) {
        assert!(
            !cold.cached(skipped),
            "a tensor the load does not want was read ahead"
        );
    }
    let read: &[u32] = bytemuck::cast_slice(&bytes);
    assert_eq!(
        (read[0], read[len - 1]),
        (2 << 28, (2 << 28) + u32::try_from(len - 1).unwrap())
    );
}
