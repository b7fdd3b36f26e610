//! `bpk inspect`: header facts, totals, metadata, scalars and tensors, for packs and safetensors
//! weights.

use burnpack::format::{Layout, TensorInfo};
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::read::TensorSource;
use regex::Regex;
use serde_json::json;
use std::path::Path;

use crate::Failure;
use crate::open::*;
use crate::print::*;
use crate::remote;

pub(crate) fn inspect(path: &Path, as_json: bool, filter: Option<&str>) -> Result<u8, Failure> {
    let filter = filter
        .map(|pattern| {
            Regex::new(pattern).map_err(|e| {
                // regex's own message spans several lines (the pattern, a caret, the error).
                let why = e
                    .to_string()
                    .lines()
                    .rev()
                    .find_map(|l| l.trim().strip_prefix("error: ").map(str::to_string))
                    .unwrap_or_else(|| e.to_string().replace('\n', " "));
                Failure::usage(format!("--filter '{pattern}' is not a valid regex: {why}"))
            })
        })
        .transpose()?;
    if crate::pytorch::is_pytorch(path) {
        return crate::pytorch::inspect(path, as_json, filter.as_ref());
    }
    if crate::legacy::is_legacy(path) {
        return crate::legacy::inspect(path, as_json, filter.as_ref());
    }
    if is_safetensors(path) {
        return inspect_safetensors(path, as_json, filter.as_ref());
    }
    if is_url(path) {
        let source = remote::open(path)?;
        #[cfg(feature = "object-store")]
        {
            // What opening cost: header and metadata, never a tensor.
            let fetched = (source.fetched_bytes(), source.requests());
            return Ok(inspect_pack(
                path,
                source.layout(),
                as_json,
                filter.as_ref(),
                Some(fetched),
            ));
        }
        #[cfg(not(feature = "object-store"))]
        match source {}
    }
    let reader = open(path)?;
    Ok(inspect_pack(
        path,
        reader.layout(),
        as_json,
        filter.as_ref(),
        None,
    ))
}

/// `inspect` for a pack: header, totals, metadata, scalars and the tensors matching
/// `filter`; for a pack on object storage, the bytes and requests that opening it took.
pub(crate) fn inspect_pack(
    path: &Path,
    layout: &Layout,
    as_json: bool,
    filter: Option<&Regex>,
    fetched: Option<(u64, u64)>,
) -> u8 {
    let shown = matching(layout.tensors_by_position(), filter);
    let census = Census::of(layout.tensors());
    if as_json {
        let out = json!({
            "file": path.display().to_string(),
            "version": layout.header().version,
            "file_size": layout.file_len(),
            "metadata_size": layout.header().metadata_size,
            "data_start": layout.data_start(),
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "metadata": layout.metadata(),
            "scalars": layout.scalars().iter().map(|(k, v)| (k.clone(), format!("{v:?}"))).collect::<std::collections::BTreeMap<_, _>>(),
            "tensors": shown.iter().map(|t| tensor_json(t)).collect::<Vec<_>>(),
            "fetched_bytes": fetched.map(|(bytes, _)| bytes),
            "requests": fetched.map(|(_, requests)| requests),
        });
        print_json(&out);
        return 0;
    }
    println!(
        "{}: burnpack v{}, {} ({} bytes)",
        path.display(),
        layout.header().version,
        mib(layout.file_len()),
        layout.file_len()
    );
    println!(
        "metadata: {} bytes of CBOR, data section at byte {}",
        layout.header().metadata_size,
        layout.data_start()
    );
    if let Some((bytes, requests)) = fetched {
        println!(
            "fetched: {bytes} bytes in {requests} requests (header and metadata, no tensor data)"
        );
    }
    census.print();
    print_metadata(layout.metadata());
    if !layout.scalars().is_empty() {
        println!("scalars:");
        for (k, v) in layout.scalars() {
            println!("  {k} = {v:?}");
        }
    }
    let width = name_width(&shown);
    println!(
        "{:<width$}  {:>9}  {:>16}  {:>12}  {:>20}  {:>12}",
        "name", "dtype", "shape", "bytes", "param id", "offset"
    );
    for t in &shown {
        let id = t
            .param_id()
            .map_or_else(|| "-".to_string(), |id| id.to_string());
        println!(
            "{:<width$}  {:>9}  {:>16}  {:>12}  {:>20}  {:>12}",
            t.name(),
            dtype_name(t.dtype()),
            format!("{:?}", t.shape()),
            t.len(),
            id,
            t.offset()
        );
    }
    filtered(filter, shown.len(), census.count);
    0
}

/// `inspect` for safetensors weights: the shard table, totals, the dtype census, metadata and
/// the tensors (reads only the headers).
pub(crate) fn inspect_safetensors(
    path: &Path,
    as_json: bool,
    filter: Option<&Regex>,
) -> Result<u8, Failure> {
    let source = SafetensorsSource::open(path).map_err(Failure::file)?;
    let tensors = source.tensors();
    let census = Census::of(tensors);
    let mut by_shard = std::collections::BTreeMap::<&Path, (usize, u64)>::new();
    for t in tensors {
        let shard = by_shard.entry(source.shard_of(t)).or_default();
        shard.0 += 1;
        shard.1 += t.len();
    }
    let shown = matching(tensors.iter(), filter);
    let shard_name = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    if as_json {
        let out = json!({
            "file": path.display().to_string(),
            "format": "safetensors",
            "shards": by_shard.iter().map(|(p, (n, b))| json!({"file": shard_name(p), "tensors": n, "bytes": b})).collect::<Vec<_>>(),
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "metadata": source.metadata(),
            "unaligned": source.unaligned().map(TensorInfo::name).collect::<Vec<_>>(),
            "tensors": shown.iter().map(|t| {
                let mut v = tensor_json(t);
                v["shard"] = json!(shard_name(source.shard_of(t)));
                v
            }).collect::<Vec<_>>(),
        });
        print_json(&out);
        return Ok(0);
    }
    println!(
        "{}: safetensors, {} shard{}, {} of tensor data",
        path.display(),
        by_shard.len(),
        if by_shard.len() == 1 { "" } else { "s" },
        mib(census.data_bytes)
    );
    if by_shard.len() > 1 {
        println!("shards:");
        for (p, (n, b)) in &by_shard {
            println!("  {}  {n} tensors, {}", shard_name(p), mib(*b));
        }
    }
    census.print();
    let unaligned = source.unaligned().count();
    if unaligned > 0 {
        println!("unaligned: {unaligned} tensors (copied when loaded)");
    }
    print_metadata(source.metadata());
    print_tensor_table(&shown, "shard", |t| shard_name(source.shard_of(t)));
    filtered(filter, shown.len(), census.count);
    Ok(0)
}
