//! Saving copies no tensor bytes on the CPU backends: the peak resident memory of a save of
//! a 64 MiB model grows by far less than one of its 16 MiB tensors, on flex, ndarray and an
//! autodiff flex model; a parameter that flex holds as a transposed view takes the read-back
//! route, and the same measurement sees its copy.
//!
//! One test in its own binary, so no other test allocates while memory is measured. (On
//! Linux the writer's staging windows, 4 MiB per job in flight for this file, are allowed for:
//! a window is not a tensor.)

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};
use burnpack::module::PackModule;
use burnpack::read::Reader;

const ROWS: usize = 2048;
const COLS: usize = 2048; // 16 MiB of f32 per layer
const LAYERS: usize = 4;

#[derive(Module, Debug)]
struct Big {
    layers: Vec<Param<Tensor<2>>>,
}

fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// How far the resident size rose above its level before `f` while `f` ran, in bytes.
fn peak_growth(f: impl FnOnce()) -> u64 {
    // Linux: resets the peak (VmHWM) to the current resident size.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    f();
    status_kib("VmHWM:").saturating_sub(before) << 10
}

fn model(device: &Device, transposed: bool) -> Big {
    Big {
        layers: (0..LAYERS)
            .map(|l| {
                let t = Tensor::<2>::ones([ROWS, COLS], device).mul_scalar(l as f32 + 1.0);
                Param::from_tensor(if transposed { t.transpose() } else { t })
            })
            .collect(),
    }
}

#[test]
fn saving_64_mib_copies_no_tensor_bytes() {
    let dir = tempfile::tempdir().unwrap();
    #[allow(deprecated)] // burn-ndarray is deprecated in Burn 0.22, still supported and tested
    let devices = [
        ("flex", Device::flex()),
        ("ndarray", Device::ndarray()),
        ("flex autodiff", Device::flex().autodiff()),
    ];
    for (label, device) in devices {
        let m = model(&device, false);
        let path = dir.path().join("m.bpk");
        let grown = peak_growth(|| {
            m.save_pack(&path).unwrap();
        });
        println!("{label}: save peak grew by {} KiB", grown >> 10);
        // Linux writes a file this large past the page cache, each worker through a staging
        // window of a sixteenth of the file in huge pages (4 MiB here), one per job in flight
        // (each layer is one): bounded by the threads, never by a tensor.
        let stages = if cfg!(target_os = "linux") {
            rayon::current_num_threads().min(LAYERS) as u64 * (4 << 20)
        } else {
            0
        };
        assert!(
            grown < (4 << 20) + stages,
            "{label}: saving a 64 MiB model raised the peak by {} KiB",
            grown >> 10
        );
        // What was written is the parameters' values.
        let reader = Reader::open(&path).unwrap();
        for l in 0..LAYERS {
            let bytes = reader.bytes(&format!("layers.{l}")).unwrap();
            let last: [u8; 4] = bytes[bytes.len() - 4..].try_into().unwrap();
            assert_eq!(f32::from_le_bytes(last), l as f32 + 1.0);
        }
    }

    // What Burn's own `into_data` costs on a parameter (the route without this crate's
    // backend features): flex copies a shared storage into a `Vec<u8>`, and Burn's `Bytes`
    // copies that again into an aligned allocation unless the allocator happened to align it.
    for (label, device) in [
        ("flex", Device::flex()),
        ("flex autodiff", Device::flex().autodiff()),
    ] {
        let m = model(&device, false);
        let grown = peak_growth(|| drop(std::hint::black_box(m.layers[0].val().into_data())));
        println!(
            "{label}: Burn's into_data of one 16 MiB parameter raised the peak by {} KiB",
            grown >> 10
        );
        // At least most of one 16 MiB copy (the allocator may cover a little of it with slack
        // it already holds: 15.8 MiB was seen once for flex autodiff).
        assert!(grown >= 12 << 20, "{label}: {} KiB", grown >> 10);
    }

    // The control: flex cannot lend a transposed view's storage as the parameter's bytes, so
    // those are read back (a copy per tensor), and the measurement sees it.
    let m = model(&Device::flex(), true);
    let path = dir.path().join("t.bpk");
    let grown = peak_growth(|| {
        m.save_pack(&path).unwrap();
    });
    println!(
        "flex, transposed views: save peak grew by {} KiB",
        grown >> 10
    );
    assert!(
        grown >= 16 << 20,
        "a copying save raised the peak by only {} KiB",
        grown >> 10
    );
}
