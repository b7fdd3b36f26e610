//! GGUF loading: burnpack's `GgufSource` beside candle's reader (`candle-core`'s
//! `quantized::gguf_file` and its CPU dequantization), on the same files, with the method of
//! burnpack's own benchmarks (`benches/common`, shared through `#[path]`).
//!
//! Three files of about `BURNPACK_BENCH_MIB` MiB each (default 1024), written by this program
//! (a small GGUF v3 writer: 32-byte alignment, llama.cpp's layout): square matrices of
//! `BURNPACK_BENCH_DIM` (default 4096) in **F16**, in **Q8_0** and in **Q4_K**, and one F32
//! norm of `DIM` values every 4 matrices (as real files keep norms in F32). Random bytes: F16
//! values finite (|x| < 2), the f16 scale fields of every quantized block (`d`, and `dmin` for
//! Q4_K) forced to small finite values.
//!
//! Contenders, each "load + read of every tensor", every value kept until the end (as a model
//! load keeps them) and every byte touched (a wrapping sum of its 8-byte words):
//! - `burnpack`: `GgufSource::open` then `TensorSource::read` of each tensor in file order: F16
//!   and F32 zero-copy windows of the mapping, Q8_0 and Q4_K dequantized to f32 (rayon, every
//!   core); `burnpack-1t` the same with `RAYON_NUM_THREADS=1`; `burnpack-kept` (Q8_0 only)
//!   opened with `OpenOptions::keep_quantized`: Burn quantized tensors (the `i8` values, then
//!   the `f16` scales), not dequantized.
//! - `candle`: `gguf_file::Content::read(&mut file)`, then `content.tensor(&mut file, name,
//!   &Device::Cpu)` for each tensor in file order (sorted by offset: candle keeps its table in a
//!   `HashMap`); quantized tensors `.dequantize(&Device::Cpu)` to f32 (one thread: candle's CPU
//!   dequantization is sequential), F16 and F32 tensors kept as read (`QTensor::data`).
//! - `from-memory` (the reference): the file read into a heap buffer before the timer starts.
//!   F16 file: the same windows checksummed straight from the buffer (the least a read of the
//!   values costs). Quantized files: `GgufSource::from_bytes` over that buffer (opened before
//!   the timer) and the same reads, i.e. burnpack's dequantization alone, without the file.
//!   Its cold rows are warm ones too.
//!
//! Every measurement runs in a child process (this program with `--child`); contenders
//! interleaved, the order rotated each round; warm = the file read once before each child,
//! cold = the file dropped from the page cache (`posix_fadvise(DONTNEED)`) before each child.
//!
//! ```sh
//! cd tools/bench-gguf
//! CARGO_TARGET_DIR=../../target cargo build --release
//! BURNPACK_BENCH_DIR=/tmp BURNPACK_BENCH_RUNS=5 ../../target/release/bench-gguf
//! ```
//!
//! Env: `BURNPACK_BENCH_RUNS` (default 5), `BURNPACK_BENCH_MIB` (default 1024),
//! `BURNPACK_BENCH_DIM` (default 4096), `BURNPACK_BENCH_DIR` (the files are kept there and
//! reused by later runs; default: a temporary directory, removed at the end),
//! `BURNPACK_BENCH_ONLY` (a comma list of `f16,q8_0,q4_k,q4_k_m`).
//!
//! `q4_k_m`: a mix as llama.cpp's `Q4_K_M` (`Q4_K`, `Q6_K`, `Q8_0`, `Q4_0` matrices), of about
//! `BURNPACK_BENCH_MIB` MiB as `f32`; contender `burnpack-kept-f16` opens it with
//! `keep_quantized` and `dequantize_to(F16)` (`Q6_K`, `Q8_0`, `Q4_0` kept quantized, `Q4_K`
//! dequantized into f16), and a row gives the bytes the loaded tensors hold each way.

#[path = "../../../benches/common/mod.rs"]
mod common;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use burnpack::interop::gguf::GgufSource;
use burnpack::read::TensorSource;

/// The files: name, ggml type id of the matrices, block elements, block bytes. `q4_k_m` is a
/// mix ([`MIX`]), its size that of its values in `f32`.
const KINDS: [(&str, u32, u64, u64); 4] = [
    ("f16", 1, 1, 2),
    ("q8_0", 8, 32, 34),
    ("q4_k", 12, 256, 144),
    ("q4_k_m", MIXED, 256, 0),
];

/// The type id standing for [`MIX`].
const MIXED: u32 = u32::MAX;

/// The matrices of the `q4_k_m` file in turn, as llama.cpp's `Q4_K_M` mixes them (most in
/// `Q4_K`, a quarter in `Q6_K`, some in `Q8_0` and `Q4_0`): type id, block elements, block
/// bytes.
const MIX: [(u32, u64, u64); 8] = [
    (12, 256, 144),
    (14, 256, 210),
    (12, 256, 144),
    (8, 32, 34),
    (12, 256, 144),
    (14, 256, 210),
    (12, 256, 144),
    (2, 32, 18),
];

/// One tensor of a file: name, dims (fastest first), ggml type, offset in the data section,
/// bytes.
struct Place {
    name: String,
    dims: Vec<u64>,
    ty: u32,
    offset: u64,
    bytes: u64,
}

/// The layout of a bench file of `kind`: its header (up to the data section, padded) and its
/// tensors.
fn layout(kind: usize, mib: u64, dim: u64) -> (Vec<u8>, Vec<Place>) {
    let (_, ty, block, block_bytes) = KINDS[kind];
    let matrix_bytes = dim * dim / block * block_bytes;
    let matrices = if ty == MIXED {
        ((mib << 20) / (dim * dim * 4)).max(1)
    } else {
        ((mib << 20) / matrix_bytes).max(1)
    };
    let mut places = Vec::new();
    let mut offset = 0u64;
    let mut push = |name: String, dims: Vec<u64>, ty: u32, bytes: u64| {
        places.push(Place {
            name,
            dims,
            ty,
            offset,
            bytes,
        });
        offset = (offset + bytes).next_multiple_of(32);
    };
    for i in 0..matrices {
        if i % 4 == 0 {
            push(format!("blk.{i}.attn_norm.weight"), vec![dim], 0, dim * 4);
        }
        if ty == MIXED {
            let (ty, block, block_bytes) = MIX[i as usize % MIX.len()];
            push(
                format!("blk.{i}.weight"),
                vec![dim, dim],
                ty,
                dim * dim / block * block_bytes,
            );
        } else {
            push(format!("blk.{i}.weight"), vec![dim, dim], ty, matrix_bytes);
        }
    }
    let kv: [(&str, &str); 2] = [
        ("general.architecture", "llama"),
        ("general.name", "burnpack-bench"),
    ];
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((places.len() as u64).to_le_bytes());
    out.extend((kv.len() as u64).to_le_bytes());
    for (key, value) in kv {
        out.extend((key.len() as u64).to_le_bytes());
        out.extend(key.as_bytes());
        out.extend(8u32.to_le_bytes()); // string
        out.extend((value.len() as u64).to_le_bytes());
        out.extend(value.as_bytes());
    }
    for p in &places {
        out.extend((p.name.len() as u64).to_le_bytes());
        out.extend(p.name.as_bytes());
        out.extend((p.dims.len() as u32).to_le_bytes());
        for d in &p.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(p.ty.to_le_bytes());
        out.extend(p.offset.to_le_bytes());
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    (out, places)
}

/// xorshift64*: fast random bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        let (words, rest) = buf.as_chunks_mut::<8>();
        for w in words {
            *w = self.next().to_le_bytes();
        }
        let last = self.next().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }

    /// A small positive finite f16 (about 0.001 to 0.016), as the bits of a block's scale.
    fn scale(&mut self) -> [u8; 2] {
        (0x1400u16 + (self.next() % 0x1000) as u16).to_le_bytes()
    }
}

/// Writes the file of `kind` at `path` (random blocks, finite scales), synced.
fn write(path: &Path, kind: usize, mib: u64, dim: u64) {
    let (header, places) = layout(kind, mib, dim);
    let tmp = path.with_extension("tmp");
    let mut out = BufWriter::with_capacity(8 << 20, std::fs::File::create(&tmp).unwrap());
    out.write_all(&header).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ kind as u64);
    let mut written = 0u64;
    let mut buf = Vec::new();
    for p in &places {
        out.write_all(&vec![0u8; (p.offset - written) as usize])
            .unwrap();
        buf.resize(p.bytes as usize, 0);
        rng.fill(&mut buf);
        match p.ty {
            0 => {
                // F32 norms: values in [0.5, 1.5).
                for w in buf.as_chunks_mut::<4>().0 {
                    let x = 0.5 + (u32::from_le_bytes(*w) >> 8) as f32 / (1u32 << 24) as f32;
                    *w = x.to_le_bytes();
                }
            }
            1 => {
                // F16: exponent bit 14 cleared, so |x| < 2 and never Inf or NaN.
                for h in buf.as_chunks_mut::<2>().0 {
                    *h = (u16::from_le_bytes(*h) & 0xbbff).to_le_bytes();
                }
            }
            8 => {
                for b in buf.chunks_exact_mut(34) {
                    b[..2].copy_from_slice(&rng.scale());
                }
            }
            12 => {
                for b in buf.chunks_exact_mut(144) {
                    b[..2].copy_from_slice(&rng.scale());
                    b[2..4].copy_from_slice(&rng.scale());
                }
            }
            2 => {
                for b in buf.chunks_exact_mut(18) {
                    b[..2].copy_from_slice(&rng.scale());
                }
            }
            14 => {
                for b in buf.chunks_exact_mut(210) {
                    b[208..].copy_from_slice(&rng.scale());
                }
            }
            _ => unreachable!(),
        }
        out.write_all(&buf).unwrap();
        written = p.offset + p.bytes;
    }
    let file = out.into_inner().unwrap();
    file.sync_all().unwrap();
    drop(file);
    std::fs::rename(&tmp, path).unwrap();
}

fn file_len(kind: usize, mib: u64, dim: u64) -> u64 {
    let (header, places) = layout(kind, mib, dim);
    let last = places.last().unwrap();
    header.len() as u64 + last.offset + last.bytes
}

/// Every byte of `bytes` read: the wrapping sum of its 8-byte words (the same in every
/// contender).
fn touch(acc: u64, bytes: &[u8]) -> u64 {
    let (words, rest) = bytes.as_chunks::<8>();
    let acc = words
        .iter()
        .fold(acc, |acc, w| acc.wrapping_add(u64::from_le_bytes(*w)));
    rest.iter()
        .fold(acc, |acc, b| acc.wrapping_add(u64::from(*b)))
}

/// burnpack: every tensor read in file order, kept; returns the checksum and what it kept.
fn burnpack_read_all(source: &GgufSource) -> (u64, Vec<burn::tensor::Bytes>) {
    let mut sum = 0u64;
    let mut kept = Vec::with_capacity(source.tensors().len());
    for info in source.tensors() {
        let bytes = source.read(info).unwrap();
        sum = touch(sum, &bytes);
        kept.push(bytes);
    }
    (sum, kept)
}

/// candle's bytes of a CPU tensor (f32, contiguous).
fn candle_f32_bytes(acc: u64, t: &candle_core::Tensor) -> u64 {
    let (storage, layout) = t.storage_and_layout();
    assert!(layout.is_contiguous() && layout.start_offset() == 0);
    match &*storage {
        candle_core::Storage::Cpu(cpu) => {
            let values = cpu.as_slice::<f32>().unwrap();
            touch(acc, bytemuck::cast_slice(values))
        }
        _ => unreachable!("CPU only"),
    }
}

fn child(who: &str, file: &Path, kind: usize, mib: u64, dim: u64) {
    let quantized = KINDS[kind].1 != 1;
    match who {
        "from-memory" if !quantized => {
            // Untimed: the file's bytes in memory and where each tensor is in them.
            let buffer = std::fs::read(file).unwrap();
            let (header, places) = layout(kind, mib, dim);
            let start_of = header.len() as u64;
            let meter = common::Meter::start();
            let start = Instant::now();
            let mut sum = 0u64;
            for p in &places {
                let at = (start_of + p.offset) as usize;
                sum = touch(sum, &buffer[at..at + p.bytes as usize]);
            }
            println!("SUM {sum:016x}");
            meter.report(start.elapsed());
        }
        "from-memory" => {
            // Untimed: the file's bytes in memory, opened as a GGUF source.
            let buffer = burn::tensor::Bytes::from_shared(
                bytes::Bytes::from(std::fs::read(file).unwrap()),
                burn::tensor::AllocationProperty::Other,
            );
            let source = GgufSource::from_bytes(buffer, &Default::default()).unwrap();
            let meter = common::Meter::start();
            let start = Instant::now();
            let (sum, kept) = burnpack_read_all(&source);
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            drop(kept);
        }
        "burnpack" => {
            let meter = common::Meter::start();
            let start = Instant::now();
            let source = GgufSource::open(file).unwrap();
            let (sum, kept) = burnpack_read_all(&source);
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            drop(kept);
        }
        "burnpack-kept" | "burnpack-kept-f16" => {
            // Kept quantized: Burn's quantized layout (i8 values, then the block scales); with
            // `-f16`, the types no Burn scheme holds (Q4_K) dequantized into f16.
            let meter = common::Meter::start();
            let start = Instant::now();
            let options = burnpack::interop::OpenOptions::new().keep_quantized(true);
            let options = if who == "burnpack-kept-f16" {
                options.dequantize_to(burn::tensor::DType::F16)
            } else {
                options
            };
            let source = GgufSource::open_with(file, &options).unwrap();
            let (sum, kept) = burnpack_read_all(&source);
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            drop(kept);
        }
        "candle" => {
            use candle_core::Device;
            use candle_core::quantized::{GgmlDType, gguf_file};
            let meter = common::Meter::start();
            let start = Instant::now();
            let mut f = std::fs::File::open(file).unwrap();
            let content = gguf_file::Content::read(&mut f).unwrap();
            let mut names: Vec<(&String, u64)> = content
                .tensor_infos
                .iter()
                .map(|(name, info)| (name, info.offset))
                .collect();
            names.sort_by_key(|&(_, offset)| offset);
            let mut sum = 0u64;
            let mut kept_q = Vec::new();
            let mut kept_t = Vec::new();
            for (name, _) in names {
                let q = content.tensor(&mut f, name, &Device::Cpu).unwrap();
                if matches!(q.dtype(), GgmlDType::F16 | GgmlDType::F32) {
                    // Kept as stored, as burnpack's windows.
                    sum = touch(sum, &q.data().unwrap());
                    kept_q.push(q);
                } else {
                    let t = q.dequantize(&Device::Cpu).unwrap();
                    sum = candle_f32_bytes(sum, &t);
                    kept_t.push(t);
                }
            }
            println!("SUM {sum:016x}");
            let time = start.elapsed();
            meter.report(time);
            drop((kept_q, kept_t));
        }
        _ => panic!("unknown contender {who}"),
    }
}

/// Runs this program as a child measuring `who` (`-1t`: one rayon thread).
fn run(who: &str, file: &Path, kind: usize, mib: u64, dim: u64) -> common::Sample {
    let (name, one_thread) = match who.strip_suffix("-1t") {
        Some(name) => (name, true),
        None => (who, false),
    };
    let args = [
        name.to_string(),
        file.to_str().unwrap().to_string(),
        kind.to_string(),
        mib.to_string(),
        dim.to_string(),
    ];
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.arg("--child").args(&args);
    if one_thread {
        command.env("RAYON_NUM_THREADS", "1");
    } else {
        command.env_remove("RAYON_NUM_THREADS");
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::run_command(command, &args)
}

/// `contender | time | x from-memory | x candle | CPU | peak RSS rise | anon` rows.
fn print_rows(label: &str, contenders: &[&str], samples: &[Vec<common::Sample>]) {
    let candle = contenders.iter().position(|c| *c == "candle").unwrap();
    let ratio_to = |i: usize, r: usize| -> String {
        let ratios: Vec<f64> = samples[i]
            .iter()
            .zip(&samples[r])
            .map(|(s, reference)| s.time.as_secs_f64() / reference.time.as_secs_f64())
            .collect();
        format!("{:.2}", common::median_ratio(ratios))
    };
    for (i, who) in contenders.iter().enumerate() {
        let times: Vec<Duration> = samples[i].iter().map(|s| s.time).collect();
        let cpu = common::median(samples[i].iter().map(|s| s.cpu).collect());
        let rise = samples[i]
            .iter()
            .map(|s| s.peak_kib.saturating_sub(s.base_kib))
            .max()
            .unwrap_or(0);
        let anon = samples[i]
            .iter()
            .filter_map(|s| s.anon_kib)
            .max()
            .unwrap_or(0);
        println!(
            "| {label} | {who} | {} | {} | {} | {:.0} | {} MiB | {} MiB |",
            common::spread(&times),
            ratio_to(i, 0),
            ratio_to(i, candle),
            cpu.as_secs_f64() * 1e3,
            rise >> 10,
            anon >> 10
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(
            &args[2],
            Path::new(&args[3]),
            args[4].parse().unwrap(),
            args[5].parse().unwrap(),
            args[6].parse().unwrap(),
        );
        return;
    }
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let mib = common::env_or("BURNPACK_BENCH_MIB", 1024) as u64;
    let dim = common::env_or("BURNPACK_BENCH_DIM", 4096) as u64;
    let only = std::env::var("BURNPACK_BENCH_ONLY").unwrap_or_default();
    // The files in a folder of their own (evicted whole before each cold child).
    let (_temp, dir): (Option<tempfile::TempDir>, PathBuf) =
        match std::env::var("BURNPACK_BENCH_DIR") {
            Ok(d) => {
                let dir = Path::new(&d).join("bench-gguf-files");
                std::fs::create_dir_all(&dir).unwrap();
                (None, dir)
            }
            Err(_) => {
                let t = tempfile::tempdir().unwrap();
                let dir = t.path().to_path_buf();
                (Some(t), dir)
            }
        };
    println!(
        "| file (cache) | contender | time, ms: median (min-max) | x from-memory | x candle | CPU, ms | peak RSS rise | anon |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (kind, (name, _, _, _)) in KINDS.iter().enumerate() {
        if !only.is_empty() && !only.split(',').any(|o| o == *name) {
            continue;
        }
        let file = dir.join(format!("bench-{name}-{mib}m-{dim}.gguf"));
        let len = file_len(kind, mib, dim);
        if std::fs::metadata(&file).map(|m| m.len()).ok() != Some(len) {
            let t = Instant::now();
            write(&file, kind, mib, dim);
            eprintln!("wrote {} in {:.1?}", file.display(), t.elapsed());
        }
        let contenders: &[&str] = if kind == 0 {
            &["from-memory", "burnpack", "candle"]
        } else if kind == 1 {
            &["from-memory", "burnpack", "burnpack-1t", "burnpack-kept", "candle"]
        } else if kind == 3 {
            &["from-memory", "burnpack", "burnpack-kept-f16", "candle"]
        } else {
            &["from-memory", "burnpack", "burnpack-1t", "candle"]
        };
        if kind == 3 {
            // What the loaded tensors hold, as each contender opens the file.
            let held = |options: &burnpack::interop::OpenOptions| -> u64 {
                let source = GgufSource::open_with(&file, options).unwrap();
                source.tensors().iter().map(|t| t.len()).sum()
            };
            let plain = burnpack::interop::OpenOptions::new();
            let kept = plain
                .clone()
                .keep_quantized(true)
                .dequantize_to(burn::tensor::DType::F16);
            println!(
                "| {name}: tensors held | file {} MiB | f32 {} MiB | kept + f16 {} MiB | | | | |",
                len >> 20,
                held(&plain) >> 20,
                held(&kept) >> 20
            );
        }
        for cold in [false, true] {
            let (samples, _) = common::interleave(runs, contenders.len(), |i| {
                if cold {
                    common::evict_dir(&dir);
                } else {
                    common::read_sequentially(&file);
                }
                run(contenders[i], &file, kind, mib, dim)
            });
            print_rows(
                &format!(
                    "{name}, {} MiB ({})",
                    len >> 20,
                    if cold { "cold" } else { "warm" }
                ),
                contenders,
                &samples,
            );
        }
    }
}
