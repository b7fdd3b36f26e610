//! `PyTorch` `torch.save` files (`.pt`, `.pth`, `.ckpt`, a `.bin` that is one, and
//! `pytorch_model.bin.index.json`) in `inspect` and `verify`; `convert` writes them as packs or
//! safetensors (`convert.rs`), `diff` reads them through `open.rs`.

use burnpack::format::TensorInfo;
use burnpack::interop::pytorch::{PytorchError, PytorchOptions, PytorchSource};
use burnpack::read::TensorSource;
use regex::Regex;
use serde_json::json;
use std::path::Path;

use crate::Failure;
use crate::print::*;
use crate::scan::{Scan, scan};

/// Whether `path` names `torch.save` weights: by extension, or a `.bin` whose first bytes are
/// a zip archive's or a pickle's (Burn's bincode records are `.bin` too).
pub(crate) fn is_pytorch(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    if [
        ".pt",
        ".pth",
        ".ckpt",
        ".bin.index.json",
        ".pt.index.json",
        ".pth.index.json",
    ]
    .iter()
    .any(|ext| name.ends_with(ext))
    {
        return true;
    }
    if !name.ends_with(".bin") {
        return false;
    }
    let mut head = [0u8; 4];
    burnpack::read::open_regular_file(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| head == *b"PK\x03\x04" || head[0] == 0x80 && (2..=5).contains(&head[1]))
}

/// `--key`: where the state dict is in a torch.save file, for every command.
pub(crate) static KEY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

fn open_source(path: &Path) -> Result<PytorchSource, PytorchError> {
    let mut options = PytorchOptions::new();
    if let Some(key) = KEY.get().cloned().flatten() {
        options = options.key(key);
    }
    PytorchSource::open_with(path, &options)
}

pub(crate) fn open(path: &Path) -> Result<PytorchSource, Failure> {
    open_source(path).map_err(Failure::file)
}

/// `inspect`: the container, where the state dict was, the globals the pickle references,
/// totals, the tensors (with why a load would copy one).
pub(crate) fn inspect(path: &Path, as_json: bool, filter: Option<&Regex>) -> Result<u8, Failure> {
    let source = open(path)?;
    let tensors = source.tensors();
    let census = Census::of(tensors);
    let shown = matching(tensors.iter(), filter);
    let copy = |t: &TensorInfo| source.copy_reason(t).map(|r| r.to_string());
    if as_json {
        let out = json!({
            "file": path.display().to_string(),
            "format": format!("{:?}", source.format()),
            "shards": source.shards().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "key": source.key(),
            "unread_keys": source.unread_keys(),
            "globals": source.globals(),
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "tensors": shown.iter().map(|t| {
                let mut row = tensor_json(t);
                row["copied"] = json!(copy(t));
                row
            }).collect::<Vec<_>>(),
        });
        print_json(&out);
        return Ok(0);
    }
    println!(
        "{}: PyTorch torch.save file ({:?}{}), {} of tensor data",
        path.display(),
        source.format(),
        match source.shards().len() {
            1 => String::new(),
            n => format!(", {n} shards"),
        },
        mib(census.data_bytes)
    );
    if let Some(key) = source.key() {
        println!("state dict: under '{key}'");
    }
    if !source.unread_keys().is_empty() {
        println!(
            "not read (tensors under other top-level keys; --key KEY reads one): {}",
            source.unread_keys().join(", ")
        );
    }
    println!("globals: {}", source.globals().join(", "));
    census.print();
    print_tensor_table(&shown, "load", |t| {
        copy(t).unwrap_or_else(|| "view".to_string())
    });
    filtered(filter, shown.len(), census.count);
    Ok(0)
}

/// `verify`: the pickle read by the restricted unpickler, every view checked against its
/// storage, the pickle and every storage against the zip archive's CRC-32 (the legacy format
/// keeps none), every tensor read, optionally scanned for NaN / Inf.
pub(crate) fn verify(path: &Path, nan: bool) -> Result<u8, Failure> {
    let source = match open_source(path) {
        Ok(source) => source,
        // What cannot be read at all (missing, not a regular file) is not a verdict.
        Err(e @ PytorchError::Io { .. }) => return Err(Failure::file(e)),
        Err(e) => {
            println!("{e}");
            println!("{}: FAILED: 1 problem", path.display());
            return Ok(1);
        }
    };
    if let Err(e) = source.verify_structure() {
        println!("{e}");
        println!("{}: FAILED: 1 problem", path.display());
        return Ok(1);
    }
    let Scan {
        bad,
        verified,
        total,
    } = scan(&source, path, nan)?;
    if bad > 0 {
        println!("{}: FAILED: {bad} problems", path.display());
        return Ok(1);
    }
    let sums = match source.format() {
        burnpack::interop::pytorch::PytorchFormat::Zip => {
            format!("the pickle and {verified} tensors' storages match their zip CRC-32")
        }
        _ => "no checksums in the legacy format (contents unverified)".to_string(),
    };
    println!(
        "{}: OK: torch.save file valid ({:?}), {} tensors ({}) read, no globals beyond a state dict's, {sums}{}",
        path.display(),
        source.format(),
        source.tensors().len(),
        mib(total),
        scanned(nan)
    );
    if !source.unread_keys().is_empty() {
        println!(
            "{}: note: not read (tensors under other top-level keys; --key KEY reads one): {}",
            path.display(),
            source.unread_keys().join(", ")
        );
    }
    Ok(0)
}
