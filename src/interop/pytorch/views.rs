//! Tensors as views of storages: each view checked against its storage's bytes when the file
//! is opened, and a non-contiguous one gathered into row-major order when it is read.

use burn::tensor::DType;

use super::pickle::{Storage, TensorView};
use super::{StorageEntry, Storages};
use crate::format::{Limits, TensorInfo};

/// A non-contiguous view: gathered element by element (runs where the last stride is 1).
pub(super) struct Strided {
    /// The storage's first byte in the file.
    pub(super) base: u64,
    /// The storage's length in bytes.
    pub(super) storage_len: u64,
    /// The view's first element in the storage.
    pub(super) offset: u64,
    pub(super) strides: Vec<u64>,
}

/// Where a tensor of one file is: its gather (for a non-contiguous view) and its storage.
pub(super) struct Placed {
    pub(super) strided: Option<Strided>,
    pub(super) storage: StorageEntry,
}

/// The bytes of each element of a view of `storage` (elements of `size` bytes) at `offset`
/// with `strides`, in row-major order into `out` (validated when the file was opened: every
/// element lies inside `storage`).
pub(super) fn gather_into(
    out: &mut [u8],
    storage: &[u8],
    shape: &[usize],
    strides: &[u64],
    offset: u64,
    size: usize,
) {
    let rank = shape.len();
    if out.is_empty() {
        return;
    }
    if rank == 0 {
        let at = offset as usize * size;
        out.copy_from_slice(&storage[at..at + size]);
        return;
    }
    // Runs along the last dimension when it is contiguous.
    let inner = shape[rank - 1];
    let run = if strides[rank - 1] == 1 {
        inner * size
    } else {
        size
    };
    let per_outer = if strides[rank - 1] == 1 { 1 } else { inner };
    let mut index = vec![0usize; rank];
    let mut written = 0;
    while written < out.len() {
        let mut at = offset;
        for d in 0..rank {
            at += index[d] as u64 * strides[d];
        }
        for k in 0..per_outer {
            let from = (at + k as u64 * strides[rank - 1]) as usize * size;
            out[written..written + run].copy_from_slice(&storage[from..from + run]);
            written += run;
        }
        // Next index, the last dimension taken whole above.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

pub(super) fn element_size(dtype: DType) -> usize {
    match dtype {
        DType::Bool(_) => 1,
        other => other.size(),
    }
}

/// Whether `strides` are the row-major strides of `shape` (dimensions of 1 aside).
pub(super) fn is_contiguous(shape: &[u64], strides: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// A tensor's table entry: checked against its storage's bytes in the file.
pub(super) fn place(
    name: &str,
    view: &TensorView,
    storage: &Storage,
    storages: &Storages,
    limits: &Limits,
) -> Result<(TensorInfo, Placed), String> {
    let kind = storage.kind;
    let dtype = kind
        .dtype
        .ok_or_else(|| format!("a torch.{} tensor, which Burn has no dtype for", kind.name))?;
    let size = kind.element_size;
    let key = &storage.key;
    let entry = *storages
        .get(key)
        .ok_or_else(|| format!("its storage '{key}' is not in the file"))?;
    let (start, bytes) = (entry.start, entry.len);
    let numel_storage = storage.numel;
    let storage_len = numel_storage
        .checked_mul(size)
        .filter(|&len| len <= bytes)
        .ok_or_else(|| {
            format!(
                "its storage '{key}' declares {numel_storage} elements of {size} bytes; the file \
                 holds {bytes} bytes of it"
            )
        })?;
    let shape: Vec<usize> = view
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| "a dimension that does not fit in memory".to_string())?;
    // A zero dimension makes the view empty, whatever the others are.
    let len = if view.shape.contains(&0) {
        Some(0)
    } else {
        view.shape.iter().try_fold(size, |n, &d| n.checked_mul(d))
    };
    let len = len
        .filter(|&len| len <= limits.max_tensor_size)
        .ok_or_else(|| {
            format!(
                "shape {shape:?} is over the tensor-size limit of {} bytes",
                limits.max_tensor_size
            )
        })?;
    let offset = view
        .offset
        .checked_add(storage.view_offset)
        .ok_or_else(|| "an offset past any storage".to_string())?;
    if len == 0 {
        let info = TensorInfo::external(name.to_string(), dtype, shape, start, 0);
        return Ok((
            info,
            Placed {
                strided: None,
                storage: entry,
            },
        ));
    }
    let last = view
        .shape
        .iter()
        .zip(&view.stride)
        .try_fold(offset, |at, (&d, &s)| {
            at.checked_add((d - 1).checked_mul(s)?)
        });
    // A legacy storage view bounds the tensor to the view, not the whole storage.
    let end = match storage.view_len {
        Some(len) => storage.view_offset.saturating_add(len).min(numel_storage),
        None => numel_storage,
    };
    if last.is_none_or(|last| last >= end) {
        return Err(format!(
            "a view past the end of its storage: offset {offset}, shape {shape:?}, strides {:?}, \
             over a storage of {numel_storage} elements",
            view.stride
        ));
    }
    let at = start + offset * size;
    let info = TensorInfo::external(name.to_string(), dtype, shape, at, len);
    let strided = (!is_contiguous(&view.shape, &view.stride)).then_some(Strided {
        base: start,
        storage_len,
        offset,
        strides: view.stride.clone(),
    });
    Ok((
        info,
        Placed {
            strided,
            storage: entry,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_views_gather_row_major() {
        // A 2x3 matrix stored transposed (strides [1, 2]) over a 6-element storage.
        let storage: Vec<u8> = (0u8..6).collect();
        let mut out = [0u8; 6];
        gather_into(&mut out, &storage, &[2, 3], &[1, 2], 0, 1);
        assert_eq!(out, [0, 2, 4, 1, 3, 5]);
        // Rows of a contiguous last dimension at an offset, every other row.
        let storage: Vec<u8> = (0u8..12).collect();
        let mut out = [0u8; 6];
        gather_into(&mut out, &storage, &[2, 3], &[6, 1], 1, 1);
        assert_eq!(out, [1, 2, 3, 7, 8, 9]);
        assert!(is_contiguous(&[2, 1, 3], &[3, 7, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
    }
}
