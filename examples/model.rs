//! The main job: builds a real Burn model, saves it with burnpack, loads it into a fresh
//! instance, checks every value and parameter id, and prints the timings next to Burn's own
//! `save_file` / `load_file`.
//!
//! `cargo run --release --example model`

use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burnpack::module::{PackModule, SaveOptions};
use burnpack::read::Reader;

#[derive(Module, Debug)]
struct Block {
    linear: Linear,
    norm: LayerNorm,
}

#[derive(Module, Debug)]
struct Mlp {
    input: Linear,
    blocks: Vec<Block>,
    output: Linear,
}

impl Mlp {
    fn new(width: usize, depth: usize, device: &Device) -> Self {
        Self {
            input: LinearConfig::new(256, width).init(device),
            blocks: (0..depth)
                .map(|_| Block {
                    linear: LinearConfig::new(width, width).init(device),
                    norm: LayerNormConfig::new(width).init(device),
                })
                .collect(),
            output: LinearConfig::new(width, 10).init(device),
        }
    }
}

/// Every float parameter: (id, values).
#[derive(Default)]
struct Values(Vec<(u64, Vec<f32>)>);

impl ModuleVisitor for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push((
            param.id.val(),
            param.val().into_data().try_to_vec().unwrap(),
        ));
    }
}

fn values(model: &Mlp) -> Vec<(u64, Vec<f32>)> {
    let mut v = Values::default();
    model.visit(&mut v);
    v.0
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    let dir = tempfile::tempdir()?;
    let (width, depth) = (1024, 16);

    let start = Instant::now();
    let model = Mlp::new(width, depth, &device);
    let expected = values(&model); // initializes every (lazy) parameter
    let params: usize = expected.iter().map(|(_, v)| v.len()).sum();
    println!(
        "built an MLP of {} parameters ({:.0} MiB f32) in {:.0} ms",
        expected.len(),
        (params * 4) as f64 / 1048576.0,
        ms(start)
    );

    let path = dir.path().join("mlp.bpk");
    let start = Instant::now();
    let size = model.save_pack_with(
        &path,
        &SaveOptions::new()
            .metadata("model", "mlp")
            .scalar("depth", depth),
    )?;
    let save_ms = ms(start);
    println!(
        "burnpack: saved {} ({:.1} MiB, atomic + fsync) in {save_ms:.0} ms",
        path.display(),
        size as f64 / 1048576.0
    );

    let reader = Reader::open(&path)?;
    println!(
        "          {} tensors; metadata {:?}; first by position: {}",
        reader.tensors().len(),
        reader.metadata(),
        reader
            .tensors_by_position()
            .next()
            .map_or("-", |t| t.name())
    );

    let start = Instant::now();
    let loaded = Mlp::new(width, depth, &device).load_pack(&path)?;
    let open_ms = ms(start);
    let got = values(&loaded);
    let load_ms = ms(start);
    if got != expected {
        return Err("loaded values or parameter ids differ from the saved model".into());
    }
    println!(
        "burnpack: loaded into a fresh (lazy) instance in {open_ms:.1} ms (zero-copy views of the mapping), {load_ms:.0} ms with every value read back; all {} parameters and ids equal",
        got.len()
    );

    let burn_path = dir.path().join("burn.bpk");
    let start = Instant::now();
    model.clone().save_file(&burn_path)?;
    let burn_save_ms = ms(start);
    let start = Instant::now();
    let burn_loaded = Mlp::new(width, depth, &device).try_load_file(&burn_path)?;
    let burn_values = values(&burn_loaded);
    let burn_load_ms = ms(start);
    if burn_values != expected {
        return Err("Burn's own round trip differs".into());
    }
    // The files are interchangeable: Burn loads ours, we load Burn's.
    let cross = Mlp::new(width, depth, &device).try_load_file(&path)?;
    let cross_back = Mlp::new(width, depth, &device).load_pack(&burn_path)?;
    if values(&cross) != expected || values(&cross_back) != expected {
        return Err("cross-loading between burnpack and Burn failed".into());
    }
    println!(
        "Burn 0.22: save_file {burn_save_ms:.0} ms, load_file with every value read back {burn_load_ms:.0} ms; each loads the other's file"
    );
    println!(
        "burnpack vs Burn: save {:.1}x faster, load + read {:.1}x faster",
        burn_save_ms / save_ms,
        burn_load_ms / load_ms
    );
    Ok(())
}
