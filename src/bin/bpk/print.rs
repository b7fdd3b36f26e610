//! The shared printing pieces: sizes, dtype names, tensor rows and JSON, metadata, the dtype
//! census.

use burn::tensor::DType;
use burnpack::format::TensorInfo;
use burnpack::source::human_bytes;
use regex::Regex;
use serde_json::{Value, json};

/// Text from a file (a tensor name, a metadata value, a path, an error that quotes them) made
/// safe to print: control characters (a newline, a terminal escape sequence) are shown
/// escaped, so that one record stays one line and no name can drive the terminal.
pub(crate) fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// The most characters a name (a tensor's, a metadata key) takes on a line of text output:
/// longer ones are cut there and marked, so that a hostile name neither floods the terminal
/// nor widens a column past what `format!` can pad (`u16::MAX`). `--json` has them whole.
pub(crate) const NAME_SHOWN: usize = 160;

/// The most characters a value takes where a line shows it whole otherwise (`bpk diff`'s
/// metadata values).
pub(crate) const VALUE_SHOWN: usize = 400;

/// `text` made safe to print ([`clean`]) and cut to at most `most` characters, with a marker
/// saying how much was left out: `abc... (+12345 characters)`. Linear in the text, whatever
/// its length.
pub(crate) fn bounded(text: &str, most: usize) -> std::borrow::Cow<'_, str> {
    let mut shown = String::new();
    let mut chars = text.chars();
    let mut count = 0usize;
    while let Some(c) = chars.next() {
        let escaped = c.is_control().then(|| c.escape_default().to_string());
        let width = escaped.as_ref().map_or(1, |e| e.chars().count());
        if count + width > most {
            // This character and the rest are left out.
            let rest = 1 + chars.count();
            shown.push_str(&format!("... (+{rest} characters)"));
            return shown.into();
        }
        count += width;
        match escaped {
            Some(e) => shown.push_str(&e),
            None => shown.push(c),
        }
    }
    clean(text)
}

/// A name as a line of text shows it (see [`NAME_SHOWN`]).
pub(crate) fn name(text: &str) -> std::borrow::Cow<'_, str> {
    bounded(text, NAME_SHOWN)
}

pub(crate) fn dtype_name(dtype: DType) -> String {
    match dtype {
        DType::QFloat(_) => "qfloat".to_string(),
        other => other.name().to_string(),
    }
}

pub(crate) fn tensor_json(t: &TensorInfo) -> Value {
    json!({
        "name": t.name(),
        "dtype": dtype_name(t.dtype()),
        "shape": t.shape(),
        "bytes": t.len(),
        // A string: 64-bit ids do not survive JSON tools that read numbers as doubles (jq).
        "param_id": t.param_id().map(|id| id.to_string()),
        "offset": t.offset(),
    })
}

/// Totals of a table of tensors, as `inspect` shows them.
pub(crate) struct Census {
    pub(crate) count: usize,
    pub(crate) elements: u64,
    pub(crate) data_bytes: u64,
    /// Bytes by dtype name.
    pub(crate) by_dtype: std::collections::BTreeMap<String, u64>,
}

impl Census {
    pub(crate) fn of(tensors: &[TensorInfo]) -> Self {
        let mut by_dtype = std::collections::BTreeMap::<String, u64>::new();
        for t in tensors {
            *by_dtype.entry(dtype_name(t.dtype())).or_default() += t.len();
        }
        Self {
            count: tensors.len(),
            elements: tensors.iter().map(|t| t.num_elements() as u64).sum(),
            data_bytes: tensors.iter().map(TensorInfo::len).sum(),
            by_dtype,
        }
    }

    /// `tensors: N (E elements, SIZE; dtype SIZE, ...)`.
    pub(crate) fn print(&self) {
        let dtypes: Vec<String> = self
            .by_dtype
            .iter()
            .map(|(d, b)| format!("{d} {}", human_bytes(*b)))
            .collect();
        println!(
            "tensors: {} ({} elements, {}; {})",
            self.count,
            self.elements,
            human_bytes(self.data_bytes),
            if dtypes.is_empty() {
                "none".into()
            } else {
                dtypes.join(", ")
            }
        );
    }
}

/// The metadata block of `inspect` (nothing when empty).
pub(crate) fn print_metadata(metadata: &std::collections::BTreeMap<String, String>) {
    if !metadata.is_empty() {
        println!("metadata:");
        for (k, v) in metadata {
            println!("  {} = {}", name(k), clean(&abridged(v)));
        }
    }
}

/// A long value (a tokenizer's vocabulary as text, say) as its first 120 characters and its
/// length: the whole value is in `--json`.
fn abridged(v: &str) -> std::borrow::Cow<'_, str> {
    const SHOWN: usize = 120;
    match v.char_indices().nth(SHOWN + 40) {
        None => v.into(),
        Some(_) => {
            let end = v.char_indices().nth(SHOWN).map_or(v.len(), |(i, _)| i);
            format!("{} ... ({} bytes in all)", &v[..end], v.len()).into()
        }
    }
}

/// The width of the name column for `shown`: the widest name as shown, at most
/// [`NAME_SHOWN`] and its marker.
pub(crate) fn name_width(shown: &[&TensorInfo]) -> usize {
    shown
        .iter()
        .map(|t| name(t.name()).chars().count())
        .max()
        .unwrap_or(4)
        .max(4)
}

/// The tensors whose names `filter` matches (all without one), in the order given.
pub(crate) fn matching<'a>(
    tensors: impl Iterator<Item = &'a TensorInfo>,
    filter: Option<&Regex>,
) -> Vec<&'a TensorInfo> {
    tensors
        .filter(|t| filter.is_none_or(|re| re.is_match(t.name())))
        .collect()
}

/// The tensor table of `inspect`: name, dtype, shape, bytes, offset and one column of the
/// source's own (`header`, each row's `value`).
pub(crate) fn print_tensor_table(
    shown: &[&TensorInfo],
    header: &str,
    value: impl Fn(&TensorInfo) -> String,
) {
    let width = name_width(shown);
    println!(
        "{:<width$}  {:>9}  {:>16}  {:>12}  {:>12}  {header}",
        "name", "dtype", "shape", "bytes", "offset"
    );
    for t in shown {
        println!(
            "{:<width$}  {:>9}  {:>16}  {:>12}  {:>12}  {}",
            name(t.name()),
            dtype_name(t.dtype()),
            format!("{:?}", t.shape()),
            t.len(),
            t.offset(),
            clean(&value(t))
        );
    }
}

/// `inspect --json`'s output.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON of plain values")
    );
}

/// The last line of a filtered `inspect`.
pub(crate) fn filtered(filter: Option<&Regex>, shown: usize, total: usize) {
    if filter.is_some() {
        println!("({shown} of {total} tensors match the filter)");
    }
}

/// What `verify --nan` adds to its verdict.
pub(crate) fn scanned(nan: bool) -> &'static str {
    if nan {
        ", float values scanned for NaN/Inf"
    } else {
        ""
    }
}
