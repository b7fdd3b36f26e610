//! One scan for every source: each tensor read (and checked where the source has checksums), floats
//! optionally scanned for NaN/Inf.

use burn::tensor::{BoolStore, DType, bf16, f16};
use burnpack::format::TensorInfo;
use burnpack::read::TensorSource;
use rayon::prelude::*;
use std::path::Path;

use crate::Failure;

/// Calls `f` with every element of a tensor as f64 (`None` for non-numeric dtypes).
pub(crate) fn for_each_f64(dtype: DType, bytes: &[u8], mut f: impl FnMut(f64)) -> bool {
    macro_rules! each {
        ($n:literal, $conv:expr) => {
            for c in bytes.chunks_exact($n) {
                f($conv(c.try_into().expect("exact chunk")))
            }
        };
    }
    match dtype {
        DType::F64 => each!(8, f64::from_le_bytes),
        DType::F32 | DType::Flex32 => each!(4, |b| f64::from(f32::from_le_bytes(b))),
        DType::F16 => each!(2, |b| f16::from_le_bytes(b).to_f64()),
        DType::BF16 => each!(2, |b| bf16::from_le_bytes(b).to_f64()),
        DType::I64 => each!(8, |b| i64::from_le_bytes(b) as f64),
        DType::I32 => each!(4, |b| f64::from(i32::from_le_bytes(b))),
        DType::I16 => each!(2, |b| f64::from(i16::from_le_bytes(b))),
        DType::I8 => each!(1, |b: [u8; 1]| f64::from(b[0] as i8)),
        DType::U64 => each!(8, |b| u64::from_le_bytes(b) as f64),
        DType::U32 => each!(4, |b| f64::from(u32::from_le_bytes(b))),
        DType::U16 => each!(2, |b| f64::from(u16::from_le_bytes(b))),
        DType::U8 | DType::Bool(BoolStore::Native | BoolStore::U8) => {
            each!(1, |b: [u8; 1]| f64::from(b[0]))
        }
        DType::Bool(BoolStore::U32) => each!(4, |b| f64::from(u32::from_le_bytes(b))),
        DType::QFloat(_) => return false,
    }
    true
}

/// What reading every tensor of a source found.
pub(crate) struct Scan {
    /// Problems printed: checksum mismatches, tensors with NaN or infinite values.
    pub(crate) bad: usize,
    /// Tensors whose checksum matched (none for sources without checksums).
    pub(crate) verified: usize,
    /// Bytes read.
    pub(crate) total: u64,
}

/// Reads every tensor of `source` in parallel (a progress bar from 256 MiB on), checks each
/// against its checksum and, with `nan`, scans floats for NaN and infinite values; prints
/// each problem.
pub(crate) fn scan(
    source: &(dyn TensorSource + Sync),
    path: &Path,
    nan: bool,
) -> Result<Scan, Failure> {
    let total: u64 = source.tensors().iter().map(TensorInfo::len).sum();
    let bar = crate::progress::Bar::new(total, "read and checked");
    // Per tensor: name, NaN count, infinity count, checksum verdict.
    type Verdict = (String, u64, u64, Result<bool, String>);
    let results: Vec<Result<Verdict, Failure>> = source
        .tensors()
        .par_iter()
        .map(|t| {
            let bytes = source.read(t).map_err(Failure::file)?;
            let sum = source.check(t, &bytes).map_err(|e| e.to_string());
            let (mut nans, mut infs) = (0u64, 0u64);
            if nan && t.dtype().is_float() {
                for_each_f64(t.dtype(), &bytes, |v| {
                    nans += u64::from(v.is_nan());
                    infs += u64::from(v.is_infinite());
                });
            }
            bar.inc(t.len());
            Ok((t.name().to_string(), nans, infs, sum))
        })
        .collect();
    bar.finish();
    let (mut bad, mut verified) = (0, 0);
    for result in results {
        let (name, nans, infs, sum) = result?;
        match sum {
            Ok(checked) => verified += usize::from(checked),
            Err(message) => {
                bad += 1;
                println!("{}", crate::print::clean(&message));
            }
        }
        if nans + infs > 0 {
            bad += 1;
            println!(
                "{}: tensor '{}': {nans} NaN and {infs} infinite values",
                path.display(),
                crate::print::clean(&name)
            );
        }
    }
    Ok(Scan {
        bad,
        verified,
        total,
    })
}
