//! Replays the committed fuzz corpora (`fuzz/corpus/<target>`) and a few thousand seeded
//! mutations of each file through the fuzz targets' own bodies (`burnpack::interop::fuzz`:
//! `reader`, `safetensors`, `object_source`, `burn_record`, `pytorch`, `any`), which hold
//! whatever opens to the source contract, under a time bound. Set `BURNPACK_WRITE_CORPUS=1`
//! to regenerate the corpus files.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use burn::tensor::DType;
use common::{Spec, every_dtype, ours, ours_checked, pattern};

fn corpus_of(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let small = vec![
        Spec::new("w", DType::F32, &[3], Some(1)),
        Spec::new("b", DType::U8, &[5], None),
    ];
    vec![
        ("empty.bpk", ours(&[])),
        ("small-burn-identical.bpk", ours(&small)),
        ("small-checksums.bpk", ours_checked(&small)),
        ("every-dtype.bpk", ours_checked(&every_dtype())),
        (
            "metadata-only.bpk",
            burnpack::Writer::new(vec![])
                .with_metadata("k", "v")
                .with_scalar("s", 1u8)
                .into_bytes()
                .unwrap()
                .to_vec(),
        ),
    ]
}

#[test]
fn corpus_and_mutations_never_panic() {
    replay("reader", seeds(), burnpack::interop::fuzz::reader, 1000);
}

/// Writes `seeds` as the corpus of `target` when asked, then runs `exercise` over the
/// committed corpus, the seeds and seeded mutations of each (bit flips, truncations, byte
/// changes, insertions) until 20 s have passed; at least `min_runs` mutations must run.
fn replay(
    target: &str,
    seeds: Vec<(&'static str, Vec<u8>)>,
    exercise: impl Fn(&[u8]),
    min_runs: usize,
) {
    let dir = corpus_of(target);
    if std::env::var_os("BURNPACK_WRITE_CORPUS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut files: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("the committed corpus")
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        files.len() >= seeds.len(),
        "the corpus of {target} is committed"
    );
    files.extend(seeds.into_iter().map(|(_, b)| b));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut runs = 0;
    for (f, file) in files.iter().enumerate() {
        exercise(file);
        let noise = pattern(f as u64 + 1, 4 * 1500);
        for (i, r) in noise.chunks(4).enumerate() {
            if Instant::now() > deadline {
                break;
            }
            let mut m = file.clone();
            let at = (usize::from(r[0]) << 8 | usize::from(r[1])) % m.len().max(1);
            match i % 4 {
                0 if !m.is_empty() => m[at] ^= r[2] | 1,
                1 => m.truncate(at),
                2 if !m.is_empty() => m[at] = r[3],
                _ => m.insert(at.min(m.len()), r[2]),
            }
            exercise(&m);
            runs += 1;
        }
    }
    assert!(runs >= min_runs, "{target}: only {runs} mutations ran");
}

/// safetensors files written by the `safetensors` crate: one tensor, several dtypes with
/// metadata, none.
fn safetensors_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use safetensors::tensor::TensorView;
    use safetensors::{Dtype, serialize};
    let f32s: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let i64s: Vec<u8> = [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
    let one = [("w", TensorView::new(Dtype::F32, vec![3], &f32s).unwrap())];
    let several = [
        ("a", TensorView::new(Dtype::F32, vec![3], &f32s).unwrap()),
        ("b", TensorView::new(Dtype::I64, vec![2], &i64s).unwrap()),
        ("c", TensorView::new(Dtype::U8, vec![2, 0], &[]).unwrap()),
    ];
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    let none: [(&str, TensorView); 0] = [];
    vec![
        ("one.safetensors", serialize(one, None).unwrap()),
        (
            "several.safetensors",
            serialize(several, Some(meta)).unwrap(),
        ),
        ("none.safetensors", serialize(none, None).unwrap()),
    ]
}

#[test]
fn safetensors_corpus_and_mutations_never_panic() {
    replay(
        "safetensors",
        safetensors_seeds(),
        burnpack::interop::fuzz::safetensors,
        500,
    );
}

#[cfg(feature = "object-store")]
#[test]
fn object_source_corpus_and_mutations_never_panic() {
    replay(
        "object_source",
        seeds(),
        burnpack::interop::fuzz::object_source,
        500,
    );
}

/// Records Burn 0.21's own recorders wrote (`tests/data/legacy`, see `tests/legacy.rs`).
#[cfg(feature = "legacy")]
fn burn_record_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy");
    ["zoo.mpk", "zoo-half.mpk", "zoo.json"]
        .into_iter()
        .map(|name| (name, std::fs::read(data.join(name)).unwrap()))
        .collect()
}

#[cfg(feature = "legacy")]
#[test]
fn burn_record_corpus_and_mutations_never_panic() {
    replay(
        "burn_record",
        burn_record_seeds(),
        burnpack::interop::fuzz::burn_record,
        500,
    );
}

/// Files `torch.save` wrote (zip and legacy, `tests/data/pytorch`), and one with strided views
/// written by the tests' own writer.
#[cfg(feature = "pytorch")]
fn pytorch_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use common::torch::{StorageSpec, View, save};
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch");
    let mut seeds: Vec<(&'static str, Vec<u8>)> = [
        "linear__linear_with_bias.pt",
        "reader__test_data__mixed_types.pt",
        "reader__test_data__checkpoint.pt",
        "reader__test_data__legacy_with_offsets.pt",
        "reader__test_data__legacy_shared_storage.pt",
    ]
    .into_iter()
    .map(|name| (name, std::fs::read(data.join(name)).unwrap()))
    .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strided.pt");
    let view = View {
        name: "t".into(),
        storage: 0,
        offset: 1,
        shape: vec![2, 2],
        stride: vec![1, 2],
    };
    save(&path, &[StorageSpec::f32(&[1., 2., 3., 4., 5.])], &[view]);
    seeds.push(("strided.pt", std::fs::read(&path).unwrap()));
    seeds
}

#[cfg(feature = "pytorch")]
#[test]
fn pytorch_corpus_and_mutations_never_panic() {
    replay(
        "pytorch",
        pytorch_seeds(),
        burnpack::interop::fuzz::pytorch,
        500,
    );
}

/// Every format's seeds through the container registry (`interop::open_bytes_any`): what
/// sniffing and dispatch do with each, and with their mutations.
#[cfg(all(feature = "pytorch", feature = "legacy"))]
#[test]
fn any_format_corpus_and_mutations_never_panic() {
    let mut all = seeds();
    all.extend(safetensors_seeds());
    all.extend(burn_record_seeds());
    all.extend(pytorch_seeds());
    #[cfg(feature = "gguf")]
    all.extend(gguf_seeds());
    #[cfg(feature = "numpy")]
    all.extend(numpy_seeds());
    replay("any", all, burnpack::interop::fuzz::any, 500);
}

/// Small GGUF files in llama.cpp's layout (v3, metadata, a table, a 32-aligned data section):
/// an `F32` and an `F16` tensor, a `Q8_0` block, a `Q4_K` block, an array of strings; blocks of
/// `IQ2_XXS`, `IQ3_S`, `IQ1_M` and `NVFP4` (the grids, the spread scale, the `UE4M3` scales).
#[cfg(feature = "gguf")]
fn gguf_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use common::gguf::{key, string};
    let file = |tensors: &[(&str, &[u64], u32, u64)], data: &[u8], kv: &[(&str, u32, Vec<u8>)]| {
        let entries: Vec<u8> = kv.iter().flat_map(|(k, t, v)| key(k, *t, v)).collect();
        common::gguf::file(tensors, data, &entries, kv.len() as u64)
    };
    let arch = ("general.architecture", 8, string("llama"));
    let tokens = (
        "tokenizer.ggml.tokens",
        9,
        [
            &8u32.to_le_bytes()[..],
            &2u64.to_le_bytes(),
            &string("a"),
            &string("b"),
        ]
        .concat(),
    );
    let mut q8 = vec![0u8; 34];
    q8[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
    for (i, b) in q8[2..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7);
    }
    let mut q4k = vec![0u8; 144];
    q4k[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
    q4k[2..4].copy_from_slice(&0x3800u16.to_le_bytes());
    for (i, b) in q4k[4..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13);
    }
    // (name, ggml id, block bytes): each block at a 32-aligned offset, `f16` scales of 1 in front.
    let iq: [(&str, u32, usize); 4] = [("a", 16, 66), ("b", 21, 110), ("c", 29, 56), ("d", 40, 36)];
    let (mut iq_data, mut iq_tensors) = (Vec::new(), Vec::new());
    for (i, &(name, id, bytes)) in iq.iter().enumerate() {
        let mut block: Vec<u8> = (0..bytes)
            .map(|j| (j as u8).wrapping_mul(29) ^ (i as u8))
            .collect();
        if id != 29 && id != 40 {
            block[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
        }
        let per_block: u64 = if id == 40 { 64 } else { 256 };
        iq_tensors.push((name, [per_block], id, iq_data.len() as u64));
        iq_data.extend(&block);
        iq_data.resize(iq_data.len().next_multiple_of(32), 0);
    }
    let iq_tensors: Vec<(&str, &[u64], u32, u64)> = iq_tensors
        .iter()
        .map(|(n, d, id, at)| (*n, &d[..], *id, *at))
        .collect();
    vec![
        (
            "iq.gguf",
            file(&iq_tensors, &iq_data, std::slice::from_ref(&arch)),
        ),
        (
            "plain.gguf",
            file(
                &[("w", &[4, 2], 0, 0), ("h", &[4], 1, 32)],
                &[[0u8; 32].as_slice(), &[0x00, 0x3c].repeat(4)].concat(),
                &[arch.clone(), tokens],
            ),
        ),
        (
            "q8_0.gguf",
            file(&[("q", &[32], 8, 0)], &q8, std::slice::from_ref(&arch)),
        ),
        ("q4_k.gguf", file(&[("k", &[256], 12, 0)], &q4k, &[arch])),
    ]
}

#[cfg(feature = "gguf")]
#[test]
fn gguf_corpus_and_mutations_never_panic() {
    replay("gguf", gguf_seeds(), burnpack::interop::fuzz::gguf, 500);
}

/// Files NumPy wrote (`fuzz/corpus/numpy`): `.npy` versions 1, 2 and 3, big-endian and
/// Fortran order, `np.savez` and `np.savez_compressed` archives.
#[cfg(feature = "numpy")]
fn numpy_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/numpy");
    [
        "f32.npy",
        "big-fortran.npy",
        "v2.npy",
        "v3.npy",
        "stored.npz",
        "deflated.npz",
    ]
    .into_iter()
    .map(|name| (name, std::fs::read(corpus.join(name)).unwrap()))
    .collect()
}

#[cfg(feature = "numpy")]
#[test]
fn numpy_corpus_and_mutations_never_panic() {
    replay("numpy", numpy_seeds(), burnpack::interop::fuzz::numpy, 500);
}

/// Index JSON of sharded models: what `save_pretrained` writes, and its damaged neighbours.
#[cfg(feature = "safetensors")]
#[test]
fn index_corpus_and_mutations_never_panic() {
    let seeds = vec![
        (
            "two-shards.json",
            br#"{"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#.to_vec(),
        ),
        ("escape.json", br#"{"weight_map":{"a":"../x.safetensors","b":"/etc/y"}}"#.to_vec()),
        ("empty.json", br#"{"metadata":{},"weight_map":{}}"#.to_vec()),
        ("odd-metadata.json", br#"{"metadata":{"n":[1,{"k":null}]},"weight_map":{"w":"m.safetensors"}}"#.to_vec()),
    ];
    replay("index", seeds, burnpack::interop::fuzz::index, 500);
}

/// References of incremental checkpoints: well-formed ones (a tensor under its own name, one
/// under another's, the empty tensor) and hostile neighbours (paths out of the storage, names
/// of no data file, duplicates, a tensor its file does not hold).
#[cfg(feature = "optim")]
#[test]
fn manifest_corpus_and_mutations_never_panic() {
    let w = "data-00000000000000000001-0000000000000001.bpk";
    let v = "data-00000000000000000002-0000000000000002.bpk";
    let h = format!(
        "{:032x}",
        burnpack::checkpoint::content_hash(&[1, 0, 0, 0, 2, 0, 0, 0])
    );
    let e = format!("{:032x}", burnpack::checkpoint::content_hash(&[]));
    let seeds = vec![
        ("own-name.txt", format!("model.w\t{w}\t\t7\tF32\t2\t{h}\n")),
        (
            "other-name.txt",
            format!("model.a\t{w}\tmodel.w\t\tF32\t2\t{h}\nmodel.w\t{w}\t\t\tF32\t2\t{h}\n"),
        ),
        (
            "empty-tensor.txt",
            format!("model.v\t{v}\t\t\tU8\t0\t{e}\n"),
        ),
        ("escape.txt", format!("model.w\t../{w}\t\t\tF32\t2\t{h}\n")),
        (
            "unknown-file.txt",
            format!("model.w\tdata-00000000000000000009-0000000000000009.bpk\t\t\tF32\t2\t{h}\n"),
        ),
        (
            "twice.txt",
            format!("model.w\t{w}\t\t\tF32\t2\t{h}\nmodel.w\t{w}\t\t\tF32\t2\t{h}\n"),
        ),
        (
            "missing-tensor.txt",
            format!("model.w\t{v}\t\t\tF32\t2\t{h}\n"),
        ),
        (
            "wrong-shape.txt",
            format!("model.w\t{w}\t\t\tF32\t1,2\t{h}\n"),
        ),
        ("wrong-hash.txt", format!("model.w\t{w}\t\t\tF32\t2\t{e}\n")),
    ];
    let seeds = seeds
        .into_iter()
        .map(|(n, t)| (n, t.into_bytes()))
        .collect();
    replay("manifest", seeds, burnpack::interop::fuzz::manifest, 500);
}

/// The committed corpus of ONNX models (written by the `onnx` package: every initializer type,
/// raw and typed, nested graphs, external data, types without a Burn dtype) and its mutations.
#[cfg(feature = "onnx")]
#[test]
fn onnx_corpus_and_mutations_never_panic() {
    replay("onnx", Vec::new(), burnpack::interop::fuzz::onnx, 500);
}
