//! The registry's output side through the public API (`burnpack::interop::outputs`): which
//! output each name picks, what each refuses by name, and what each writes.
#![cfg(all(feature = "safetensors", feature = "legacy", feature = "optim"))]

use std::path::Path;
use std::sync::Arc;

use burn::tensor::{Bytes, DType};
use burnpack::interop::{
    OutputError, OutputOptions, migration, migrations, open_any, output_for, output_formats,
    outputs,
};
use burnpack::source::DescribedSource;
use burnpack::{Entry, Writer};

fn plain() -> OutputOptions {
    OutputOptions::new()
}

fn sharded(bytes: u64) -> OutputOptions {
    OutputOptions::new().shard_size(Some(bytes))
}

/// A pack of three 16-byte tensors at `path`, opened through the registry.
fn pack(path: &Path) -> Arc<dyn DescribedSource> {
    let entries = (0..3)
        .map(|i| {
            Entry::resident(
                format!("w{i}"),
                DType::F32,
                vec![4],
                Bytes::from_elems(vec![i as f32; 4]),
            )
        })
        .collect();
    Writer::new(entries).write_to_file(path).unwrap();
    Arc::from(open_any(path).unwrap())
}

#[test]
fn each_output_says_the_names_it_takes() {
    let names: Vec<&str> = outputs().iter().map(|o| o.name).collect();
    assert_eq!(names, ["burnpack", "safetensors", "safetensors-sharded"]);
    assert_eq!(output_formats(), ["burnpack", "safetensors"]);
    for output in outputs() {
        assert!(!output.extensions.is_empty(), "{}", output.name);
    }
    let pack = output_for("run/model.bpk", None, &plain()).unwrap();
    assert_eq!((pack.name, pack.format), ("burnpack", "burnpack"));
    assert!(pack.keeps_quantized && pack.object_store && !pack.sharded);
    let st = output_for("model.safetensors", None, &plain()).unwrap();
    assert_eq!(st.name, "safetensors");
    assert!(!st.keeps_quantized && !st.object_store && !st.sharded);
    // A shard size picks the sharded output.
    let shards = output_for("model.safetensors", None, &sharded(1 << 30)).unwrap();
    assert_eq!(
        (shards.name, shards.format),
        ("safetensors-sharded", "safetensors")
    );
    assert!(shards.sharded);
    // A format named picks by it, whatever the name.
    assert_eq!(
        output_for("weights.bin", Some("burnpack"), &plain())
            .unwrap()
            .name,
        "burnpack"
    );
    assert_eq!(
        output_for("model.bpk", Some("safetensors"), &plain())
            .unwrap()
            .name,
        "safetensors"
    );
    // A pack also goes to object storage.
    assert_eq!(
        output_for("s3://bucket/model.bpk", None, &plain())
            .unwrap()
            .name,
        "burnpack"
    );
}

#[test]
fn an_unknown_output_name_is_refused_naming_the_known_ones() {
    for name in ["model.onnx", "model", "model.safetensors.index.json"] {
        let err = output_for(name, None, &plain()).unwrap_err();
        assert!(
            matches!(err, OutputError::UnknownName { .. }),
            "{name}: {err:?}"
        );
        assert!(err.is_usage() && !err.is_damaged());
        let message = err.to_string();
        assert!(
            message.starts_with(name) && message.contains(".bpk, .safetensors"),
            "{message}"
        );
    }
    let err = output_for("model.bpk", Some("onnx"), &plain()).unwrap_err();
    assert!(err.is_usage());
    assert!(
        err.to_string()
            .contains("'onnx' (known: burnpack, safetensors)"),
        "{err}"
    );
}

#[test]
fn options_an_output_does_not_take_are_refused() {
    let err = output_for("model.bpk", None, &sharded(10)).unwrap_err();
    assert!(err.is_usage());
    assert_eq!(
        err.to_string(),
        "--shard-size applies to safetensors output only"
    );
    let keep = OutputOptions::new().keep_quantized(true);
    assert_eq!(
        output_for("model.bpk", None, &keep).unwrap().name,
        "burnpack"
    );
    let err = output_for("model.safetensors", None, &keep).unwrap_err();
    assert!(err.is_usage());
    assert!(
        err.to_string()
            .contains("--keep-quantized applies to burnpack output only"),
        "{err}"
    );
    let err = output_for("s3://bucket/model.safetensors", None, &plain()).unwrap_err();
    assert!(err.is_usage());
    assert!(err.to_string().contains("local files only"), "{err}");
}

#[test]
fn each_output_writes_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bpk");
    let source = pack(&input);

    let out = dir.path().join("out.safetensors");
    let options = plain();
    let written = output_for(&out, None, &options)
        .unwrap()
        .write(&source, &input, &out, &options, None)
        .unwrap();
    assert_eq!(written.paths, [out.clone()]);
    assert_eq!(written.size, std::fs::metadata(&out).unwrap().len());
    let back: Arc<dyn DescribedSource> = Arc::from(open_any(&out).unwrap());
    assert_eq!(back.describe().format, "safetensors");

    // Three 16-byte tensors in shards of at most 16 bytes: three shards, the index last.
    let out = dir.path().join("sharded.safetensors");
    let options = sharded(16);
    let written = output_for(&out, None, &options)
        .unwrap()
        .write(&source, &input, &out, &options, None)
        .unwrap();
    assert_eq!(written.paths.len(), 4);
    assert_eq!(
        written.paths.last().unwrap(),
        &dir.path().join("sharded.safetensors.index.json")
    );
    assert!(written.paths.iter().all(|p| p.exists()));

    // A pack, from safetensors, counting its bytes.
    let st: Arc<dyn DescribedSource> =
        Arc::from(open_any(dir.path().join("out.safetensors")).unwrap());
    let out = dir.path().join("again.bpk");
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = counted.clone();
    let progress: burnpack::interop::Progress = Arc::new(move |n| {
        seen.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    });
    let target = output_for(&out, None, &plain()).unwrap();
    assert!(target.reports_progress);
    let written = target
        .write(&st, &input, &out, &plain(), Some(progress))
        .unwrap();
    assert_eq!(written.paths, [out.clone()]);
    // (What the writer writes: the tensors' 48 bytes, and their alignment.)
    assert!(counted.load(std::sync::atomic::Ordering::Relaxed) >= 48);
    let reader = burnpack::Reader::open(&out).unwrap();
    assert_eq!(reader.tensors().len(), 3);
}

#[test]
fn a_failed_write_leaves_nothing_and_names_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bpk");
    let source = pack(&input);
    for name in ["missing/out.bpk", "missing/out.safetensors"] {
        let out = dir.path().join(name);
        let err = output_for(&out, None, &plain())
            .unwrap()
            .write(&source, &input, &out, &plain(), None)
            .unwrap_err();
        assert!(matches!(err, OutputError::Failed { .. }), "{err:?}");
        assert!(!err.is_usage() && !err.is_damaged());
        assert!(err.to_string().contains("missing"), "{err}");
        assert!(!dir.path().join("missing").exists());
    }
}

#[test]
fn migrations_are_listed_by_name() {
    assert!(migrations().iter().any(|m| m.name == "burn-train"));
    let burn_train = migration("burn-train").unwrap();
    let names: Vec<&str> = burn_train.schedulers.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "constant",
            "exponential",
            "cosine",
            "linear",
            "step",
            "noam"
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    assert_eq!((burn_train.epochs)(dir.path()).unwrap(), Vec::<u64>::new());
    // An unknown scheduler is refused by name, with the known ones.
    std::fs::write(dir.path().join("model-1.mpk"), b"").unwrap();
    let err = (burn_train.check)(dir.path(), "warmup").unwrap_err();
    assert!(
        err.to_string()
            .contains("'warmup' (known: constant, exponential"),
        "{err}"
    );
    assert!(migration("no-such-layout").is_none());
}
