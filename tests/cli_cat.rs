//! `bpk cat FILE NAME` (issue 52, point 3): a tensor's dtype, shape and values, abridged as
//! NumPy abridges them, `--full`, `--rows A..B`, and `--npy OUT` read back by NumPy, for every
//! format the registry opens (packs, safetensors, GGUF, NumPy, ONNX, `torch.save`, an
//! incremental checkpoint), with the exit codes of the other commands.

mod common;

use std::path::Path;

use burn::tensor::quantization::QuantScheme;
use burn::tensor::{Bytes, DType, Device, Tensor, TensorData};
use burnpack::source::{TensorSource, TensorSourceExt};
use burnpack::write::{Entry, Writer};
use common::bpk;

/// Writes, with each format's own writer, `a.npy` (2000 x 7 f32, abridged when printed),
/// `m.gguf` (f32 and Q8_0, dequantized at open) and `m.onnx` (f16 and bool), and each
/// tensor's values as NumPy holds them, `ref.<name>.npy`.
const WRITER: &str = r#"
import numpy as np, gguf, onnx
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import quantize, dequantize
from onnx import helper, numpy_helper, TensorProto
a = (np.arange(2000 * 7, dtype=np.float32) / 4).reshape(2000, 7)
np.save("a.npy", a); np.save("ref.array.npy", a)
w = GGUFWriter("m.gguf", "llama")
g = (np.arange(15, dtype=np.float32) - 7) / 8
w.add_tensor("g.f32", g.reshape(5, 3))
q = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
w.add_tensor("g.q8", quantize(q, T.Q8_0), raw_dtype=T.Q8_0)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
r = gguf.GGUFReader("m.gguf")
for t in r.tensors:
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    data = dequantize(t.data, t.tensor_type) if t.tensor_type == T.Q8_0 else np.asarray(t.data)
    np.save("ref." + t.name + ".npy", np.asarray(data, dtype=np.float32).reshape(shape))
h = (np.arange(6, dtype=np.float32) / 3).astype(np.float16).reshape(2, 3)
b = np.array([True, False, True, True])
inits = [numpy_helper.from_array(h, "o.h"), numpy_helper.from_array(b, "o.b")]
graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("o.h", TensorProto.FLOAT16, [2, 3])], inits)
onnx.save(helper.make_model(graph), "m.onnx")
np.save("ref.o.h.npy", h); np.save("ref.o.b.npy", b)
"#;

fn python(script: &str, dir: &Path) -> Option<()> {
    common::python("numpy, gguf, onnx", script, dir)
}

/// `OUT` written by `bpk cat FILE NAME --npy OUT` (and its rows, if any) equals NumPy's
/// `ref.<name>.npy` (sliced the same way) in dtype, shape and values.
fn npy_matches(dir: &Path, file: &str, name: &str, rows: Option<(usize, usize)>) {
    let out = format!("out.{name}.npy");
    let mut args = vec![
        "cat".to_string(),
        dir.join(file).display().to_string(),
        name.to_string(),
        "--npy".to_string(),
        dir.join(&out).display().to_string(),
    ];
    let slice = match rows {
        Some((a, b)) => {
            args.extend(["--rows".to_string(), format!("{a}..{b}")]);
            format!("[{a}:{b}]")
        }
        None => String::new(),
    };
    let (code, stdout, stderr) = bpk(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(&out), "{stdout}");
    python(
        &format!(
            "import numpy as np\n\
             got = np.load('{out}'); want = np.load('ref.{name}.npy'){slice}\n\
             assert got.dtype == want.dtype, (got.dtype, want.dtype)\n\
             assert got.shape == want.shape, (got.shape, want.shape)\n\
             assert np.array_equal(got, want), (got, want)\n"
        ),
        dir,
    );
}

fn cat(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["cat"];
    all.extend_from_slice(args);
    bpk(&all)
}

#[test]
fn numpy_gguf_and_onnx_tensors_print_and_write_npy_numpy_reads() {
    let dir = tempfile::tempdir().unwrap();
    let Some(()) = python(WRITER, dir.path()) else {
        return;
    };
    let at = |f: &str| dir.path().join(f).display().to_string();

    // Abridged: the first and last three rows and columns, and the count.
    let (code, out, err) = cat(&[&at("a.npy"), "array"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "array: f32 [2000, 7] (14000 values, abridged; --full prints all)"
    );
    // Values right-aligned to the widest printed ("3499.25"), NumPy's rows and ellipses.
    let row = |values: [f32; 6]| {
        let cell = |v: f32| format!("{:>7}", format!("{v:?}"));
        let [a, b, c, d, e, f] = values.map(cell);
        format!("[{a}, {b}, {c}, ..., {d}, {e}, {f}]")
    };
    assert_eq!(
        lines[1],
        format!("[{},", row([0.0, 0.25, 0.5, 1.0, 1.25, 1.5]))
    );
    assert_eq!(lines[4], " ...,");
    let last = [13993, 13994, 13995, 13997, 13998, 13999].map(|i| i as f32 / 4.0);
    assert_eq!(lines[7], format!(" {}]", row(last)));
    assert_eq!(lines.len(), 8, "{out}");
    // Everything with --full.
    let (code, out, _) = cat(&[&at("a.npy"), "array", "--full"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2001);
    assert!(!out.contains("..."));
    assert!(out.contains("3499.75"));
    // Rows.
    let (code, out, _) = cat(&[&at("a.npy"), "array", "--rows", "10..12"]);
    assert_eq!(code, 0);
    let cells: Vec<String> = (70..84)
        .map(|i| format!("{:>5}", format!("{:?}", i as f32 / 4.0)))
        .collect();
    assert_eq!(
        out,
        format!(
            "array: f32 [2000, 7], rows 10..12 [2, 7]\n[[{}],\n [{}]]\n",
            cells[..7].join(", "),
            cells[7..].join(", ")
        )
    );
    npy_matches(dir.path(), "a.npy", "array", None);
    npy_matches(dir.path(), "a.npy", "array", Some((1990, 2000)));

    // GGUF: plain and Q8_0 (dequantized when the file is opened, as every command reads it).
    let (code, out, err) = cat(&[&at("m.gguf"), "g.f32"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("g.f32: f32 [5, 3]\n[[-0.875,  -0.75, -0.625],\n [  -0.5,"),
        "{out}"
    );
    npy_matches(dir.path(), "m.gguf", "g.f32", None);
    npy_matches(dir.path(), "m.gguf", "g.f32", Some((2, 4)));
    npy_matches(dir.path(), "m.gguf", "g.q8", None);

    // ONNX: f16 and bool.
    let (code, out, err) = cat(&[&at("m.onnx"), "o.h"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("o.h: f16 [2, 3]\n"), "{out}");
    assert!(
        out.contains("0.33325195"),
        "f16 values as f16 holds them: {out}"
    );
    let (code, out, _) = cat(&[&at("m.onnx"), "o.b"]);
    assert_eq!(code, 0);
    assert_eq!(out, "o.b: bool [4]\n[ true, false,  true,  true]\n");
    npy_matches(dir.path(), "m.onnx", "o.h", None);
    npy_matches(dir.path(), "m.onnx", "o.b", None);
}

/// A pack of several dtypes, a quantized tensor among them.
fn pack(path: &Path) -> TensorData {
    let device = Device::flex();
    let values: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) / 7.0).collect();
    let float = Tensor::<2>::from_data(TensorData::new(values, [2, 32]), &device);
    let quantized = float.quantize_dynamic(&QuantScheme::default());
    let dequantized = quantized.clone().dequantize().into_data();
    let (bytes, shape, dtype) = quantized.into_data().into_parts();
    Writer::new(vec![
        Entry::resident(
            "w",
            DType::F32,
            vec![3, 2],
            Bytes::from_elems(vec![1.0f32, -2.5, 3.0, 4.0, 1e-8, 6.0]),
        ),
        Entry::resident(
            "half",
            DType::BF16,
            vec![2],
            Bytes::from_elems(vec![
                burn::tensor::bf16::from_f32(1.5),
                burn::tensor::bf16::from_f32(-3.0),
            ]),
        ),
        Entry::resident(
            "ints",
            DType::I32,
            vec![3],
            Bytes::from_elems(vec![-1i32, 20, 300]),
        ),
        Entry::resident("u", DType::U8, vec![2], Bytes::from_bytes_vec(vec![0, 255])),
        Entry::resident("q", dtype, shape.to_vec(), bytes),
    ])
    .write_to_file(path)
    .unwrap();
    dequantized
}

#[test]
fn a_packs_tensors_print_every_dtype_and_quantized_ones_dequantized() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    let dequantized = pack(&path);
    let file = path.display().to_string();
    let show = |name: &str| {
        let (code, out, err) = cat(&[&file, name]);
        assert_eq!(code, 0, "{err}");
        out
    };
    assert_eq!(
        show("w"),
        "w: f32 [3, 2]\n[[ 1.0, -2.5],\n [ 3.0,  4.0],\n [1e-8,  6.0]]\n"
    );
    assert_eq!(show("half"), "half: bf16 [2]\n[ 1.5, -3.0]\n");
    assert_eq!(show("ints"), "ints: i32 [3]\n[ -1,  20, 300]\n");
    assert_eq!(show("u"), "u: u8 [2]\n[  0, 255]\n");
    let q = show("q");
    assert!(
        q.contains("(quantized: values dequantized for printing)"),
        "{q}"
    );
    let first = dequantized.try_to_vec::<f32>().unwrap()[0];
    assert!(q.contains(&format!("{first:?}")), "{q}");

    // --npy: what .npy holds; bf16 and quantized refused as usage (2), nothing written.
    let out = dir.path().join("w.npy");
    let (code, _, err) = cat(&[&file, "w", "--npy", &out.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let back = burnpack::interop::open_any(&out).unwrap();
    let back = back.as_tensor_source().tensor_data("array").unwrap();
    assert_eq!(
        back.try_to_vec::<f32>().unwrap(),
        [1.0, -2.5, 3.0, 4.0, 1e-8, 6.0]
    );
    assert_eq!(back.shape().to_vec(), [3, 2]);
    for name in ["half", "q"] {
        let out = dir.path().join(format!("{name}.npy"));
        let (code, _, err) = cat(&[&file, name, "--npy", &out.display().to_string()]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("'{name}'")) && err.contains("cannot hold"),
            "{err}"
        );
        assert!(!out.exists());
        assert_eq!(common::scratch_files(dir.path()), 0);
    }
}

#[test]
fn exit_codes_are_the_other_commands() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    pack(&path);
    let file = path.display().to_string();
    // A tensor not in the file, rows outside it, a bad range: usage (2).
    for args in [
        vec![file.as_str(), "nope"],
        vec![file.as_str(), "w", "--rows", "2..9"],
        vec![file.as_str(), "w", "--rows", "x"],
    ] {
        let (code, _, err) = cat(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (_, _, err) = cat(&[&file, "nope"]);
    assert!(
        err.starts_with("bpk: ") && err.contains(&file) && err.contains("'nope'"),
        "{err}"
    );
    // A missing file: 3.
    let (code, _, _) = cat(&[&dir.path().join("none.bpk").display().to_string(), "w"]);
    assert_eq!(code, 3);
    // A damaged tensor: its checksum, read whole for printing, says so (1).
    let mut bytes = std::fs::read(&path).unwrap();
    let reader = burnpack::read::Reader::open(&path).unwrap();
    let at = reader.tensor("ints").unwrap().offset() as usize;
    bytes[at] ^= 0x40;
    let damaged = dir.path().join("damaged.bpk");
    std::fs::write(&damaged, bytes).unwrap();
    let (code, _, err) = cat(&[&damaged.display().to_string(), "ints"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("checksum") && err.contains("'ints'"), "{err}");
}

#[test]
fn safetensors_pytorch_and_checkpoint_tensors_write_what_the_library_reads() {
    use safetensors::tensor::TensorView;
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("m.safetensors");
    let values: Vec<u8> = (0..12)
        .flat_map(|i| (i as f32 * 1.5).to_le_bytes())
        .collect();
    safetensors::serialize_to_file(
        [(
            "s",
            TensorView::new(safetensors::Dtype::F32, vec![4, 3], &values).unwrap(),
        )],
        None,
        &st,
    )
    .unwrap();

    // An incremental checkpoint: its tensors in data files beside the manifest.
    use burn::module::{Module, Param};
    use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
    #[derive(Module, Debug)]
    struct One {
        weight: Param<Tensor<2>>,
    }
    let device = Device::flex();
    let ckpts = dir.path().join("ckpts");
    std::fs::create_dir(&ckpts).unwrap();
    let manager = CheckpointManager::new(&ckpts).unwrap().incremental(true);
    let model = One {
        weight: Param::from_data([[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]], &device),
    };
    manager
        .save(TrainingState::new(&model, Progress::new(0, 1)))
        .unwrap();
    manager
        .save(TrainingState::new(&model, Progress::new(0, 2)))
        .unwrap();
    let ckpt = manager.latest().unwrap().unwrap();
    let ckpt_path = std::fs::read_dir(&ckpts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ckpt-")
        })
        .max()
        .unwrap();
    let weight = ckpt
        .chain()
        .unwrap()
        .tensors()
        .iter()
        .map(|t| t.name().to_string())
        .find(|n| n.ends_with("weight"))
        .unwrap();

    let pt = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch/linear__linear.pt");
    let mut cases = vec![(st.clone(), "s".to_string()), (ckpt_path, weight)];
    let linear = burnpack::interop::open_any(&pt).unwrap();
    for t in linear.as_tensor_source().tensors() {
        cases.push((pt.clone(), t.name().to_string()));
    }
    for (k, (file, name)) in cases.iter().enumerate() {
        let source = burnpack::interop::open_any(file).unwrap();
        let source = source.as_tensor_source();
        let want = source.tensor_data(name).unwrap();
        let (code, out, err) = cat(&[&file.display().to_string(), name]);
        assert_eq!(code, 0, "{}: {err}", file.display());
        assert!(
            out.starts_with(&format!("{name}: f32 {:?}\n", want.shape().to_vec())),
            "{out}"
        );
        let out = dir.path().join(format!("{k}.npy"));
        let (code, _, err) = cat(&[
            &file.display().to_string(),
            name,
            "--npy",
            &out.display().to_string(),
        ]);
        assert_eq!(code, 0, "{err}");
        let back = burnpack::interop::open_any(&out).unwrap();
        let back = back.as_tensor_source().tensor_data("array").unwrap();
        assert_eq!(back.shape(), want.shape(), "{name}");
        assert_eq!(back.as_bytes(), want.as_bytes(), "{name}");
        // The first row alone, read on its own.
        let (code, rows, err) = cat(&[&file.display().to_string(), name, "--rows", "..1"]);
        assert_eq!(code, 0, "{err}");
        assert!(rows.contains(", rows 0..1 "), "{rows}");
    }
}

/// `--npy` never writes over what it reads, however the path is spelled (`..`, a link), nor
/// over something that is not a regular file (a FIFO, a directory): exit 2 or 3, the thing
/// left as it was.
#[test]
fn npy_never_replaces_its_input_nor_a_non_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("o");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("m.bpk");
    pack(&path);
    let before = std::fs::read(&path).unwrap();
    let file = path.display().to_string();
    let dotted = dir.path().join("o/../o/m.bpk").display().to_string();
    let (code, _, err) = cat(&[&file, "w", "--npy", &dotted]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is the input"), "{err}");
    #[cfg(unix)]
    {
        let link = dir.path().join("link.npy");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let (code, _, err) = cat(&[&file, "w", "--npy", &link.display().to_string()]);
        assert_eq!(code, 2, "{err}");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let (code, _, err) = cat(&[&file, "w", "--npy", &fifo.display().to_string()]);
            assert_eq!(code, 3, "{err}");
            assert!(err.contains("not a regular file"), "{err}");
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
            // `convert` refuses it the same way.
            let out = fifo.display().to_string();
            let (code, _, err) = bpk(&["convert", &file, &out, "--to", "safetensors"]);
            assert_eq!(code, 3, "{err}");
            assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        }
    }
    let (code, _, err) = cat(&[&file, "w", "--npy", &sub.display().to_string()]);
    assert_ne!(code, 0, "{err}");
    assert!(sub.is_dir());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(common::scratch_files(dir.path()), 0);
    assert_eq!(common::scratch_files(&sub), 0);
}
