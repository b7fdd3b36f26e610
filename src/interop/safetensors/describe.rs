//! What `bpk inspect` and `verify` say of a safetensors source: its shards, unaligned
//! tensors, folded FP8 scales and the tensors it withholds.

use std::path::Path;

use super::SafetensorsSource;
use crate::format::TensorInfo;
use crate::source::{Description, human_bytes};

impl crate::source::DescribedSource for SafetensorsSource {
    fn describe(&self) -> Description {
        let tensors = self.table.tensors();
        let mut by_shard = vec![(0usize, 0u64); self.shards.len()];
        for (info, place) in tensors.iter().zip(self.table.places()) {
            by_shard[place.shard].0 += 1;
            by_shard[place.shard].1 += info.len();
        }
        let count = self.shards.len();
        let plural = if count == 1 { "" } else { "s" };
        let mut lines = Vec::new();
        if count > 1 {
            lines.push("shards:".to_string());
            for (shard, (n, bytes)) in self.shards.iter().zip(&by_shard) {
                lines.push(format!(
                    "  {}  {n} tensors, {}",
                    file_name(&shard.path),
                    human_bytes(*bytes)
                ));
            }
        }
        let folded: Vec<String> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.folded
                    .iter()
                    .map(|(scale, weight)| format!("{scale} -> {weight}"))
            })
            .collect();
        if !folded.is_empty() {
            lines.push(format!(
                "FP8 scales folded into their weights: {}",
                folded.join(", ")
            ));
        }
        let unaligned: Vec<String> = self.unaligned().map(|t| t.name().to_string()).collect();
        if !unaligned.is_empty() {
            lines.push(format!(
                "unaligned: {} tensors (copied when loaded)",
                unaligned.len()
            ));
        }
        Description {
            format: "safetensors",
            summary: format!("safetensors, {count} shard{plural}"),
            valid: format!("{count} shard{plural} valid"),
            shards: self.shards.iter().map(|s| s.path.clone()).collect(),
            metadata: self.metadata.clone(),
            lines,
            fields: vec![
                ("format", "safetensors".into()),
                (
                    "shards",
                    self.shards
                        .iter()
                        .map(|s| file_name(&s.path))
                        .collect::<Vec<_>>()
                        .into(),
                ),
                ("unaligned", unaligned.into()),
                ("folded_scales", folded.into()),
                (
                    "not_loadable",
                    self.withheld
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .into(),
                ),
            ],
            unverified: "no checksums in safetensors (contents unverified)".into(),
            notes: self
                .withheld
                .iter()
                .map(|w| format!("not loadable: {w}; its bytes are not read"))
                .collect(),
            column: Some("shard"),
            ..Description::default()
        }
    }

    fn column(&self, info: &TensorInfo) -> Option<String> {
        Some(file_name(self.shard_of(info)))
    }
}

/// A path's file name, for tables of shards.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
