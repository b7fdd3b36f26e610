use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use burnpack::module::PackModule;
use std::time::Instant;
#[derive(Module, Debug)]
struct Stack { layers: Vec<Linear> }
#[derive(Default)]
struct ReadAll(u64);
impl ModuleVisitor for ReadAll {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let data = param.val().into_data();
        self.0 += data.as_bytes().len() as u64;
    }
}
struct V(u8, u64, Vec<Box<dyn FnOnce() -> u64>>, Vec<burn::tensor::Bytes>, Vec<String>);
impl ModuleVisitor for V {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        match self.0 {
            0 => {}
            1 => { let t = param.val(); self.1 += t.dtype().size() as u64; }
            2 => { let t = param.transform_for_save().val(); self.1 += t.dtype().size() as u64; }
            3 => { let t = param.transform_for_save().val(); self.1 += t.shape().num_elements() as u64; }
            4 => { let (_, _, m) = param.clone().consume(); let t = m.on_save(param.val()); self.1 += t.dims()[0] as u64; }
            5 => { let p = param.clone(); self.1 += p.id.val(); }
            7 => { let (_, _, m) = param.clone().consume(); let t = m.on_save(param.val()); let d = t.into_dispatch(); self.1 += matches!(d.kind, burn::backend::DispatchTensorKind::Flex(_)) as u64; }
            8 => { let (_, _, m) = param.clone().consume(); let t = m.on_save(param.val()); let b = burn::tensor::Bytes::from_shared(bytes::Bytes::from_owner(vec![0u8; 4]), burn::tensor::AllocationProperty::Other); self.1 += t.dims()[0] as u64 + b.len() as u64; self.3.push(b); }
            9 => { let (_, _, m) = param.clone().consume(); let t = m.on_save(param.val()); self.1 += t.dims()[0] as u64; self.4.push(format!("layers.{}.weight", self.1)); }
            _ => { let (_, _, m) = param.clone().consume(); let t = m.on_save(param.val()); self.1 += t.dims()[0] as u64; self.2.push(Box::new(move || t.dims()[0] as u64)); }
        }
    }
}
fn main() {
    let op = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).unwrap().parse().unwrap();
    let device = Device::flex();
    let m = Stack { layers: (0..5000).map(|_| LinearConfig::new(8, 8).init(&device)).collect() };
    let path = "/tmp/bb/prof.bpk";
    m.save_pack(path).unwrap();
    let file = std::fs::read(path).unwrap();
    let h = burnpack::format::Header::parse(&file[..10]).unwrap();
    let meta = &file[10..10 + h.metadata_size as usize].to_vec();
    let meta = &meta[..meta.len()];
    let start = Instant::now();
    for _ in 0..n {
        match op.as_str() {
            "save" => { m.save_pack(path).unwrap(); }
            "entries" => { std::hint::black_box(m.pack_entries().unwrap()); }
            "plan" => { std::hint::black_box(burnpack::Writer::new(m.pack_entries().unwrap()).size().unwrap()); }
            "bytes" => { std::hint::black_box(m.pack_writer(&Default::default()).unwrap().into_bytes().unwrap()); }
            "open" => { std::hint::black_box(burnpack::read::Reader::open(path).unwrap()); }
            "load" => { std::hint::black_box(m.clone().load_pack(path).unwrap()); }
            "loadread" => { let l = m.clone().load_pack(path).unwrap(); let mut r = ReadAll::default(); l.visit(&mut r); std::hint::black_box(r.0); }
            "v0" | "v1" | "v2" | "v3" | "v4" | "v5" | "v6" | "v7" | "v8" | "v9" => { let mut v = V(op.as_bytes()[1] - b'0', 0, Vec::new(), Vec::new(), Vec::new()); m.visit(&mut v); std::hint::black_box(v.1); }
            "decode" => { std::hint::black_box(burnpack::format::Metadata::decode(meta, &Default::default()).unwrap()); }
            "layout" => { std::hint::black_box(burnpack::format::Layout::from_bytes(&file, &Default::default()).unwrap()); }
            "stages" => {
                let t = Instant::now();
                let e = m.pack_entries().unwrap();
                let a = t.elapsed();
                let w = burnpack::Writer::new(e).checksums(true).with_metadata("producer", "burnpack 0.1.0");
                let t = Instant::now();
                let _ = w.size().unwrap();
                let b = t.elapsed();
                let t = Instant::now();
                w.write_to_file(path).unwrap();
                let c = t.elapsed();
                let t = Instant::now();
                let r = burnpack::read::Reader::open(path).unwrap();
                let d = t.elapsed();
                let t = Instant::now();
                let l = m.clone().load_pack_reader(&r, &Default::default()).unwrap();
                let e = t.elapsed();
                let t = Instant::now();
                let mut rr = ReadAll::default(); l.visit(&mut rr);
                let f = t.elapsed();
                println!("entries {:.1} plan {:.1} write {:.1} | open {:.1} apply {:.1} read {:.1}", a.as_secs_f64()*1e3, b.as_secs_f64()*1e3, c.as_secs_f64()*1e3, d.as_secs_f64()*1e3, e.as_secs_f64()*1e3, f.as_secs_f64()*1e3);
            }
            "supports" => { let mut k = 0; for _ in 0..10000 { k += device.supports_dtype(burn::tensor::DType::F32) as u64; } std::hint::black_box(k); }
            "lazydev" => { let mut k = 0; for l in &m.layers { let d = l.weight.lazy_device(); let s = l.weight.lazy_shape(); k += s.num_dims() as u64 + (d == device) as u64; } std::hint::black_box(k); }
            "read" => { let mut r = ReadAll::default(); m.visit(&mut r); std::hint::black_box(r.0); }
            _ => panic!(),
        }
    }
    println!("{op}: {:.2} ms per op", start.elapsed().as_secs_f64() * 1e3 / n as f64);
}
