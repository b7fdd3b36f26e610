//! Format-layer benchmark: writing and reading a pack of about 1 GiB of f32 tensors, side by
//! side with Burn 0.22's `burn_pack` and with plain `write(2)` / `read(2)` of the same bytes.
//!
//! `cargo bench --bench format` (env: `BURNPACK_BENCH_MIB`, default 1024; `BURNPACK_BENCH_RUNS`,
//! default 5). Prints a markdown table of medians. Cold reads drop the page cache first, which
//! needs root; without it they are reported as warm.

mod common;

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use burn::tensor::{AllocationProperty, Bytes, DType};
use burnpack::read::{ReadMode, ReadOptions};
use burnpack::write::{Entry, Writer};

const TENSOR_MIB: usize = 16;

fn drop_caches() -> bool {
    let synced = std::process::Command::new("sync")
        .status()
        .is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Wrapping sum of every 8-byte word: forces every byte to be read.
fn touch(bytes: &[u8]) -> u64 {
    let (words, rest) = bytes.as_chunks::<8>();
    words
        .iter()
        .fold(rest.iter().map(|&b| u64::from(b)).sum(), |acc, w| {
            acc.wrapping_add(u64::from_le_bytes(*w))
        })
}

struct Row {
    op: &'static str,
    who: &'static str,
    time: Duration,
    bytes: u64,
}

fn time_runs(runs: usize, mut setup: impl FnMut(), mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut samples = Vec::new();
    let mut out = 0;
    for _ in 0..runs {
        setup();
        let start = Instant::now();
        out = f();
        samples.push(start.elapsed());
    }
    (common::median(samples), out)
}

fn main() {
    let total_mib = common::env_or("BURNPACK_BENCH_MIB", 1024);
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 5);
    let count = (total_mib / TENSOR_MIB).max(1);
    let elems = TENSOR_MIB * 1024 * 1024 / 4;
    let dir = common::bench_dir();
    let path = dir.path().join("bench.bpk");

    // The tensors, shared so each contender gets a zero-cost clone of the same bytes.
    let tensors: Vec<Bytes> = (0..count)
        .map(|t| {
            let data: Vec<f32> = (0..elems).map(|i| (t * elems + i) as f32).collect();
            Bytes::from_shared(
                bytes::Bytes::from(bytemuck::cast_slice::<f32, u8>(&data).to_vec()),
                AllocationProperty::Other,
            )
        })
        .collect();
    let names: Vec<String> = (0..count).map(|t| format!("layers.{t}.weight")).collect();
    let ours = || {
        Writer::new(
            tensors
                .iter()
                .zip(&names)
                .map(|(b, n)| Entry::resident(n.clone(), DType::F32, vec![elems], b.clone()))
                .collect(),
        )
    };
    let burns = || {
        burn_pack::Writer::new(
            tensors
                .iter()
                .zip(&names)
                .map(|(b, n)| {
                    burn_pack::Tensor::new(n.clone(), DType::F32, vec![elems], None, b.clone())
                })
                .collect(),
        )
    };
    let buffer = ours().into_bytes().unwrap();
    let size = buffer.len() as u64;
    let plain_size = ours().checksums(false).size().unwrap();

    // Writers run round-robin, one sample of each per round, each after a `sync` so its fsync
    // covers only its own data (and the deletion of the previous sample's file is flushed):
    // drift in the disk's state hits every contender alike.
    type WriteFn<'a> = Box<dyn Fn(&Path) + 'a>;
    let writers: Vec<(&str, WriteFn)> = vec![
        (
            "write(2) of a ready buffer + fsync (floor)",
            Box::new(|p: &Path| {
                let mut f = File::create(p).unwrap();
                f.write_all(&buffer).unwrap();
                f.sync_all().unwrap();
            }),
        ),
        (
            "burn_pack::Writer::write_to_file (Burn 0.22)",
            Box::new(|p: &Path| burns().write_to_file(p).unwrap()),
        ),
        (
            "burnpack Writer::write_to_file (atomic, one writer thread)",
            Box::new(|p: &Path| {
                ours().write_to_file(p).unwrap();
            }),
        ),
        (
            "burnpack without checksums (atomic, one writer thread)",
            Box::new(|p: &Path| {
                ours().checksums(false).write_to_file(p).unwrap();
            }),
        ),
        (
            "burnpack, slots through a shared mapping (atomic)",
            Box::new(|p: &Path| {
                mapped_write(ours(), p);
            }),
        ),
    ];
    let mut samples = vec![Vec::new(); writers.len()];
    for run in 0..runs {
        for (i, (who, f)) in writers.iter().enumerate() {
            let out = dir.path().join(format!("w{run}-{i}.bpk"));
            let _ = std::process::Command::new("sync").status();
            let start = Instant::now();
            f(&out);
            samples[i].push(start.elapsed());
            let written = std::fs::metadata(&out).unwrap().len();
            assert!(
                written == size || written == plain_size,
                "{who} wrote {written} bytes"
            );
            if run == 0 && who.starts_with("burnpack") && !who.contains("without checksums") {
                assert_eq!(
                    std::fs::read(&out).unwrap(),
                    &buffer[..],
                    "{who}: file differs from the buffer"
                );
            }
            std::fs::rename(&out, &path).unwrap();
        }
    }
    let mut rows = Vec::new();
    for ((who, _), s) in writers.iter().zip(samples) {
        rows.push(Row {
            op: "write + fsync",
            who,
            time: common::median(s),
            bytes: size,
        });
    }

    // The work checksums add to a save: xxh3-64 over every tensor, on one thread.
    let (time, _) = time_runs(
        runs,
        || {},
        || {
            tensors
                .iter()
                .map(|t| burnpack::format::checksum(t))
                .fold(0, u64::wrapping_add)
        },
    );
    rows.push(Row {
        op: "checksum work",
        who: "xxh3-64 of every tensor, one thread (inside the write above, spread over its threads)",
        time,
        bytes: size,
    });

    let cold = drop_caches();
    for (temperature, drop) in [("cold", true), ("warm", false)] {
        if drop && !cold {
            continue;
        }
        let op = if drop {
            "open + read all (cold)"
        } else {
            "open + read all (warm)"
        };
        let setup = || {
            if drop {
                drop_caches();
            } else {
                touch(&std::fs::read(&path).unwrap());
            }
        };
        let expected = touch(&buffer[..]);
        let _ = temperature;
        let mut read = |who, f: &dyn Fn() -> u64| {
            let (time, sum) = time_runs(runs, setup, f);
            assert!(sum != 0 || expected == 0, "{who} read nothing");
            rows.push(Row {
                op,
                who,
                time,
                bytes: size,
            });
        };
        read("read(2) of the whole file (floor)", &|| {
            touch(&std::fs::read(&path).unwrap())
        });
        read("burn_pack::Reader::from_file (Burn 0.22)", &|| {
            let reader = burn_pack::Reader::from_file(&path).unwrap();
            reader
                .into_tensors()
                .unwrap()
                .iter()
                .map(|t| touch(&t.to_bytes().unwrap()))
                .fold(0, u64::wrapping_add)
        });
        read("burnpack Reader::open (mmap)", &|| {
            let reader = burnpack::read::Reader::open(&path).unwrap();
            reader
                .tensors()
                .iter()
                .map(|t| touch(&reader.read(t).unwrap()))
                .fold(0, u64::wrapping_add)
        });
        read("burnpack buffered", &|| {
            let reader = ReadOptions::new()
                .mode(ReadMode::Buffered)
                .open(&path)
                .unwrap();
            reader
                .tensors()
                .iter()
                .map(|t| touch(&reader.read(t).unwrap()))
                .fold(0, u64::wrapping_add)
        });
    }

    println!(
        "\n{count} f32 tensors of {TENSOR_MIB} MiB ({:.2} GiB), median of {runs} runs, {} threads{}\n",
        size as f64 / (1u64 << 30) as f64,
        rayon::current_num_threads(),
        if cold {
            ""
        } else {
            " (page cache could not be dropped: no cold reads)"
        }
    );
    println!("| operation | contender | median | GiB/s |");
    println!("|---|---|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} ms | {:.2} |",
            r.op,
            r.who,
            r.time.as_secs_f64() * 1e3,
            r.bytes as f64 / (1u64 << 30) as f64 / r.time.as_secs_f64()
        );
    }
}

/// The contender "slots through a shared mapping": the pack's size reserved on disk
/// (`fallocate`, so filling the mapping cannot fault on a full disk), the file mapped and
/// filled with `Writer::write_into`, flushed and fsynced, then renamed into place as the
/// atomic writer does. It lives here, not in the library: a mapping turns a full disk or a
/// truncated file into `SIGBUS`, which is why the library writes with positional writes.
fn mapped_write(writer: burnpack::write::Writer, path: &Path) {
    use std::os::fd::AsRawFd;
    let size = writer.size().unwrap();
    let scratch = path.with_extension("mapped-tmp");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&scratch)
        .unwrap();
    file.set_len(size).unwrap();
    let len = libc::off_t::try_from(size).unwrap();
    // SAFETY: a plain system call on a descriptor borrowed for its duration.
    assert_eq!(
        unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) },
        0,
        "fallocate"
    );
    // SAFETY: the scratch file was just created by this function and nobody else opens it
    // before the rename below; its blocks are reserved, so filling the mapping cannot fault.
    let mut map = unsafe { memmap2::MmapOptions::new().populate().map_mut(&file) }.unwrap();
    assert_eq!(writer.write_into(&mut map).unwrap(), size);
    map.flush().unwrap();
    drop(map);
    file.sync_all().unwrap();
    std::fs::rename(&scratch, path).unwrap();
}
