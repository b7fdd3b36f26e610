//! Safetensors as the registry sees it: an 8-byte header length then JSON, the near-miss
//! hint, the openers.

use super::SafetensorsSource;
use crate::interop::container::{Container, boxed, first_text_byte};

/// Safetensors files, one or shards through an index JSON.
pub(crate) const CONTAINER: Container = Container {
    name: "safetensors",
    sniff,
    hint: "this looks like a safetensors file: convert it with `bpk convert IN.safetensors \
           OUT.bpk` or `burnpack::interop::safetensors::safetensors_to_burnpack`, or open it \
           with `burnpack::interop::open_any`",
    open: |path, options| boxed(SafetensorsSource::open_file_for(path, None, options)),
    open_file: |path, file, options| {
        boxed(SafetensorsSource::open_file_for(path, Some(file), options))
    },
    open_index: Some(|path, options| boxed(SafetensorsSource::open_index_for(path, options))),
    index_shards: Some(crate::interop::index::shards),
    from_bytes: |bytes, options| boxed(SafetensorsSource::from_bytes(bytes, options)),
    refuse: None,
};

/// An 8-byte little-endian header length, then a JSON object (JSON allows white space before
/// it, and the `safetensors` crate reads such headers). The length's four high bytes are zero
/// in any safetensors file (headers are at most 100 MB), and never in text (a JSON Burn record
/// that starts `{"item":{`): a cut file is still told apart, and its parser says it is cut.
fn sniff(head: &[u8], _: u64) -> bool {
    head.len() > 8
        && head[4..8] == [0; 4]
        && head[..4] != [0; 4]
        && first_text_byte(&head[8..]) == Some(b'{')
}
