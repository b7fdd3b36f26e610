//! Records of Burn 0.14-0.21 as the registry sees them: gzip, JSON or a named `MessagePack`
//! map, the near-miss hint, the openers.

use super::LegacySource;
use super::source::GZIP;
use crate::interop::container::{Container, boxed, first_text_byte};
use crate::source::SourceError;

/// Records of Burn 0.14-0.21 that describe themselves (`.mpk`, `.mpk.gz`, `.json`,
/// `.json.gz`), told by their content.
pub(crate) const CONTAINER: Container = Container {
    name: "burn-record",
    sniff,
    hint: "this looks like a record of Burn 0.14-0.21: open it with \
           `burnpack::interop::burn_record::LegacySource` or `burnpack::interop::open_any`, or \
           convert it with `bpk convert IN.mpk OUT.bpk`",
    open: |path, options| boxed(LegacySource::open_with(path, options)),
    open_file: |path, file, options| boxed(LegacySource::open_file(path, file, options)),
    open_index: None,
    index_shards: None,
    from_bytes: |bytes, options| boxed(LegacySource::from_bytes(bytes, options)),
    refuse: Some(|path, head| {
        super::bincode::fits_record(head).then(|| SourceError::Bincode {
            path: path.to_path_buf(),
        })
    }),
};

/// Gzip (`.mpk.gz`, `.json.gz`), a JSON object, or a small `MessagePack` map whose first key
/// is a short string (`metadata`): what Burn 0.14-0.21's recorders write.
fn sniff(head: &[u8], _: u64) -> bool {
    head.starts_with(&GZIP)
        || first_text_byte(head) == Some(b'{')
        || head.len() > 1 && (0x81..=0x8f).contains(&head[0]) && (0xa0..=0xbf).contains(&head[1])
}
