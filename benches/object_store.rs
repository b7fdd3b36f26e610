//! Packs on object storage, side by side with the floor in one run: `cargo bench --features
//! object-store --bench object_store`, against the S3 server that `AWS_ENDPOINT` points to
//! (with `AWS_ALLOW_HTTP=true` and credentials; `BURNPACK_S3_BUCKET` names an existing bucket).
//! `.ci/run` shows how to start moto's server on 127.0.0.1.
//!
//! Save: `upload` (multipart, parts following the layout) against a plain PUT of the
//! ready-made pack bytes (the floor: the same bytes, nothing produced) and against saving to a
//! local file, then putting that file. Load + read every parameter: `ObjectSource` against a
//! plain GET of the whole object (the floor) and against GET to a local file, then
//! `load_pack`. Then the bytes a filtered load fetches. Rounds interleave the contenders; rows
//! give the median (min-max) and the ratio of medians to the floor. Env:
//! `BURNPACK_BENCH_MIB` (model size, default 256), `BURNPACK_BENCH_RUNS` (default 3).

mod common;

use std::time::{Duration, Instant};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::Device;
use burnpack::interop::object_store::{ObjectLocation, ObjectSource, UploadOptions, upload};
use burnpack::module::{LoadOptions, PackModule, SaveOptions};

#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

fn model(mib: usize, device: &Device) -> Stack {
    Stack {
        layers: (0..mib / 4)
            .map(|_| LinearConfig::new(1024, 1024).init(device))
            .collect(),
    }
}

fn read_all(m: &Stack) -> u64 {
    common::read_all(m)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Ok(bucket) = std::env::var("BURNPACK_S3_BUCKET") else {
        eprintln!(
            "set AWS_ENDPOINT, AWS_ALLOW_HTTP, credentials and BURNPACK_S3_BUCKET (see .ci/run)"
        );
        return;
    };
    let mib = common::env_or("BURNPACK_BENCH_MIB", 256);
    let runs = common::env_or("BURNPACK_BENCH_RUNS", 3);
    let device = Device::flex();
    let dir = common::bench_dir();
    let m = model(mib, &device);
    read_all(&m);
    let bytes = m.to_pack_bytes().unwrap().to_vec();
    let size = bytes.len();
    let at =
        |name: &str| ObjectLocation::parse(&format!("s3://{bucket}/bench/{name}.bpk")).unwrap();
    let local = dir.path().join("local.bpk");

    type Op<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let saves: Vec<Op> = vec![
        (
            "PUT of the ready bytes (floor)",
            Box::new(|| at("floor").put_all(bytes.clone()).unwrap()),
        ),
        (
            "burnpack `upload` (multipart)",
            Box::new(|| {
                upload(
                    m.pack_writer(&SaveOptions::new()).unwrap(),
                    &at("pack"),
                    &UploadOptions::new(),
                )
                .unwrap();
            }),
        ),
        (
            "`save_pack` to a local file, then PUT it",
            Box::new(|| {
                m.save_pack(&local).unwrap();
                at("file").put_all(std::fs::read(&local).unwrap()).unwrap();
            }),
        ),
    ];
    let loads: Vec<Op> = vec![
        (
            "GET of the whole object (floor)",
            Box::new(|| {
                std::hint::black_box(at("pack").read_all().unwrap());
            }),
        ),
        (
            "burnpack `ObjectSource` + load + read",
            Box::new(|| {
                let source = ObjectSource::open(&at("pack")).unwrap();
                let loaded = model(mib, &device)
                    .load_from_source(&source, &LoadOptions::new())
                    .unwrap();
                std::hint::black_box(read_all(&loaded));
            }),
        ),
        (
            "burnpack `ObjectSource` + load (no read)",
            Box::new(|| {
                let source = ObjectSource::open(&at("pack")).unwrap();
                let loaded = model(mib, &device)
                    .load_from_source(&source, &LoadOptions::new())
                    .unwrap();
                std::hint::black_box(loaded);
            }),
        ),
        (
            "GET to a local file, then `load_pack` + read",
            Box::new(|| {
                std::fs::write(&local, at("pack").read_all().unwrap()).unwrap();
                let loaded = model(mib, &device).load_pack(&local).unwrap();
                std::hint::black_box(read_all(&loaded));
            }),
        ),
    ];
    println!(
        "| {} MiB pack | operation | contender | time, ms: median (min-max) | x floor |",
        size >> 20
    );
    println!("|---|---|---|---:|---:|");
    for (op, contenders) in [("save", &saves), ("load", &loads)] {
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); contenders.len()];
        for round in 0..runs {
            for k in 0..contenders.len() {
                let i = (round + k) % contenders.len();
                let start = Instant::now();
                (contenders[i].1)();
                samples[i].push(start.elapsed());
            }
        }
        let floor = common::median(samples[0].clone()).as_secs_f64();
        for ((name, _), own) in contenders.iter().zip(&samples) {
            let med = common::median(own.clone()).as_secs_f64();
            println!(
                "| | {op} | {name} | {} | {:.2} |",
                common::spread(own),
                med / floor
            );
        }
    }
    // A filtered load: what travels.
    let source = ObjectSource::open(&at("pack")).unwrap();
    let head = source.fetched_bytes();
    let options = LoadOptions::new().filter(|p| p.starts_with("layers.0."));
    let _ = model(mib, &device)
        .load_from_source(&source, &options)
        .unwrap();
    println!(
        "\nfiltered load of `layers.0.*`: opening fetched {head} bytes in 2 requests; the load {} bytes in {} more request(s), of a {size}-byte object",
        source.fetched_bytes() - head,
        source.requests() - 2
    );
}
