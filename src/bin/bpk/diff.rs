//! `bpk diff`: tensors only in one file, different dtype, shape or id, value differences, metadata
//! and scalar differences.

use burn::tensor::DType;
use burnpack::format::TensorInfo;
use rayon::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;

use crate::Failure;
use crate::open::*;
use crate::print::*;
use crate::scan::*;

/// A tensor whose values differ: name, largest absolute and relative difference.
pub(crate) type ValueDiff = (String, f64, f64);

/// Largest absolute and relative difference between two tensors of one dtype and shape.
pub(crate) fn max_diff(dtype: DType, a: &[u8], b: &[u8]) -> Option<(f64, f64)> {
    let mut left = Vec::new();
    if !for_each_f64(dtype, a, |v| left.push(v)) {
        return (a != b)
            .then_some((f64::NAN, f64::NAN))
            .or(Some((0.0, 0.0)));
    }
    let (mut abs, mut rel, mut i) = (0.0f64, 0.0f64, 0);
    for_each_f64(dtype, b, |y| {
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

pub(crate) fn diff(a_path: &Path, b_path: &Path, as_json: bool) -> Result<u8, Failure> {
    let (a, b) = (Opened::open(a_path)?, Opened::open(b_path)?);
    let names_a: BTreeSet<&str> = a.source().tensors().iter().map(TensorInfo::name).collect();
    let names_b: BTreeSet<&str> = b.source().tensors().iter().map(TensorInfo::name).collect();
    let only_a: Vec<&str> = names_a.difference(&names_b).copied().collect();
    let only_b: Vec<&str> = names_b.difference(&names_a).copied().collect();
    let common: Vec<(&TensorInfo, &TensorInfo)> = names_a
        .intersection(&names_b)
        .map(|n| (a.tensor(n).expect("listed"), b.tensor(n).expect("listed")))
        .collect();
    let mut changed_kind = Vec::new();
    let compared: Vec<Result<Option<ValueDiff>, Failure>> = common
        .par_iter()
        .filter(|(x, y)| x.dtype() == y.dtype() && x.shape() == y.shape())
        .map(|(x, y)| {
            let (bx, by) = (
                a.source().read(x).map_err(Failure::file)?,
                b.source().read(y).map_err(Failure::file)?,
            );
            if bx[..] == by[..] {
                return Ok(None);
            }
            let (abs, rel) = max_diff(x.dtype(), &bx, &by).unwrap_or((f64::NAN, f64::NAN));
            Ok(Some((x.name().to_string(), abs, rel)))
        })
        .collect();
    for (x, y) in &common {
        if x.dtype() != y.dtype() || x.shape() != y.shape() {
            changed_kind.push(json!({
                "name": x.name(),
                "a": {"dtype": dtype_name(x.dtype()), "shape": x.shape()},
                "b": {"dtype": dtype_name(y.dtype()), "shape": y.shape()},
            }));
        }
    }
    let ids: Vec<Value> = common
        .iter()
        .filter(|(x, y)| x.param_id() != y.param_id())
        .map(|(x, y)| {
            let id = |t: &TensorInfo| t.param_id().map(|id| id.to_string());
            json!({"name": x.name(), "a": id(x), "b": id(y)})
        })
        .collect();
    let mut values = Vec::new();
    for r in compared {
        if let Some(v) = r? {
            values.push(v);
        }
    }
    let map_diff = |x: Vec<(String, String)>, y: Vec<(String, String)>| {
        let xs: std::collections::BTreeMap<_, _> = x.into_iter().collect();
        let ys: std::collections::BTreeMap<_, _> = y.into_iter().collect();
        let keys: BTreeSet<&String> = xs.keys().chain(ys.keys()).collect();
        keys.into_iter()
            .filter(|k| xs.get(*k) != ys.get(*k))
            .map(|k| json!({"key": k, "a": xs.get(k), "b": ys.get(k)}))
            .collect::<Vec<_>>()
    };
    let strings = |r: &Opened| {
        r.metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    let metadata = map_diff(strings(&a), strings(&b));
    let scalar_diffs = map_diff(a.scalars(), b.scalars());
    let differ = !(only_a.is_empty()
        && only_b.is_empty()
        && changed_kind.is_empty()
        && ids.is_empty()
        && values.is_empty()
        && metadata.is_empty()
        && scalar_diffs.is_empty());
    if as_json {
        let out = json!({
            "a": a_path.display().to_string(),
            "b": b_path.display().to_string(),
            "identical": !differ,
            "only_in_a": only_a,
            "only_in_b": only_b,
            "dtype_or_shape": changed_kind,
            "param_ids": ids,
            "values": values.iter().map(|(n, abs, rel)| json!({"name": n, "max_abs": abs, "max_rel": rel})).collect::<Vec<_>>(),
            "metadata": metadata,
            "scalars": scalar_diffs,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("JSON of plain values")
        );
        return Ok(u8::from(differ));
    }
    for n in &only_a {
        println!("only in {}: {n}", a_path.display());
    }
    for n in &only_b {
        println!("only in {}: {n}", b_path.display());
    }
    for c in &changed_kind {
        println!(
            "{}: {} {} vs {} {}",
            c["name"].as_str().unwrap_or(""),
            c["a"]["dtype"],
            c["a"]["shape"],
            c["b"]["dtype"],
            c["b"]["shape"]
        );
    }
    for d in &ids {
        println!(
            "{}: param id {} vs {}",
            d["name"].as_str().unwrap_or(""),
            d["a"].as_str().unwrap_or("none"),
            d["b"].as_str().unwrap_or("none")
        );
    }
    for (n, abs, rel) in &values {
        println!("{n}: values differ (max abs {abs:e}, max rel {rel:e})");
    }
    for m in &metadata {
        println!(
            "metadata {}: {} vs {}",
            m["key"].as_str().unwrap_or(""),
            m["a"],
            m["b"]
        );
    }
    for m in &scalar_diffs {
        println!(
            "scalar {}: {} vs {}",
            m["key"].as_str().unwrap_or(""),
            m["a"],
            m["b"]
        );
    }
    let same = common.len() - changed_kind.len() - values.len();
    println!(
        "{} tensors with identical values, {} differ in values, {} in dtype or shape, {} only in A, {} only in B",
        same,
        values.len(),
        changed_kind.len(),
        only_a.len(),
        only_b.len()
    );
    Ok(u8::from(differ))
}
