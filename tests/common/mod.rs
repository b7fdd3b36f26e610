//! Helpers shared by the integration tests: deterministic tensor specs convertible into this
//! crate's entries and into Burn's `burn_pack` tensors.
#![allow(dead_code)]

pub mod gguf;
pub mod held;
#[cfg(feature = "optim")]
pub mod incremental;
pub mod lazy;
pub mod model;
#[cfg(feature = "object-store")]
pub mod s3;
pub mod torch;
#[cfg(feature = "train")]
pub mod train;

use burn::tensor::quantization::QuantScheme;
use burn::tensor::{Bytes, DType};
use burnpack::Entry;

/// Deterministic pseudo-random bytes (xorshift64*), so tests need no data files.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// A tensor to write, described independently of either writer.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub param_id: Option<u64>,
    pub data: Vec<u8>,
}

impl Spec {
    /// A tensor of `dtype` and `shape` filled with deterministic bytes.
    pub fn new(name: &str, dtype: DType, shape: &[usize], param_id: Option<u64>) -> Self {
        let len = shape.iter().product::<usize>() * dtype.size();
        Self::with_data(
            name,
            dtype,
            shape,
            param_id,
            pattern(name.len() as u64 + len as u64, len),
        )
    }

    pub fn with_data(
        name: &str,
        dtype: DType,
        shape: &[usize],
        param_id: Option<u64>,
        data: Vec<u8>,
    ) -> Self {
        Self {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            param_id,
            data,
        }
    }

    pub fn entry(&self) -> Entry {
        let e = Entry::resident(
            self.name.clone(),
            self.dtype,
            self.shape.clone(),
            Bytes::from_bytes_vec(self.data.clone()),
        );
        match self.param_id {
            Some(id) => e.with_param_id(id),
            None => e,
        }
    }

    pub fn deferred_entry(&self) -> Entry {
        let data = self.data.clone();
        let e = Entry::deferred(
            self.name.clone(),
            self.dtype,
            self.shape.clone(),
            self.data.len() as u64,
            move || Ok(Bytes::from_bytes_vec(data)),
        );
        match self.param_id {
            Some(id) => e.with_param_id(id),
            None => e,
        }
    }

    pub fn burn_tensor(&self) -> burn_pack::Tensor {
        burn_pack::Tensor::new(
            self.name.clone(),
            self.dtype,
            self.shape.clone(),
            self.param_id,
            Bytes::from_bytes_vec(self.data.clone()),
        )
    }
}

/// A quantized scheme Burn writes for int8 weights.
pub fn qfloat() -> DType {
    DType::QFloat(QuantScheme::default())
}

/// One tensor of every dtype Burn has, plus zero-size, scalar and unicode-named tensors.
pub fn every_dtype() -> Vec<Spec> {
    let dtypes = burnpack::format::PLAIN_DTYPES;
    let mut specs: Vec<Spec> = dtypes
        .iter()
        .enumerate()
        .map(|(i, &dtype)| {
            let shape = [i + 1, 3];
            let mut spec = Spec::new(
                &format!("dtypes.{}.{i}", dtype.name()),
                dtype,
                &shape,
                Some(1000 + i as u64),
            );
            if dtype.is_bool() {
                // Booleans hold 0 or 1 in each element.
                let size = dtype.size();
                for (j, chunk) in spec.data.chunks_mut(size).enumerate() {
                    chunk.fill(0);
                    chunk[0] = (j % 2) as u8;
                }
            }
            spec
        })
        .collect();
    // Quantized: 12 packed int8 values in three u32 words, then one f32 scale.
    let mut q = pattern(7, 12);
    q.extend_from_slice(&0.05f32.to_le_bytes());
    specs.push(Spec::with_data(
        "quant.weight",
        qfloat(),
        &[3, 4],
        Some(77),
        q,
    ));
    specs.push(Spec::new("empty", DType::F32, &[0, 5], None));
    specs.push(Spec::new("scalar", DType::F64, &[], Some(5)));
    specs.push(Spec::new("ünïcødé.层.🔥", DType::F16, &[7], None));
    specs
}

/// Writes `specs` with this crate into memory, without checksums: Burn's exact bytes.
pub fn ours(specs: &[Spec]) -> Vec<u8> {
    burnpack::Writer::new(specs.iter().map(Spec::entry).collect())
        .checksums(false)
        .into_bytes()
        .unwrap()
        .to_vec()
}

/// Writes `specs` with this crate's defaults (checksums on) into memory.
pub fn ours_checked(specs: &[Spec]) -> Vec<u8> {
    burnpack::Writer::new(specs.iter().map(Spec::entry).collect())
        .into_bytes()
        .unwrap()
        .to_vec()
}

/// Writes `specs` with Burn's `burn_pack::Writer` into memory.
pub fn burns(specs: &[Spec]) -> Vec<u8> {
    burn_pack::Writer::new(specs.iter().map(Spec::burn_tensor).collect())
        .into_bytes()
        .unwrap()
        .to_vec()
}

/// How many scratch files (`*.bpk-tmp`) are in `dir`.
pub fn scratch_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".bpk-tmp")
        })
        .count()
}

/// Whether this is a CI run: `CI` is `true` (any case) or `1`, as `.ci/run` and CI services
/// set it. Any other value, or none, is a run on a developer's machine.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// A test that cannot run here because `why` (a missing server, file, adapter or privilege):
/// in a CI run ([`in_ci`]) a failure naming it; otherwise the line `skipped: <why>` on stderr
/// (shown with `--nocapture`), after which the caller returns and the test passes.
#[track_caller]
pub fn skip(why: &str) {
    assert!(
        !in_ci(),
        "CI must provide what this test needs (see .ci/run): {why}"
    );
    eprintln!("skipped: {why}");
}

/// Runs `script` with `python3` in `dir` where `python3` imports every module of `modules`
/// (comma-separated, from `BURNPACK_PYTHONPATH` when set, as `.ci/run` installs them);
/// `None`, after [`skip`] (a failure in CI), where it does not. A failing script fails the
/// test with its stderr.
#[allow(dead_code)]
pub fn python(modules: &str, script: &str, dir: &std::path::Path) -> Option<()> {
    use std::process::Command;
    let pythonpath = std::env::var_os("BURNPACK_PYTHONPATH");
    let probe = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .envs(pythonpath.clone().map(|p| ("PYTHONPATH", p)))
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skip(&format!(
            "python3 with the packages {modules} (BURNPACK_PYTHONPATH)"
        ));
        return None;
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .envs(pythonpath.map(|p| ("PYTHONPATH", p)))
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

/// Runs the `bpk` binary of this build (feature `cli`) with `args`: its exit code (-1 for a
/// signal), stdout and stderr.
#[allow(dead_code)]
pub fn bpk<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> (i32, String, String) {
    let out = assert_cmd::Command::cargo_bin("bpk")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A real S3 server's bucket (`BURNPACK_S3_BUCKET`, on the server `AWS_ENDPOINT` points to),
/// or `None` after [`skip`] (a failure in CI).
#[track_caller]
pub fn s3_bucket() -> Option<String> {
    let bucket = std::env::var("BURNPACK_S3_BUCKET").ok();
    if bucket.is_none() {
        skip("BURNPACK_S3_BUCKET is not set (.ci/run starts a server)");
    }
    bucket
}

/// Packs with zero-length tensors (a shape with a 0) in every position: alone, first, last,
/// right after a tensor of 1 MiB or more (alone in its write batch), several in a row,
/// between small neighbours; of several dtypes and shapes.
pub fn zero_length_cases() -> Vec<(&'static str, Vec<Spec>)> {
    let empty = |name: &str, dtype: DType, shape: &[usize]| Spec::new(name, dtype, shape, None);
    let small = |name: &str| Spec::new(name, DType::F32, &[3, 5], Some(7));
    let large = |name: &str| Spec::new(name, DType::F32, &[700, 1000], Some(9));
    vec![
        ("alone", vec![empty("e", DType::F32, &[0])]),
        (
            "several alone",
            vec![
                empty("e0", DType::F32, &[0]),
                empty("e1", DType::I64, &[0, 5]),
                empty("e2", DType::U8, &[3, 0]),
            ],
        ),
        ("first", vec![empty("e", DType::F32, &[0]), small("s")]),
        ("last", vec![small("s"), empty("e", DType::F16, &[0])]),
        (
            "after large",
            vec![large("big"), empty("e", DType::F32, &[0])],
        ),
        (
            "several after large",
            vec![
                large("big"),
                empty("e0", DType::F32, &[0]),
                empty("e1", DType::BF16, &[4, 0]),
                empty("e2", DType::I32, &[0]),
            ],
        ),
        (
            "between large",
            vec![large("a"), empty("e", DType::F32, &[0]), large("b")],
        ),
        (
            "before large",
            vec![empty("e", DType::F64, &[0]), large("big")],
        ),
        (
            "in a row between small",
            vec![
                small("s0"),
                empty("e0", DType::F32, &[0]),
                empty("e1", DType::U16, &[0, 0]),
                empty("e2", DType::F32, &[0]),
                small("s1"),
            ],
        ),
        (
            "between small",
            vec![small("s0"), empty("e", DType::I8, &[2, 0, 3]), small("s1")],
        ),
    ]
}

/// Whether damaged pack `bytes` are noticed: refused on open, or failing `verify_all`.
pub fn damage_noticed(bytes: Vec<u8>) -> bool {
    match burnpack::read::Reader::from_bytes(Bytes::from_bytes_vec(bytes)) {
        Err(_) => true,
        Ok(reader) => reader.verify_all().is_err(),
    }
}

/// The single-bit flips in `bytes[..end]` that [`damage_noticed`] misses: `(byte, bit)`.
pub fn unnoticed_flips(bytes: &[u8], end: usize) -> Vec<(usize, u8)> {
    let mut missed = Vec::new();
    for byte in 0..end {
        for bit in 0..8 {
            let mut flipped = bytes.to_vec();
            flipped[byte] ^= 1 << bit;
            if !damage_noticed(flipped) {
                missed.push((byte, bit));
            }
        }
    }
    missed
}

/// Checks a pack written by one of this crate's writing paths (`path` names it): it names
/// this crate as its producer, carries checksums, verifies, and every single-bit flip in its
/// header, metadata and the padding up to the data section is noticed (refused on open or by
/// `verify_all`). Returns the number of flips tried.
pub fn assert_written_here(path: &str, bytes: &[u8]) -> usize {
    let reader = burnpack::read::Reader::from_bytes(Bytes::from_bytes_vec(bytes.to_vec())).unwrap();
    assert_eq!(
        reader.metadata().get("producer").map(String::as_str),
        Some(burnpack::format::PRODUCER),
        "{path}: no producer of this crate"
    );
    assert!(reader.layout().has_checksums(), "{path}: no checksums");
    reader.verify_all().unwrap();
    let end = reader.layout().data_start() as usize;
    let missed = unnoticed_flips(bytes, end);
    assert!(
        missed.is_empty(),
        "{path}: {} of {} single-bit flips went unnoticed: {missed:?}",
        missed.len(),
        end * 8
    );
    end * 8
}

/// `file` with its metadata blob replaced by `edit(metadata)`: the header's size and the
/// padding up to the (256-aligned) data section follow, the data section is kept as it is.
pub fn with_metadata_edited(file: &[u8], edit: impl FnOnce(Vec<u8>) -> Vec<u8>) -> Vec<u8> {
    use burnpack::format::{HEADER_SIZE, Header, data_start};
    let header = Header::parse(file).unwrap();
    let size = header.metadata_size as usize;
    let metadata = file[HEADER_SIZE..HEADER_SIZE + size].to_vec();
    let data = &file[data_start(header.metadata_size) as usize..];
    let edited = edit(metadata);
    let mut out = Header::new(edited.len() as u32).to_bytes().to_vec();
    out.extend_from_slice(&edited);
    out.resize(data_start(edited.len() as u32) as usize, 0);
    out.extend_from_slice(data);
    out
}

/// Cuts the file at `path` to `len` bytes in place (as another process truncating a file a
/// reader holds open would).
pub fn cut(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}
