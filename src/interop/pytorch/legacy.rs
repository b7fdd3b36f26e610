//! The legacy container of `torch.save` (before `PyTorch` 1.6): pickles in a row, then each
//! storage's element count and bytes.

use std::collections::HashMap;

use super::pickle::{self, Node, Pickle};
use super::{Fault, StorageEntry, Storages};
use crate::source::OpenOptions;

/// The magic number of the legacy format, as its pickle writes it (LONG1, little-endian).
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// The legacy format: magic, protocol, system info, the object, the storage keys, then each
/// storage as its element count (8 bytes) and its bytes.
pub(super) fn legacy_parts(all: &[u8], options: &OpenOptions) -> Result<(Pickle, Storages), Fault> {
    let other = |s: &str| Fault::Other(s.to_string());
    let mut at = 0usize;
    let next = |at: &mut usize| -> Result<Pickle, Fault> {
        let rest = &all[*at..];
        let window = &rest[..rest.len().min(options.limits.max_metadata_size as usize)];
        let (pickle, used) = pickle::load(window).map_err(|mut e| {
            e.offset += *at;
            Fault::Pickle(e)
        })?;
        *at += used;
        Ok(pickle)
    };
    let magic = next(&mut at)?;
    if !matches!(magic.node(magic.root), Node::BigInt(b) if b[..] == LEGACY_MAGIC) {
        return Err(other("a pickle without torch.save's magic number"));
    }
    let protocol = next(&mut at)?;
    if !matches!(protocol.node(protocol.root), Node::Int(1001)) {
        return Err(other(
            "a legacy torch.save file of another protocol than 1001",
        ));
    }
    // The system info: a dict whose `little_endian`, when present, must be `True`.
    let info = next(&mut at)?;
    let Node::Dict(entries) = info.node(info.root) else {
        return Err(other(
            "the system information after the protocol is not a dict",
        ));
    };
    for &(k, v) in entries {
        if matches!(info.node(k), Node::Str(s) if &**s == "little_endian")
            && !matches!(info.node(v), Node::Bool(true))
        {
            return Err(other(
                "a big-endian file (little_endian is not True): only little-endian files are read",
            ));
        }
    }
    let object = next(&mut at)?;
    let keys = next(&mut at)?;
    let Node::List(items) = keys.node(keys.root) else {
        return Err(other("no list of storage keys after the object"));
    };
    let sizes: HashMap<&str, u64> = object
        .storages()
        .map(|s| (s.key.as_str(), s.kind.element_size))
        .collect();
    let mut storages = Storages::new();
    for &item in items {
        let Node::Str(key) = keys.node(item) else {
            return Err(other("a storage key that is not a string"));
        };
        if storages.contains_key(&**key) {
            return Err(Fault::Other(format!(
                "storage '{key}' is listed twice (one of its records would be ignored)"
            )));
        }
        let element = *sizes.get(&**key).ok_or_else(|| {
            Fault::Other(format!(
                "storage '{key}' is listed, but nothing in the pickle names it: its size is unknown"
            ))
        })?;
        let head: [u8; 8] = all
            .get(at..at + 8)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| {
                Fault::Other(format!("storage '{key}' is missing: the file ends first"))
            })?;
        at += 8;
        let numel = u64::from_le_bytes(head);
        let len = numel
            .checked_mul(element)
            .filter(|&len| len <= (all.len() - at) as u64)
            .ok_or_else(|| {
                Fault::Other(format!(
                    "storage '{key}' of {numel} elements runs past the end of the file"
                ))
            })?;
        storages.insert(
            key.to_string(),
            StorageEntry {
                start: at as u64,
                len,
                crc: None,
            },
        );
        at += len as usize;
    }
    if at != all.len() {
        return Err(Fault::Other(format!(
            "{} bytes after the last storage, which nothing names",
            all.len() - at
        )));
    }
    Ok((object, storages))
}
