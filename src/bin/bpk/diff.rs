//! `bpk diff`: tensors only in one file, different dtype, shape or id, value differences (with
//! a tolerance; quantized tensors by their dequantized values), metadata and scalar
//! differences. Tensors decide the exit code; metadata decides it only when asked.

use burn::tensor::DType;
use burnpack::format::TensorInfo;
use burnpack::source::{TensorSource, Withheld};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::Failure;
use crate::open::open;
use crate::print::*;
use crate::progress::Bar;
use crate::scan::*;

/// What counts as a difference.
pub(crate) struct Rules {
    /// Absolute tolerance: values agree when `|a - b| <= atol + rtol * |b|`.
    pub(crate) atol: f64,
    /// Relative tolerance.
    pub(crate) rtol: f64,
    /// Metadata, scalars and parameter ids missing on one side also decide the exit code.
    pub(crate) strict_metadata: bool,
}

/// The largest absolute and relative difference between two tensors of one shape, and
/// whether any element differs beyond the tolerance; each side is decoded by its own dtype
/// (a quantized tensor by its dequantized values). `None` when a side does not decode to
/// numbers (then the bytes decide, compared by the caller).
fn max_diff(
    (x, a): (&TensorInfo, &[u8]),
    (y, b): (&TensorInfo, &[u8]),
    rules: &Rules,
) -> Option<(f64, f64, bool)> {
    // Integers of 64 bits do not fit an f64: they are compared exactly.
    if let (Some(left), Some(right)) = (integers(x, a), integers(y, b)) {
        return (left.len() == right.len()).then(|| {
            let (mut abs, mut rel, mut beyond) = (0.0f64, 0.0f64, false);
            for (&v, &w) in left.iter().zip(&right) {
                if v == w {
                    continue;
                }
                let d = (v - w).unsigned_abs() as f64;
                abs = abs.max(d);
                rel = rel.max(d / (v.unsigned_abs().max(w.unsigned_abs()) as f64));
                beyond |= !(d <= rules.atol + rules.rtol * w.unsigned_abs() as f64);
            }
            (abs, rel, beyond)
        });
    }
    let mut left = Vec::new();
    if !for_each_f64(x, a, |v| left.push(v)) {
        return None;
    }
    let (mut abs, mut rel, mut beyond, mut i) = (0.0f64, 0.0f64, false, 0);
    let decoded = for_each_f64(y, b, |w| {
        let v = left.get(i).copied().unwrap_or(f64::NAN);
        i += 1;
        let same = v == w || (v.is_nan() && w.is_nan());
        // A NaN on one side only, or an infinity against another value, is never within a
        // tolerance (whichever side it is on), and differs by an infinite amount.
        let special = !same && (!v.is_finite() || !w.is_finite());
        let d = if same {
            0.0
        } else if special {
            f64::INFINITY
        } else {
            (v - w).abs()
        };
        abs = abs.max(d);
        let scale = v.abs().max(w.abs());
        if d > 0.0 {
            rel = rel.max(if scale > 0.0 && !special {
                d / scale
            } else {
                f64::INFINITY
            });
        }
        beyond |= special || !same && !(d <= rules.atol + rules.rtol * w.abs());
    });
    (decoded && i == left.len()).then_some((abs, rel, beyond))
}

/// The values of an integer tensor, exactly (`None` for any other dtype).
fn integers(info: &TensorInfo, bytes: &[u8]) -> Option<Vec<i128>> {
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> i128) -> Vec<i128> {
        bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("exact chunk")))
            .collect()
    }
    Some(match info.dtype() {
        DType::I64 => each(bytes, |b| i128::from(i64::from_le_bytes(b))),
        DType::U64 => each(bytes, |b| i128::from(u64::from_le_bytes(b))),
        DType::I32 => each(bytes, |b| i128::from(i32::from_le_bytes(b))),
        DType::U32 => each(bytes, |b| i128::from(u32::from_le_bytes(b))),
        DType::I16 => each(bytes, |b| i128::from(i16::from_le_bytes(b))),
        DType::U16 => each(bytes, |b| i128::from(u16::from_le_bytes(b))),
        DType::I8 => each(bytes, |b: [u8; 1]| i128::from(b[0] as i8)),
        DType::U8 => each(bytes, |b: [u8; 1]| i128::from(b[0])),
        _ => return None,
    })
}

/// Whether two tensors of one shape are compared by values across their dtypes: one of them
/// quantized, the other a float (a quantized tensor against its dequantized conversion).
fn dequantized_pair(x: &TensorInfo, y: &TensorInfo) -> bool {
    let q = |t: &TensorInfo| matches!(t.dtype(), DType::QFloat(_));
    let f = |t: &TensorInfo| t.dtype().is_float() || q(t);
    x.shape() == y.shape() && x.dtype() != y.dtype() && (q(x) || q(y)) && f(x) && f(y)
}

/// What `bpk diff` found: one value that serializes to `--json` and prints as text.
/// Fields are in the order of the JSON keys.
#[derive(Serialize)]
struct Diff<'a> {
    a: String,
    b: String,
    /// Tensors of different dtype or shape (a quantized tensor against a float of its shape
    /// is compared by values instead, and listed in `dequantized`).
    dtype_or_shape: Vec<KindChange<'a>>,
    /// Tensors compared by their dequantized values (a quantized dtype on one side).
    dequantized: Vec<KindChange<'a>>,
    /// The verdict, the exit code: tensors differ (or, with --strict-metadata, metadata).
    differ: bool,
    identical: bool,
    metadata: Vec<EntryChange>,
    only_in_a: Vec<&'a str>,
    only_in_b: Vec<&'a str>,
    param_ids: Vec<IdChange<'a>>,
    scalars: Vec<EntryChange>,
    /// Whether metadata, scalars and one-sided parameter ids decided the verdict too.
    strict_metadata: bool,
    /// The tolerance values were compared with.
    tolerance: Tolerance,
    values: Vec<ValueChange>,
    /// Tensors present in both files (for the text summary).
    #[serde(skip)]
    common: usize,
}

/// `--atol` and `--rtol`.
#[derive(Serialize)]
struct Tolerance {
    atol: f64,
    rtol: f64,
}

/// A tensor's dtype and shape.
#[derive(Serialize)]
struct Kind {
    dtype: String,
    shape: Vec<usize>,
}

impl Kind {
    fn of(t: &TensorInfo) -> Self {
        Self {
            dtype: dtype_name(t.dtype()),
            shape: t.shape().to_vec(),
        }
    }
}

/// A tensor of another dtype or shape in B.
#[derive(Serialize)]
struct KindChange<'a> {
    a: Kind,
    b: Kind,
    name: &'a str,
}

impl<'a> KindChange<'a> {
    fn of(x: &'a TensorInfo, y: &TensorInfo) -> Self {
        Self {
            a: Kind::of(x),
            b: Kind::of(y),
            name: x.name(),
        }
    }
}

/// A tensor with another parameter id in B (ids as strings: they exceed JSON's exact range).
#[derive(Serialize)]
struct IdChange<'a> {
    a: Option<String>,
    b: Option<String>,
    name: &'a str,
}

/// A tensor whose values differ, with the largest absolute and relative difference, and
/// whether they are within the tolerance.
#[derive(Serialize)]
struct ValueChange {
    max_abs: f64,
    max_rel: f64,
    name: String,
    within_tolerance: bool,
}

/// A metadata entry or scalar that differs (absent on one side: `None`).
#[derive(Serialize)]
struct EntryChange {
    a: Option<String>,
    b: Option<String>,
    key: String,
}

/// The entries of two maps that differ, by key.
fn entry_changes(a: Vec<(String, String)>, b: Vec<(String, String)>) -> Vec<EntryChange> {
    let xs: BTreeMap<String, String> = a.into_iter().collect();
    let ys: BTreeMap<String, String> = b.into_iter().collect();
    let keys: BTreeSet<&String> = xs.keys().chain(ys.keys()).collect();
    keys.into_iter()
        .filter(|k| xs.get(*k) != ys.get(*k))
        .map(|k| EntryChange {
            a: xs.get(k).cloned(),
            b: ys.get(k).cloned(),
            key: k.clone(),
        })
        .collect()
}

/// A value as JSON text (strings quoted, absent values `null`), as the text output shows it.
fn shown(value: &impl Serialize) -> String {
    // Bounded: a metadata value may be megabytes (a vocabulary as text); `--json` has it whole.
    let json = serde_json::to_string(value).expect("JSON of plain values");
    crate::print::bounded(&json, crate::print::VALUE_SHOWN).into_owned()
}

impl Diff<'_> {
    /// Whether the tensors differ (by name, dtype or shape, values beyond the tolerance,
    /// parameter ids both sides have) or, with `--strict-metadata`, anything else does.
    fn verdict(&self) -> bool {
        let tensors = !self.only_in_a.is_empty()
            || !self.only_in_b.is_empty()
            || !self.dtype_or_shape.is_empty()
            || self.values.iter().any(|v| !v.within_tolerance)
            || self
                .param_ids
                .iter()
                .any(|d| d.a.is_some() && d.b.is_some());
        tensors || self.strict_metadata && !self.identical
    }

    fn print_text(&self) {
        for n in &self.only_in_a {
            println!("only in {}: {}", self.a, clean(n));
        }
        for n in &self.only_in_b {
            println!("only in {}: {}", self.b, clean(n));
        }
        for c in &self.dtype_or_shape {
            println!(
                "{}: {} {} vs {} {}",
                clean(c.name),
                shown(&c.a.dtype),
                shown(&c.a.shape),
                shown(&c.b.dtype),
                shown(&c.b.shape)
            );
        }
        for d in &self.param_ids {
            println!(
                "{}: param id {} vs {}",
                clean(d.name),
                d.a.as_deref().unwrap_or("none"),
                d.b.as_deref().unwrap_or("none")
            );
        }
        for c in &self.dequantized {
            println!(
                "{}: {} vs {}: compared by dequantized values",
                clean(c.name),
                shown(&c.a.dtype),
                shown(&c.b.dtype)
            );
        }
        for v in &self.values {
            if v.max_abs.is_nan() && !v.within_tolerance {
                println!(
                    "{}: bytes differ (a dtype bpk does not decode: compared as stored)",
                    clean(&v.name)
                );
                continue;
            }
            println!(
                "{}: values differ (max abs {:e}, max rel {:e}){}",
                clean(&v.name),
                v.max_abs,
                v.max_rel,
                if v.within_tolerance {
                    ", within the tolerance"
                } else {
                    ""
                }
            );
        }
        for (what, changes) in [("metadata", &self.metadata), ("scalar", &self.scalars)] {
            for m in changes {
                println!(
                    "{what} {}: {} vs {}",
                    clean(&m.key),
                    shown(&m.a),
                    shown(&m.b)
                );
            }
        }
        let same = self.common - self.dtype_or_shape.len() - self.values.len();
        let beyond = self.values.iter().filter(|v| !v.within_tolerance).count();
        let within = self.values.len() - beyond;
        println!(
            "{} tensors with identical values, {} differ in values{}, {} in dtype or shape, {} only in A, {} only in B",
            same,
            beyond,
            if within > 0 {
                format!(" ({within} more within the tolerance)")
            } else {
                String::new()
            },
            self.dtype_or_shape.len(),
            self.only_in_a.len(),
            self.only_in_b.len()
        );
        let others = self.metadata.len() + self.scalars.len();
        if others > 0 && !self.strict_metadata {
            println!(
                "{others} metadata or scalar differences: reported, not failed (--strict-metadata fails them)"
            );
        }
    }
}

/// The tensors either side lists but cannot decode (FP8 in safetensors: `withheld`) into
/// `found`: a name on one side only, another dtype or shape (or a decodable tensor on the other
/// side), and, where both hold one of the same kind, the bytes as stored compared.
fn withheld<'s>(
    a: &'s dyn TensorSource,
    b: &'s dyn TensorSource,
    found: &mut Diff<'s>,
) -> Result<(), Failure> {
    let kind = |w: &Withheld| Kind {
        dtype: w.dtype.clone(),
        shape: w.shape.clone(),
    };
    let by_name = |s: &'s dyn TensorSource| -> BTreeMap<&'s str, &'s Withheld> {
        s.withheld().iter().map(|w| (w.name.as_str(), w)).collect()
    };
    let (wa, wb) = (by_name(a), by_name(b));
    // Names counted "only in" one side that the other withholds are compared below.
    found.only_in_a.retain(|n| !wb.contains_key(n));
    found.only_in_b.retain(|n| !wa.contains_key(n));
    for (&name, x) in &wa {
        match (wb.get(name), b.tensor(name)) {
            (Some(y), _) if x.dtype == y.dtype && x.shape == y.shape => {
                found.common += 1;
                let bytes_a = a.read_withheld(name).map_err(|e| Failure::of(&e))?;
                let bytes_b = b.read_withheld(name).map_err(|e| Failure::of(&e))?;
                if bytes_a[..] != bytes_b[..] {
                    found.values.push(ValueChange {
                        max_abs: f64::NAN,
                        max_rel: f64::NAN,
                        name: name.to_string(),
                        within_tolerance: false,
                    });
                }
            }
            (Some(y), _) => {
                found.common += 1;
                found.dtype_or_shape.push(KindChange {
                    a: kind(x),
                    b: kind(y),
                    name,
                });
            }
            (None, Some(t)) => {
                found.common += 1;
                found.dtype_or_shape.push(KindChange {
                    a: kind(x),
                    b: Kind::of(t),
                    name,
                });
            }
            (None, None) => found.only_in_a.push(name),
        }
    }
    for (&name, y) in &wb {
        if wa.contains_key(name) {
            continue;
        }
        match a.tensor(name) {
            Some(t) => {
                found.common += 1;
                found.dtype_or_shape.push(KindChange {
                    a: Kind::of(t),
                    b: kind(y),
                    name,
                });
            }
            None => found.only_in_b.push(name),
        }
    }
    Ok(())
}

pub(crate) fn diff(
    a_path: &Path,
    b_path: &Path,
    as_json: bool,
    rules: &Rules,
) -> Result<u8, Failure> {
    if !(rules.atol >= 0.0 && rules.rtol >= 0.0) {
        return Err(Failure::usage(
            "--atol and --rtol are tolerances: zero or more",
        ));
    }
    let (opened_a, opened_b) = (open(a_path)?, open(b_path)?);
    let (about_a, about_b) = (opened_a.describe(), opened_b.describe());
    let (a, b) = (opened_a.as_tensor_source(), opened_b.as_tensor_source());
    let names_a: BTreeSet<&str> = a.tensors().iter().map(TensorInfo::name).collect();
    let names_b: BTreeSet<&str> = b.tensors().iter().map(TensorInfo::name).collect();
    let common: Vec<(&TensorInfo, &TensorInfo)> = names_a
        .intersection(&names_b)
        .filter_map(|n| Some((a.tensor(n)?, b.tensor(n)?)))
        .collect();
    let same_kind = |(x, y): &(&TensorInfo, &TensorInfo)| {
        x.dtype() == y.dtype() && x.shape() == y.shape() || dequantized_pair(x, y)
    };
    let compared_pairs: Vec<_> = common.iter().filter(|p| same_kind(p)).collect();
    let total = compared_pairs.iter().map(|(x, y)| x.len() + y.len()).sum();
    let bar = Bar::new(total, "compared");
    // Per pair: `None` for the same values; a quantized tensor whose scheme is not decoded
    // here is a dtype change after all (`Err(name)`).
    type Compared<'t> = Option<Result<ValueChange, &'t str>>;
    let compared: Vec<Result<Compared<'_>, Failure>> = compared_pairs
        .par_iter()
        .map(|(x, y)| {
            let (bx, by) = (
                a.read(x).map_err(|e| Failure::of(&e))?,
                b.read(y).map_err(|e| Failure::of(&e))?,
            );
            bar.inc(x.len() + y.len());
            if x.dtype() == y.dtype() && bx[..] == by[..] {
                return Ok(None);
            }
            let (max_abs, max_rel, beyond) = match max_diff((x, &bx), (y, &by), rules) {
                Some(found) => found,
                None if x.dtype() != y.dtype() => return Ok(Some(Err(x.name()))),
                None => (f64::NAN, f64::NAN, true),
            };
            if max_abs == 0.0 && !beyond {
                return Ok(None);
            }
            Ok(Some(Ok(ValueChange {
                max_abs,
                max_rel,
                name: x.name().to_string(),
                within_tolerance: !beyond,
            })))
        })
        .collect();
    bar.finish();
    let (mut values, mut undecoded) = (Vec::new(), BTreeSet::new());
    for r in compared {
        match r? {
            Some(Ok(change)) => values.push(change),
            Some(Err(name)) => {
                undecoded.insert(name);
            }
            None => {}
        }
    }
    let compared_by_values =
        |(x, y): &&(&TensorInfo, &TensorInfo)| same_kind(&(x, y)) && !undecoded.contains(x.name());
    let id = |t: &TensorInfo| t.param_id().map(|id| id.to_string());
    let mut found = Diff {
        a: a_path.display().to_string(),
        b: b_path.display().to_string(),
        dtype_or_shape: common
            .iter()
            .filter(|pair| !compared_by_values(pair))
            .map(|(x, y)| KindChange::of(x, y))
            .collect(),
        dequantized: common
            .iter()
            .filter(|pair| compared_by_values(pair) && dequantized_pair(pair.0, pair.1))
            .map(|(x, y)| KindChange::of(x, y))
            .collect(),
        differ: false,
        identical: false,
        metadata: entry_changes(
            about_a.metadata.clone().into_iter().collect(),
            about_b.metadata.clone().into_iter().collect(),
        ),
        only_in_a: names_a.difference(&names_b).copied().collect(),
        only_in_b: names_b.difference(&names_a).copied().collect(),
        param_ids: common
            .iter()
            .filter(|(x, y)| x.param_id() != y.param_id())
            .map(|(x, y)| IdChange {
                a: id(x),
                b: id(y),
                name: x.name(),
            })
            .collect(),
        scalars: entry_changes(about_a.scalars.clone(), about_b.scalars.clone()),
        strict_metadata: rules.strict_metadata,
        tolerance: Tolerance {
            atol: rules.atol,
            rtol: rules.rtol,
        },
        values,
        common: common.len(),
    };
    withheld(a, b, &mut found)?;
    found.identical = found.only_in_a.is_empty()
        && found.only_in_b.is_empty()
        && found.dtype_or_shape.is_empty()
        && found.dequantized.is_empty()
        && found.param_ids.is_empty()
        && found.values.is_empty()
        && found.metadata.is_empty()
        && found.scalars.is_empty();
    found.differ = found.verdict();
    if as_json {
        print_json(&serde_json::to_value(&found).expect("JSON of plain values"));
    } else {
        found.print_text();
    }
    Ok(u8::from(found.differ))
}
