//! What a pack says about itself, for tools.

use crate::source::{Checksums, Description, human_bytes};

/// What every pack says about itself, wherever it is read from (a [`Reader`](super::Reader),
/// a pack on object storage).
pub(crate) fn describe_pack(layout: &crate::format::Layout) -> Description {
    let header = layout.header();
    let checksums = if layout.has_checksums() {
        Checksums::PerTensor
    } else {
        Checksums::None
    };
    Description {
        format: "burnpack",
        summary: format!(
            "burnpack v{}, {} ({} bytes)",
            header.version,
            human_bytes(layout.file_len()),
            layout.file_len()
        ),
        valid: "structure valid".into(),
        shards: Vec::new(),
        metadata: layout.metadata().clone(),
        scalars: layout
            .scalars()
            .iter()
            .map(|(k, v)| (k.clone(), format!("{v:?}")))
            .collect(),
        lines: vec![format!(
            "metadata: {} bytes of CBOR, data section at byte {}",
            header.metadata_size,
            layout.data_start()
        )],
        fields: vec![
            ("version", u64::from(header.version).into()),
            ("file_size", layout.file_len().into()),
            ("metadata_size", u64::from(header.metadata_size).into()),
            ("data_start", layout.data_start().into()),
        ],
        warnings: layout.check_extras().unwrap_or_default(),
        notes: Vec::new(),
        checksums,
        unverified: "no checksums in this file (contents unverified)".into(),
        column: Some("param id"),
    }
}
