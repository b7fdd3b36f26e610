//! Where a record's tensor bytes go: moved down to 8-byte boundaries in a decompressed
//! file, or appended, aligned, to one buffer of decoded tensors.

use super::node::{Found, Payload};

/// Decoded JSON tensors are laid out at offsets that are multiples of this (every element
/// type's alignment), so each is a window of one buffer.
const DECODED_ALIGN: usize = 64;

/// Moves each tensor's bytes in `buffer` down to the 8-byte boundary at or below them, when
/// that stays clear of the previous tensor's bytes (between two tensors lie their `MessagePack`
/// heads, which the walk has read), and updates the offsets in `found`.
pub(super) fn compact(buffer: &mut [u8], found: &mut [Found]) {
    let mut order: Vec<usize> = (0..found.len()).collect();
    order.sort_by_key(|&i| match found[i].tensor.payload {
        Payload::At(at) => at,
        Payload::Owned(_) => usize::MAX,
    });
    let mut previous_end = 0;
    for i in order {
        let len = found[i].tensor.len;
        let Payload::At(at) = &mut found[i].tensor.payload else {
            continue;
        };
        let to = *at & !7;
        if to >= previous_end && to != *at {
            buffer.copy_within(*at..*at + len, to);
            *at = to;
        }
        previous_end = *at + len;
    }
}

/// Appends `bytes` at the next multiple of [`DECODED_ALIGN`]; returns where.
pub(super) fn append_aligned(out: &mut Vec<u8>, bytes: &[u8]) -> usize {
    let start = out.len().next_multiple_of(DECODED_ALIGN);
    out.resize(start, 0);
    out.extend_from_slice(bytes);
    start
}
