//! The stack, its marks and the memo. Every value is a node's index: a memo "bomb" of
//! repeated `GET`s adds indices, never copies.

use super::machine::Machine;
use super::{Fault, Node, fault};

/// Most entries in the memo (a state dict uses a few per tensor).
const MAX_MEMO: usize = 1 << 22;

/// What one memo entry costs (the hash map's slot and its share of spare capacity).
const MEMO_ENTRY: usize = 32;

impl Machine<'_> {
    /// A new node on the stack. The node table and the stack grow by doubling, and each
    /// growth is counted before it is made, so what is counted is what is allocated (see
    /// [`Memory::room_for_one`](super::memory::Memory::room_for_one)).
    pub(super) fn push(&mut self, node: Node) -> Result<(), Fault> {
        self.memory.room_for_one(&mut self.nodes, self.at)?;
        self.nodes.push(node);
        self.push_shared(self.nodes.len() - 1)
    }

    /// A node that exists already (shared, or the result of a call) on the stack.
    pub(super) fn push_shared(&mut self, id: usize) -> Result<(), Fault> {
        self.memory.room_for_one(&mut self.stack, self.at)?;
        self.stack.push(id);
        Ok(())
    }

    pub(super) fn pop(&mut self) -> Result<usize, Fault> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(fault("a value taken from below a MARK"));
        }
        self.stack.pop().ok_or_else(|| fault("the stack is empty"))
    }

    pub(super) fn top(&self) -> Result<usize, Fault> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| fault("the stack is empty"))
    }

    /// Everything above the last MARK, which is removed.
    pub(super) fn pop_mark(&mut self) -> Result<Vec<usize>, Fault> {
        let mark = self.marks.pop().ok_or_else(|| fault("no MARK to pop to"))?;
        let items = self.stack.split_off(mark.min(self.stack.len()));
        // What moves into a container stays: counted (the stack itself is transient).
        self.charge(items.len() * 8)?;
        Ok(items)
    }

    /// A MARK: where the next `pop_mark` takes from, its table grown and counted like the
    /// stack's.
    pub(super) fn mark(&mut self) -> Result<(), Fault> {
        self.memory.room_for_one(&mut self.marks, self.at)?;
        self.marks.push(self.stack.len());
        Ok(())
    }

    pub(super) fn memo_put(&mut self, key: u32) -> Result<(), Fault> {
        let top = self.top()?;
        if !self.memo.contains_key(&key) {
            if self.memo.len() >= MAX_MEMO {
                return Err(fault(format!("more than {MAX_MEMO} memo entries")));
            }
            self.charge(MEMO_ENTRY)?;
        }
        self.memo.insert(key, top);
        Ok(())
    }

    pub(super) fn memo_get(&mut self, key: u32) -> Result<(), Fault> {
        let id = *self
            .memo
            .get(&key)
            .ok_or_else(|| fault(format!("memo entry {key} was never stored")))?;
        self.push_shared(id)
    }
}
