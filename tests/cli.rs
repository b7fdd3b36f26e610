//! The real `bpk` binary on files made by this crate, by Burn 0.22 and by the `safetensors`
//! crate.

mod common;

use std::collections::HashMap;
use std::path::Path;

use assert_cmd::Command;
use burn::tensor::{Bytes, DType};
use burnpack::{Entry, Writer, read::Reader};
use common::{Spec, every_dtype};
use safetensors::{Dtype, SafeTensors};

fn bpk() -> Command {
    Command::cargo_bin("bpk").unwrap()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = bpk().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn f32_entry(name: &str, values: &[f32]) -> Entry {
    Entry::resident(
        name,
        DType::F32,
        vec![values.len()],
        Bytes::from_elems(values.to_vec()),
    )
    .with_param_id(9)
}

#[test]
fn inspect_lists_everything_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    Writer::new(every_dtype().iter().map(Spec::entry).collect())
        .with_metadata("producer", "test")
        .with_scalar("epoch", 4u32)
        .write_to_file(&path)
        .unwrap();

    let (code, out, _) = run(&["inspect", s(&path)]);
    assert_eq!(code, 0);
    assert!(
        out.contains("burnpack v1")
            && out.contains("producer = test")
            && out.contains("epoch = UInt(4)"),
        "{out}"
    );
    assert!(
        out.contains("quant.weight") && out.contains("qfloat") && out.contains("ünïcødé.层.🔥"),
        "{out}"
    );
    assert!(out.contains("1000"), "param ids are listed: {out}");

    let (code, out, _) = run(&["inspect", s(&path), "--json", "--filter", "^dtypes\\.f"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tensor_count"], every_dtype().len());
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("dtypes.f")),
        "{names:?}"
    );
    assert_eq!(v["metadata"]["producer"], "test");

    let (code, _, err) = run(&["inspect", s(&path), "--filter", "("]);
    assert_eq!(code, 2, "a bad regex is a usage error: {err}");
}

#[test]
fn verify_passes_sound_files_and_fails_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.bpk");
    Writer::new(vec![f32_entry("w", &[1.0, 2.0])])
        .write_to_file(&good)
        .unwrap();
    let (code, out, _) = run(&["verify", s(&good), "--nan"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("OK") && out.contains("all 1 tensor checksums match"),
        "{out}"
    );

    // A flipped data byte: the structure is sound, the checksum names the tensor.
    let corrupt = dir.path().join("corrupt.bpk");
    let mut bytes = std::fs::read(&good).unwrap();
    *bytes.last_mut().unwrap() ^= 0x40;
    std::fs::write(&corrupt, &bytes).unwrap();
    let (code, out, err) = run(&["verify", s(&corrupt)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("tensor 'w': checksum mismatch"), "{out}");
    // The verdict: one line on stderr naming the file.
    assert!(
        err.starts_with("bpk: ")
            && err.contains("corrupt.bpk: FAILED: 1 problem")
            && err.lines().count() == 1,
        "{err}"
    );

    let nan = dir.path().join("nan.bpk");
    Writer::new(vec![f32_entry("w", &[1.0, f32::NAN, f32::INFINITY])])
        .write_to_file(&nan)
        .unwrap();
    assert_eq!(
        run(&["verify", s(&nan)]).0,
        0,
        "without --nan values are not judged"
    );
    let (code, out, _) = run(&["verify", s(&nan), "--nan"]);
    assert_eq!(code, 1);
    assert!(out.contains("tensor 'w': 1 NaN and 1 infinite"), "{out}");

    let truncated = dir.path().join("truncated.bpk");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 1]).unwrap();
    let (code, _, err) = run(&["verify", s(&truncated)]);
    assert_eq!(code, 3);
    assert!(
        err.starts_with("bpk: ")
            && err.contains("truncated.bpk")
            && err.contains("'w'")
            && err.lines().count() == 1,
        "{err}"
    );

    let (code, _, err) = run(&["verify", "/no/such.bpk"]);
    assert_eq!(code, 3);
    assert!(err.contains("/no/such.bpk"), "{err}");
}

#[test]
fn diff_reports_every_kind_of_difference() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.bpk"), dir.path().join("b.bpk"));
    Writer::new(vec![
        f32_entry("same", &[1.0]),
        f32_entry("moved", &[1.0, 2.0]),
        f32_entry("gone", &[0.0]),
        f32_entry("reshaped", &[1.0, 2.0]),
    ])
    .with_metadata("k", "1")
    .write_to_file(&a)
    .unwrap();
    Writer::new(vec![
        f32_entry("same", &[1.0]),
        f32_entry("moved", &[1.0, 2.5]),
        f32_entry("new", &[0.0]),
        Entry::resident(
            "reshaped",
            DType::F64,
            vec![2],
            Bytes::from_elems(vec![1.0f64, 2.0]),
        ),
    ])
    .with_metadata("k", "2")
    .with_scalar("lr", 0.1)
    .write_to_file(&b)
    .unwrap();

    let (code, out, _) = run(&["diff", s(&a), s(&b)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("only in") && out.contains("gone") && out.contains("new"),
        "{out}"
    );
    assert!(
        out.contains("moved: values differ (max abs 5e-1, max rel 2e-1)"),
        "{out}"
    );
    assert!(
        out.contains("reshaped: \"f32\" [2] vs \"f64\" [2]"),
        "{out}"
    );
    assert!(
        out.contains("metadata k") && out.contains("scalar lr"),
        "{out}"
    );

    let (code, out, _) = run(&["diff", s(&a), s(&b), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["identical"], false);
    assert_eq!(v["only_in_a"][0], "gone");
    assert_eq!(v["values"][0]["name"], "moved");
    assert_eq!(v["values"][0]["max_abs"], 0.5);

    let (code, out, _) = run(&["diff", s(&a), s(&a)]);
    assert_eq!(code, 0, "{out}");

    // Same values, different parameter ids.
    let c = dir.path().join("c.bpk");
    Writer::new(vec![Entry::resident(
        "same",
        DType::F32,
        vec![1],
        Bytes::from_elems(vec![1.0f32]),
    )])
    .write_to_file(&c)
    .unwrap();
    let d = dir.path().join("d.bpk");
    Writer::new(vec![f32_entry("same", &[1.0])])
        .write_to_file(&d)
        .unwrap();
    // Ids on one side only (a safetensors file holds none): reported, failed only when
    // metadata is strict.
    let (code, out, _) = run(&["diff", s(&c), s(&d)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("same: param id none vs 9"), "{out}");
    let (code, _, _) = run(&["diff", s(&c), s(&d), "--strict-metadata"]);
    assert_eq!(code, 1);
}

/// A safetensors file written by the `safetensors` crate.
fn safetensors_file(path: &Path) -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    let tensors = vec![
        (
            "embed.weight".to_string(),
            Dtype::F32,
            vec![3, 4],
            common::pattern(1, 48),
        ),
        (
            "norm.scale".to_string(),
            Dtype::F16,
            vec![5],
            common::pattern(2, 10),
        ),
        (
            "ids".to_string(),
            Dtype::I64,
            vec![2],
            common::pattern(3, 16),
        ),
        ("mask".to_string(), Dtype::BOOL, vec![3], vec![1, 0, 1]),
        (
            "bytes".to_string(),
            Dtype::U8,
            vec![7],
            common::pattern(4, 7),
        ),
        (
            "half.b".to_string(),
            Dtype::BF16,
            vec![3],
            common::pattern(5, 6),
        ),
    ];
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path).unwrap();
    tensors
}

#[test]
fn convert_round_trips_safetensors_made_by_the_safetensors_crate() {
    let dir = tempfile::tempdir().unwrap();
    let (st, bp, back) = (
        dir.path().join("m.safetensors"),
        dir.path().join("m.bpk"),
        dir.path().join("back.safetensors"),
    );
    let tensors = safetensors_file(&st);
    assert_eq!(run(&["convert", s(&st), s(&bp)]).0, 0);
    let reader = Reader::open(&bp).unwrap();
    assert_eq!(reader.metadata()["format"], "pt");
    for (name, _, shape, data) in &tensors {
        let info = reader.tensor(name).unwrap();
        assert_eq!(info.shape(), &shape[..]);
        assert_eq!(&reader.read(info).unwrap()[..], &data[..], "{name}");
        assert_eq!(info.offset() % 256, 0);
    }
    assert_eq!(
        reader.tensor("mask").unwrap().dtype(),
        DType::Bool(burn::tensor::BoolStore::Native)
    );

    let (code, out, _) = run(&["convert", s(&bp), s(&back)]);
    assert_eq!(code, 0, "{out}");
    let bytes = std::fs::read(&back).unwrap();
    let parsed = SafeTensors::deserialize(&bytes).unwrap();
    for (name, dtype, shape, data) in &tensors {
        let t = parsed.tensor(name).unwrap();
        assert_eq!(
            (t.dtype(), t.shape(), t.data()),
            (*dtype, &shape[..], &data[..]),
            "{name}"
        );
    }
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(meta.metadata().as_ref().unwrap()["format"], "pt");
}

#[test]
fn convert_handles_unaligned_safetensors_tensors() {
    // Hand-made but valid: an f32 tensor starting at data byte 1, an f64 at byte 9.
    let header = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]},"c":{"dtype":"F64","shape":[1],"data_offsets":[9,17]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.push(7);
    file.extend_from_slice(&[1.5f32, -2.25].map(f32::to_le_bytes).concat());
    file.extend_from_slice(&3.125f64.to_le_bytes());
    SafeTensors::deserialize(&file).expect("the safetensors crate accepts it");
    let dir = tempfile::tempdir().unwrap();
    let (st, bp) = (dir.path().join("u.safetensors"), dir.path().join("u.bpk"));
    std::fs::write(&st, &file).unwrap();
    let (code, _, err) = run(&["convert", s(&st), s(&bp)]);
    assert_eq!(code, 0, "{err}");
    let reader = Reader::open(&bp).unwrap();
    assert!(reader.unaligned().next().is_none());
    let b: &[f32] = bytemuck::cast_slice(&reader.bytes("b").unwrap()[..])
        .to_vec()
        .leak();
    assert_eq!(b, [1.5, -2.25]);
    assert_eq!(&reader.bytes("c").unwrap()[..], &3.125f64.to_le_bytes());
}

#[test]
fn works_on_files_written_by_burn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("burn.bpk");
    burn_pack::Writer::new(every_dtype().iter().map(Spec::burn_tensor).collect())
        .write_to_file(&path)
        .unwrap();
    assert_eq!(run(&["inspect", s(&path)]).0, 0);
    let (code, out, _) = run(&["verify", s(&path)]);
    assert_eq!(code, 0);
    assert!(
        out.contains("no checksums in this file (contents unverified)"),
        "{out}"
    );
    // Random bit patterns in the float tensors include NaNs, which --nan reports.
    assert_eq!(run(&["verify", s(&path), "--nan"]).0, 1);
    assert_eq!(run(&["diff", s(&path), s(&path)]).0, 0);
    // Non-native booleans and quantized tensors have no safetensors equivalent: one clear line.
    let (code, _, err) = run(&["convert", s(&path), s(&dir.path().join("x.safetensors"))]);
    assert_eq!(code, 3);
    assert!(
        err.contains("tensor 'dtypes.bool(u")
            && err.contains("no safetensors equivalent")
            && err.lines().count() == 1,
        "{err}"
    );
    assert!(!dir.path().join("x.safetensors").exists());
}

#[test]
fn usage_errors_exit_2_and_every_command_has_help_with_an_example() {
    assert_eq!(run(&[]).0, 2);
    assert_eq!(run(&["inspect"]).0, 2);
    assert_eq!(run(&["frobnicate"]).0, 2);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.bpk");
    Writer::new(vec![]).write_to_file(&p).unwrap();
    let (code, _, err) = run(&["convert", s(&p), s(&dir.path().join("out.weird"))]);
    assert_eq!(code, 2, "{err}");
    for cmd in ["inspect", "verify", "diff", "convert", "migrate"] {
        let (code, out, _) = run(&[cmd, "--help"]);
        assert_eq!(code, 0);
        assert!(out.contains("Example"), "{cmd} --help has no example");
    }
}

#[test]
fn a_bad_filter_is_one_line_and_json_param_ids_are_exact_strings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ids.bpk");
    let id = u64::MAX - 1; // not representable as an f64
    Writer::new(vec![f32_entry("w", &[1.0]).with_param_id(id)])
        .write_to_file(&path)
        .unwrap();
    let (code, _, err) = run(&["inspect", s(&path), "--filter", "a(b"]);
    assert_eq!(code, 2);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--filter 'a(b' is not a valid regex"), "{err}");

    let (code, out, _) = run(&["inspect", s(&path), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tensors"][0]["param_id"], id.to_string());

    let other = dir.path().join("other.bpk");
    Writer::new(vec![f32_entry("w", &[1.0]).with_param_id(id - 1)])
        .write_to_file(&other)
        .unwrap();
    let (code, out, _) = run(&["diff", s(&path), s(&other), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["param_ids"][0]["a"], id.to_string());
    assert_eq!(v["param_ids"][0]["b"], (id - 1).to_string());
}

#[test]
fn verify_fails_files_whose_metadata_was_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    Writer::new(vec![f32_entry("w", &[1.0, 2.0])])
        .with_metadata("producer", burnpack::module::PRODUCER)
        .write_to_file(&path)
        .unwrap();
    let clean = std::fs::read(&path).unwrap();
    let find = |needle: &[u8]| {
        clean
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
    };
    // A flipped bit in the parameter id (9 is stored as the byte 0x09).
    let mut id_flip = clean.clone();
    let at = find(b"param_id") + b"param_id".len();
    id_flip[at] ^= 0x02;
    // A flipped bit in the key `checksums`: checking would be off.
    let mut key_flip = clean.clone();
    key_flip[find(b"checksums") + 8] ^= 1;
    // Both read, and found damaged (exit 1): the metadata checksum as the file is opened
    // (one line on stderr), the damaged key by verify's own check (on stdout, and the
    // verdict on stderr).
    for (what, bytes, says) in [
        ("param id", id_flip, "metadata corrupt"),
        ("checksums key", key_flip, "'checksumr'"),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let (code, out, err) = run(&["verify", s(&path)]);
        assert_eq!(code, 1, "{what}: {out}{err}");
        assert!(
            (out.contains(says) || err.contains(says))
                && err.starts_with("bpk: ")
                && err.contains("m.bpk")
                && err.lines().count() == 1,
            "{what}: {out}{err}"
        );
    }
}

/// Sharded safetensors weights: `convert --shard-size` writes them from a pack, `inspect`
/// shows the shard table, `verify` reads every shard, `diff` compares them with the pack and
/// each other, and `convert` takes the index back into one pack.
#[test]
fn sharded_safetensors_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("m.bpk");
    let entries: Vec<Entry> = (0..6)
        .map(|i| f32_entry(&format!("layer{i}.weight"), &[i as f32; 8]))
        .collect();
    Writer::new(entries)
        .with_metadata("format", "pt")
        .write_to_file(&pack)
        .unwrap();
    let st = dir.path().join("m.safetensors");
    let (code, out, err) = run(&["convert", s(&pack), s(&st), "--shard-size", "64"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("3 shards"), "{out}");
    let index = dir.path().join("m.safetensors.index.json");
    assert!(index.exists() && dir.path().join("m-00003-of-00003.safetensors").exists());

    let (code, out, _) = run(&["inspect", s(&index)]);
    assert_eq!(code, 0);
    assert!(
        out.contains("safetensors, 3 shards")
            && out.contains("m-00002-of-00003.safetensors  2 tensors")
            && out.contains("tensors: 6")
            && out.contains("layer5.weight"),
        "{out}"
    );
    let (code, out, _) = run(&["inspect", s(&index), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["shards"].as_array().unwrap().len(), 3);
    assert_eq!(v["tensors"][0]["shard"], "m-00001-of-00003.safetensors");

    let (code, out, _) = run(&["verify", s(&index), "--nan"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("OK: 3 shards valid, 6 tensors"), "{out}");

    // Against the pack: the values are the same; parameter ids do not survive safetensors
    // (reported; failed only with --strict-metadata).
    let (code, out, _) = run(&["diff", s(&pack), s(&index)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("param id 9 vs none"), "{out}");
    assert_eq!(
        run(&["diff", s(&pack), s(&index), "--strict-metadata"]).0,
        1
    );
    assert!(
        out.contains("6 tensors with identical values, 0 differ"),
        "{out}"
    );
    let (code, _, _) = run(&["diff", s(&index), s(&index)]);
    assert_eq!(code, 0);

    // The index back into one pack.
    let back = dir.path().join("back.bpk");
    let (code, _, err) = run(&["convert", s(&index), s(&back)]);
    assert_eq!(code, 0, "{err}");
    let reader = Reader::open(&back).unwrap();
    assert_eq!(reader.tensors().len(), 6);
    assert_eq!(
        &reader.bytes("layer3.weight").unwrap()[..],
        &Reader::open(&pack).unwrap().bytes("layer3.weight").unwrap()[..]
    );
    assert_eq!(reader.metadata()["format"], "pt");

    // A shard whose header is damaged cannot be read (exit 3), named.
    let shard = dir.path().join("m-00002-of-00003.safetensors");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[10] = b'!';
    std::fs::write(&shard, bytes).unwrap();
    let (code, out, err) = run(&["verify", s(&index)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("m-00002-of-00003.safetensors") && err.lines().count() == 1,
        "{err}"
    );
    // --shard-size is for safetensors output.
    let (code, _, err) = run(&[
        "convert",
        s(&index),
        s(&dir.path().join("x.bpk")),
        "--shard-size",
        "9",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// Every command on `s3://` URLs against a real S3 server (`.ci/run` starts one): a pack goes
/// up and comes down byte for byte, `inspect` fetches header and metadata only (and says how
/// many bytes), `verify` fails a damaged object naming the tensor, `diff` compares an object
/// with a file, safetensors go up as a pack and a pack comes down as safetensors.
#[cfg(feature = "object-store")]
#[test]
fn urls_in_every_command() {
    let Some(bucket) = common::s3_bucket() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    let entries: Vec<Entry> = (0..4)
        .map(|i| f32_entry(&format!("layer{i}.w"), &vec![i as f32 + 0.5; 1 << 16]))
        .collect();
    Writer::new(entries)
        .with_metadata("producer", "test")
        .write_to_file(&path)
        .unwrap();
    let url = format!("s3://{bucket}/cli-{}/m.bpk", std::process::id());

    // Up (a copy), then down again: the same bytes.
    let (code, out, err) = run(&["convert", s(&path), &url]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("-> {url}")), "{out}");
    let back = dir.path().join("back.bpk");
    let (code, _, err) = run(&["convert", &url, s(&back)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&path).unwrap());

    // Inspect reads header and metadata only: two requests, far less than the 1 MiB of data.
    let (code, out, err) = run(&["inspect", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("layer3.w") && out.contains("producer = test"),
        "{out}"
    );
    assert!(out.contains("in 2 requests (header and metadata"), "{out}");
    let (_, json, _) = run(&["inspect", &url, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fetched = v["fetched_bytes"].as_u64().unwrap();
    let metadata = v["metadata_size"].as_u64().unwrap();
    assert_eq!(
        fetched,
        metadata + burnpack::format::HEADER_SIZE as u64,
        "header and metadata, nothing else"
    );
    assert_eq!(v["requests"], 2);

    // Verify and diff.
    let (code, out, err) = run(&["verify", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{url}: OK")), "{out}");
    let (code, out, _) = run(&["diff", &url, s(&path)]);
    assert_eq!(code, 0, "{out}");
    let mut damaged = std::fs::read(&path).unwrap();
    let reader = Reader::open(&path).unwrap();
    let at = reader.tensor("layer2.w").unwrap().offset() as usize + 8;
    damaged[at] ^= 1;
    let damaged_path = dir.path().join("damaged.bpk");
    std::fs::write(&damaged_path, &damaged).unwrap();
    let bad_url = format!("s3://{bucket}/cli-{}/damaged.bpk", std::process::id());
    burnpack::interop::object_store::ObjectLocation::parse(&bad_url)
        .unwrap()
        .put_all(damaged)
        .unwrap();
    let (code, out, err) = run(&["verify", &bad_url]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("layer2.w") && out.contains(&bad_url), "{out}");
    assert!(err.contains(&bad_url) && err.contains("FAILED"), "{err}");
    // Damage the object's own checksum finds as it arrives: exit 1, as for a file.
    let (code, out, err) = run(&["diff", &url, &bad_url]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("layer2.w") && err.contains("checksum"),
        "{err}"
    );

    // Safetensors up as a pack, a pack down as safetensors.
    let st = dir.path().join("m.safetensors");
    let (code, _, err) = run(&["convert", s(&path), s(&st)]);
    assert_eq!(code, 0, "{err}");
    let st_url = format!("s3://{bucket}/cli-{}/from-st.bpk", std::process::id());
    let (code, _, err) = run(&["convert", s(&st), &st_url]);
    assert_eq!(code, 0, "{err}");
    // Parameter ids do not survive safetensors: reported, failing only when strict.
    let (code, out, _) = run(&["diff", &st_url, s(&path)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4 tensors with identical values"), "{out}");
    let (code, out, _) = run(&["diff", &st_url, s(&path), "--strict-metadata"]);
    assert_eq!(code, 1, "{out}");
    let down = dir.path().join("down.safetensors");
    let (code, _, err) = run(&["convert", &url, s(&down)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(safetensors_file(&down), safetensors_file(&st));

    // Errors: a missing object (3), a bad URL and safetensors to a URL (2).
    let missing = format!("s3://{bucket}/cli-{}/nothing.bpk", std::process::id());
    let (code, _, err) = run(&["inspect", &missing]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nothing.bpk"), "{err}");
    let (code, _, err) = run(&["inspect", "s3://"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["convert", s(&path), &format!("s3://{bucket}/x.safetensors")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("local files only"), "{err}");
}

/// `bpk convert` writes the producer with its checksums, so a damaged `checksums` key in a
/// converted file fails verification (naming the key); an unknown top-level key in another
/// writer's file is a warning, and the verification passes.
#[test]
fn verify_names_unknown_keys_and_converted_files_carry_the_producer() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("w.safetensors");
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(Dtype::F32, vec![2], &data).unwrap();
    safetensors::serialize_to_file([("w", view)], None, &st).unwrap();
    let pack = dir.path().join("w.bpk");
    let (code, _, err) = run(&["convert", s(&st), s(&pack)]);
    assert_eq!(code, 0, "{err}");
    let clean = std::fs::read(&pack).unwrap();
    common::assert_written_here("bpk convert", &clean);
    let mut flipped = clean.clone();
    let at = clean.windows(9).position(|w| w == b"checksums").unwrap();
    flipped[at + 8] ^= 1;
    std::fs::write(&pack, &flipped).unwrap();
    let (code, out, err) = run(&["verify", s(&pack)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("'checksumr'"), "{out}");
    assert!(
        err.contains("w.bpk: FAILED") && err.lines().count() == 1,
        "{err}"
    );

    // Another writer's file (Burn's bytes) with a key of a newer version: OK, with a warning.
    let burn = common::burns(&every_dtype());
    let newer = common::with_metadata_edited(&burn, |mut m| {
        assert_eq!(m[0], 0xA1);
        m[0] = 0xA2;
        m.extend_from_slice(b"\x66future\x01");
        m
    });
    let other = dir.path().join("other.bpk");
    std::fs::write(&other, newer).unwrap();
    let (code, out, err) = run(&["verify", s(&other)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("warning") && out.contains("'future'"), "{out}");
    assert!(out.contains("OK"), "{out}");
}

/// Records of Burn 0.14-0.21 (written by Burn 0.21's recorders, `tests/data/legacy`):
/// `inspect` says the format and Burn version, `verify` reads every tensor, `convert` writes a
/// pack that keeps the record's metadata and verifies, `diff` finds the same values; bincode is
/// refused with exit 3 and what to do.
#[test]
fn burn_records_are_inspected_verified_and_converted() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy");
    for name in ["zoo.mpk", "zoo.mpk.gz", "zoo.json", "zoo.json.gz"] {
        let file = data.join(name);
        let (code, out, err) = run(&["inspect", s(&file)]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains("Burn 0.21.0 record"), "{out}");
        assert!(out.contains("tensors: 22"), "{out}");
        assert!(out.contains("linear.weight"), "{out}");
        let (code, out, _) = run(&["inspect", s(&file), "--json"]);
        assert_eq!(code, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["burn_version"], "0.21.0");
        assert_eq!(json["tensor_count"], 22);
        let (code, out, err) = run(&["verify", s(&file), "--nan"]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(out.contains("OK"), "{out}");
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("zoo.bpk");
        let (code, _, err) = run(&["convert", s(&file), s(&pack)]);
        assert_eq!(code, 0, "{name}: {err}");
        let reader = Reader::open(&pack).unwrap();
        assert_eq!(reader.tensors().len(), 22);
        assert_eq!(reader.metadata()["burn.record.version"], "0.21.0");
        assert!(reader.layout().has_checksums());
        let (code, out, _) = run(&["verify", s(&pack)]);
        assert_eq!(code, 0, "{out}");
        // Same tensors, same values: only the metadata differs (the pack adds `producer`),
        // which fails only with --strict-metadata.
        let (code, out, _) = run(&["diff", s(&file), s(&pack)]);
        assert!(out.contains("22 tensors with identical values"), "{out}");
        assert!(out.contains("metadata producer"), "{out}");
        assert_eq!(code, 0, "the pack adds metadata: {out}");
        let (code, _, _) = run(&["diff", s(&file), s(&pack), "--strict-metadata"]);
        assert_eq!(code, 1);
    }
    let (code, _, err) = run(&["verify", s(&data.join("zoo.bin"))]);
    assert_eq!(code, 3);
    assert!(
        err.contains("bincode") && err.contains("NamedMpkFileRecorder"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.mpk");
    let mut bytes = std::fs::read(data.join("zoo.mpk")).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&damaged, bytes).unwrap();
    // Cut short: cannot be read (exit 3), one line naming it.
    let (code, out, err) = run(&["verify", s(&damaged)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("damaged.mpk") && err.lines().count() == 1,
        "{err}"
    );
}

/// `bpk migrate`: a burn-train 0.21 checkpoint directory becomes one checkpoint per epoch,
/// named as `PackCheckpointer` names it; the scheduler must be named when its record holds a
/// number.
#[test]
fn migrate_turns_a_burn_train_0_21_directory_into_checkpoints() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy/train-adam");
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("checkpoint");
    let (code, out, err) = run(&["migrate", s(&old), s(&new), "--scheduler", "exponential"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("epoch 1"), "{out}");
    let file = new.join("ckpt-00000000000000000001.bpk");
    let ckpt = burnpack::checkpoint::Checkpoint::open(&file).unwrap();
    assert!(ckpt.has_optimizer() && ckpt.has_scheduler());
    assert_eq!(ckpt.progress().epoch, 1);
    let (code, out, _) = run(&["verify", s(&file)]);
    assert_eq!(code, 0, "{out}");
    let (code, _, err) = run(&["migrate", s(&old), s(&dir.path().join("other"))]);
    assert_eq!(code, 3);
    assert!(
        err.contains("name the scheduler") && err.contains("--scheduler"),
        "{err}"
    );
    let (code, _, err) = run(&["migrate", s(dir.path()), s(&dir.path().join("x"))]);
    assert_eq!(code, 3);
    assert!(err.contains("no model-<epoch> record"), "{err}");
}

/// `torch.save` files (zip and legacy, `.pt` and a `.bin` that is one): inspect lists the
/// globals and where the state dict was, verify reads every view, convert writes a pack or
/// safetensors with the same values, diff compares across formats; a refused pickle is a
/// failed verify naming the global.
#[test]
fn pytorch_files_are_inspected_verified_converted_and_diffed() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pytorch");
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("pytorch_model.bin");
    std::fs::copy(data.join("reader__test_data__checkpoint.pt"), &bin).unwrap();
    for file in [
        data.join("reader__test_data__checkpoint.pt"),
        data.join("reader__test_data__legacy_shared_storage.pt"),
        bin,
    ] {
        let (code, out, err) = run(&["inspect", s(&file)]);
        assert_eq!(code, 0, "{file:?}: {err}");
        assert!(out.contains("PyTorch torch.save file"), "{out}");
        assert!(out.contains("torch._utils._rebuild_tensor_v2"), "{out}");
        let (code, out, _) = run(&["inspect", s(&file), "--json"]);
        assert_eq!(code, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        let count = json["tensor_count"].as_u64().unwrap() as usize;
        assert!(json["globals"].as_array().unwrap().len() >= 2, "{json}");
        let (code, out, err) = run(&["verify", s(&file), "--nan"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("OK"), "{out}");
        for target in ["model.bpk", "model.safetensors"] {
            let out_file = dir.path().join(target);
            let (code, _, err) = run(&["convert", s(&file), s(&out_file)]);
            assert_eq!(code, 0, "{file:?} -> {target}: {err}");
            let (_, out, _) = run(&["diff", s(&file), s(&out_file)]);
            assert!(
                out.contains(&format!("{count} tensors with identical values")),
                "{out}"
            );
        }
        assert_eq!(
            Reader::open(dir.path().join("model.bpk"))
                .unwrap()
                .tensors()
                .len(),
            count
        );
    }
    let (_, out, _) = run(&["inspect", s(&data.join("reader__test_data__checkpoint.pt"))]);
    assert!(
        out.contains("state dict: under 'model_state_dict'"),
        "{out}"
    );
    let (_, out, _) = run(&["verify", s(&data.join("linear__linear.pt"))]);
    assert!(
        out.contains("3 tensors' storages match their zip CRC-32"),
        "{out}"
    );
    // One flipped bit in a storage: the CRC-32 catches it.
    let mut bytes = std::fs::read(data.join("linear__linear.pt")).unwrap();
    let source =
        burnpack::interop::pytorch::PytorchSource::open(data.join("linear__linear.pt")).unwrap();
    let at = source.tensor("fc2.weight").unwrap().offset() as usize;
    bytes[at + 3] ^= 1;
    let flipped = dir.path().join("flipped.pt");
    std::fs::write(&flipped, bytes).unwrap();
    let (code, out, _) = run(&["verify", s(&flipped)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("fc2.weight") && out.contains("checksum mismatch"),
        "{out}"
    );
    // A pickle that references a global no state dict needs.
    let hostile = dir.path().join("hostile.pt");
    let pickle = common::torch::Pickler::new()
        .global("posix", "system")
        .str("id")
        .op(b"\x85R")
        .finish();
    common::torch::write_zip(&hostile, &pickle, &[], common::torch::ZipOptions::default());
    // Refused: cannot be read (exit 3), whatever the command.
    for command in ["inspect", "verify"] {
        let (code, out, err) = run(&[command, s(&hostile)]);
        assert_eq!(code, 3, "{out}{err}");
        assert!(
            err.contains("posix.system") && err.contains("hostile.pt"),
            "{err}"
        );
    }
}

/// Hostile and unusual foreign files through every command: each refused with exit 3 (or a
/// failed verification, exit 1) and a line naming the input, never read as empty, never a
/// panic or a hang.
#[test]
fn foreign_files_that_are_not_what_they_seem_exit_1_or_3_naming_the_input() {
    use common::torch::{
        Pickler, StorageSpec, View, ZipOptions, legacy_file, ordered_dict_of_pairs, write_zip,
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let no_panic = |err: &str| assert!(!err.contains("panicked"), "{err}");
    // A legacy torch.save file whose state dict is OrderedDict([[name, tensor], ...]).
    let storages = vec![
        StorageSpec::f32(&[1., 2., 3., 4.]),
        StorageSpec::f32(&[5., 6.]),
    ];
    let views = vec![
        View::whole("fc.weight", 0, &[2, 2]),
        View::whole("fc.bias", 1, &[2]),
    ];
    let old = d.join("old.pth");
    legacy_file(
        &old,
        &ordered_dict_of_pairs(&storages, &views, b"l"),
        &storages,
    );
    let (code, out, err) = run(&["inspect", s(&old)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("fc.weight") && out.contains("fc.bias"),
        "{out}"
    );
    let (code, out, _) = run(&["verify", s(&old)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 tensors"), "{out}");
    let st = d.join("old.safetensors");
    let (code, _, err) = run(&["convert", s(&old), s(&st)]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&st).unwrap();
    let written = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(written.len(), 2);
    assert_eq!(
        written.tensor("fc.bias").unwrap().data(),
        &storages[1].bytes[..]
    );

    // No tensor anywhere: an error pointing at --key, never "OK, 0 tensors".
    let mut p = Pickler::new();
    p.op(b"}(").str("epoch").op(b"K\x03u");
    let keyed = d.join("keyed.pt");
    write_zip(&keyed, &p.finish(), &storages, ZipOptions::default());
    let (code, _, err) = run(&["inspect", s(&keyed)]);
    assert_eq!(code, 3);
    no_panic(&err);
    let (code, out, err) = run(&["verify", s(&keyed)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("no tensors found") && err.contains("keyed.pt"),
        "{err}"
    );
    let (code, _, err) = run(&["convert", s(&keyed), s(&d.join("keyed.safetensors"))]);
    assert_eq!(code, 3);
    assert!(
        err.contains("no tensors found") && err.contains("--key"),
        "{err}"
    );
    assert!(!d.join("keyed.safetensors").exists());
    // --key takes the state dict under a key of the top-level dict.
    let mut p = Pickler::new();
    p.op(b"}(").str("a");
    p.tensor(&views[1], storages[1].kind, 2);
    p.str("ema").op(b"}(").str("w");
    p.tensor(&views[1], storages[1].kind, 2).op(b"uu");
    let two = d.join("two.pt");
    write_zip(&two, &p.finish(), &storages, ZipOptions::default());
    let (code, out, err) = run(&["inspect", s(&two), "--key", "ema", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["key"], "ema");
    assert_eq!(json["tensor_count"], 1);
    assert_eq!(json["tensors"][0]["name"], "w");

    // A Burn record without a tensor: a failed verification, a refused conversion.
    let record = serde_json::json!({
        "metadata": {"float": "f32", "int": "i32", "format": "x", "version": "0.21.0",
                     "settings": "FullPrecisionSettings"},
        "item": {"step": 3}
    });
    let empty = d.join("empty.json");
    std::fs::write(&empty, record.to_string()).unwrap();
    let (code, out, err) = run(&["verify", s(&empty)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("no tensors found") && err.contains("empty.json"),
        "{err}"
    );
    let (code, _, err) = run(&["convert", s(&empty), s(&d.join("empty.bpk"))]);
    assert_eq!(code, 3);
    assert!(err.contains("empty.json"), "{err}");

    // An index that routes nothing.
    let index = d.join("pytorch_model.bin.index.json");
    std::fs::write(&index, r#"{"weight_map": {}}"#).unwrap();
    for args in [
        vec!["inspect", s(&index)],
        vec!["convert", s(&index), "x.bpk"],
        vec!["convert", s(&index), "x.safetensors"],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 3, "{args:?}");
        no_panic(&err);
        assert!(
            err.contains("weight_map is empty") && err.contains("index.json"),
            "{err}"
        );
    }
    let (code, out, err) = run(&["verify", s(&index)]);
    assert_eq!(code, 3, "{out}{err}");
    no_panic(&err);

    // A FIFO in place of a file: refused at once, not a hang.
    let fifo = d.join("fifo.pt");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let out = bpk()
        .args(["inspect", s(&fifo)])
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fifo.pt") && err.contains("named pipe"),
        "{err}"
    );

    // A pickle that does not match its zip CRC-32: converted by nobody.
    let crc = d.join("crc.pt");
    write_zip(
        &crc,
        &Pickler::new()
            .state_dict(&storages[1..], &[View::whole("w", 0, &[2])])
            .finish(),
        &storages[1..],
        ZipOptions::default(),
    );
    let mut bytes = std::fs::read(&crc).unwrap();
    let at = bytes
        .windows(6)
        .position(|w| w == b"X\x01\x00\x00\x00w")
        .unwrap();
    bytes[at + 5] = b'v';
    std::fs::write(&crc, &bytes).unwrap();
    // Read, and found damaged by the archive's own CRC-32: exit 1 whatever the command.
    let (code, _, err) = run(&["convert", s(&crc), s(&d.join("crc.bpk"))]);
    assert_eq!(code, 1);
    assert!(err.contains("crc.pt") && err.contains("CRC-32"), "{err}");
    let (code, out, err) = run(&["verify", s(&crc)]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("crc.pt") && err.lines().count() == 1, "{err}");
    assert_eq!(run(&["inspect", s(&crc)]).0, 1);
}

/// One exit-code and stderr contract for every format, whatever the command: a missing or
/// cut input of any format exits 3 with one line on stderr naming it; a file of no format
/// bpk reads says what it starts with; a successful run writes nothing on stderr (no progress
/// bar when piped).
#[test]
fn every_format_meets_one_exit_code_and_stderr_contract() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let pack = d.join("m.bpk");
    Writer::new(vec![f32_entry("w", &[1.0, 2.0]), f32_entry("v", &[3.0])])
        .write_to_file(&pack)
        .unwrap();
    let st = d.join("m.safetensors");
    assert_eq!(run(&["convert", s(&pack), s(&st)]).0, 0);
    let shards = d.join("sharded.safetensors");
    assert_eq!(
        run(&["convert", s(&pack), s(&shards), "--shard-size", "8"]).0,
        0
    );
    let index = d.join("sharded.safetensors.index.json");
    let pt = d.join("m.pt");
    std::fs::copy(data.join("pytorch/linear__linear.pt"), &pt).unwrap();
    let legacy_pt = d.join("old.pt");
    std::fs::copy(
        data.join("pytorch/reader__test_data__legacy_with_offsets.pt"),
        &legacy_pt,
    )
    .unwrap();
    let mpk = d.join("m.mpk");
    std::fs::copy(data.join("legacy/zoo.mpk"), &mpk).unwrap();
    let gz = d.join("m.json.gz");
    std::fs::copy(data.join("legacy/zoo.json.gz"), &gz).unwrap();
    let one_line = |what: &str, err: &str, name: &str| {
        assert!(
            err.starts_with("bpk: ") && err.contains(name) && err.lines().count() == 1,
            "{what}: {err}"
        );
        assert!(!err.contains("panicked"), "{what}: {err}");
    };
    for file in [&pack, &st, &index, &pt, &legacy_pt, &mpk, &gz] {
        let name = file.file_name().unwrap().to_str().unwrap();
        // Sound: every command succeeds, with nothing on stderr.
        for args in [
            vec!["inspect", s(file)],
            vec!["inspect", s(file), "--json"],
            vec!["verify", s(file)],
            vec!["diff", s(file), s(file)],
        ] {
            let (code, out, err) = run(&args);
            assert_eq!(code, 0, "{args:?}: {out}{err}");
            assert!(err.is_empty(), "{args:?}: {err}");
        }
        // Missing: exit 3, one line naming it, for every command.
        let missing = d.join(format!("missing-{name}"));
        let out_file = d.join("out.bpk");
        for args in [
            vec!["inspect", s(&missing)],
            vec!["verify", s(&missing)],
            vec!["diff", s(&missing), s(file)],
            vec!["diff", s(file), s(&missing)],
            vec!["convert", s(&missing), s(&out_file)],
        ] {
            let (code, _, err) = run(&args);
            assert_eq!(code, 3, "{args:?}: {err}");
            one_line(&format!("{args:?}"), &err, "missing-");
        }
        // Damaged (cut in half): exit 3 naming it, or a failed verification.
        if file.extension().is_some_and(|e| e == "json") {
            continue;
        }
        let bytes = std::fs::read(file).unwrap();
        let cut = d.join(format!("cut-{name}"));
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        for args in [
            vec!["inspect", s(&cut)],
            vec!["diff", s(&cut), s(file)],
            vec!["convert", s(&cut), s(&out_file)],
        ] {
            let (code, _, err) = run(&args);
            assert_eq!(code, 3, "{args:?}: {err}");
            one_line(&format!("{args:?}"), &err, "cut-");
        }
        // Cut short is "cannot read" for verify too, whatever the format.
        let (code, out, err) = run(&["verify", s(&cut)]);
        assert_eq!(code, 3, "verify {name} cut in half: {out}{err}");
        one_line("verify", &err, "cut-");
        assert!(!out_file.exists(), "nothing written from a damaged {name}");
    }
    // No format bpk reads: what it starts with, exit 3, for every command.
    let text = d.join("notes.pt");
    std::fs::write(&text, b"hello, weights\n").unwrap();
    for args in [
        vec!["inspect", s(&text)],
        vec!["verify", s(&text)],
        vec!["diff", s(&text), s(&pack)],
        vec!["convert", s(&text), "x.bpk"],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 3, "{args:?}: {err}");
        one_line(&format!("{args:?}"), &err, "notes.pt");
        assert!(
            err.contains("not a file bpk reads (it starts with \"hello, weights\\n\")"),
            "{err}"
        );
    }
}

/// Names from a file (tensor names, shard names, paths) never drive the terminal: control
/// characters are shown escaped, and an error stays one line.
#[test]
fn control_characters_in_names_are_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let name = "a\u{1b}[2J\nfake line";
    let data = 1.0f32.to_le_bytes();
    let view = safetensors::tensor::TensorView::new(Dtype::F32, vec![1], &data).unwrap();
    let path = dir.path().join("esc.safetensors");
    safetensors::serialize_to_file([(name, view)], None, &path).unwrap();
    let (code, out, _) = run(&["inspect", s(&path)]);
    assert_eq!(code, 0);
    assert!(
        !out.contains('\u{1b}') && out.contains("a\\u{1b}[2J\\nfake line"),
        "{out}"
    );
    let odd = dir.path().join("no\nsuch.pt");
    let (code, _, err) = run(&["inspect", s(&odd)]);
    assert_eq!(code, 3);
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// GGUF files through every command, with nothing in `bpk` that knows the format: inspect
/// shows the metadata and the stored types, verify reads every tensor (quantized ones
/// dequantized), convert writes a pack and safetensors, diff finds the same values.
#[cfg(feature = "gguf")]
#[test]
fn gguf_files_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf");
    for name in ["plain.gguf", "q4_k.gguf", "q8_0.gguf"] {
        let file = corpus.join(name);
        let (code, out, err) = run(&["inspect", s(&file)]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("GGUF v3")
                && out.contains("architecture: llama")
                && out.contains("stored types:"),
            "{out}"
        );
        let (code, out, _) = run(&["inspect", s(&file), "--json"]);
        assert_eq!(code, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["format"], "gguf");
        assert!(json["tensors"][0]["type"].is_string(), "{json}");
        let (code, out, _) = run(&["verify", s(&file)]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("OK: GGUF v3 valid"), "{out}");
        let pack = dir.path().join(format!("{name}.bpk"));
        let st = dir.path().join(format!("{name}.safetensors"));
        assert_eq!(run(&["convert", s(&file), s(&pack)]).0, 0);
        assert_eq!(run(&["convert", s(&file), s(&st)]).0, 0);
        let (code, out, _) = run(&["diff", s(&file), s(&st)]);
        assert!(out.contains("0 differ in values"), "{code}: {out}");
    }
}

/// `bpk convert --keep-quantized`: GGUF's Q8_0 tensors become Burn quantized tensors of the
/// pack, which Burn dequantizes to the values the GGUF reader dequantizes; safetensors output
/// refuses the flag.
#[cfg(feature = "gguf")]
#[test]
fn gguf_q8_0_converts_kept_quantized() {
    use burn::tensor::{DType, Device, Tensor, TensorData};
    use burnpack::source::TensorSource;
    let dir = tempfile::tempdir().unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf/q8_0.gguf");
    let pack = dir.path().join("kept.bpk");
    let (code, _, err) = run(&["convert", s(&file), s(&pack), "--keep-quantized"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(&["inspect", s(&pack)]);
    assert_eq!(code, 0);
    assert!(out.contains("qfloat"), "{out}");
    let reader = burnpack::read::Reader::open(&pack).unwrap();
    let gguf = burnpack::interop::gguf::GgufSource::open(&file).unwrap();
    let mut kept = 0;
    for info in gguf.tensors() {
        let stored = reader.tensor(info.name()).unwrap();
        let bytes = TensorSource::read(&reader, stored).unwrap();
        let expected = gguf.read(info).unwrap();
        if let DType::QFloat(_) = stored.dtype() {
            kept += 1;
            let data = TensorData::from_bytes(bytes, stored.shape().to_vec(), stored.dtype());
            let values = match stored.shape().len() {
                1 => Tensor::<1>::from_data(data, (&Device::flex(), stored.dtype()))
                    .dequantize()
                    .into_data(),
                _ => Tensor::<2>::from_data(data, (&Device::flex(), stored.dtype()))
                    .dequantize()
                    .into_data(),
            };
            assert_eq!(values.as_bytes(), &expected[..], "{}", info.name());
        } else {
            assert_eq!(&bytes[..], &expected[..], "{}", info.name());
        }
    }
    assert!(kept > 0, "no tensor kept quantized");
    let st = dir.path().join("kept.safetensors");
    let (code, _, err) = run(&["convert", s(&file), s(&st), "--keep-quantized"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--keep-quantized"), "{err}");
}

/// What attacks on `bpk` with GGUF files found, fixed: quantized tensors of a pack are scanned
/// and compared by their dequantized values, GGUF metadata reaches safetensors and reads as
/// plain text, outputs get the umask's permissions, a conversion onto its own input and one
/// whose metadata no reader would accept are refused.
#[cfg(feature = "gguf")]
#[test]
fn gguf_conversions_keep_what_they_should_and_refuse_what_they_cannot() {
    use common::gguf::{file, key, string};
    let dir = tempfile::tempdir().unwrap();
    let q8 = |scales: [u16; 4], bump: u8| {
        let mut data = Vec::new();
        for (b, s) in scales.iter().enumerate() {
            data.extend(s.to_le_bytes());
            data.extend((0..32u8).map(|i| i.wrapping_add(b as u8).wrapping_add(bump)));
        }
        let kv = key("general.architecture", 8, &string("llama"));
        file(&[("w", &[32, 4], 8, 0)], &data, &kv, 1)
    };
    // NaN and infinite scales: found in the kept pack as in the GGUF file.
    let (nan, half) = (0x7e00u16, 0x3800u16);
    let bad = dir.path().join("nan.gguf");
    std::fs::write(&bad, q8([nan, 0x7c00, half, half], 0)).unwrap();
    let kept = dir.path().join("nan.bpk");
    assert_eq!(
        run(&["convert", s(&bad), s(&kept), "--keep-quantized"]).0,
        0
    );
    for f in [&bad, &kept] {
        let (code, out, _) = run(&["verify", s(f), "--nan"]);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("tensor 'w': 32 NaN and 32 infinite values"),
            "{out}"
        );
    }
    // Two kept packs differing in one value: compared by their dequantized values.
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    std::fs::write(&a, q8([half; 4], 0)).unwrap();
    std::fs::write(&b, q8([half; 4], 1)).unwrap();
    let (ka, kb) = (dir.path().join("a.bpk"), dir.path().join("b.bpk"));
    for (g, k) in [(&a, &ka), (&b, &kb)] {
        assert_eq!(run(&["convert", s(g), s(k), "--keep-quantized"]).0, 0);
    }
    let (_, out, _) = run(&["diff", s(&ka), s(&kb), "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["values"][0]["max_abs"], 0.5, "{json}");
    // Metadata: plain strings, kept in safetensors.
    let (_, out, _) = run(&["inspect", s(&a), "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["metadata"]["general.architecture"], "llama", "{json}");
    let st = dir.path().join("a.safetensors");
    assert_eq!(run(&["convert", s(&a), s(&st)]).0, 0);
    let bytes = std::fs::read(&st).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(
        meta.metadata().as_ref().unwrap()["general.architecture"],
        "llama"
    );
    // The safetensors output has the permissions a pack output gets (the umask's).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&st), mode(&ka));
    }
    // Onto its own input: refused, the input intact.
    let before = std::fs::read(&a).unwrap();
    let (code, _, err) = run(&["convert", s(&a), s(&a), "--to", "burnpack"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is the input"), "{err}");
    assert_eq!(std::fs::read(&a).unwrap(), before);
    // Sharded, onto files its shards or index would be named like: refused, the input intact
    // (a safetensors file named like shard 1 of `m.safetensors`; a sharded set onto itself).
    let like = dir.path().join("m-00001-of-00002.safetensors");
    std::fs::copy(&st, &like).unwrap();
    let before = std::fs::read(&like).unwrap();
    let m = dir.path().join("m.safetensors");
    let (code, _, err) = run(&["convert", s(&like), s(&m), "--shard-size", "16"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is the input") && err.contains("m-00001-of-00002"),
        "{err}"
    );
    assert_eq!(std::fs::read(&like).unwrap(), before);
    let set = dir.path().join("set.safetensors");
    assert_eq!(
        run(&["convert", s(&st), s(&set), "--shard-size", "16"]).0,
        0
    );
    let index = dir.path().join("set.safetensors.index.json");
    let first = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("set-00001-of-"))
        .unwrap();
    let shard = std::fs::read(&first).unwrap();
    let (code, _, err) = run(&["convert", s(&index), s(&set), "--shard-size", "16"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(std::fs::read(&first).unwrap(), shard);
    // Beside them under another name, the same set converts.
    let other = dir.path().join("other.safetensors");
    assert_eq!(
        run(&["convert", s(&index), s(&other), "--shard-size", "16"]).0,
        0
    );
    // Metadata no reader would accept (a huge array as text): refused, naming the key, and
    // nothing written.
    let mut array = 12u32.to_le_bytes().to_vec(); // f64 items: 8 bytes, about 21 as text
    let items = 5_200_000u64;
    array.extend(items.to_le_bytes());
    array.extend(
        std::iter::repeat_n(0.123_456_789_012_345_68f64.to_le_bytes(), items as usize).flatten(),
    );
    let kv = key("big.array", 9, &array);
    let huge = dir.path().join("huge.gguf");
    std::fs::write(&huge, file(&[("x", &[1], 0, 0)], &[0; 4], &kv, 1)).unwrap();
    let out = dir.path().join("huge.bpk");
    let (code, _, err) = run(&["convert", s(&huge), s(&out)]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("big.array") && err.contains("max_metadata_size"),
        "{err}"
    );
    assert!(!out.exists());
}

/// Worker threads that cannot be started (here: far more asked than the address space left
/// holds stacks for) are a clear error with exit code 3, not a panic at the first parallel step.
#[cfg(target_os = "linux")]
#[test]
fn worker_threads_that_cannot_start_are_an_error_not_a_panic() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    std::fs::write(&path, common::ours(&every_dtype())).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bpk"));
    command
        .args(["verify", path.to_str().unwrap()])
        .env("RAYON_NUM_THREADS", "100000");
    // SAFETY: only `setrlimit` runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = command.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("cannot start worker threads") && !err.contains("panicked"),
        "{err}"
    );
    // With the threads it asks for, the same file verifies.
    let (code, _, _) = run(&["verify", path.to_str().unwrap()]);
    assert_eq!(code, 0);
}

/// A value written once into every file of the exit-code matrix: the byte flipped to damage a
/// tensor's data (its mantissa: the value stays finite and changes).
const MARK: f32 = 1234.5;

/// One file of every format bpk reads, written into `dir` (the Burn records are Burn 0.21's
/// own, from tests/data): (label, the argument given to bpk, the file damaged, where a byte of
/// tensor data is: for an incremental checkpoint, in its data file).
fn every_format(dir: &Path) -> Vec<(&'static str, std::path::PathBuf, std::path::PathBuf, usize)> {
    use common::torch::{Pickler, StorageSpec, View, legacy_file, save};
    let mark = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        let at = bytes
            .windows(4)
            .position(|w| w == MARK.to_le_bytes())
            .unwrap_or_else(|| panic!("{path:?}: no marked value"));
        at + 1
    };
    let values = [MARK, 2.0, 3.0, 4.0];
    let mut out = Vec::new();
    // A pack, with checksums.
    let pack = dir.join("m.bpk");
    Writer::new(vec![f32_entry("w", &values), f32_entry("b", &[5.0, 6.0])])
        .with_metadata("producer", burnpack::module::PRODUCER)
        .write_to_file(&pack)
        .unwrap();
    out.push(("pack", pack.clone(), pack.clone(), mark(&pack)));
    // safetensors, by the `safetensors` crate.
    let st = dir.join("m.safetensors");
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(Dtype::F32, vec![4], &bytes).unwrap();
    safetensors::serialize_to_file([("w", view)], None, &st).unwrap();
    out.push(("safetensors", st.clone(), st.clone(), mark(&st)));
    // Sharded safetensors: an index and two shards (the marked tensor in the second).
    let sharded = dir.join("sharded.safetensors");
    assert_eq!(
        run(&["convert", s(&pack), s(&sharded), "--shard-size", "8"]).0,
        0
    );
    let index = dir.join("sharded.safetensors.index.json");
    let shard = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.to_str().unwrap().contains("sharded-")
                && std::fs::read(p)
                    .unwrap()
                    .windows(4)
                    .any(|w| w == MARK.to_le_bytes())
        })
        .unwrap();
    out.push(("sharded safetensors", index, shard.clone(), mark(&shard)));
    // torch.save: zip (with CRC-32s) and legacy.
    let storages = vec![StorageSpec::f32(&values), StorageSpec::f32(&[5.0, 6.0])];
    let views = vec![View::whole("w", 0, &[4]), View::whole("b", 1, &[2])];
    let zip = dir.join("m.pt");
    save(&zip, &storages, &views);
    out.push((".pt zip", zip.clone(), zip.clone(), mark(&zip)));
    let legacy = dir.join("old.pt");
    legacy_file(
        &legacy,
        &Pickler::new().state_dict(&storages, &views).finish(),
        &storages,
    );
    out.push((".pt legacy", legacy.clone(), legacy.clone(), mark(&legacy)));
    // GGUF: one F32 tensor.
    let gguf = dir.join("m.gguf");
    std::fs::write(
        &gguf,
        common::gguf::file(&[("w", &[4], 0, 0)], &bytes, &[], 0),
    )
    .unwrap();
    out.push(("gguf", gguf.clone(), gguf.clone(), mark(&gguf)));
    // An incremental checkpoint: a manifest (`ckpt-...2.bpk`) whose tensors all live in the
    // data file of the step before; its data byte is in that data file.
    let manager = burnpack::checkpoint::CheckpointManager::new(dir)
        .unwrap()
        .incremental(true);
    let model = common::model::Net::new(&burn::tensor::Device::flex());
    for step in 1..=2 {
        manager
            .save(burnpack::checkpoint::TrainingState::new(
                &model,
                burnpack::checkpoint::Progress::new(0, step),
            ))
            .unwrap();
    }
    let manifest = manager.path_for(2);
    let data_file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("data-")
        })
        .unwrap();
    let reader = Reader::open(&data_file).unwrap();
    let largest = reader.tensors().iter().max_by_key(|t| t.len()).unwrap();
    let at = (largest.offset() + largest.len() / 2) as usize;
    drop(reader);
    out.push(("incremental checkpoint", manifest.clone(), manifest, at));
    // Burn 0.21 records: a tensor's bytes in the .mpk; the gzip stream's CRC-32 in the .gz.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy");
    let mpk = dir.join("m.mpk");
    std::fs::copy(data.join("zoo.mpk"), &mpk).unwrap();
    let record = burnpack::interop::burn_record::LegacySource::open(&mpk).unwrap();
    let info = burnpack::source::TensorSource::tensors(&record)
        .iter()
        .find(|t| t.len() >= 16)
        .unwrap();
    let at = info.offset() as usize + 9;
    out.push((".mpk", mpk.clone(), mpk, at));
    // A JSON record: the last digit of a tensor's first byte (it stays a byte).
    let json = dir.join("m.json");
    std::fs::copy(data.join("zoo.json"), &json).unwrap();
    let text = std::fs::read(&json).unwrap();
    let first = text.windows(10).position(|w| w == b"\"bytes\": [").unwrap() + 10;
    let digits = first + text[first..].iter().position(u8::is_ascii_digit).unwrap();
    let last = digits
        + text[digits..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
        - 1;
    out.push(("record .json", json.clone(), json, last));
    let gz = dir.join("m.mpk.gz");
    std::fs::copy(data.join("zoo.mpk.gz"), &gz).unwrap();
    let len = std::fs::metadata(&gz).unwrap().len() as usize;
    out.push((".mpk.gz", gz.clone(), gz, len - 7));
    out
}

/// The damage done to a file of the matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Damage {
    /// Cut in half.
    Cut,
    /// Its first four bytes overwritten.
    Magic,
    /// One bit of one byte of tensor data flipped (of a `.gz`, its CRC-32).
    Flip,
}

/// The exit code of `command` on a file of `format` with `damage`, by the contract of
/// `bpk --help`: a file that cannot be read exits 3 whatever the command; one that is read
/// and found damaged by its own checks (a pack's checksums, a zip's or a gzip stream's
/// CRC-32) exits 1 where the command reads what is damaged; diff exits 1 when values differ.
fn contract(format: &str, damage: Damage, command: &str) -> i32 {
    match damage {
        Damage::Cut | Damage::Magic => 3,
        Damage::Flip => match (format, command) {
            // The stream is read whole, and checked, on every open.
            (".mpk.gz", _) => 1,
            (_, "diff") => 1,
            ("pack" | ".pt zip" | "incremental checkpoint", "verify" | "convert") => 1,
            // No checksum: the value read is the damaged one.
            _ => 0,
        },
    }
}

/// The exit-code contract as a matrix: every format bpk reads x damage (cut short, a bad
/// magic number, a flipped data byte) x command (inspect, verify, diff with the sound file,
/// convert); every failure one line on stderr naming the damaged file, a result (diff's
/// differences) nothing on stderr.
#[test]
fn exit_codes_are_one_contract_for_every_format_damage_and_command() {
    let dir = tempfile::tempdir().unwrap();
    let sound = dir.path().join("sound");
    std::fs::create_dir(&sound).unwrap();
    let files = every_format(&sound);
    let mut failures = Vec::new();
    for damage in [Damage::Cut, Damage::Magic, Damage::Flip] {
        let here = dir.path().join(format!("{damage:?}"));
        std::fs::create_dir(&here).unwrap();
        for entry in std::fs::read_dir(&sound).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), here.join(entry.file_name())).unwrap();
        }
        for (format, arg, target, at) in &files {
            let arg_here = here.join(arg.file_name().unwrap());
            let target_here = here.join(target.file_name().unwrap());
            // An incremental checkpoint's data bytes are in its data file.
            let damaged = if damage == Damage::Flip && *format == "incremental checkpoint" {
                std::fs::read_dir(&here)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .find(|p| {
                        p.file_name()
                            .unwrap()
                            .to_str()
                            .unwrap()
                            .starts_with("data-")
                    })
                    .unwrap()
            } else {
                target_here
            };
            let mut bytes = std::fs::read(&damaged).unwrap();
            match damage {
                Damage::Cut => bytes.truncate(bytes.len() / 2),
                Damage::Magic => bytes[..4].copy_from_slice(b"XXXX"),
                Damage::Flip => bytes[*at] ^= 0x01,
            }
            std::fs::write(&damaged, &bytes).unwrap();
            let output = here.join(if *format == "pack" {
                "out.safetensors"
            } else {
                "out.bpk"
            });
            for command in ["inspect", "verify", "diff", "convert"] {
                let args: Vec<&str> = match command {
                    "diff" => vec!["diff", s(&arg_here), s(arg)],
                    "convert" => vec!["convert", s(&arg_here), s(&output)],
                    other => vec![other, s(&arg_here)],
                };
                let (code, out, err) = run(&args);
                if command == "convert" && code != 0 {
                    assert!(!output.exists(), "{format} {damage:?}: {output:?} written");
                }
                let _ = std::fs::remove_file(&output);
                let expected = contract(format, damage, command);
                let what =
                    format!("{format} {damage:?} {command}: exit {code}, expected {expected}");
                if code != expected {
                    failures.push(format!("{what}\n  stdout: {out}\n  stderr: {err}"));
                    continue;
                }
                let result = command == "diff" && code == 1 && !matches!(format, &".mpk.gz");
                let fine = if code == 0 || result {
                    err.is_empty()
                } else {
                    err.starts_with("bpk: ")
                        && err.lines().count() == 1
                        && err.contains(s(&here))
                        && !err.contains("panicked")
                };
                if !fine {
                    failures.push(format!("{what}: stderr: {err}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each divergence the contract's matrix was written for, by name: an unsupported GGUF
/// version and an unsupported safetensors dtype both cannot be read (3) under every command;
/// a safetensors header of invalid UTF-8 is 3 under `inspect` and `verify` alike; a pack cut
/// inside its data section names the tensor the cut falls in; a safetensors header that
/// starts with white space (valid JSON, read by the `safetensors` crate) is read.
#[test]
fn the_contract_holds_where_formats_used_to_diverge() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut gguf = common::gguf::file(&[("w", &[1], 0, 0)], &1.0f32.to_le_bytes(), &[], 0);
    gguf[4..8].copy_from_slice(&9u32.to_le_bytes());
    let version = d.join("v9.gguf");
    std::fs::write(&version, gguf).unwrap();
    let safetensors_with = |name: &str, header: &[u8], data: &[u8]| {
        let path = d.join(name);
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(data);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let dtype = safetensors_with(
        "dtype.safetensors",
        br#"{"w":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}}"#,
        &[0; 4],
    );
    let utf8 = safetensors_with(
        "utf8.safetensors",
        b"{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        &[0; 4],
    );
    for file in [&version, &dtype, &utf8] {
        for args in [
            vec!["inspect", s(file)],
            vec!["verify", s(file)],
            vec!["verify", s(file), "--json"],
            vec!["convert", s(file), s(&d.join("out.bpk"))],
        ] {
            let (code, out, err) = run(&args);
            assert_eq!(code, 3, "{args:?}: {out}{err}");
            assert!(
                err.starts_with("bpk: ") && err.contains(s(file)) && err.lines().count() == 1,
                "{args:?}: {err}"
            );
            if args.contains(&"--json") {
                // The verdict as JSON on stdout too.
                let json: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(
                    (json["ok"].as_bool(), json["exit_code"].as_u64()),
                    (Some(false), Some(3))
                );
            } else {
                assert!(out.is_empty(), "{args:?}: {out}");
            }
        }
    }

    // White space before the header's JSON object: valid for the `safetensors` crate.
    let values: Vec<u8> = [1.5f32, 2.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    let spaced = safetensors_with(
        "spaced.safetensors",
        b"  \n{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        &values,
    );
    let bytes = std::fs::read(&spaced).unwrap();
    assert_eq!(
        SafeTensors::deserialize(&bytes)
            .unwrap()
            .tensor("w")
            .unwrap()
            .data(),
        &values[..]
    );
    let opened = burnpack::interop::open_any(&spaced).unwrap();
    assert_eq!(opened.describe().format, "safetensors");
    let (code, out, err) = run(&["inspect", s(&spaced)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("safetensors"), "{out}");
    let (code, out, err) = run(&["verify", s(&spaced)]);
    assert_eq!(code, 0, "{out}{err}");

    // A pack cut inside its data section: the tensor the cut falls in is named (the first in
    // the file, `z`, not the first by name, `a`, which lies wholly past the cut).
    let pack = d.join("cut.bpk");
    Writer::new(vec![
        f32_entry("z", &vec![1.0; 512]),
        f32_entry("a", &vec![2.0; 512]),
    ])
    .write_to_file(&pack)
    .unwrap();
    let reader = Reader::open(&pack).unwrap();
    let (z, a) = (reader.tensor("z").unwrap(), reader.tensor("a").unwrap());
    assert!(z.offset() < a.offset());
    let cut = z.offset() + z.len() / 2;
    drop(reader);
    common::cut(&pack, cut);
    let err = burnpack::interop::open_any(&pack).unwrap_err();
    assert_eq!(err.tensor(), Some("z"), "{err}");
    assert_eq!(err.kind(), burnpack::source::SourceErrorKind::Truncated);
    for command in ["inspect", "verify"] {
        let (code, _, err) = run(&[command, s(&pack)]);
        assert_eq!(code, 3);
        assert!(
            err.contains("tensor 'z'") && err.contains("cut.bpk"),
            "{err}"
        );
    }
}

/// `verify --json`: the verdict as JSON on stdout, the same exit code, and a failure's one
/// line on stderr.
#[test]
fn verify_json_gives_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.bpk");
    Writer::new(vec![f32_entry("w", &[1.0, f32::NAN])])
        .write_to_file(&good)
        .unwrap();
    let (code, out, err) = run(&["verify", s(&good), "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["format"], "burnpack");
    assert_eq!(v["tensor_count"], 1);
    assert_eq!(v["verified_checksums"], 1);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    let (code, out, err) = run(&["verify", s(&good), "--json", "--nan"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["nan_scanned"], true);
    assert!(v["problems"][0].as_str().unwrap().contains("1 NaN"), "{v}");
    assert!(
        err.starts_with("bpk: ") && err.contains("good.bpk: FAILED") && err.lines().count() == 1,
        "{err}"
    );
    // A checksum mismatch found while reading.
    let mut bytes = std::fs::read(&good).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    let bad = dir.path().join("bad.bpk");
    std::fs::write(&bad, bytes).unwrap();
    let (code, out, _) = run(&["verify", s(&bad), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["problems"][0]
            .as_str()
            .unwrap()
            .contains("tensor 'w': checksum mismatch"),
        "{v}"
    );
}

/// The help names every format bpk reads and the exit codes; convert's input is told by its
/// content, not its name.
#[test]
fn help_names_every_format_and_the_exit_codes() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "burnpack",
        "checkpoints",
        "incremental",
        "safetensors",
        "PyTorch",
        "GGUF",
        "Burn 0.14-0.21 records",
        "Exit codes",
        "0  done",
        "1  read, but damaged",
        "2  usage",
        "3  cannot read",
        "stderr",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    let (_, out, _) = run(&["convert", "--help"]);
    assert!(!out.contains("by its name"), "{out}");
    assert!(out.contains("GGUF") && out.contains("content"), "{out}");
    for command in ["inspect", "verify", "diff"] {
        let (_, out, _) = run(&[command, "--help"]);
        assert!(out.contains("any format bpk reads"), "{command}: {out}");
    }
    let (_, out, _) = run(&["verify", "--help"]);
    assert!(out.contains("--json"), "{out}");
}

/// Wrong diagnoses no more: a Git LFS pointer and an HTML page are said to be what they are
/// under any name; a `.bin` is called a bincode record only when its bytes fit one (exit 3,
/// one line, whatever the command).
#[test]
fn lfs_pointers_html_pages_and_random_bin_files_are_named_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lfs = d.join("pytorch_model.bin");
    std::fs::write(
        &lfs,
        "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a21\nsize 1048576\n",
    )
    .unwrap();
    let html = d.join("model.safetensors");
    std::fs::write(&html, "<html><body>Rate limit exceeded</body></html>").unwrap();
    let noise = d.join("model.bin");
    std::fs::write(&noise, common::pattern(3, 300)).unwrap();
    let bincode = d.join("zoo.bin");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy/zoo.bin"),
        &bincode,
    )
    .unwrap();
    for (file, says, not) in [
        (
            &lfs,
            "a Git LFS pointer, not the file (1.0 MiB in the repository): run `git lfs pull`",
            "bincode",
        ),
        (
            &html,
            "an HTML page, not weights: the download failed?",
            "bincode",
        ),
        (&noise, "not a file bpk reads", "bincode"),
        (&bincode, "a bincode record", "not a file bpk reads"),
    ] {
        for args in [
            vec!["inspect", s(file)],
            vec!["verify", s(file)],
            vec!["diff", s(file), s(file)],
            vec!["convert", s(file), s(&d.join("out.bpk"))],
        ] {
            let (code, _, err) = run(&args);
            assert_eq!(code, 3, "{args:?}: {err}");
            assert!(
                err.contains(says)
                    && !err.contains(not)
                    && err.contains(s(file))
                    && err.lines().count() == 1,
                "{args:?}: {err}"
            );
        }
    }
}

/// `bpk diff`: tensors decide the exit code. A file and its own conversion are the same
/// (metadata such as `producer` is reported, and fails only with `--strict-metadata`); a
/// quantized tensor is compared with its dequantized form by values; `--atol` and `--rtol`
/// allow differences.
#[cfg(feature = "gguf")]
#[test]
fn diff_lets_tensors_decide_with_a_tolerance_and_dequantized_values() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf");
    for (name, flags) in [
        ("q4_k.gguf", &[][..]),
        ("q8_0.gguf", &[][..]),
        ("q8_0.gguf", &["--keep-quantized"][..]),
    ] {
        let gguf = corpus.join(name);
        for target in ["c.bpk", "c.safetensors"] {
            if target.ends_with("safetensors") && !flags.is_empty() {
                continue;
            }
            let out = d.join(target);
            let mut args = vec!["convert", s(&gguf), s(&out)];
            args.extend(flags);
            let (code, _, err) = run(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            let (code, text, err) = run(&["diff", s(&gguf), s(&out)]);
            assert_eq!(code, 0, "{name} {flags:?} -> {target}: {text}{err}");
            assert!(
                text.contains("0 differ in values, 0 in dtype or shape"),
                "{text}"
            );
            let (_, json, _) = run(&["diff", s(&gguf), s(&out), "--json"]);
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["differ"], false, "{v}");
            if flags.is_empty() {
                assert!(v["dequantized"].as_array().unwrap().is_empty(), "{v}");
            } else {
                // Q8_0 kept as Burn's QFloat against the GGUF's dequantized f32: by values.
                assert!(!v["dequantized"].as_array().unwrap().is_empty(), "{v}");
                assert!(text.contains("compared by dequantized values"), "{text}");
            }
            // What differs is metadata: failed only when asked.
            if !v["metadata"].as_array().unwrap().is_empty() {
                assert_eq!(run(&["diff", s(&gguf), s(&out), "--strict-metadata"]).0, 1);
            }
            std::fs::remove_file(&out).unwrap();
        }
    }

    // Tolerances: |a - b| <= atol + rtol * |b|.
    let (a, b) = (d.join("a.bpk"), d.join("b.bpk"));
    Writer::new(vec![f32_entry("w", &[1.0, 2.0, f32::NAN])])
        .with_metadata("run", "1")
        .write_to_file(&a)
        .unwrap();
    Writer::new(vec![f32_entry("w", &[1.0, 2.001, f32::NAN])])
        .with_metadata("run", "2")
        .write_to_file(&b)
        .unwrap();
    for (flags, expected) in [
        (&[][..], 1),
        (&["--atol", "0.01"][..], 0),
        (&["--atol", "0.0001"][..], 1),
        (&["--rtol", "0.001"][..], 0),
        (&["--rtol", "0.0001"][..], 1),
        (&["--atol", "0.01", "--strict-metadata"][..], 1),
    ] {
        let mut args = vec!["diff", s(&a), s(&b)];
        args.extend(flags);
        let (code, out, err) = run(&args);
        assert_eq!(code, expected, "{flags:?}: {out}{err}");
        assert!(out.contains("metadata run: \"1\" vs \"2\""), "{out}");
        if expected == 0 {
            assert!(out.contains("within the tolerance"), "{out}");
        }
    }
    let (_, out, _) = run(&["diff", s(&a), s(&b), "--json", "--atol", "0.01"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["values"][0]["within_tolerance"], true, "{v}");
    assert_eq!(v["tolerance"]["atol"], 0.01, "{v}");
    // A NaN against a number is beyond any tolerance.
    let c = d.join("c.bpk");
    Writer::new(vec![f32_entry("w", &[1.0, 2.0, 3.0])])
        .write_to_file(&c)
        .unwrap();
    assert_eq!(run(&["diff", s(&a), s(&c), "--atol", "1e30"]).0, 1);
    // A tolerance below zero is a usage error.
    assert_eq!(run(&["diff", s(&a), s(&b), "--atol", "-1"]).0, 2);
}

/// A `bpk migrate` that fails leaves nothing behind: without `--scheduler` nothing is created
/// (the scheduler records are read first); a bad record of a later epoch removes the
/// checkpoints already written and the directories the migration created, and keeps a
/// directory that was there before.
#[test]
fn a_failed_migrate_leaves_nothing_behind() {
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy/train-adam");
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("a/b/checkpoint");
    let (code, _, err) = run(&["migrate", s(&old), s(&new)]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("--scheduler") && err.lines().count() == 1,
        "{err}"
    );
    assert!(
        !dir.path().join("a").exists(),
        "created: {:?}",
        dir.path().join("a")
    );

    // Epoch 1 sound, epoch 2's model record damaged.
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    for entry in std::fs::read_dir(&old).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), broken.join(entry.file_name())).unwrap();
    }
    let model = std::fs::read_dir(&broken)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("model-1.")
        })
        .unwrap();
    let ext = model.file_name().unwrap().to_str().unwrap()["model-1.".len()..].to_string();
    std::fs::write(broken.join(format!("model-2.{ext}")), b"\x1f\x8bnot gzip").unwrap();
    let (code, _, err) = run(&["migrate", s(&broken), s(&new), "--scheduler", "exponential"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("model-2"), "{err}");
    assert!(
        !dir.path().join("a").exists(),
        "left behind after a failure"
    );
    // Into a directory that was there: it stays, with only what was in it.
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    std::fs::write(existing.join("notes.txt"), b"mine").unwrap();
    let (code, _, _) = run(&[
        "migrate",
        s(&broken),
        s(&existing),
        "--scheduler",
        "exponential",
    ]);
    assert_eq!(code, 3);
    let left: Vec<_> = std::fs::read_dir(&existing)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("notes.txt")]);
    // Sound inputs: written.
    let (code, _, err) = run(&["migrate", s(&old), s(&new), "--scheduler", "exponential"]);
    assert_eq!(code, 0, "{err}");
    assert!(new.join("ckpt-00000000000000000001.bpk").exists());
}
