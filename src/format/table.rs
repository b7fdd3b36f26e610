//! The tensors of a metadata blob as one table, for opening: every name in one shared buffer
//! and shapes of rank up to 4 held inline, so a pack of 10,000 tensors opens (and its
//! [`Layout`](super::Layout) drops) without 20,000 small allocations.

#[allow(unused_imports)]
use super::prelude::*;

use alloc::sync::Arc;

use burn::tensor::DType;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// One tensor's entry in the metadata, exactly as stored.
///
/// ```
/// use burn::tensor::DType;
/// use burnpack::format::Descriptor;
/// let d = Descriptor { dtype: DType::F32, shape: vec![2], data_offsets: (0, 8), param_id: None };
/// assert_eq!(d.data_offsets.1 - d.data_offsets.0, 8);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Descriptor {
    /// Element type.
    pub dtype: DType,
    /// Dimensions; empty for a scalar tensor.
    pub shape: Vec<u64>,
    /// `[start, end)` relative to the data section.
    pub data_offsets: (u64, u64),
    /// The parameter's `ParamId`, when the tensor is a module parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_id: Option<u64>,
}

/// Dimensions held inline up to rank 4 (every parameter of the common layers).
pub(crate) type Dims<T> = SmallVec<[T; 4]>;

/// A tensor's name: a range of a buffer shared by every tensor of one file (or the name
/// alone, for tensors of other containers). Cloning it does not copy the text.
#[derive(Clone)]
pub(crate) struct Name {
    arena: Arc<str>,
    start: usize,
    end: usize,
}

impl Name {
    /// `range` of `arena`, which must lie on character boundaries (ranges pushed by
    /// [`Table::push`] do).
    pub(super) fn new(arena: &Arc<str>, (start, end): (usize, usize)) -> Self {
        debug_assert!(arena.is_char_boundary(start) && arena.is_char_boundary(end));
        Self {
            arena: Arc::clone(arena),
            start,
            end,
        }
    }
}

impl From<String> for Name {
    fn from(name: String) -> Self {
        let end = name.len();
        Self {
            arena: Arc::from(name),
            start: 0,
            end,
        }
    }
}

impl core::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        // In range and on boundaries by construction; `get` keeps a mistake from panicking.
        self.arena.get(self.start..self.end).unwrap_or_default()
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl core::fmt::Debug for Name {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&**self, f)
    }
}

/// One tensor's descriptor in a [`Table`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// `[start, end)` of the name in [`Table::names`].
    pub name: (usize, usize),
    pub dtype: DType,
    pub shape: Dims<u64>,
    pub data_offsets: (u64, u64),
    pub param_id: Option<u64>,
}

/// The `tensors` map of a metadata blob, in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Table {
    names: String,
    pub rows: Vec<Row>,
}

impl Table {
    /// An empty table with room for `rows` tensors and `names` bytes of names.
    pub fn with_capacity(rows: usize, names: usize) -> Self {
        Self {
            names: String::with_capacity(names),
            rows: Vec::with_capacity(rows),
        }
    }

    /// Appends the name of the next row; returns its range for [`Row::name`].
    pub fn push_name(&mut self, name: &str) -> (usize, usize) {
        let start = self.names.len();
        self.names.push_str(name);
        (start, self.names.len())
    }

    /// The name of `row`.
    #[cfg(test)]
    pub fn name(&self, row: &Row) -> &str {
        self.names.get(row.name.0..row.name.1).unwrap_or_default()
    }

    /// The shared buffer the [`Name`]s of this table's rows point into, and a way to make
    /// them.
    pub fn into_names(self) -> (Names, Vec<Row>) {
        (Names(Arc::from(self.names)), self.rows)
    }

    /// From the general decoder's list of named descriptors.
    pub fn from_pairs(pairs: Vec<(String, Descriptor)>) -> Self {
        let names = pairs.iter().map(|(name, _)| name.len()).sum();
        let mut table = Self::with_capacity(pairs.len(), names);
        for (name, d) in pairs {
            let name = table.push_name(&name);
            table.rows.push(Row {
                name,
                dtype: d.dtype,
                shape: d.shape.into_iter().collect(),
                data_offsets: d.data_offsets,
                param_id: d.param_id,
            });
        }
        table
    }

    /// As the public [`Metadata::tensors`](super::Metadata::tensors) list.
    #[cfg(test)]
    pub fn into_pairs(self) -> Vec<(String, Descriptor)> {
        self.rows
            .iter()
            .map(|row| {
                (
                    self.name(row).to_string(),
                    Descriptor {
                        dtype: row.dtype,
                        shape: row.shape.to_vec(),
                        data_offsets: row.data_offsets,
                        param_id: row.param_id,
                    },
                )
            })
            .collect()
    }
}

/// The names of a table, shared by the [`Name`]s made from it.
pub(crate) struct Names(Arc<str>);

impl Names {
    /// The name at `range` (a [`Row::name`] of the table this came from).
    pub fn name(&self, range: (usize, usize)) -> Name {
        Name::new(&self.0, range)
    }
}
