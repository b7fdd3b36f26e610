//! Records of Burn 0.14-0.21 (`.mpk`, `.mpk.gz`, `.json`, `.json.gz`) in `inspect` and
//! `verify`; `convert` writes them as packs (`convert.rs`).

use burnpack::interop::burn_record::{LegacySource, RecordFormat, SchedulerKind};
use burnpack::read::TensorSource;
use regex::Regex;
use serde_json::json;
use std::path::Path;

use crate::Failure;
use crate::print::*;
use crate::scan::{Scan, scan};

/// Whether `path` names a Burn 0.14-0.21 record (bincode ones included, to refuse them with
/// the reason).
pub(crate) fn is_legacy(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    RecordFormat::from_path(path).is_some() && !name.ends_with(".index.json")
        || name.ends_with(".bin")
        || name.ends_with(".bin.gz")
}

pub(crate) fn open(path: &Path) -> Result<LegacySource, Failure> {
    LegacySource::open(path).map_err(Failure::file)
}

/// What a record without a single tensor is, for `verify` and `convert`: nothing to load (a
/// bare scheduler record, or tensors this reader did not find), never a silent success.
pub(crate) fn no_tensors(path: &Path) -> String {
    format!(
        "{}: no tensors found in the record (a scheduler's or an empty optimizer's record \
         holds none: `bpk migrate` converts those with their checkpoint)",
        path.display()
    )
}

/// `inspect`: the format, the Burn version and precision that wrote it, totals, the tensors.
pub(crate) fn inspect(path: &Path, as_json: bool, filter: Option<&Regex>) -> Result<u8, Failure> {
    let source = open(path)?;
    let meta = source.record_metadata();
    let tensors = source.tensors();
    let census = Census::of(tensors);
    let shown = matching(tensors.iter(), filter);
    if as_json {
        let out = json!({
            "file": path.display().to_string(),
            "format": format!("{:?}", source.format()),
            "recorder": source.format().recorder(),
            "burn_version": meta.version,
            "float": meta.float,
            "int": meta.int,
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "metadata": source.metadata(),
            "tensors": shown.iter().map(|t| tensor_json(t)).collect::<Vec<_>>(),
        });
        print_json(&out);
        return Ok(0);
    }
    println!(
        "{}: Burn {} record ({}), {} of tensor data",
        path.display(),
        meta.version,
        source.format().recorder(),
        mib(census.data_bytes)
    );
    println!("precision: float {}, int {}", meta.float, meta.int);
    census.print();
    print_tensor_table(&shown, "param id", |t| {
        t.param_id().map_or_else(String::new, |id| id.to_string())
    });
    filtered(filter, shown.len(), census.count);
    Ok(0)
}

/// `verify`: the record decoded and validated (every tensor's bytes against its shape and
/// dtype), every tensor read, optionally scanned for NaN / Inf. Records carry no checksums.
pub(crate) fn verify(path: &Path, nan: bool) -> Result<u8, Failure> {
    let source = match LegacySource::open(path) {
        Ok(source) => source,
        Err(
            e @ (burnpack::interop::burn_record::LegacyError::Bincode { .. }
            | burnpack::interop::burn_record::LegacyError::Io { .. }),
        ) => {
            return Err(Failure::file(e));
        }
        Err(e) => {
            println!("{e}");
            println!("{}: FAILED: 1 problem", path.display());
            return Ok(1);
        }
    };
    if source.tensors().is_empty() {
        println!("{}", no_tensors(path));
        println!("{}: FAILED: 1 problem", path.display());
        return Ok(1);
    }
    let Scan { bad, total, .. } = scan(&source, path, nan)?;
    if bad > 0 {
        println!("{}: FAILED: {bad} problems", path.display());
        return Ok(1);
    }
    println!(
        "{}: OK: Burn {} record valid, {} tensors ({}) read, no checksums in Burn records (contents unverified){}",
        path.display(),
        source.record_metadata().version,
        source.tensors().len(),
        mib(total),
        scanned(nan)
    );
    Ok(0)
}

/// `migrate`: every epoch of a burn-train 0.14-0.21 checkpoint directory into one checkpoint
/// in `new`, named as `PackCheckpointer` names it.
pub(crate) fn migrate(old: &Path, new: &Path, kind: SchedulerKind) -> Result<u8, Failure> {
    use burnpack::interop::burn_record::{burn_train_epochs, import_legacy_burn_train};
    let epochs = burn_train_epochs(old).map_err(Failure::file)?;
    if epochs.is_empty() {
        return Err(Failure::file(format!(
            "{}: no model-<epoch> record (a burn-train checkpoint directory holds model-1.mpk.gz, ...)",
            old.display()
        )));
    }
    let manager = burnpack::checkpoint::CheckpointManager::new(new).map_err(Failure::file)?;
    for epoch in epochs {
        let out = manager.path_for(epoch);
        let size = import_legacy_burn_train(old, epoch, kind, &out).map_err(Failure::file)?;
        println!(
            "{} epoch {epoch} -> {} ({})",
            old.display(),
            out.display(),
            mib(size)
        );
    }
    Ok(0)
}
