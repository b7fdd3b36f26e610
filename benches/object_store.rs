//! Packs on object storage, side by side with the floor in one run: `cargo bench --features
//! object-store --bench object_store`, against the S3 server that `AWS_ENDPOINT` points to
//! (with `AWS_ALLOW_HTTP=true` and credentials; `BURNPACK_S3_BUCKET` names an existing bucket).
//! `.ci/run` shows how to build and start s3s-fs on 127.0.0.1.
//!
//! Save: `upload` (multipart, parts following the layout) against a plain PUT of the
//! ready-made pack bytes (the floor: the same bytes, nothing produced), against
//! `object_store`'s own multipart writer on those bytes (16 MiB parts, 4 in flight: what any
//! multipart upload costs on this server) and against saving to a local file, then putting
//! that file. Load + read every parameter: `ObjectSource` against a
//! plain GET of the whole object (the floor) and against GET to a local file, then
//! `load_pack`. Then the bytes a filtered load fetches. Rounds interleave the contenders; rows
//! give the median (min-max), the ratio of medians to the floor and the largest rise of peak
//! resident memory over the start of the operation in any round (a load's includes the
//! loaded model, which it keeps). Env:
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
    // object_store's own multipart writer, for the multipart floor: the same ready bytes in
    // parts of the size `upload` uses, as many in flight.
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(&bucket)
        .build()
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let multipart_floor = || {
        runtime.block_on(async {
            let path = object_store::path::Path::from("bench/multipart.bpk");
            let upload = object_store::ObjectStoreExt::put_multipart(&store, &path)
                .await
                .unwrap();
            let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, 16 << 20);
            for chunk in bytes.chunks(16 << 20) {
                writer.wait_for_capacity(4).await.unwrap();
                writer.write(chunk);
            }
            writer.finish().await.unwrap();
        });
    };

    type Op<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let saves: Vec<Op> = vec![
        (
            "PUT of the ready bytes (floor)",
            Box::new(|| at("floor").put_all(bytes.clone()).unwrap()),
        ),
        (
            "multipart PUT of the ready bytes (`WriteMultipart`)",
            Box::new(multipart_floor),
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
    let remote_load = || {
        let source = ObjectSource::open(&at("pack")).unwrap();
        model(mib, &device)
            .load_from_source(&source, &LoadOptions::new())
            .unwrap()
    };
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
                std::hint::black_box(read_all(&remote_load()));
            }),
        ),
        (
            "burnpack `ObjectSource` + load (no read)",
            Box::new(|| {
                std::hint::black_box(remote_load());
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
        "| {} MiB pack | operation | contender | time, ms: median (min-max) | x floor | peak memory, MiB over the start |",
        size >> 20
    );
    println!("|---|---|---|---:|---:|---:|");
    for (op, contenders) in [("save", &saves), ("load", &loads)] {
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); contenders.len()];
        let mut peaks: Vec<u64> = vec![0; contenders.len()];
        for round in 0..runs {
            for k in 0..contenders.len() {
                let i = (round + k) % contenders.len();
                // The peak resident size from here on is this operation's own (Linux).
                let _ = std::fs::write("/proc/self/clear_refs", "5");
                let base = common::resident_kib();
                let start = Instant::now();
                (contenders[i].1)();
                samples[i].push(start.elapsed());
                peaks[i] = peaks[i].max(common::peak_kib().saturating_sub(base));
            }
        }
        let floor = common::median(samples[0].clone()).as_secs_f64();
        for (((name, _), own), peak) in contenders.iter().zip(&samples).zip(&peaks) {
            let med = common::median(own.clone()).as_secs_f64();
            println!(
                "| | {op} | {name} | {} | {:.2} | {} |",
                common::spread(own),
                med / floor,
                peak >> 10
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
