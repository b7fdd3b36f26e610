//! Shard assembly, written once for every format whose weights may be split over several
//! files (safetensors and `torch.save` shards under an index JSON; any other format with split
//! files): each shard is opened in name order, checked against the routing before the next
//! one is opened, and its rows go into one [`SourceTable`] whose places say which shard holds
//! each tensor.

use std::path::{Path, PathBuf};

use super::error::SourceError;
use super::table::{SourceTable, TableBuilder};
use crate::format::{Limits, TensorInfo};

/// Which tensors each shard must hold (an index JSON's `weight_map`, a split file's own
/// table of contents): asked as each shard is opened.
pub trait Routing {
    /// Whether shard `shard` holds exactly what is routed to it (`held`: every tensor found
    /// in it).
    ///
    /// # Errors
    /// What does not agree, as a sentence.
    fn check_shard(&self, shard: usize, held: &mut dyn Iterator<Item = &str>)
    -> Result<(), String>;
}

/// A tensor's place in a sharded source: which shard, and where in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InShard<P> {
    /// The shard's position in the list of shards.
    pub shard: usize,
    /// Where in that shard.
    pub place: P,
}

/// Opened shards and the table over all of them.
pub struct Sharded<S, P> {
    /// Each shard's path and what its opener returned, in the order given.
    pub shards: Vec<(PathBuf, S)>,
    /// Every tensor of every shard, sorted by name.
    pub table: SourceTable<InShard<P>>,
}

/// Opens `shards` (files in the folder of `file`, the index or first file, which errors name)
/// one after the other with `open`, which gets each shard's path and the limits that shard
/// must keep (no tensor past the total limit), and returns its own state and its rows. Each
/// shard is checked against `routing` before the next is opened (a shard holding a tensor
/// routed elsewhere, or none, is refused naming that tensor); a tensor held by two shards is
/// refused naming both.
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::format::{Limits, TensorInfo};
/// use burnpack::source::assemble_shards;
///
/// let dir = std::path::Path::new("weights");
/// let shards = [dir.join("a.bin"), dir.join("b.bin")];
/// let sharded = assemble_shards(&dir.join("index.json"), &shards, None, &Limits::default(), |path, _| {
///     let name = path.file_stem().unwrap().to_string_lossy().into_owned();
///     Ok(((), vec![(TensorInfo::external(name, DType::U8, vec![1], 0, 1), ())]))
/// })?;
/// assert_eq!(sharded.table.tensors().len(), 2);
/// assert_eq!(sharded.table.places()[1].shard, 1);
/// # Ok::<(), burnpack::source::SourceError>(())
/// ```
///
/// # Errors
/// What `open` returns; [`SourceError::Invalid`] for a shard outside the folder of `file` or
/// one that does not agree with `routing`; [`SourceError::Tensor`] for a tensor in two
/// shards; the [`TableBuilder`]'s errors.
pub fn assemble_shards<S, P>(
    file: &Path,
    shards: &[PathBuf],
    routing: Option<&dyn Routing>,
    limits: &Limits,
    mut open: impl FnMut(&Path, &Limits) -> Result<(S, Vec<(TensorInfo, P)>), SourceError>,
) -> Result<Sharded<S, P>, SourceError> {
    let folder = file.parent().unwrap_or(Path::new(""));
    let invalid = SourceError::invalid(file);
    let mut table = TableBuilder::new(file, limits);
    let mut opened = Vec::with_capacity(shards.len());
    for (i, path) in shards.iter().enumerate() {
        if shards.len() > 1 && path.parent().unwrap_or(Path::new("")) != folder {
            return Err(invalid(format!(
                "shard '{}' is outside the folder of '{}'",
                path.display(),
                file.display()
            )));
        }
        let mut shard_limits = *limits;
        shard_limits.max_tensor_count = limits.max_tensor_count.saturating_sub(table.len());
        let (state, rows) = open(path, &shard_limits)?;
        if let Some(routing) = routing {
            routing
                .check_shard(i, &mut rows.iter().map(|(info, _)| info.name()))
                .map_err(&invalid)?;
        }
        for (info, place) in rows {
            table.push(info, InShard { shard: i, place })?;
        }
        opened.push((path.clone(), state));
    }
    // Two of one name in one file need no "where".
    let table = table.finish(|p| {
        if shards.len() > 1 {
            format!("in '{}'", shards[p.shard].display())
        } else {
            String::new()
        }
    })?;
    Ok(Sharded {
        shards: opened,
        table,
    })
}
