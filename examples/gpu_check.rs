//! Loads a pack of about 1 GiB of f32 into wgpu (Vulkan), checks the values and prints the
//! upload throughput. Built beforehand with
//! `cargo build --release --features wgpu --example gpu_check`, run by `scripts/gpu-check.sh`.
//!
//! `gpu_check [MIB] [discrete|integrated|default]` (default 1024 MiB on the default device).

use std::time::Instant;

use burn::module::{Module, Param, ParamId};
use burn::tensor::{Bytes, DType, Device, DeviceKind, Tensor};
use burnpack::module::PackModule;
use burnpack::{Entry, Writer};

const ROWS: usize = 4096;
const COLS: usize = 4096; // 64 MiB per tensor: under lavapipe's 128 MiB buffer limit

#[derive(Module, Debug)]
struct Big {
    layers: Vec<Param<Tensor<2>>>,
}

fn value(layer: usize, i: usize) -> f32 {
    (layer * 31 + i % 977) as f32 * 0.5
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).map_or(Ok(1024), |s| s.parse())?;
    let kind = match args.get(2).map(String::as_str) {
        Some("discrete") => DeviceKind::DiscreteGpu(0),
        Some("integrated") => DeviceKind::IntegratedGpu(0),
        _ => DeviceKind::DefaultDevice,
    };
    let layers = (mib / 64).max(1);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gpu-check.bpk");
    let entries = (0..layers)
        .map(|l| {
            Entry::deferred(
                format!("layers.{l}"),
                DType::F32,
                vec![ROWS, COLS],
                (ROWS * COLS * 4) as u64,
                move || {
                    Ok(Bytes::from_elems(
                        (0..ROWS * COLS).map(|i| value(l, i)).collect::<Vec<f32>>(),
                    ))
                },
            )
        })
        .collect();
    let size = Writer::new(entries).write_to_file(&path)?;
    println!("wrote {} MiB in {layers} tensors of 64 MiB", size >> 20);

    let device = Device::wgpu(kind);
    let lazy = Big {
        layers: (0..layers)
            .map(|_| {
                let init = |d: &Device, _| Tensor::zeros([ROWS, COLS], d);
                Param::uninitialized(
                    ParamId::new(),
                    init,
                    device.clone(),
                    false,
                    [ROWS, COLS].into(),
                )
            })
            .collect(),
    };
    // Warm the device up so adapter creation is not counted as upload time.
    Tensor::<1>::from_data([0.0f32], &device).into_data();
    let start = Instant::now();
    let loaded = lazy.load_pack(&path)?;
    let handles: Vec<Tensor<2>> = loaded.layers.iter().map(Param::val).collect();
    device.sync().map_err(|e| format!("{e:?}"))?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "uploaded {} MiB to {device:?} in {:.3} s: {:.2} GiB/s",
        size >> 20,
        secs,
        size as f64 / secs / f64::from(1u32 << 30)
    );

    for (l, t) in handles.iter().enumerate() {
        let back: Vec<f32> = t
            .clone()
            .slice([ROWS - 2..ROWS, 0..COLS])
            .into_data()
            .try_to_vec()
            .map_err(|e| format!("{e:?}"))?;
        let expected: Vec<f32> = ((ROWS - 2) * COLS..ROWS * COLS)
            .map(|i| value(l, i))
            .collect();
        if back != expected {
            return Err(format!("layers.{l}: values read back from the device differ").into());
        }
    }
    println!("values checked on every tensor: OK");
    Ok(())
}
