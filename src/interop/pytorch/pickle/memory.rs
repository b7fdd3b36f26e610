//! What the machine holds, counted before it is taken: one budget that grows with the bytes
//! of the pickle read, charged for every node, container, memo entry and copy, and for each
//! growth of the node table, the stack and the marks.

use super::{Fault, fault};

/// Bytes of graph (nodes, their contents, memo entries, copies made by calls) the machine may
/// hold per byte of the pickle. A `torch.save` state dict needs far less (measured on every
/// file of the tests); a pickle of a million empty lists needs more.
pub(crate) const MEMORY_PER_BYTE: usize = 32;

/// Bytes of graph any pickle may hold beyond [`MEMORY_PER_BYTE`].
pub(crate) const MEMORY_SLACK: usize = 1 << 20;

/// Bytes of graph held so far, against a budget that grows with the bytes read.
#[derive(Debug, Default)]
pub(super) struct Memory {
    held: usize,
}

impl Memory {
    /// Counts `bytes` more of graph, or fails when that would pass the budget: at any
    /// moment, [`MEMORY_PER_BYTE`] per byte of the pickle read so far (`read`), plus
    /// [`MEMORY_SLACK`].
    pub(super) fn charge(&mut self, bytes: usize, read: usize) -> Result<(), Fault> {
        self.held = self.held.saturating_add(bytes);
        let budget = read
            .saturating_mul(MEMORY_PER_BYTE)
            .saturating_add(MEMORY_SLACK);
        if self.held > budget {
            return Err(fault(format!(
                "its object graph would take more than {budget} bytes ({MEMORY_PER_BYTE} per \
                 byte of the pickle read, plus {MEMORY_SLACK}): not a state dict"
            )));
        }
        Ok(())
    }

    /// Room for one more item in `table` (the node table, the stack, the marks): it grows by
    /// doubling (by 1024 items at least), and each growth is counted before it is made, so
    /// what is counted is what is allocated.
    pub(super) fn room_for_one<T>(&mut self, table: &mut Vec<T>, read: usize) -> Result<(), Fault> {
        if table.len() == table.capacity() {
            let more = table.capacity().max(1024);
            self.charge(more * std::mem::size_of::<T>(), read)?;
            table.reserve_exact(more);
        }
        Ok(())
    }
}
