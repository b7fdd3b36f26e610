//! ONNX models written by the `onnx` Python package (`onnx.helper`, `onnx.numpy_helper`,
//! `onnx.save_model(..., save_as_external_data=True)`), read here: every initializer type with
//! a Burn dtype as `raw_data` and as typed fields, nested graphs, external data, the model's
//! metadata, a small model's weights into a Burn module, and hostile files made here.
//!
//! The Python side needs `onnx` (with `numpy`, `protobuf`, `ml_dtypes`; `.ci/run` installs
//! them, pinned, into a folder it names in `BURNPACK_PYTHONPATH`); without them these tests
//! say "skipped" and pass, except in CI.

mod common;

use std::path::Path;
use std::process::Command;

use burn::tensor::Bytes;
use burnpack::interop::onnx::OnnxSource;
use burnpack::interop::{OpenOptions, open_any};
use burnpack::source::{TensorSource, assert_source_contract};

/// Runs `script` with `python3` and its packages in `dir` (see `common::python`).
fn python(script: &str, dir: &Path) -> Option<()> {
    common::python("onnx, numpy, ml_dtypes", script, dir)
}

/// Writes `model.onnx` (every type as `raw_data` and as typed fields, an `If` whose branches
/// hold initializers, metadata), `ext.onnx` + `ext.bin` (the same, external), `string.onnx`
/// and `f8.onnx` (types without a Burn dtype), `names.txt`, and each tensor's values as
/// `onnx.numpy_helper.to_array` reads them back (`<name>.ref`, little-endian).
const WRITER: &str = r#"
import numpy as np, onnx, ml_dtypes
from onnx import helper, numpy_helper, TensorProto as T
rng = np.random.default_rng(5)
inits = []
def ref(name, arr):
    arr = np.ascontiguousarray(arr)
    arr.astype(arr.dtype.newbyteorder("<")).tofile(name + ".ref")
# raw_data, every type with a Burn dtype
arrays = {
    "raw.f32": rng.standard_normal((3, 5)).astype(np.float32),
    "raw.f64": rng.standard_normal((4,)).astype(np.float64),
    "raw.f16": rng.standard_normal((2, 3)).astype(np.float16),
    "raw.bf16": rng.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
    "raw.i8": np.arange(-3, 3, dtype=np.int8),
    "raw.i16": np.arange(-3, 3, dtype=np.int16),
    "raw.i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
    "raw.i64": np.arange(-3, 3, dtype=np.int64),
    "raw.u8": np.arange(250, 256, dtype=np.uint8),
    "raw.u16": np.arange(6, dtype=np.uint16) * 10000,
    "raw.u32": np.arange(6, dtype=np.uint32) * 700000000,
    "raw.u64": np.arange(6, dtype=np.uint64) * (1 << 61),
    "raw.bool": np.array([True, False, True]),
    "raw.scalar": np.array(2.5, dtype=np.float32),
    "raw.empty": np.zeros((0, 3), dtype=np.float32),
}
for name, a in arrays.items():
    inits.append(numpy_helper.from_array(a, name)); ref(name, a)
# typed fields (helper.make_tensor, raw=False)
typed = {
    T.FLOAT: arrays["raw.f32"], T.DOUBLE: arrays["raw.f64"], T.FLOAT16: arrays["raw.f16"],
    T.BFLOAT16: arrays["raw.bf16"], T.INT8: arrays["raw.i8"], T.INT16: arrays["raw.i16"],
    T.INT32: arrays["raw.i32"], T.INT64: arrays["raw.i64"], T.UINT8: arrays["raw.u8"],
    T.UINT16: arrays["raw.u16"], T.UINT32: arrays["raw.u32"], T.UINT64: arrays["raw.u64"],
    T.BOOL: arrays["raw.bool"],
}
for dt, a in typed.items():
    name = "typed." + T.DataType.Name(dt).lower()
    t = helper.make_tensor(name, dt, a.shape, a.flatten().tolist() if dt not in (T.FLOAT16, T.BFLOAT16) else a.flatten().astype(np.float32).tolist(), raw=False)
    inits.append(t)
    back = numpy_helper.to_array(t)
    assert back.shape == a.shape, name
    ref(name, back)
# A nested graph (If's branches) with initializers of their own.
then_init = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "then.w"); ref("then.w", np.array([1.0, 2.0], np.float32))
else_init = numpy_helper.from_array(np.array([3, 4], np.int64), "else.w"); ref("else.w", np.array([3, 4], np.int64))
out_t = helper.make_tensor_value_info("then.w", T.FLOAT, [2])
then_g = helper.make_graph([], "then", [], [helper.make_tensor_value_info("then.w", T.FLOAT, [2])], [then_init])
else_g = helper.make_graph([helper.make_node("Cast", ["else.w"], ["else.f"], to=T.FLOAT)], "else", [], [helper.make_tensor_value_info("else.f", T.FLOAT, [2])], [else_init])
cond = numpy_helper.from_array(np.array(True), "cond"); ref("cond", np.array(True))
inits.append(cond)
node = helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)
graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", T.FLOAT, [2])], inits)
model = helper.make_model(graph, producer_name="burnpack-test", producer_version="1.0",
                          doc_string="a test model " * 40, model_version=7,
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 2)])
helper.set_model_props(model, {"author": "tests", "license": "MIT"})
onnx.save_model(model, "model.onnx")
onnx.save_model(model, "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="ext.bin", size_threshold=0)
m2 = onnx.load("ext.onnx", load_external_data=False)
n = sum(1 for t in m2.graph.initializer if t.data_location == T.EXTERNAL)
assert n > 10, n
with open("names.txt", "w") as f:
    f.write("\n".join(sorted(t.name for t in inits) + ["then.w", "else.w"]))
# Types with no Burn dtype.
bad = helper.make_graph([], "g", [], [], [helper.make_tensor("s", T.STRING, [1], [b"x"]), ])
onnx.save_model(helper.make_model(bad), "string.onnx")
f8 = helper.make_graph([], "g", [], [], [helper.make_tensor("f8", T.FLOAT8E4M3FN, [2], [1.0, 2.0])])
onnx.save_model(helper.make_model(f8), "f8.onnx")
"#;

fn written(dir: &Path) -> Option<Vec<String>> {
    python(WRITER, dir)?;
    let names = std::fs::read_to_string(dir.join("names.txt")).unwrap();
    Some(names.lines().map(str::to_string).collect())
}

fn check_values(source: &dyn TensorSource, dir: &Path, names: &[String]) {
    assert_eq!(source.tensors().len(), names.len());
    for name in names {
        let info = source
            .tensor(name)
            .unwrap_or_else(|| panic!("{name} listed"));
        let expected = std::fs::read(dir.join(format!("{name}.ref"))).unwrap();
        let got = source.read(info).unwrap();
        assert_eq!(&got[..], &expected[..], "{name}");
    }
}

#[test]
fn initializers_written_by_onnx_read_exactly() {
    use burn::tensor::DType;
    let dir = tempfile::tempdir().unwrap();
    let Some(names) = written(dir.path()) else {
        return;
    };
    let source = OnnxSource::open(dir.path().join("model.onnx")).unwrap();
    assert_source_contract(&source);
    check_values(&source, dir.path(), &names);
    let f32s = source.tensor("raw.f32").unwrap();
    assert_eq!((f32s.dtype(), f32s.shape()), (DType::F32, &[3usize, 5][..]));
    assert_eq!(
        source.tensor("raw.scalar").unwrap().shape(),
        &[] as &[usize]
    );
    assert_eq!(
        source.tensor("typed.bfloat16").unwrap().dtype(),
        DType::BF16
    );
    // Typed fields are decoded (a copy, said so); the nested graphs' initializers are listed.
    assert!(
        source
            .copy_reason(source.tensor("typed.float").unwrap())
            .is_some()
    );
    assert!(source.tensor("then.w").is_some() && source.tensor("else.w").is_some());
    let meta: std::collections::HashMap<_, _> = source.metadata().into_iter().collect();
    assert_eq!(meta["producer_name"], "burnpack-test");
    assert_eq!(meta["producer_version"], "1.0");
    assert_eq!(meta["model_version"], "7");
    assert_eq!(meta["opset_import.ai.onnx"], "17");
    assert_eq!(meta["opset_import.com.example"], "2");
    // The user's keys under their field's name, never in the place of the model's own.
    assert_eq!(meta["metadata_props.author"], "tests");
    assert!(!meta.contains_key("author"));
    assert!(
        meta["doc_string"].contains("... (520 bytes)"),
        "{}",
        meta["doc_string"]
    );
    assert_eq!(source.ir_version(), meta["ir_version"].parse().ok());
    // Through the registry, by content; and from bytes.
    let any = open_any(dir.path().join("model.onnx")).unwrap();
    assert_eq!(any.describe().format, "onnx");
    let bytes = std::fs::read(dir.path().join("model.onnx")).unwrap();
    let memory = OnnxSource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new()).unwrap();
    check_values(&memory, dir.path(), &names);
    // Verified (read, not mapped).
    let verified = OnnxSource::open_with(
        dir.path().join("model.onnx"),
        &OpenOptions::new().verify(true),
    )
    .unwrap();
    check_values(&verified, dir.path(), &names);
}

#[test]
fn external_data_is_mapped_from_the_models_folder() {
    let dir = tempfile::tempdir().unwrap();
    let Some(names) = written(dir.path()) else {
        return;
    };
    let source = OnnxSource::open(dir.path().join("ext.onnx")).unwrap();
    assert_source_contract(&source);
    check_values(&source, dir.path(), &names);
    assert_eq!(source.external_files().len(), 1);
    // The first tensor of ext.bin is at offset 0 of a mapping: a view, no copy.
    assert_eq!(source.copy_reason(source.tensor("raw.f32").unwrap()), None);
    let about = open_any(dir.path().join("ext.onnx")).unwrap().describe();
    assert_eq!(about.shards.len(), 2, "{:?}", about.shards);
    // From bytes, external data cannot be reached: said so, naming the tensor.
    let bytes = std::fs::read(dir.path().join("ext.onnx")).unwrap();
    let err = OnnxSource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("external data") && err.contains("tensor '"),
        "{err}"
    );
    // The data file gone: an error naming it.
    std::fs::remove_file(dir.path().join("ext.bin")).unwrap();
    let err = OnnxSource::open(dir.path().join("ext.onnx"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("ext.bin"), "{err}");
}

#[test]
fn types_without_a_burn_dtype_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_) = written(dir.path()) else {
        return;
    };
    for (file, tensor, ty) in [
        ("string.onnx", "'s'", "STRING"),
        ("f8.onnx", "'f8'", "FLOAT8E4M3FN"),
    ] {
        let err = OnnxSource::open(dir.path().join(file))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(tensor) && err.contains(ty) && err.contains(file),
            "{err}"
        );
    }
}

/// An MLP (`fc1`: Linear 4→8, LayerNorm `norm`, ReLU, `fc2`: Linear 8→3) as `onnx.helper`
/// builds it: `Gemm` nodes with `transB = 1` over PyTorch-style initializers (`fc1.weight`
/// `[out, in]`, `norm.weight`/`norm.bias`), checked by `onnx.checker`; and `reference.ref`:
/// its forward pass in numpy on a fixed input.
const MLP: &str = r#"
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
rng = np.random.default_rng(11)
w1 = rng.standard_normal((8, 4)).astype(np.float32); b1 = rng.standard_normal(8).astype(np.float32)
g = rng.standard_normal(8).astype(np.float32); beta = rng.standard_normal(8).astype(np.float32)
w2 = rng.standard_normal((3, 8)).astype(np.float32); b2 = rng.standard_normal(3).astype(np.float32)
inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "fc1.weight"), (b1, "fc1.bias"),
         (g, "norm.weight"), (beta, "norm.bias"), (w2, "fc2.weight"), (b2, "fc2.bias")]]
nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
         helper.make_node("LayerNormalization", ["h", "norm.weight", "norm.bias"], ["n"], axis=-1, epsilon=1e-5),
         helper.make_node("Relu", ["n"], ["r"]),
         helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], transB=1)]
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])], inits)
model = helper.make_model(graph, producer_name="pytorch", opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
onnx.save_model(model, "mlp.onnx", save_as_external_data=True, location="mlp.weights", size_threshold=0)
x = np.arange(8, dtype=np.float32).reshape(2, 4) / 5 - 0.5
h = x @ w1.T + b1
n = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * g + beta
y = np.maximum(n, 0) @ w2.T + b2
y.astype(np.float32).tofile("reference.ref")
"#;

mod mlp {
    use burn::module::Module;
    use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
    use burn::tensor::activation::relu;
    use burn::tensor::{Device, Tensor};

    #[derive(Module, Debug)]
    pub struct Mlp {
        pub fc1: Linear,
        pub norm: LayerNorm,
        pub fc2: Linear,
    }

    impl Mlp {
        pub fn new(device: &Device) -> Self {
            Self {
                fc1: LinearConfig::new(4, 8).init(device),
                norm: LayerNormConfig::new(8).init(device),
                fc2: LinearConfig::new(8, 3).init(device),
            }
        }

        pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
            self.fc2
                .forward(relu(self.norm.forward(self.fc1.forward(x))))
        }
    }
}

#[test]
fn an_onnx_models_initializers_load_into_a_burn_module_with_pytorchs_convention() {
    use burn::tensor::{Device, Tensor};
    use burnpack::LoadOptions;
    use burnpack::PackModule;
    let dir = tempfile::tempdir().unwrap();
    let Some(()) = python(MLP, dir.path()) else {
        return;
    };
    let source = OnnxSource::open(dir.path().join("mlp.onnx")).unwrap();
    let reference: Vec<f32> = std::fs::read(dir.path().join("reference.ref"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let device = Device::flex();
    let model = mlp::Mlp::new(&device)
        .load_from_source(&source, &LoadOptions::new().pytorch(true))
        .unwrap();
    let x: Vec<f32> = (0..8).map(|i| i as f32 / 5.0 - 0.5).collect();
    let x = Tensor::<1>::from_floats(x.as_slice(), &device).reshape([2, 4]);
    let y = model.forward(x).into_data().try_to_vec::<f32>().unwrap();
    assert_eq!(y.len(), reference.len());
    for (i, (a, b)) in y.iter().zip(&reference).enumerate() {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{i}: {a} vs {b}");
    }
}

/// Protobuf by hand, for hostile files.
mod pb {
    pub fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }
    pub fn int(field: u32, v: u64) -> Vec<u8> {
        [varint(u64::from(field) << 3), varint(v)].concat()
    }
    pub fn bytes(field: u32, data: &[u8]) -> Vec<u8> {
        [
            varint(u64::from(field) << 3 | 2),
            varint(data.len() as u64),
            data.to_vec(),
        ]
        .concat()
    }
    /// A `TensorProto`.
    pub fn tensor(name: &str, data_type: u64, dims: &[u64], rest: &[u8]) -> Vec<u8> {
        let dims: Vec<u8> = dims.iter().flat_map(|&d| int(1, d)).collect();
        [
            dims,
            int(2, data_type),
            bytes(8, name.as_bytes()),
            rest.to_vec(),
        ]
        .concat()
    }
    /// An external-data entry.
    pub fn entry(key: &str, value: &str) -> Vec<u8> {
        bytes(
            13,
            &[bytes(1, key.as_bytes()), bytes(2, value.as_bytes())].concat(),
        )
    }
    /// A model (IR 9) whose graph holds `tensors` as initializers.
    pub fn model(tensors: &[Vec<u8>]) -> Vec<u8> {
        let graph: Vec<u8> = tensors.iter().flat_map(|t| bytes(5, t)).collect();
        [int(1, 9), bytes(7, &graph)].concat()
    }
}

fn open_err(bytes: Vec<u8>) -> String {
    OnnxSource::from_bytes(Bytes::from_bytes_vec(bytes), &OpenOptions::new())
        .unwrap_err()
        .to_string()
}

#[test]
fn hostile_wire_formats_are_refused_cleanly() {
    let ok = pb::model(&[pb::tensor("w", 1, &[2], &pb::bytes(9, &[0; 8]))]);
    assert!(OnnxSource::from_bytes(Bytes::from_bytes_vec(ok.clone()), &OpenOptions::new()).is_ok());
    // Every cut of a good file is an error, never a panic.
    for cut in 1..ok.len() {
        let _ = OnnxSource::from_bytes(
            Bytes::from_bytes_vec(ok[..cut].to_vec()),
            &OpenOptions::new(),
        );
    }
    // A length past the end.
    let mut long = ok.clone();
    long[3] = 0x7f;
    assert!(open_err(long).contains("past the end"));
    // A varint of 11 bytes.
    let mut varint = vec![0x08];
    varint.extend([0xff; 10]);
    varint.push(1);
    assert!(open_err(varint).contains("varint"));
    // A group (wire type 3).
    assert!(open_err([pb::int(1, 9), vec![0x3b]].concat()).contains("group"));
    // Graphs nested 5000 deep through If nodes' attributes.
    let mut graph = Vec::new();
    for _ in 0..5000 {
        graph = pb::bytes(1, &pb::bytes(5, &pb::bytes(6, &graph)));
    }
    let err = open_err([pb::int(1, 9), pb::bytes(7, &graph)].concat());
    assert!(err.contains("nested more than 128 deep"), "{err}");
    // Huge dims with a few bytes, negative dims, overflowing dims.
    let err = open_err(pb::model(&[pb::tensor(
        "big",
        1,
        &[1 << 40, 1 << 20],
        &pb::bytes(9, &[0; 8]),
    )]));
    assert!(err.contains("'big'") && err.contains("limit"), "{err}");
    let err = open_err(pb::model(&[pb::tensor("neg", 1, &[u64::MAX], &[])]));
    assert!(err.contains("'neg'") && err.contains("negative"), "{err}");
    let err = open_err(pb::model(&[pb::tensor(
        "over",
        1,
        &[1 << 40, 1 << 40],
        &[],
    )]));
    assert!(err.contains("'over'") && err.contains("overflow"), "{err}");
    // raw_data of the wrong length; typed values of the wrong count or type; both kinds.
    let err = open_err(pb::model(&[pb::tensor(
        "short",
        1,
        &[3],
        &pb::bytes(9, &[0; 8]),
    )]));
    assert!(
        err.contains("'short'") && err.contains("raw_data holds 8 bytes"),
        "{err}"
    );
    let err = open_err(pb::model(&[pb::tensor("few", 7, &[3], &pb::int(7, 1))]));
    assert!(err.contains("'few'") && err.contains("1 values"), "{err}");
    let err = open_err(pb::model(&[pb::tensor("kind", 7, &[1], &pb::int(5, 1))]));
    assert!(
        err.contains("'kind'") && err.contains("int32_data"),
        "{err}"
    );
    let both = [pb::bytes(9, &[0; 8]), pb::int(7, 1)].concat();
    assert!(open_err(pb::model(&[pb::tensor("both", 7, &[1], &both)])).contains("'both'"));
    // An int32_data value that is no INT8 value: refused when read, naming the tensor.
    let source = OnnxSource::from_bytes(
        Bytes::from_bytes_vec(pb::model(&[pb::tensor("i8", 3, &[1], &pb::int(5, 300))])),
        &OpenOptions::new(),
    )
    .unwrap();
    let err = source
        .read(source.tensor("i8").unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("'i8'") && err.contains("300"), "{err}");
    // Two initializers of one name; no graph; a segment; a sparse initializer.
    let w = pb::tensor("w", 1, &[2], &pb::bytes(9, &[0; 8]));
    assert!(open_err(pb::model(&[w.clone(), w.clone()])).contains("'w'"));
    assert!(open_err(pb::int(1, 9)).contains("no graph"));
    let seg = pb::tensor(
        "seg",
        1,
        &[2],
        &[pb::bytes(3, &pb::int(1, 0)), pb::bytes(9, &[0; 8])].concat(),
    );
    assert!(open_err(pb::model(&[seg])).contains("segment"));
    let sparse = [
        pb::int(1, 9),
        pb::bytes(7, &pb::bytes(15, &pb::bytes(1, &w))),
    ]
    .concat();
    let err = open_err(sparse);
    assert!(
        err.contains("sparse initializer") && err.contains("'w'"),
        "{err}"
    );
    // Over the tensor-count limit, before the rows are kept.
    let limits = burnpack::Limits::default().with_max_tensor_count(2);
    let three = pb::model(&[
        w.clone(),
        pb::tensor("v", 1, &[2], &pb::bytes(9, &[0; 8])),
        pb::tensor("u", 1, &[2], &pb::bytes(9, &[0; 8])),
    ]);
    let err = OnnxSource::from_bytes(
        Bytes::from_bytes_vec(three),
        &OpenOptions::new().limits(limits),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("tensor-count limit"), "{err}");
}

#[test]
fn external_data_outside_the_folder_or_not_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("model");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(dir.path().join("secret.bin"), [0u8; 64]).unwrap();
    std::fs::write(folder.join("w.bin"), [0u8; 64]).unwrap();
    let external = |location: &str, offset: &str, length: &str| {
        let rest = [
            pb::entry("location", location),
            pb::entry("offset", offset),
            pb::entry("length", length),
            pb::int(14, 1),
        ]
        .concat();
        pb::model(&[pb::tensor("w", 1, &[4], &rest)])
    };
    let open = |bytes: Vec<u8>| {
        let path = folder.join("m.onnx");
        std::fs::write(&path, bytes).unwrap();
        OnnxSource::open(&path)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    open(external("w.bin", "16", "16")).unwrap();
    for (location, why) in [
        ("../secret.bin", "not a plain path"),
        ("/etc/passwd", "not a plain path"),
        ("", "not a plain path"),
    ] {
        let err = open(external(location, "0", "16")).unwrap_err();
        assert!(
            err.contains(why) && err.contains("'w'") && err.contains("m.onnx"),
            "{err}"
        );
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("secret.bin"), folder.join("link.bin")).unwrap();
        let err = open(external("link.bin", "0", "16")).unwrap_err();
        assert!(err.contains("out of the model's folder"), "{err}");
        let fifo = folder.join("fifo");
        let made = Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let err = open(external("fifo", "0", "16")).unwrap_err();
            assert!(err.contains("fifo"), "{err}");
        }
    }
    let err = open(external("w.bin", "60", "16")).unwrap_err();
    assert!(err.contains("past its end"), "{err}");
    // An offset past the end is said to be, not "0 bytes".
    let err = open(external("w.bin", "1000", "16")).unwrap_err();
    assert!(
        err.contains("at offset 1000, past its end (64 bytes)"),
        "{err}"
    );
    let err = open(external("w.bin", "0", "12")).unwrap_err();
    assert!(
        err.contains("its length is 12 bytes") && err.contains("needs 16"),
        "{err}"
    );
    // A key given twice (onnx's loader takes the last; another reader could take the first),
    // and a key ONNX does not define, are refused by name.
    for (rest, why) in [
        (
            [
                pb::entry("location", "w.bin"),
                pb::entry("location", "../secret.bin"),
            ]
            .concat(),
            "external_data key 'location' given twice",
        ),
        (
            [
                pb::entry("location", "w.bin"),
                pb::entry("offset", "0"),
                pb::entry("offset", "16"),
            ]
            .concat(),
            "external_data key 'offset' given twice",
        ),
        (
            [pb::entry("location", "w.bin"), pb::entry("mystery", "1")].concat(),
            "external_data key 'mystery'",
        ),
    ] {
        let rest = [rest, pb::int(14, 1)].concat();
        let err = open(pb::model(&[pb::tensor("w", 1, &[4], &rest)])).unwrap_err();
        assert!(err.contains(why) && err.contains("'w'"), "{err}");
    }
    let err = open(external("missing.bin", "0", "16")).unwrap_err();
    assert!(err.contains("missing.bin"), "{err}");
}

/// `bpk inspect / verify / convert / diff` on ONNX models (the committed corpus, written by
/// the `onnx` package): through the registry, with no code of bpk's own for ONNX.
#[cfg(feature = "cli")]
#[test]
fn bpk_inspects_verifies_converts_and_diffs_onnx_models() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/onnx");
    let model = corpus.join("model.onnx");
    let ext = corpus.join("ext.onnx");
    let (code, out, err) = common::bpk(&["inspect".as_ref(), model.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ONNX model") && out.contains("raw.bf16") && out.contains("BFLOAT16"),
        "{out}"
    );
    assert!(
        out.contains("burnpack-test") && out.contains("then.w"),
        "{out}"
    );
    for file in [&model, &ext] {
        let (code, out, err) = common::bpk(&["verify".as_ref(), file.as_os_str()]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("model.bpk");
    let (code, out, err) = common::bpk(&["convert".as_ref(), ext.as_os_str(), pack.as_os_str()]);
    assert_eq!(code, 0, "{out}{err}");
    let converted = burnpack::read::Reader::open(&pack).unwrap();
    let source = OnnxSource::open(&model).unwrap();
    for info in source.tensors() {
        let got = converted.tensor(info.name()).unwrap();
        assert_eq!(
            &converted.read(got).unwrap()[..],
            &source.read(info).unwrap()[..],
            "{}",
            info.name()
        );
    }
    // The model and its external-data twin hold the same values; the pack too.
    for (a, b) in [(&model, &ext), (&model, &pack)] {
        let (code, out, err) = common::bpk(&["diff".as_ref(), a.as_os_str(), b.as_os_str()]);
        assert_eq!(code, 0, "{out}{err}");
    }
}

/// Initializers of the same name in two nested graphs (an `If`'s branches) and a nested name
/// shadowing an outer one: valid ONNX (onnx's checker passes it), loaded with the nested ones
/// named by their scope (`<node>/<attribute>/<name>`), unique names kept as stored.
#[test]
fn nested_graphs_sharing_a_name_are_scoped() {
    const SCRIPT: &str = r#"
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
def branch(name, value):
    w = numpy_helper.from_array(np.array([value], np.float32), "w")
    own = numpy_helper.from_array(np.array([value * 10], np.float32), name + "_only")
    return helper.make_graph([helper.make_node("Add", ["w", name + "_only"], [name + "_y"])], name, [],
        [helper.make_tensor_value_info(name + "_y", T.FLOAT, [1])], [w, own])
outer = numpy_helper.from_array(np.array([7.0], np.float32), "w")
cond = numpy_helper.from_array(np.array(True), "cond")
node = helper.make_node("If", ["cond"], ["y"], name="If_0",
    then_branch=branch("then", 1.0), else_branch=branch("else", 2.0))
graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", T.FLOAT, [1])], [outer, cond])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model, full_check=True)
onnx.save_model(model, "nested.onnx")
"#;
    let dir = tempfile::tempdir().unwrap();
    if python(SCRIPT, dir.path()).is_none() {
        return;
    }
    let source = OnnxSource::open(dir.path().join("nested.onnx")).unwrap();
    let names: Vec<&str> = source.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "If_0/else_branch/w",
            "If_0/then_branch/w",
            "cond",
            "else_only",
            "then_only",
            "w"
        ]
    );
    let value = |name: &str| {
        let bytes = source.read(source.tensor(name).unwrap()).unwrap();
        f32::from_le_bytes(bytes[..4].try_into().unwrap())
    };
    assert_eq!(
        (
            value("w"),
            value("If_0/then_branch/w"),
            value("If_0/else_branch/w")
        ),
        (7.0, 1.0, 2.0)
    );
    assert_eq!(value("then_only"), 10.0);
    assert_source_contract(&source);
}

/// A `BOOL` byte other than 0 or 1 is refused on every path (`raw_data` as typed fields are),
/// and a `metadata_props` key given twice (onnx's checker refuses it) is refused by name.
#[test]
fn bool_bytes_and_metadata_keys_are_held_to_onnx() {
    let model = pb::model(&[pb::tensor("b", 9, &[3], &pb::bytes(9, &[0, 1, 2]))]);
    let source = OnnxSource::from_bytes(Bytes::from_bytes_vec(model), &OpenOptions::new()).unwrap();
    let err = source
        .read(source.tensor("b").unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'b'") && err.contains("element 2 holds the byte 2"),
        "{err}"
    );
    let good = pb::model(&[pb::tensor("b", 9, &[2], &pb::bytes(9, &[0, 1]))]);
    let source =
        OnnxSource::from_bytes(Bytes::from_bytes_vec(good.clone()), &OpenOptions::new()).unwrap();
    assert_eq!(
        &source.read(source.tensor("b").unwrap()).unwrap()[..],
        &[0, 1]
    );
    let prop = |k: &str, v: &str| {
        pb::bytes(
            14,
            &[pb::bytes(1, k.as_bytes()), pb::bytes(2, v.as_bytes())].concat(),
        )
    };
    let twice = [good.clone(), prop("k", "1"), prop("k", "2")].concat();
    let err = open_err(twice);
    assert!(err.contains("metadata_props key 'k' given twice"), "{err}");
    // A key named like a field of the model stays the user's.
    let spoof = [good, prop("producer_name", "evil")].concat();
    let source = OnnxSource::from_bytes(Bytes::from_bytes_vec(spoof), &OpenOptions::new()).unwrap();
    let meta: std::collections::HashMap<_, _> = source.metadata().into_iter().collect();
    assert_eq!(
        meta.get("metadata_props.producer_name").map(String::as_str),
        Some("evil")
    );
    assert!(!meta.contains_key("producer_name"));
}

/// Scopes qualify names, so long node names over many nested graphs would multiply a small
/// file into gigabytes of names: they count against the metadata limit and stop there. A
/// domain imported twice (`""` and `ai.onnx` are one) is refused.
#[test]
fn scoped_names_and_opset_imports_are_bounded() {
    let long = "n".repeat(60 << 10);
    let inner = pb::bytes(5, &pb::tensor("w", 1, &[1], &pb::bytes(9, &[0; 4])));
    let graphs: Vec<u8> = (0..2000).flat_map(|_| pb::bytes(11, &inner)).collect();
    let attribute = [pb::bytes(1, b"bodies"), graphs].concat();
    let node = [pb::bytes(3, long.as_bytes()), pb::bytes(5, &attribute)].concat();
    let model = [pb::int(1, 9), pb::bytes(7, &pb::bytes(1, &node))].concat();
    assert!(model.len() < 200 << 10);
    let err = open_err(model);
    assert!(err.contains("metadata"), "{err}");
    // Two graphs holding `w`, qualified apart; with the same scope (two nodes named alike),
    // the refusal names both graphs.
    let node = |name: &str| {
        let attribute = [pb::bytes(1, b"body"), pb::bytes(6, &inner)].concat();
        pb::bytes(
            1,
            &[pb::bytes(3, name.as_bytes()), pb::bytes(5, &attribute)].concat(),
        )
    };
    let ok = [
        pb::int(1, 9),
        pb::bytes(7, &[node("A"), node("B")].concat()),
    ]
    .concat();
    let source = OnnxSource::from_bytes(Bytes::from_bytes_vec(ok), &OpenOptions::new()).unwrap();
    let names: Vec<&str> = source.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["A/body/w", "B/body/w"]);
    let clash = [
        pb::int(1, 9),
        pb::bytes(7, &[node("X"), node("X")].concat()),
    ]
    .concat();
    let err = open_err(clash);
    assert!(
        err.contains("X/body/w") && err.matches("subgraph@").count() >= 2,
        "{err}"
    );
    let opset = |domain: &str| {
        pb::bytes(
            8,
            &[pb::bytes(1, domain.as_bytes()), pb::int(2, 17)].concat(),
        )
    };
    let good = pb::model(&[pb::tensor("w", 1, &[1], &pb::bytes(9, &[0; 4]))]);
    let twice = [good, opset(""), opset("ai.onnx")].concat();
    let err = open_err(twice);
    assert!(err.contains("twice"), "{err}");
}
