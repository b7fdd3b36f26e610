//! `bpk diff`: tensors only in one file, different dtype, shape or id, value differences, metadata
//! and scalar differences.

use burnpack::format::TensorInfo;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::Failure;
use crate::open::open;
use crate::print::*;
use crate::progress::Bar;
use crate::scan::*;

/// Largest absolute and relative difference between two tensors of one dtype and shape.
/// Quantized tensors are compared by their dequantized values.
pub(crate) fn max_diff(info: &TensorInfo, a: &[u8], b: &[u8]) -> Option<(f64, f64)> {
    let mut left = Vec::new();
    if !for_each_f64(info, a, |v| left.push(v)) {
        return (a != b)
            .then_some((f64::NAN, f64::NAN))
            .or(Some((0.0, 0.0)));
    }
    let (mut abs, mut rel, mut i) = (0.0f64, 0.0f64, 0);
    for_each_f64(info, b, |y| {
        let x = left[i];
        i += 1;
        let d = if x == y || (x.is_nan() && y.is_nan()) {
            0.0
        } else {
            (x - y).abs()
        };
        abs = abs.max(d);
        let scale = x.abs().max(y.abs());
        if d > 0.0 {
            rel = rel.max(if scale > 0.0 {
                d / scale
            } else {
                f64::INFINITY
            });
        }
    });
    Some((abs, rel))
}

/// What `bpk diff` found: one value that serializes to `--json` and prints as text.
/// Fields are in the order of the JSON keys.
#[derive(Serialize)]
struct Diff<'a> {
    a: String,
    b: String,
    dtype_or_shape: Vec<KindChange<'a>>,
    identical: bool,
    metadata: Vec<EntryChange>,
    only_in_a: Vec<&'a str>,
    only_in_b: Vec<&'a str>,
    param_ids: Vec<IdChange<'a>>,
    scalars: Vec<EntryChange>,
    values: Vec<ValueChange>,
    /// Tensors present in both files (for the text summary).
    #[serde(skip)]
    common: usize,
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

/// A tensor with another parameter id in B (ids as strings: they exceed JSON's exact range).
#[derive(Serialize)]
struct IdChange<'a> {
    a: Option<String>,
    b: Option<String>,
    name: &'a str,
}

/// A tensor whose values differ, with the largest absolute and relative difference.
#[derive(Serialize)]
struct ValueChange {
    max_abs: f64,
    max_rel: f64,
    name: String,
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
    fn differ(&self) -> bool {
        !self.identical
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
        for v in &self.values {
            println!(
                "{}: values differ (max abs {:e}, max rel {:e})",
                clean(&v.name),
                v.max_abs,
                v.max_rel
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
        println!(
            "{} tensors with identical values, {} differ in values, {} in dtype or shape, {} only in A, {} only in B",
            same,
            self.values.len(),
            self.dtype_or_shape.len(),
            self.only_in_a.len(),
            self.only_in_b.len()
        );
    }
}

pub(crate) fn diff(a_path: &Path, b_path: &Path, as_json: bool) -> Result<u8, Failure> {
    let (opened_a, opened_b) = (open(a_path)?, open(b_path)?);
    let (about_a, about_b) = (opened_a.describe(), opened_b.describe());
    let (a, b) = (opened_a.as_tensor_source(), opened_b.as_tensor_source());
    let names_a: BTreeSet<&str> = a.tensors().iter().map(TensorInfo::name).collect();
    let names_b: BTreeSet<&str> = b.tensors().iter().map(TensorInfo::name).collect();
    let common: Vec<(&TensorInfo, &TensorInfo)> = names_a
        .intersection(&names_b)
        .filter_map(|n| Some((a.tensor(n)?, b.tensor(n)?)))
        .collect();
    let total = common.iter().map(|(x, y)| x.len() + y.len()).sum();
    let bar = Bar::new(total, "compared");
    let same_kind =
        |(x, y): &&(&TensorInfo, &TensorInfo)| x.dtype() == y.dtype() && x.shape() == y.shape();
    let compared: Vec<Result<Option<ValueChange>, Failure>> = common
        .par_iter()
        .filter(same_kind)
        .map(|(x, y)| {
            let (bx, by) = (
                a.read(x).map_err(Failure::file)?,
                b.read(y).map_err(Failure::file)?,
            );
            bar.inc(x.len() + y.len());
            if bx[..] == by[..] {
                return Ok(None);
            }
            let (max_abs, max_rel) = max_diff(x, &bx, &by).unwrap_or((f64::NAN, f64::NAN));
            Ok(Some(ValueChange {
                max_abs,
                max_rel,
                name: x.name().to_string(),
            }))
        })
        .collect();
    bar.finish();
    let mut values = Vec::new();
    for r in compared {
        values.extend(r?);
    }
    let id = |t: &TensorInfo| t.param_id().map(|id| id.to_string());
    let mut found = Diff {
        a: a_path.display().to_string(),
        b: b_path.display().to_string(),
        dtype_or_shape: common
            .iter()
            .filter(|pair| !same_kind(pair))
            .map(|(x, y)| KindChange {
                a: Kind::of(x),
                b: Kind::of(y),
                name: x.name(),
            })
            .collect(),
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
        values,
        common: common.len(),
    };
    found.identical = found.only_in_a.is_empty()
        && found.only_in_b.is_empty()
        && found.dtype_or_shape.is_empty()
        && found.param_ids.is_empty()
        && found.values.is_empty()
        && found.metadata.is_empty()
        && found.scalars.is_empty();
    if as_json {
        print_json(&serde_json::to_value(&found).expect("JSON of plain values"));
    } else {
        found.print_text();
    }
    Ok(u8::from(found.differ()))
}
