//! GGUF files written by llama.cpp's own Python library (`gguf` from PyPI: `GGUFWriter`, and
//! `gguf.quants` for the reference dequantization), read here: every plain type as views,
//! every quantized type this crate reads compared bit for bit with `gguf.quants.dequantize`,
//! every metadata type, split sets, and hostile files made here.
//!
//! The Python side needs `gguf` and `numpy` (`.ci/run` installs them, pinned, into a folder it
//! names in `BURNPACK_PYTHONPATH`); without them these tests say "skipped" and pass, except in
//! CI.

mod common;

use std::path::{Path, PathBuf};

use burn::tensor::{Bytes, DType};
use burnpack::interop::gguf::{Array, GgmlType, GgufSource, Value};
use burnpack::interop::{OpenOptions, open_any};
use burnpack::source::{SourceErrorKind, TensorSource, assert_source_contract};

/// Runs `script` with `python3` and its packages in `dir` (see `common::python`).
fn python(script: &str, dir: &Path) -> Option<()> {
    common::python("gguf, numpy", script, dir)
}

/// Writes `model.gguf` in `dir`: metadata of every type, tensors of every plain type and of
/// every quantized type this crate reads (random blocks with finite scales, as llama.cpp's
/// writer stores them), and `<name>.ref`: `gguf.quants.dequantize`'s values (little-endian
/// f32) or the plain values as stored.
const WRITER: &str = r#"
import numpy as np, gguf, struct
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import dequantize
from gguf.constants import GGML_QUANT_SIZES
# ggml's block_q8_1 is 36 bytes (f16 d, f16 s, 32 int8); gguf 0.19 still lists the old 40.
GGML_QUANT_SIZES[T.Q8_1] = (32, 36)
rng = np.random.default_rng(7)
w = GGUFWriter("model.gguf", "llama")
w.add_uint32("llama.context_length", 2048)
w.add_int8("k.i8", -3); w.add_uint8("k.u8", 250); w.add_int16("k.i16", -300); w.add_uint16("k.u16", 60000)
w.add_int32("k.i32", -70000); w.add_int64("k.i64", -(1 << 40)); w.add_uint64("k.u64", 1 << 60)
w.add_float32("k.f32", 0.5); w.add_float64("k.f64", -2.25); w.add_bool("k.bool", True)
w.add_string("k.str", "héllo \"world\"")
w.add_array("k.ints", [1, 2, 3])
w.add_array("k.strs", ["a", "b"])
w.add_array("k.nested", [[1, 2], [3]])
w.add_tokenizer_model("gpt2")
w.add_token_list([f"t{i}" for i in range(100)])
# Plain types.
plain = {
    "plain.f32": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
    "plain.f16": (np.arange(8, dtype=np.float32) / 3).astype(np.float16).reshape(2, 4),
    "plain.f64": np.arange(3, dtype=np.float64) / 9,
    "plain.i8": np.arange(-4, 4, dtype=np.int8),
    "plain.i16": np.arange(-4, 4, dtype=np.int16),
    "plain.i32": np.arange(-4, 4, dtype=np.int32).reshape(2, 2, 2),
    "plain.i64": np.arange(-2, 2, dtype=np.int64),
}
for name, value in plain.items():
    w.add_tensor(name, value)
    value.tofile(name + ".ref")
bf16 = (rng.integers(0, 1 << 15, 12, dtype=np.uint16) | 0x3000).astype(np.uint16)
w.add_tensor("plain.bf16", bf16.view(np.uint8).reshape(3, 8), raw_dtype=T.BF16)
bf16.tofile("plain.bf16.ref")
# Quantized types, random blocks with finite scales: where each block keeps its f16 scales.
scales = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q8_1": [0, 2],
          "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "Q8_K": [],
          "TQ1_0": [52], "TQ2_0": [64], "IQ4_NL": [0], "IQ4_XS": [0], "MXFP4": [], "NVFP4": [],
          "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ1_S": [0],
          "IQ1_M": []}
# The grid-based types get enough blocks to pick (nearly) every row of their grids.
grids = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"}
for name, fields in scales.items():
    t = T[name]
    block, size = GGML_QUANT_SIZES[t]
    rows, per_row = (3, 256) if name in grids else (3, 32) if name == "NVFP4" else (3, 2)
    raw = rng.integers(0, 256, (rows, per_row * size), dtype=np.uint8)
    for r in range(rows):
        for b in range(per_row):
            for at in fields:
                scale = np.float16(rng.uniform(-2, 2))
                raw[r, b * size + at:b * size + at + 2] = np.frombuffer(scale.tobytes(), np.uint8)
    blocks = raw.reshape(-1, size)
    if name == "MXFP4":
        raw[:, ::size] = rng.integers(100, 140, (rows, per_row), dtype=np.uint8)
    if name == "NVFP4":  # every byte as a UE4M3 scale (0x7F is zero, the top bit ignored)
        blocks[:, :4] = (np.arange(blocks.shape[0] * 4) % 256).astype(np.uint8).reshape(-1, 4)
    if name == "Q8_K":  # an f32 scale
        blocks[:, :4] = rng.uniform(-2, 2, len(blocks)).astype("<f4").view(np.uint8).reshape(-1, 4)
    if name == "IQ1_M":  # the f16 scale: the top nibbles of the 4 u16 of scales (bytes 48..56)
        bits = rng.uniform(-2, 2, len(blocks)).astype(np.float16).view(np.uint16)
        for k in range(4):
            high = ((bits >> (4 * k)) & 0xF).astype(np.uint8) << 4
            blocks[:, 49 + 2 * k] = (blocks[:, 49 + 2 * k] & 0x0F) | high
    w.add_tensor("q." + name, raw, raw_dtype=t)
    if name in ("Q8_1", "Q8_K"):  # no class in gguf.quants: d * q in float32
        d = blocks[:, :4].copy().view("<f4") if name == "Q8_K" else blocks[:, :2].copy().view("<f2").astype(np.float32)
        ref = d * blocks[:, 4:4 + block].view(np.int8).astype(np.float32)
    else:
        ref = dequantize(raw, t)
    assert ref.dtype == np.float32 and np.isfinite(ref).all(), name
    ref.astype("<f4").tofile("q." + name + ".ref")
# A type this crate does not read: Q1_0 (blocks of 128, 18 bytes).
w.add_tensor("q.Q1_0", rng.integers(0, 256, (1, 18), dtype=np.uint8), raw_dtype=T.Q1_0)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
"#;

fn model(dir: &Path) -> Option<PathBuf> {
    python(WRITER, dir)?;
    Some(dir.join("model.gguf"))
}

fn reference(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(format!("{name}.ref"))).unwrap()
}

#[test]
fn every_type_reads_as_llama_cpps_reference_computes_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = model(dir.path()) else {
        return;
    };
    let source = GgufSource::open(&path).unwrap();
    assert_source_contract(&source);
    let mut quantized = 0;
    for info in source.tensors() {
        let name = info.name();
        let ty = source.ggml_type(info).unwrap();
        if name == "q.Q1_0" {
            // Listed, with its shape; refused by name when read; the rest still load.
            assert_eq!(info.shape(), [1, 128]);
            let err = source.read(info).unwrap_err().to_string();
            assert!(err.contains("q.Q1_0") && err.contains("Q1_0"), "{err}");
            continue;
        }
        let bytes = source.read(info).unwrap();
        assert_eq!(
            &bytes[..],
            &reference(dir.path(), name)[..],
            "{name} ({ty})"
        );
        if ty.plain_dtype().is_some() {
            assert_eq!(source.copy_reason(info), None, "{name} is a view");
        } else {
            assert_eq!(info.dtype(), DType::F32);
            quantized += 1;
        }
    }
    assert_eq!(quantized, 25);
    // Shapes in Burn's order: numpy's (2, 3) is GGUF's [3, 2].
    let f32s = source.tensor("plain.f32").unwrap();
    assert_eq!((f32s.shape(), f32s.dtype()), (&[2, 3][..], DType::F32));
    let q = source.tensor("q.Q4_K").unwrap();
    assert_eq!(q.shape(), [3, 512]);
    assert_eq!(source.tensor("plain.bf16").unwrap().dtype(), DType::BF16);
    // From bytes, the same.
    let bytes = Bytes::from_bytes_vec(std::fs::read(&path).unwrap());
    let from_bytes =
        GgufSource::from_bytes(bytes, &burnpack::source::OpenOptions::default()).unwrap();
    assert_source_contract(&from_bytes);
    assert_eq!(from_bytes.tensors(), source.tensors());
}

#[test]
fn metadata_of_every_type_is_exposed_typed_and_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = model(dir.path()) else {
        return;
    };
    let source = GgufSource::open(&path).unwrap();
    assert_eq!(source.version(), 3);
    assert_eq!(
        source.get("general.architecture").and_then(Value::as_str),
        Some("llama")
    );
    assert_eq!(source.get("llama.context_length"), Some(&Value::U32(2048)));
    assert_eq!(source.get("k.i8"), Some(&Value::I8(-3)));
    assert_eq!(source.get("k.u16"), Some(&Value::U16(60000)));
    assert_eq!(source.get("k.i64"), Some(&Value::I64(-(1 << 40))));
    assert_eq!(source.get("k.u64"), Some(&Value::U64(1 << 60)));
    assert_eq!(source.get("k.f64"), Some(&Value::F64(-2.25)));
    assert_eq!(source.get("k.bool"), Some(&Value::Bool(true)));
    assert_eq!(
        source.get("k.str").unwrap().to_string(),
        "\"héllo \\\"world\\\"\""
    );
    assert_eq!(source.get("k.ints").unwrap().to_string(), "[1, 2, 3]");
    assert_eq!(source.get("k.strs").unwrap().to_string(), "[\"a\", \"b\"]");
    assert_eq!(source.get("k.nested").unwrap().to_string(), "[[1, 2], [3]]");
    let Some(Value::Array(Array::String(tokens))) = source.get("tokenizer.ggml.tokens") else {
        panic!("the token list")
    };
    assert_eq!(tokens.len(), 100);
    assert!(
        source
            .get("tokenizer.ggml.tokens")
            .unwrap()
            .to_string()
            .ends_with("... (100 items)]")
    );
    // Through the registry, described.
    let any = open_any(&path).unwrap();
    let about = any.describe();
    assert_eq!(about.format, "gguf");
    assert!(about.lines.iter().any(|l| l == "architecture: llama"));
    assert!(about.lines.iter().any(|l| l == "context length: 2048"));
    assert!(
        about
            .lines
            .iter()
            .any(|l| l == "tokenizer: gpt2 (100 tokens)")
    );
    assert!(about.notes.iter().any(|n| n.contains("q.Q1_0 (Q1_0)")));
    assert_eq!(about.metadata["k.nested"], "[[1, 2], [3]]");
    // Described metadata is bounded: strings plain, long arrays abridged with their length
    // and a hash of every item; what a conversion carries has them whole.
    assert_eq!(about.metadata["general.architecture"], "llama");
    let shown = &about.metadata["tokenizer.ggml.tokens"];
    assert!(shown.contains("... (100 items, xxh3 "), "{shown}");
    let carried = any.carried_metadata();
    let whole = &carried
        .iter()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
        .unwrap()
        .1;
    assert!(
        whole.contains("\"t99\"") && !whole.contains("..."),
        "{whole}"
    );
    // Converted, the metadata is whole: strings as they are, arrays unabridged.
    assert_eq!(
        source.get("general.architecture").unwrap().stored(),
        "llama"
    );
    let tokens = source.get("tokenizer.ggml.tokens").unwrap().stored();
    assert!(
        tokens.contains("\"t99\"") && !tokens.contains("..."),
        "{tokens}"
    );
    assert_eq!(GgmlType::from_id(12).unwrap().name(), "Q4_K");
}

use common::gguf::{file as gguf, key};

#[test]
fn hostile_files_are_clear_errors_naming_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let open = |name: &str, bytes: &[u8]| {
        let path = d.join(name);
        std::fs::write(&path, bytes).unwrap();
        GgufSource::open(&path).map(|_| ())
    };
    let f32s = [0u8; 64];
    // A sound one, to vary.
    assert!(
        open(
            "ok.gguf",
            &gguf(&[("w", &[4, 2], 0, 0)], &f32s[..32], &[], 0)
        )
        .is_ok()
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.gguf", vec![], "ends in the magic"),
        (
            "v1.gguf",
            b"GGUF\x01\x00\x00\x00".to_vec(),
            "versions 2 and 3",
        ),
        ("be.gguf", b"GGUF\x00\x00\x00\x03".to_vec(), "big-endian"),
        (
            "count.gguf",
            [
                b"GGUF".as_slice(),
                &3u32.to_le_bytes(),
                &u64::MAX.to_le_bytes(),
                &0u64.to_le_bytes(),
            ]
            .concat(),
            "tensor-count limit",
        ),
        (
            "kvs.gguf",
            [
                b"GGUF".as_slice(),
                &3u32.to_le_bytes(),
                &0u64.to_le_bytes(),
                &(1u64 << 40).to_le_bytes(),
            ]
            .concat(),
            "metadata entries, over the limit",
        ),
        (
            "string.gguf",
            gguf(&[], &[], &key("k", 8, &(1u64 << 40).to_le_bytes()), 1),
            "a string of 1099511627776 bytes",
        ),
        (
            "array.gguf",
            gguf(
                &[],
                &[],
                &key(
                    "k",
                    9,
                    &[&4u32.to_le_bytes()[..], &(1u64 << 40).to_le_bytes()].concat(),
                ),
                1,
            ),
            "more than the",
        ),
        (
            "twice.gguf",
            gguf(
                &[],
                &[],
                &[key("k", 4, &[1, 0, 0, 0]), key("k", 4, &[2, 0, 0, 0])].concat(),
                2,
            ),
            "'k' is given twice",
        ),
        (
            "past.gguf",
            gguf(&[("w", &[4, 2], 0, 32)], &f32s[..32], &[], 0),
            "tensor 'w' ends at byte",
        ),
        (
            "misaligned.gguf",
            gguf(&[("w", &[2], 0, 4)], &f32s, &[], 0),
            "not a multiple of the alignment",
        ),
        (
            "overlap.gguf",
            gguf(&[("a", &[8], 0, 0), ("b", &[8], 0, 0)], &f32s, &[], 0),
            "overlap",
        ),
        (
            "blocks.gguf",
            gguf(&[("q", &[31], 8, 0)], &f32s, &[], 0),
            "not whole blocks of 32",
        ),
        (
            "dims.gguf",
            gguf(&[("w", &[1 << 32, 1 << 32, 1 << 32], 0, 0)], &f32s, &[], 0),
            "overflow",
        ),
        (
            "dup.gguf",
            gguf(&[("w", &[2], 0, 0), ("w", &[2], 0, 32)], &f32s, &[], 0),
            "two tensors of this name",
        ),
        (
            "alignment.gguf",
            gguf(
                &[],
                &[],
                &key("general.alignment", 4, &3u32.to_le_bytes()),
                1,
            ),
            "power of two",
        ),
        (
            "split.gguf",
            gguf(&[], &[], &key("split.count", 2, &3u16.to_le_bytes()), 1),
            "split set",
        ),
        (
            "rows.gguf",
            gguf(&[("q", &[16, 2], 2, 0)], &f32s, &[], 0),
            "not whole blocks of 32",
        ),
        (
            "rank.gguf",
            gguf(&[("w", &[1, 1, 1, 1, 1], 0, 0)], &f32s, &[], 0),
            "at most 4",
        ),
        (
            "v196608.gguf",
            [
                b"GGUF".as_slice(),
                &0x0003_0000u32.to_le_bytes(),
                &[0u8; 16],
            ]
            .concat(),
            "GGUF version 196608",
        ),
        (
            "keys.gguf",
            [
                b"GGUF".as_slice(),
                &3u32.to_le_bytes(),
                &0u64.to_le_bytes(),
                &200_000u64.to_le_bytes(),
                &[0u8; 4096],
            ]
            .concat(),
            "metadata entries, over the limit",
        ),
        (
            "orphan.gguf",
            gguf(&[], &[], &key("split.no", 2, &0u16.to_le_bytes()), 1),
            "does not say how many parts",
        ),
    ];
    for (name, bytes, says) in cases {
        let err = open(name, &bytes).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
    }
    // A type ggml does not have yet: listed, refused by name when read.
    let path = d.join("future.gguf");
    std::fs::write(
        &path,
        gguf(&[("new", &[4], 99, 0), ("w", &[4], 0, 0)], &f32s, &[], 0),
    )
    .unwrap();
    let source = GgufSource::open(&path).unwrap();
    let err = source
        .read(source.tensor("new").unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("'new'") && err.contains("type 99"), "{err}");
    assert_eq!(source.read(source.tensor("w").unwrap()).unwrap().len(), 16);
    // Kinds a program can match: a cut header is truncated, another version unsupported.
    let path = d.join("cut-header.gguf");
    std::fs::write(&path, b"GGUF").unwrap();
    assert_eq!(
        open_any(&path).unwrap_err().kind(),
        SourceErrorKind::Truncated
    );
    let path = d.join("be.gguf");
    std::fs::write(&path, b"GGUF\x00\x00\x00\x03").unwrap();
    assert_eq!(
        open_any(&path).unwrap_err().kind(),
        SourceErrorKind::Unsupported
    );
    // A count the file cannot hold is refused before anything is allocated for it, and
    // arrays nested in arrays keep only what the file holds.
    let mut nested = Vec::new();
    for _ in 0..64 {
        nested.extend(9u32.to_le_bytes());
        nested.extend(1u64.to_le_bytes());
    }
    nested.extend(0u32.to_le_bytes());
    nested.extend(0u64.to_le_bytes());
    let path = d.join("nested.gguf");
    std::fs::write(&path, gguf(&[], &[], &key("deep", 9, &nested), 1)).unwrap();
    let source = GgufSource::open(&path).unwrap();
    assert!(source.get("deep").unwrap().to_string().starts_with("[[[["));
    // Cut short: truncated, through the registry too.
    let whole = gguf(&[("w", &[8], 0, 0)], &f32s[..32], &[], 0);
    let path = d.join("cut.gguf");
    std::fs::write(&path, &whole[..whole.len() - 4]).unwrap();
    assert_eq!(
        open_any(&path).unwrap_err().kind(),
        SourceErrorKind::Truncated
    );
}

#[test]
fn a_split_set_opens_as_one_source_from_its_first_part() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let part = |no: u16, name: &str| {
        let kv = [
            key("split.no", 2, &no.to_le_bytes()),
            key("split.count", 2, &2u16.to_le_bytes()),
        ]
        .concat();
        gguf(&[(name, &[4], 0, 0)], &[1u8; 16], &kv, 2)
    };
    std::fs::write(d.join("m-00001-of-00002.gguf"), part(0, "a")).unwrap();
    std::fs::write(d.join("m-00002-of-00002.gguf"), part(1, "b")).unwrap();
    let source = open_any(d.join("m-00001-of-00002.gguf")).unwrap();
    let names: Vec<&str> = source.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_source_contract(source.as_tensor_source());
    // A part that says it is another, or a missing part: refused, naming it.
    std::fs::write(d.join("m-00002-of-00002.gguf"), part(0, "b")).unwrap();
    let err = open_any(d.join("m-00001-of-00002.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("m-00002-of-00002.gguf") && err.contains("not part 2"),
        "{err}"
    );
    std::fs::remove_file(d.join("m-00002-of-00002.gguf")).unwrap();
    let err = open_any(d.join("m-00001-of-00002.gguf")).unwrap_err();
    assert_eq!(err.kind(), SourceErrorKind::Io, "{err}");
}

/// A llama-architecture file (`GGUFWriter("llama")`, llama.cpp's names; some weights `Q8_0`),
/// and `reference.ref`: one forward pass in numpy over the dequantized weights.
const LLAMA: &str = r#"
import numpy as np, gguf
from gguf.quants import quantize, dequantize
T = gguf.GGMLQuantizationType
rng = np.random.default_rng(1)
dim, hidden, vocab = 32, 64, 16
w = gguf.GGUFWriter("llama.gguf", "llama")
w.add_uint32("llama.context_length", 128)
def lin(name, out, inp, q):
    m = (rng.standard_normal((out, inp)) / 8).astype(np.float32)
    if q:
        raw = quantize(m, T.Q8_0)
        w.add_tensor(name, raw, raw_dtype=T.Q8_0)
        return dequantize(raw, T.Q8_0)
    w.add_tensor(name, m)
    return m
def norm(name):
    g = rng.uniform(0.5, 1.5, dim).astype(np.float32)
    w.add_tensor(name, g)
    return g
emb = rng.standard_normal((vocab, dim)).astype(np.float32)
w.add_tensor("token_embd.weight", emb)
g1 = norm("blk.0.attn_norm.weight")
wq = lin("blk.0.attn_q.weight", dim, dim, True)
wk = lin("blk.0.attn_k.weight", dim, dim, False)
wv = lin("blk.0.attn_v.weight", dim, dim, True)
wo = lin("blk.0.attn_output.weight", dim, dim, False)
g2 = norm("blk.0.ffn_norm.weight")
w1 = lin("blk.0.ffn_gate.weight", hidden, dim, True)
w2 = lin("blk.0.ffn_down.weight", dim, hidden, True)
w3 = lin("blk.0.ffn_up.weight", hidden, dim, False)
gn = norm("output_norm.weight")
out = lin("output.weight", vocab, dim, False)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
def rms(x, g): return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g
silu = lambda x: x / (1 + np.exp(-x))
x = emb[[1, 5, 7]]
h = rms(x, g1)
x = x + (h @ wq.T + h @ wk.T + h @ wv.T) @ wo.T
f = rms(x, g2)
x = x + (silu(f @ w1.T) * (f @ w3.T)) @ w2.T
y = rms(x, gn) @ out.T
y.astype("<f4").tofile("reference.ref")
"#;

mod llama {
    use burn::module::Module;
    use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig, RmsNorm, RmsNormConfig};
    use burn::tensor::activation::silu;
    use burn::tensor::{Device, Int, Tensor};

    #[derive(Module, Debug)]
    pub struct Attention {
        pub wq: Linear,
        pub wk: Linear,
        pub wv: Linear,
        pub wo: Linear,
    }

    #[derive(Module, Debug)]
    pub struct FeedForward {
        pub w1: Linear,
        pub w2: Linear,
        pub w3: Linear,
    }

    #[derive(Module, Debug)]
    pub struct Layer {
        pub attention: Attention,
        pub feed_forward: FeedForward,
        pub attention_norm: RmsNorm,
        pub ffn_norm: RmsNorm,
    }

    /// The names of Burn's llama models, at a toy's size.
    #[derive(Module, Debug)]
    pub struct Llama {
        pub tok_embeddings: Embedding,
        pub layers: Vec<Layer>,
        pub norm: RmsNorm,
        pub output: Linear,
    }

    impl Llama {
        pub fn new(device: &Device) -> Self {
            let (dim, hidden, vocab) = (32, 64, 16);
            let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
            Self {
                tok_embeddings: EmbeddingConfig::new(vocab, dim).init(device),
                layers: vec![Layer {
                    attention: Attention {
                        wq: linear(dim, dim),
                        wk: linear(dim, dim),
                        wv: linear(dim, dim),
                        wo: linear(dim, dim),
                    },
                    feed_forward: FeedForward {
                        w1: linear(dim, hidden),
                        w2: linear(hidden, dim),
                        w3: linear(dim, hidden),
                    },
                    attention_norm: RmsNormConfig::new(dim).init(device),
                    ffn_norm: RmsNormConfig::new(dim).init(device),
                }],
                norm: RmsNormConfig::new(dim).init(device),
                output: linear(dim, vocab),
            }
        }

        /// The reference's forward pass (no attention softmax: the weights are what is
        /// compared).
        pub fn forward(&self, ids: Tensor<2, Int>) -> Tensor<3> {
            let mut x = self.tok_embeddings.forward(ids);
            for layer in &self.layers {
                let a = &layer.attention;
                let h = layer.attention_norm.forward(x.clone());
                let qkv = a.wq.forward(h.clone()) + a.wk.forward(h.clone()) + a.wv.forward(h);
                x = x + a.wo.forward(qkv);
                let f = layer.ffn_norm.forward(x.clone());
                let ff = &layer.feed_forward;
                x = x + ff
                    .w2
                    .forward(silu(ff.w1.forward(f.clone())) * ff.w3.forward(f));
            }
            self.output.forward(self.norm.forward(x))
        }
    }
}

#[test]
fn a_llama_file_loads_into_a_burn_llama_with_llama_cpps_convention() {
    use burn::tensor::{Device, Int, Tensor};
    use burnpack::LoadOptions;
    use burnpack::PackModule;
    use burnpack::interop::gguf::LlamaCppConvention;
    let dir = tempfile::tempdir().unwrap();
    let Some(()) = python(LLAMA, dir.path()) else {
        return;
    };
    let path = dir.path().join("llama.gguf");
    let source = GgufSource::open(&path).unwrap();
    // Q8_0 weights kept quantized: Burn quantized tensors, dequantized by Burn in the pass.
    let kept = GgufSource::open_with(&path, &OpenOptions::new().keep_quantized(true)).unwrap();
    let wq = kept.tensor("blk.0.attn_q.weight").unwrap();
    assert!(matches!(wq.dtype(), DType::QFloat(_)), "{:?}", wq.dtype());
    let reference: Vec<f32> = reference(dir.path(), "reference")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let options = LoadOptions::new().convention(LlamaCppConvention::llama());
    #[allow(deprecated)] // ndarray: still one of Burn 0.22's CPU backends, tested beside flex
    for device in [Device::flex(), Device::ndarray()] {
        let model = llama::Llama::new(&device)
            .load_from_source(&source, &options)
            .unwrap();
        let forward = |model: &llama::Llama| {
            let ids = Tensor::<2, Int>::from_data([[1, 5, 7]], &device);
            model.forward(ids).into_data().try_to_vec::<f32>().unwrap()
        };
        let y = forward(&model);
        assert_eq!(y.len(), reference.len());
        for (i, (a, b)) in y.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{device:?} {i}: {a} vs {b}"
            );
        }
        // Kept quantized, the Q8_0 weights are Burn quantized tensors, transposed as the
        // convention says, and Burn dequantizes them to the reference's weights exactly.
        let quantized = llama::Llama::new(&device)
            .load_from_source(&kept, &options)
            .unwrap();
        let (a, q) = (&model.layers[0], &quantized.layers[0]);
        for (plain, kept) in [
            (&a.attention.wq, &q.attention.wq),
            (&a.attention.wv, &q.attention.wv),
            (&a.feed_forward.w1, &q.feed_forward.w1),
            (&a.feed_forward.w2, &q.feed_forward.w2),
        ] {
            let kept = kept.weight.val();
            assert!(matches!(kept.dtype(), DType::QFloat(_)), "{device:?}");
            assert_eq!(
                kept.dequantize().into_data().try_to_vec::<f32>().unwrap(),
                plain.weight.val().into_data().try_to_vec::<f32>().unwrap(),
                "{device:?}"
            );
        }
        // Burn computes with the quantized weights its own way (its quantized matmul):
        // close to the reference, not bit for bit.
        let y = forward(&quantized);
        for (i, (a, b)) in y.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() <= 2e-2 * (1.0 + b.abs()),
                "{device:?} {i}: {a} vs {b}"
            );
        }
    }
    // Without the convention, strict loading names what it cannot find.
    let err = llama::Llama::new(&Device::flex())
        .load_from_source(&source, &LoadOptions::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tok_embeddings.weight") && err.contains("token_embd.weight"),
        "{err}"
    );
}

#[test]
fn q8_0_kept_quantized_is_a_burn_quantized_tensor_that_dequantizes_to_the_reference() {
    use burn::tensor::{Device, Tensor, TensorData};
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = model(dir.path()) else {
        return;
    };
    let source = GgufSource::open_with(&path, &OpenOptions::new().keep_quantized(true)).unwrap();
    assert_source_contract(&source);
    let info = source.tensor("q.Q8_0").unwrap();
    let DType::QFloat(scheme) = info.dtype() else {
        panic!("{:?}", info.dtype());
    };
    // Other quantized types are still dequantized.
    assert_eq!(source.tensor("q.Q4_K").unwrap().dtype(), DType::F32);
    let bytes = source.read(info).unwrap();
    assert_eq!(
        bytes.len(),
        burn::tensor::quantization::quantized_data_len(
            &scheme,
            &burn::tensor::Shape::from(info.shape().to_vec())
        )
    );
    let expected = reference(dir.path(), "q.Q8_0");
    #[allow(deprecated)] // ndarray: still one of Burn 0.22's CPU backends, tested beside flex
    for device in [Device::flex(), Device::ndarray()] {
        let data = TensorData::from_bytes(bytes.clone(), info.shape().to_vec(), info.dtype());
        let tensor = Tensor::<2>::from_data(data, (&device, info.dtype()));
        assert!(matches!(tensor.dtype(), DType::QFloat(_)));
        let values = tensor.dequantize().into_data();
        assert_eq!(
            values.as_bytes(),
            &expected[..],
            "{device:?}: Burn's dequantization"
        );
    }
    // The same file dequantized here gives the same values.
    let dequantized = GgufSource::open(&path).unwrap();
    let info = dequantized.tensor("q.Q8_0").unwrap();
    assert_eq!(&dequantized.read(info).unwrap()[..], &expected[..]);
}
