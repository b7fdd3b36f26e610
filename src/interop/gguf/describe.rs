//! What a GGUF file says about itself, for tools: its architecture, context length,
//! tokenizer, the census of its stored types and what is not read.

use std::collections::BTreeMap;

use super::source::GgufSource;
use super::value::Value;
use crate::format::TensorInfo;
use crate::source::{Checksums, Description, human_bytes};

impl crate::source::DescribedSource for GgufSource {
    fn describe(&self) -> Description {
        let get = |key: &str| self.get(key);
        let arch = get("general.architecture")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        let mut census: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        for (info, place) in self.table.tensors().iter().zip(self.table.places()) {
            let entry = census.entry(Self::type_name(&place.place)).or_default();
            entry.0 += 1;
            entry.1 += place.place.range.map_or(0, |(_, bytes)| bytes);
            let _ = info;
        }
        let types: Vec<String> = census
            .iter()
            .map(|(t, (n, bytes))| format!("{t} {n} ({})", human_bytes(*bytes)))
            .collect();
        let mut lines = vec![format!("architecture: {arch}")];
        if let Some(context) = get(&format!("{arch}.context_length")) {
            lines.push(format!("context length: {context}"));
        }
        if let Some(model) = get("tokenizer.ggml.model").and_then(Value::as_str) {
            let tokens = get("tokenizer.ggml.tokens")
                .and_then(Value::as_array)
                .map_or(0, super::value::Array::len);
            lines.push(format!("tokenizer: {model} ({tokens} tokens)"));
        }
        lines.push(format!("stored types: {}", types.join(", ")));
        let unread: Vec<String> = self
            .table
            .tensors()
            .iter()
            .zip(self.table.places())
            .filter(|(_, p)| {
                !p.place
                    .ty
                    .is_some_and(|t| t.plain_dtype().is_some() || t.is_dequantized())
            })
            .map(|(t, p)| format!("{} ({})", t.name(), Self::type_name(&p.place)))
            .collect();
        let mut notes = Vec::new();
        if !unread.is_empty() {
            notes.push(format!(
                "not read (types this crate does not dequantize): {}",
                unread.join(", ")
            ));
        }
        let first = &self.shards[0];
        let parts = self.shards.len();
        Description {
            format: "gguf",
            summary: format!(
                "GGUF v{}{}",
                first.version,
                if parts > 1 {
                    format!(", {parts} parts")
                } else {
                    String::new()
                }
            ),
            valid: format!("GGUF v{} valid", first.version),
            shards: self.shards.iter().map(|s| s.path.clone()).collect(),
            metadata: first
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.shown()))
                .collect(),
            lines,
            fields: vec![
                ("version", u64::from(first.version).into()),
                ("architecture", arch.into()),
                ("alignment", first.alignment.into()),
                ("types", types.into()),
                ("not_read", unread.into()),
            ],
            notes,
            checksums: Checksums::None,
            unverified: "no checksums in GGUF (contents unverified)".into(),
            column: Some("type"),
            ..Description::default()
        }
    }

    /// The whole metadata: strings as they are, other values in their full text (arrays
    /// unabridged, see [`Value::stored`]), where the description abridges long arrays.
    fn carried_metadata(&self) -> Vec<(String, String)> {
        self.metadata()
            .iter()
            .map(|(key, value)| (key.clone(), value.stored()))
            .collect()
    }

    fn column(&self, info: &TensorInfo) -> Option<String> {
        self.table
            .place(info)
            .ok()
            .map(|p| Self::type_name(&p.place))
    }
}
