//! The index JSON of a sharded checkpoint (`model.safetensors.index.json`,
//! `pytorch_model.bin.index.json`): which shard file holds each tensor. One reader for every
//! sharded source; each source maps its shards and then asks [`ShardIndex::check`] whether they
//! agree with the index, tensor for tensor.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Index files larger than this are refused before they are read (a real one lists tensor
/// names: a few MiB at most).
pub(crate) const MAX_INDEX_BYTES: u64 = 64 << 20;

#[derive(serde::Deserialize)]
struct Json {
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
    weight_map: BTreeMap<String, String>,
}

/// What is wrong with an index: an I/O failure (with what was being done) or its contents.
pub(crate) enum IndexError {
    Io(&'static str, std::io::Error),
    Invalid(String),
}

/// A validated index: its metadata, its routes, and its shards in name order.
pub(crate) struct ShardIndex {
    /// The index's `metadata` (values that are not strings as JSON text).
    pub metadata: BTreeMap<String, String>,
    weight_map: BTreeMap<String, String>,
    /// Each shard file once, sorted by name, in the index's directory.
    pub shards: Vec<PathBuf>,
    names: Vec<String>,
}

impl ShardIndex {
    /// Reads the index at `path` (at most [`MAX_INDEX_BYTES`]) of `kind` (`"safetensors"`,
    /// for errors); shard names must be plain file names in the index's directory (no
    /// directories, no `..`).
    pub fn read(path: &Path, kind: &str) -> Result<Self, IndexError> {
        let len = std::fs::metadata(path)
            .map_err(|e| IndexError::Io("stat", e))?
            .len();
        if len > MAX_INDEX_BYTES {
            return Err(IndexError::Invalid(format!(
                "index of {len} bytes is over the {MAX_INDEX_BYTES}-byte limit"
            )));
        }
        let text = std::fs::read(path).map_err(|e| IndexError::Io("read", e))?;
        let json: Json = serde_json::from_slice(&text)
            .map_err(|e| IndexError::Invalid(format!("not a {kind} index: {e}")))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut names: Vec<String> = json.weight_map.values().cloned().collect();
        names.sort();
        names.dedup();
        let shards = names
            .iter()
            .map(|name| {
                let plain = Path::new(name.as_str());
                if plain.components().count() != 1 || plain.file_name().is_none() {
                    return Err(IndexError::Invalid(format!(
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
        })
    }

    /// Whether the shards hold exactly what the index routes to them: `held` is every tensor
    /// found, as (name, position of its shard in [`shards`](Self::shards)).
    pub fn check<'a>(
        &self,
        held: impl IntoIterator<Item = (&'a str, usize)>,
    ) -> Result<(), String> {
        let by_name: HashMap<&str, usize> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let held: HashSet<(&str, usize)> = held.into_iter().collect();
        for (tensor, shard) in &self.weight_map {
            if !held.contains(&(tensor.as_str(), by_name[shard.as_str()])) {
                return Err(format!(
                    "tensor '{tensor}' is listed in shard '{shard}', which does not hold it"
                ));
            }
        }
        let mut held: Vec<_> = held.into_iter().collect();
        held.sort_unstable();
        for (name, shard) in held {
            match self.weight_map.get(name) {
                None => {
                    return Err(format!(
                        "tensor '{name}' of shard '{}' is not in the index's weight_map",
                        self.names[shard]
                    ));
                }
                Some(routed) if by_name[routed.as_str()] != shard => {
                    return Err(format!(
                        "tensor '{name}' is in shard '{}' too, but the index routes it to '{routed}'",
                        self.names[shard]
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
