//! `bpk inspect`: what a file is (in its format's own words), totals, metadata, scalars and
//! its tensors, for every format the registry reads.

use burnpack::source::{DescribedSource, Value, human_bytes};
use regex::Regex;
use serde_json::json;
use std::path::Path;

use crate::Failure;
use crate::print::*;

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
    // Only the header and the table are read (for a URL: no tensor data is fetched).
    let source = burnpack::interop::open_any_with(
        path,
        &crate::open::OPTIONS.get().cloned().unwrap_or_default(),
    )
    .map_err(|e| crate::open::failure(&e))?;
    Ok(show(path, source.as_ref(), as_json, filter.as_ref()))
}

/// A described value as JSON.
fn value_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Number(n) => json!(n),
        Value::Text(t) => json!(t),
        Value::List(items) => json!(items),
        _ => serde_json::Value::Null,
    }
}

fn show(path: &Path, source: &dyn DescribedSource, as_json: bool, filter: Option<&Regex>) -> u8 {
    let about = source.describe();
    let tensors = source.as_tensor_source().tensors();
    let census = Census::of(tensors);
    let mut shown = matching(tensors.iter(), filter);
    // Packs list their tensors in file order; other formats by name.
    if source.as_pack().is_some() {
        shown.sort_by_key(|t| t.offset());
    }
    if as_json {
        let mut out = json!({
            "file": path.display().to_string(),
            "format": about.format,
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "metadata": about.metadata,
            "scalars": about.scalars.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "notes": about.notes,
        });
        for (key, value) in &about.fields {
            out[*key] = value_json(value);
        }
        out["tensors"] = shown
            .iter()
            .map(|t| {
                let mut row = tensor_json(t);
                if let Some(column) = about.column
                    && column != "param id"
                {
                    row[column] = json!(source.column(t));
                }
                row
            })
            .collect();
        print_json(&out);
        return 0;
    }
    println!(
        "{}: {}, {} of tensor data",
        clean(&path.display().to_string()),
        about.summary,
        human_bytes(census.data_bytes)
    );
    for line in about.lines.iter().chain(&about.notes) {
        println!("{}", clean(line));
    }
    census.print();
    print_metadata(&about.metadata);
    if !about.scalars.is_empty() {
        println!("scalars:");
        for (k, v) in &about.scalars {
            println!("  {} = {}", name(k), clean(v));
        }
    }
    let heading = about.column.unwrap_or("");
    print_tensor_table(&shown, heading, |t| {
        source.column(t).unwrap_or_else(|| "-".to_string())
    });
    filtered(filter, shown.len(), census.count);
    0
}
