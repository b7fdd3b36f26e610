//! What the write pass hands to the file: chunks of neighbouring entries' bytes with the zeros
//! between their slots, written with positional writes, and the checksums computed on the way.

use std::fs::File;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use super::entry::Data;
use super::plan::Plan;
use crate::format::TENSOR_ALIGNMENT;

/// Bytes ready to be written at `offset`: one or more neighbouring entries' own bytes (not
/// copied), each followed by the zeros up to the next slot. `tensor` names the (first)
/// entry, for errors.
pub(super) struct Chunk {
    pub(super) offset: u64,
    pub(super) parts: Vec<Part>,
    pub(super) tensor: String,
    /// Whether the parts' checksums are recorded already (else [`Chunk::write_at`] computes
    /// them as it writes).
    pub(super) hashed: bool,
}

/// One entry's bytes in a [`Chunk`], the zeros that follow it, and its place among the
/// checksums.
pub(super) struct Part {
    pub(super) bytes: Data,
    pub(super) pad: usize,
    pub(super) rank: usize,
    /// Its checksum is recorded already (the entry's known checksum).
    pub(super) summed: bool,
}

/// Zeros for the gaps between slots (always shorter than the alignment).
pub(super) static ZEROS: [u8; TENSOR_ALIGNMENT as usize] = [0; TENSOR_ALIGNMENT as usize];

/// Bytes of a large entry checksummed, then written, at a time (see [`Chunk::write_at`]).
pub(super) const PIECE: usize = 256 << 10;

impl Chunk {
    pub(super) fn len(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| (p.bytes.len() + p.pad) as u64)
            .sum()
    }

    /// Writes the chunk at its offset with positional (vectored) writes, from where the
    /// entries' bytes are (a parameter's storage, a read-back buffer) to the kernel, never
    /// through an assembly buffer; any thread may write its own chunk at once.
    ///
    /// Checksums not yet recorded are computed here, a large entry [`PIECE`] by piece right
    /// before the piece is written: the piece is then in this core's cache when the kernel
    /// copies it, one pass over the tensor's memory instead of two.
    ///
    /// Each write holds `turn`: the kernel serializes writes to one file on its inode lock
    /// anyway, and a writer that waits for it there spins on the other's CPU time, where a
    /// writer waiting here sleeps (the checksums still run beside the other's write).
    pub(super) fn write_at(
        &self,
        file: &File,
        sums: &Checksums,
        turn: &Mutex<()>,
    ) -> std::io::Result<()> {
        use std::io::IoSlice;
        let locked = || turn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(self.parts.len() * 2);
        let mut at = self.offset;
        let mut queued = 0u64;
        for part in &self.parts {
            let bytes: &[u8] = &part.bytes;
            let hashed = self.hashed || part.summed;
            let streamed = !hashed && sums.enabled && bytes.len() > PIECE;
            if streamed {
                let guard = locked();
                crate::platform::write_vectored_all_at(file, &mut slices, at)?;
                drop(guard);
                at += queued;
                slices.clear();
                queued = 0;
                let mut hasher = twox_hash::XxHash3_64::new();
                for piece in bytes.chunks(PIECE) {
                    std::hash::Hasher::write(&mut hasher, piece);
                    let guard = locked();
                    crate::platform::write_all_at(file, piece, at)?;
                    drop(guard);
                    at += piece.len() as u64;
                }
                sums.set(part.rank, std::hash::Hasher::finish(&hasher));
            } else {
                if !hashed {
                    sums.record(part.rank, bytes);
                }
                // A zero-length tensor has nothing to write (an empty slice would make the
                // kernel answer 0 bytes written, which is taken for a full disk).
                if !bytes.is_empty() {
                    slices.push(IoSlice::new(bytes));
                    queued += bytes.len() as u64;
                }
            }
            if part.pad > 0 {
                slices.push(IoSlice::new(&ZEROS[..part.pad]));
                queued += part.pad as u64;
            }
        }
        let _guard = locked();
        crate::platform::write_vectored_all_at(file, &mut slices, at)
    }
}

/// Checksums computed in the data pass, by position in the tensors map.
pub(super) struct Checksums {
    sums: Vec<AtomicU64>,
    pub(super) enabled: bool,
}

impl Checksums {
    pub(super) fn new(plan: &Plan) -> Self {
        Self::sized(plan.slots().len(), plan.has_checksums())
    }

    /// Room for `n` checksums, computed only when `enabled`.
    pub(super) fn sized(n: usize, enabled: bool) -> Self {
        let n = if enabled { n } else { 0 };
        Self {
            sums: (0..n).map(|_| AtomicU64::new(0)).collect(),
            enabled,
        }
    }

    pub(super) fn record(&self, rank: usize, bytes: &[u8]) {
        if self.enabled {
            self.sums[rank].store(crate::format::checksum(bytes), Ordering::Relaxed);
        }
    }

    /// Records a checksum computed elsewhere (by pieces, in [`Chunk::write_at`]).
    pub(super) fn set(&self, rank: usize, sum: u64) {
        self.sums[rank].store(sum, Ordering::Relaxed);
    }

    pub(super) fn values(&self) -> Vec<u64> {
        self.sums
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect()
    }
}
