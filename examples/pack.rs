//! Writes a pack of deferred f32 tensors in parallel, reads it back memory-mapped, checks
//! every value and prints what happened.
//!
//! `cargo run --release --example pack [-- PATH]`

use std::time::Instant;

use burn::tensor::{Bytes, DType};
use burnpack::read::Reader;
use burnpack::write::{Entry, Writer};

fn values(layer: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (layer * 1_000_003 + i) as f32 * 1e-3)
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| dir.path().join("example.bpk"), Into::into);

    // Eight 1024x1024 f32 layers (32 MiB) plus biases; weights are produced only when written.
    let (rows, cols, layers) = (1024, 1024, 8);
    let mut entries = Vec::new();
    for layer in 0..layers {
        let n = rows * cols;
        entries.push(
            Entry::deferred(
                format!("layers.{layer}.weight"),
                DType::F32,
                vec![rows, cols],
                (n * 4) as u64,
                move || Ok(Bytes::from_elems(values(layer, n))),
            )
            .with_param_id(layer as u64 * 2),
        );
        entries.push(
            Entry::resident(
                format!("layers.{layer}.bias"),
                DType::F32,
                vec![cols],
                Bytes::from_elems(values(layer, cols)),
            )
            .with_param_id(layer as u64 * 2 + 1),
        );
    }

    let start = Instant::now();
    let size = Writer::new(entries)
        .metadata("producer", concat!("burnpack ", env!("CARGO_PKG_VERSION")))
        .scalar("layers", layers)
        .write_to_file(&path)?;
    let write_time = start.elapsed();
    println!(
        "wrote {} ({:.1} MiB) atomically in {:.1} ms",
        path.display(),
        size as f64 / 1048576.0,
        write_time.as_secs_f64() * 1e3
    );

    let start = Instant::now();
    let reader = Reader::open(&path)?;
    let open_time = start.elapsed();
    println!(
        "opened it (header and metadata only) in {:.3} ms: {} tensors, metadata {:?}",
        open_time.as_secs_f64() * 1e3,
        reader.tensors().len(),
        reader.metadata()
    );
    println!(
        "{:<20} {:>6} {:>12} {:>10} {:>10}  zero-copy",
        "tensor", "dtype", "shape", "offset", "param id"
    );
    for info in reader.tensors_by_position().take(4) {
        println!(
            "{:<20} {:>6} {:>12} {:>10} {:>10}  {}",
            info.name(),
            info.dtype().name(),
            format!("{:?}", info.shape()),
            info.offset(),
            info.param_id().unwrap_or_default(),
            reader.is_zero_copy(info)
        );
    }
    println!("... ({} more)", reader.tensors().len().saturating_sub(4));

    let start = Instant::now();
    let mut checked = 0usize;
    for layer in 0..layers {
        for (name, n) in [
            (format!("layers.{layer}.weight"), rows * cols),
            (format!("layers.{layer}.bias"), cols),
        ] {
            let bytes = reader.bytes(&name)?;
            let stored: &[f32] = bytemuck::cast_slice(&bytes);
            if stored != values(layer, n).as_slice() {
                return Err(format!("{name}: values differ from what was written").into());
            }
            checked += n;
        }
    }
    println!(
        "read back and checked {checked} values in {:.1} ms: all equal",
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
