//! The index JSON of a sharded checkpoint (`model.safetensors.index.json`,
//! `pytorch_model.bin.index.json`): which shard file holds each tensor. One reader for every
//! sharded source; each source maps its shards and then asks [`ShardIndex::check`] whether they
//! agree with the index, tensor for tensor.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::source::{Routing, SourceError};

/// Index files larger than this are refused before they are read (a real one lists tensor
/// names: a few MiB at most).
pub(crate) const MAX_INDEX_BYTES: u64 = 64 << 20;

#[derive(serde::Deserialize)]
struct Json {
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
    weight_map: BTreeMap<String, String>,
}

/// A validated index: its metadata, its routes, and its shards in name order.
pub(crate) struct ShardIndex {
    /// The index's `metadata` (values that are not strings as JSON text).
    // Read where a sharded safetensors checkpoint is described; other sharded formats keep
    // only the routes.
    #[allow(dead_code)]
    pub metadata: BTreeMap<String, String>,
    weight_map: BTreeMap<String, String>,
    /// Each shard file once, sorted by name, in the index's directory.
    pub shards: Vec<PathBuf>,
    names: Vec<String>,
    /// Tensors routed to each shard.
    counts: Vec<usize>,
}

impl ShardIndex {
    /// Reads the index at `path` (at most [`MAX_INDEX_BYTES`]) of `kind` (`"safetensors"`,
    /// for errors); shard names must be plain file names in the index's directory (no
    /// directories, no `..`); an index that routes no tensor, or more than `max_tensors`, is
    /// refused.
    pub fn read(path: &Path, kind: &str, max_tensors: usize) -> Result<Self, SourceError> {
        let invalid = SourceError::invalid(path);
        let len = crate::platform::regular_file(path)
            .map_err(SourceError::io(path, "open"))?
            .len();
        if len > MAX_INDEX_BYTES {
            return Err(invalid(format!(
                "index of {len} bytes is over the {MAX_INDEX_BYTES}-byte limit"
            )));
        }
        let mut text = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                crate::platform::open_regular(path).map_err(SourceError::io(path, "open"))?,
                MAX_INDEX_BYTES,
            ),
            &mut text,
        )
        .map_err(SourceError::io(path, "read"))?;
        Self::parse(&text, path, kind, max_tensors)
    }

    /// The index text `text` of the index at `path` (its directory holds the shards), checked
    /// as [`read`](Self::read) checks it; touches no file.
    pub fn parse(
        text: &[u8],
        path: &Path,
        kind: &str,
        max_tensors: usize,
    ) -> Result<Self, SourceError> {
        let invalid = SourceError::invalid(path);
        let json: Json = serde_json::from_slice(text)
            .map_err(|e| invalid(format!("not a {kind} index: {e}")))?;
        if json.weight_map.is_empty() {
            return Err(invalid(format!(
                "the {kind} index's weight_map is empty: it names no shard and no tensor"
            )));
        }
        if json.weight_map.len() > max_tensors {
            return Err(invalid(format!(
                "the index lists {} tensors, over the tensor-count limit of {max_tensors}",
                json.weight_map.len()
            )));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut names: Vec<String> = json.weight_map.values().cloned().collect();
        names.sort();
        names.dedup();
        let mut counts = vec![0usize; names.len()];
        for shard in json.weight_map.values() {
            if let Ok(i) = names.binary_search(shard) {
                counts[i] += 1;
            }
        }
        let shards = names
            .iter()
            .map(|name| {
                let plain = Path::new(name.as_str());
                if plain.components().count() != 1 || plain.file_name().is_none() {
                    return Err(invalid(format!(
                        "shard '{name}' is not a file name in the index's directory"
                    )));
                }
                Ok(dir.join(plain))
            })
            .collect::<Result<_, _>>()?;
        let metadata = json
            .metadata
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect();
        Ok(Self {
            metadata,
            weight_map: json.weight_map,
            shards,
            names,
            counts,
        })
    }

    /// How many tensors the index routes to shard `shard` (a position in
    /// [`shards`](Self::shards)): the most that shard may hold.
    pub fn routed(&self, shard: usize) -> usize {
        self.counts[shard]
    }

    /// Whether shard `shard` (a position in [`shards`](Self::shards)) holds exactly what the
    /// index routes to it: `held` is every tensor found in it. Called as each shard is opened,
    /// so a shard that does not agree stops the open before the next one is read.
    pub fn check_shard<'a>(
        &self,
        shard: usize,
        held: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), String> {
        let name = &self.names[shard];
        let held: HashSet<&str> = held.into_iter().collect();
        if let Some((tensor, _)) = self
            .weight_map
            .iter()
            .find(|&(t, s)| s == name && !held.contains(t.as_str()))
        {
            return Err(format!(
                "tensor '{tensor}' is listed in shard '{name}', which does not hold it"
            ));
        }
        let mut held: Vec<&str> = held.into_iter().collect();
        held.sort_unstable();
        for tensor in held {
            match self.weight_map.get(tensor) {
                None => {
                    return Err(format!(
                        "tensor '{tensor}' of shard '{name}' is not in the index's weight_map"
                    ));
                }
                Some(routed) if routed != name => {
                    return Err(format!(
                        "tensor '{tensor}' is in shard '{name}' too, but the index routes it to \
                         '{routed}'"
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl Routing for ShardIndex {
    fn check_shard(
        &self,
        shard: usize,
        held: &mut dyn Iterator<Item = &str>,
    ) -> Result<(), String> {
        ShardIndex::check_shard(self, shard, held)
    }
}

/// The shards an index names, in name order: what the registry reads of an index to tell its
/// shards' format ([`Container::index_shards`](super::Container::index_shards)).
pub(crate) fn shards(
    path: &Path,
    options: &crate::source::OpenOptions,
) -> Result<Vec<PathBuf>, SourceError> {
    let index = ShardIndex::read(path, "shard", options.limits.max_tensor_count)?;
    Ok(index.shards)
}
