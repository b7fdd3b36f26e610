//! `bpk verify`: every structural check the format has, every checksum it keeps, every tensor
//! read, optionally a NaN/Inf scan; the same for every format.

use burnpack::read::{Checksums, human_bytes};
use std::path::Path;

use crate::Failure;
use crate::print::*;
use crate::scan::*;

/// Prints a failed verification of `path` with its problems and returns exit code 1.
fn failed(path: &Path, problems: &[String]) -> u8 {
    for problem in problems {
        println!("{}", clean(problem));
    }
    let s = if problems.len() == 1 { "" } else { "s" };
    println!(
        "{}: FAILED: {} problem{s}",
        clean(&path.display().to_string()),
        problems.len()
    );
    1
}

pub(crate) fn verify(path: &Path, nan: bool) -> Result<u8, Failure> {
    let source = match crate::open::open_for_verify(path) {
        Ok(source) => source,
        // A file that could not be read at all is not a verdict (exit 3); one that was read
        // and found wrong is a failed verification.
        Err(e) if e.kind().is_unreadable() => return Err(crate::open::failure(&e)),
        Err(e) => return Ok(failed(path, &[e.to_string()])),
    };
    let tensors = source.as_tensor_source();
    if let Err(e) = tensors.verify_structure() {
        return Ok(failed(path, &[e.to_string()]));
    }
    if let Some(why) = source.unusable() {
        return Ok(failed(path, &[why]));
    }
    let about = source.describe();
    // What the format's reader ignores (an error in this crate's own files, refused above):
    // named, without failing the verification.
    for warning in &about.warnings {
        println!("{}: warning: {}", path.display(), clean(warning));
    }
    let Scan {
        bad,
        verified,
        total,
    } = scan(tensors, path, nan)?;
    if bad > 0 {
        let s = if bad == 1 { "" } else { "s" };
        println!("{}: FAILED: {bad} problem{s}", path.display());
        return Ok(1);
    }
    let sums = match about.checksums {
        Checksums::PerTensor => {
            format!("header and metadata checksum and all {verified} tensor checksums match")
        }
        Checksums::ZipCrc32 => {
            format!("the pickle and {verified} tensors' storages match their zip CRC-32")
        }
        _ => about.unverified.clone(),
    };
    println!(
        "{}: OK: {}, {} tensors ({}) read, {sums}{}",
        path.display(),
        about.valid,
        tensors.tensors().len(),
        human_bytes(total),
        scanned(nan)
    );
    for note in &about.notes {
        println!("{}: note: {}", path.display(), clean(note));
    }
    Ok(0)
}
