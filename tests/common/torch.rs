//! A writer of `torch.save` files for tests and benchmarks: the zip layout PyTorch 2 writes
//! (`archive/data.pkl`, pickle protocol 2, and one stored entry per storage, aligned to 64
//! bytes), with knobs to break it on purpose. The pickle is the one `torch.save` writes for an
//! `OrderedDict` of tensors: `_rebuild_tensor_v2(persistent_load(('storage', torch.<T>Storage,
//! key, 'cpu', numel)), offset, size, stride, False, OrderedDict())`.

use std::io::Write;
use std::path::Path;

/// One tensor: a view of storage `storage` (an index into the storages given with it).
#[derive(Clone, Debug)]
pub struct View {
    pub name: String,
    pub storage: usize,
    pub offset: u64,
    pub shape: Vec<u64>,
    pub stride: Vec<u64>,
}

impl View {
    /// A contiguous view of a whole storage.
    pub fn whole(name: &str, storage: usize, shape: &[u64]) -> Self {
        let mut stride = vec![1u64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            stride[d] = stride[d + 1] * shape[d + 1];
        }
        Self {
            name: name.to_string(),
            storage,
            offset: 0,
            shape: shape.to_vec(),
            stride,
        }
    }
}

/// A storage: its `torch.<kind>` type name (`FloatStorage`), element size and bytes.
#[derive(Clone, Debug)]
pub struct StorageSpec {
    pub kind: &'static str,
    pub element: u64,
    pub bytes: Vec<u8>,
}

impl StorageSpec {
    pub fn f32(values: &[f32]) -> Self {
        Self {
            kind: "FloatStorage",
            element: 4,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// Pickle opcodes, as `torch.save` (protocol 2) writes them.
pub struct Pickler(pub Vec<u8>);

impl Pickler {
    pub fn new() -> Self {
        Self(vec![0x80, 2])
    }
    pub fn op(&mut self, op: &[u8]) -> &mut Self {
        self.0.extend_from_slice(op);
        self
    }
    pub fn global(&mut self, module: &str, name: &str) -> &mut Self {
        self.0.push(b'c');
        self.0
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    pub fn int(&mut self, v: u64) -> &mut Self {
        if v < (1 << 31) {
            self.0.push(b'J');
            self.0.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.0.extend_from_slice(&[0x8a, 8]);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }
    pub fn tuple_of(&mut self, values: &[u64]) -> &mut Self {
        self.0.push(b'(');
        for &v in values {
            self.int(v);
        }
        self.0.push(b't');
        self
    }
    /// `_rebuild_tensor_v2(...)` of `view` over a storage of `numel` elements of `kind`.
    pub fn tensor(&mut self, view: &View, kind: &str, numel: u64) -> &mut Self {
        self.global("torch._utils", "_rebuild_tensor_v2");
        self.tensor_args(view, kind, numel).op(b"R")
    }
    /// The argument tuple of `_rebuild_tensor_v2`: `(storage, offset, size, stride, False,
    /// OrderedDict())`, the storage a persistent id.
    pub fn tensor_args(&mut self, view: &View, kind: &str, numel: u64) -> &mut Self {
        self.0.push(b'(');
        self.0.push(b'(');
        self.str("storage").global("torch", kind);
        self.str(&view.storage.to_string()).str("cpu").int(numel);
        self.0.extend_from_slice(b"tQ");
        self.int(view.offset)
            .tuple_of(&view.shape)
            .tuple_of(&view.stride);
        self.0.push(0x89);
        self.global("collections", "OrderedDict").op(b")R");
        self.0.push(b't');
        self
    }
    /// An `OrderedDict` of `views`.
    pub fn state_dict(&mut self, storages: &[StorageSpec], views: &[View]) -> &mut Self {
        self.global("collections", "OrderedDict").op(b")R").op(b"(");
        for view in views {
            let s = &storages[view.storage];
            self.str(&view.name)
                .tensor(view, s.kind, s.bytes.len() as u64 / s.element);
        }
        self.op(b"u")
    }
    pub fn finish(&mut self) -> Vec<u8> {
        self.0.push(b'.');
        std::mem::take(&mut self.0)
    }
}

/// How to write the archive.
#[derive(Clone, Copy, Debug)]
pub struct ZipOptions {
    pub align: u16,
    pub deflate_pickle: bool,
    pub deflate_storages: bool,
}

impl Default for ZipOptions {
    fn default() -> Self {
        Self {
            align: 64,
            deflate_pickle: false,
            deflate_storages: false,
        }
    }
}

/// Writes a zip `torch.save` file of `pickle` and `storages` (entry `archive/data/<i>`).
pub fn write_zip(path: &Path, pickle: &[u8], storages: &[StorageSpec], options: ZipOptions) {
    use zip::write::SimpleFileOptions;
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(file));
    let entry = |deflate: bool| {
        let o = SimpleFileOptions::default().large_file(true);
        if deflate {
            o.compression_method(zip::CompressionMethod::Deflated)
        } else {
            o.compression_method(zip::CompressionMethod::Stored)
                .with_alignment(options.align)
        }
    };
    zip.start_file("archive/data.pkl", entry(options.deflate_pickle))
        .unwrap();
    zip.write_all(pickle).unwrap();
    zip.start_file("archive/byteorder", entry(false)).unwrap();
    zip.write_all(b"little").unwrap();
    for (i, s) in storages.iter().enumerate() {
        zip.start_file(format!("archive/data/{i}"), entry(options.deflate_storages))
            .unwrap();
        zip.write_all(&s.bytes).unwrap();
    }
    zip.start_file("archive/version", entry(false)).unwrap();
    zip.write_all(b"3\n").unwrap();
    zip.finish().unwrap().flush().unwrap();
}

/// A state dict of `views` over `storages`, written as `torch.save` writes it.
pub fn save(path: &Path, storages: &[StorageSpec], views: &[View]) {
    let pickle = Pickler::new().state_dict(storages, views).finish();
    write_zip(path, &pickle, storages, ZipOptions::default());
}

/// The legacy (before 1.6) `torch.save` container: the magic number, the protocol, the system
/// info, `object` (a pickle), the storage keys, then each storage as its element count and
/// its bytes.
pub fn legacy_file(path: &Path, object: &[u8], storages: &[StorageSpec]) {
    let mut out = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec();
    out.extend_from_slice(b"\x80\x02M\xe9\x03.\x80\x02}.");
    out.extend_from_slice(object);
    let mut keys = Pickler::new();
    keys.op(b"(");
    for i in 0..storages.len() {
        keys.str(&i.to_string());
    }
    out.extend(keys.op(b"l").finish());
    for s in storages {
        out.extend_from_slice(&(s.bytes.len() as u64 / s.element).to_le_bytes());
        out.extend_from_slice(&s.bytes);
    }
    std::fs::write(path, out).unwrap();
}

/// `OrderedDict([[name, tensor], ...])`: how Python 2-era `torch.save` files (and weights
/// still shipped in packages) pickle a state dict: the items as the one argument, each a
/// list (or, with `pair = b"t"`, a tuple) of two.
pub fn ordered_dict_of_pairs(storages: &[StorageSpec], views: &[View], pair: &[u8]) -> Vec<u8> {
    let mut p = Pickler::new();
    p.global("collections", "OrderedDict").op(b"((");
    for view in views {
        let s = &storages[view.storage];
        p.op(b"(")
            .str(&view.name)
            .tensor(view, s.kind, s.bytes.len() as u64 / s.element)
            .op(pair);
    }
    p.op(b"ltR").finish()
}
