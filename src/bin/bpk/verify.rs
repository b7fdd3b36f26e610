//! `bpk verify`: every structural check, every checksum, optionally a NaN/Inf scan.

use burnpack::format::FormatError;
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::read::{ReadError, Reader, TensorSource};
use std::path::Path;

use crate::Failure;
use crate::open::*;
use crate::print::*;
use crate::remote;
use crate::scan::*;

/// `verify` for safetensors weights: every header validated by the `safetensors` crate (and an
/// index against its shards), every tensor read, optionally scanned for NaN / Inf. Safetensors
/// carries no checksums: the contents themselves are unverified.
pub(crate) fn verify_safetensors(path: &Path, nan: bool) -> Result<u8, Failure> {
    let source = match SafetensorsSource::open(path) {
        Ok(source) => source,
        Err(e @ burnpack::interop::safetensors::ConvertError::Safetensors { .. }) => {
            println!("{e}");
            println!("{}: FAILED: 1 problem", path.display());
            return Ok(1);
        }
        Err(e) => return Err(Failure::file(e)),
    };
    let Scan { bad, total, .. } = scan(&source, path, nan)?;
    if bad > 0 {
        println!("{}: FAILED: {bad} problems", path.display());
        return Ok(1);
    }
    println!(
        "{}: OK: {} shard{} valid, {} tensors ({}) read, no checksums in safetensors (contents unverified){}",
        path.display(),
        source.shards().len(),
        if source.shards().len() == 1 { "" } else { "s" },
        source.tensors().len(),
        mib(total),
        scanned(nan)
    );
    Ok(0)
}

pub(crate) fn verify(path: &Path, nan: bool) -> Result<u8, Failure> {
    if crate::pytorch::is_pytorch(path) {
        return crate::pytorch::verify(path, nan);
    }
    if crate::legacy::is_legacy(path) {
        return crate::legacy::verify(path, nan);
    }
    if is_safetensors(path) {
        return verify_safetensors(path, nan);
    }
    // Ordinary reads, never a mapping: a damaged file (a hole on a full tmpfs, a file
    // truncated meanwhile) is then an error to report, not a `SIGBUS`.
    let failed = |e: &ReadError| {
        println!("{e}");
        println!("{}: FAILED: 1 problem", path.display());
        Ok(1)
    };
    let opened = if is_url(path) {
        remote::download(path)?
    } else {
        Reader::open_buffered(path)
    };
    let reader = match opened {
        Ok(reader) => reader,
        // Damage that the checksums caught is a failed verification, like a tensor's.
        Err(
            e @ ReadError::Invalid {
                source: FormatError::MetadataChecksum { .. },
                ..
            },
        ) => return failed(&e),
        Err(e) => return Err(Failure::file(e)),
    };
    match reader.verify_structure() {
        Ok(()) => {}
        Err(e @ ReadError::Invalid { .. }) => return failed(&e),
        Err(e) => return Err(Failure::file(e)),
    }
    // What Burn's reader ignores in other writers' files (an error in this crate's files,
    // refused above): named, without failing the verification.
    for warning in reader.layout().check_extras().unwrap_or_default() {
        println!("{}: warning: {warning}", path.display());
    }
    let Scan {
        bad,
        verified,
        total,
    } = scan(&reader, path, nan)?;
    if bad > 0 {
        println!("{}: FAILED: {bad} problems", path.display());
        return Ok(1);
    }
    let scanned = scanned(nan);
    let sums = if reader.layout().has_checksums() {
        format!("header and metadata checksum and all {verified} tensor checksums match")
    } else {
        "no checksums in this file (contents unverified)".to_string()
    };
    println!(
        "{}: OK: structure valid, {} tensors ({}) read, {sums}{scanned}",
        path.display(),
        reader.tensors().len(),
        mib(total)
    );
    Ok(0)
}
