//! Tables of tensors kept in name order: the one sort, duplicate check and lookup every table
//! of this crate uses (a pack's [`Layout`](super::Layout) and every source's
//! [`SourceTable`](crate::source::SourceTable)).

#[allow(unused_imports)]
use super::prelude::*;

use super::TensorInfo;

/// Sorts `rows` by `name` (a pass that only compares when they already are, as Burn and this
/// crate write them) and returns the indices of the first two rows with the same name, if
/// any.
pub(crate) fn sort_unique<T>(rows: &mut [T], name: impl Fn(&T) -> &str) -> Option<(usize, usize)> {
    if !rows.is_sorted_by(|a, b| name(a) <= name(b)) {
        rows.sort_by(|a, b| name(a).cmp(name(b)));
    }
    rows.windows(2)
        .position(|w| name(&w[0]) == name(&w[1]))
        .map(|i| (i, i + 1))
}

/// The position of the tensor called `name` in `tensors` (sorted by name).
pub(crate) fn position(tensors: &[TensorInfo], name: &str) -> Option<usize> {
    tensors.binary_search_by(|t| t.name().cmp(name)).ok()
}

/// The position of `info` in `tensors` when it is one of them: the same name, and the same
/// dtype, shape and byte range. A description of another table (another source's, or a
/// changed copy) is `None`, never a guess.
#[cfg_attr(not(feature = "std"), allow(dead_code))]
pub(crate) fn owned(tensors: &[TensorInfo], info: &TensorInfo) -> Option<usize> {
    position(tensors, info.name()).filter(|&i| {
        let mine = &tensors[i];
        mine.offset() == info.offset()
            && mine.len() == info.len()
            && mine.dtype() == info.dtype()
            && mine.shape() == info.shape()
    })
}

/// The indices of `tensors` in the order their bytes appear (by offset, then length, then
/// name: the order of `tensors`), sorted on keys held side by side.
pub(crate) fn position_order(tensors: &[TensorInfo]) -> Vec<usize> {
    let mut keys: Vec<(u64, u64, usize)> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.start, t.len, i))
        .collect();
    if !keys.is_sorted() {
        keys.sort_unstable();
    }
    keys.into_iter().map(|(_, _, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_finds_duplicates_and_answers_not_mine() {
        let mut rows = vec!["b", "a", "c", "a"];
        assert_eq!(sort_unique(&mut rows, |r| r), Some((0, 1)));
        let mut rows = vec!["b", "a", "c"];
        assert_eq!(sort_unique(&mut rows, |r| r), None);
        assert_eq!(rows, ["a", "b", "c"]);
        let t = |name: &str, at| {
            TensorInfo::external(name.into(), burn::tensor::DType::U8, vec![1], at, 1)
        };
        let tensors = [t("a", 0), t("b", 1)];
        assert_eq!(position(&tensors, "b"), Some(1));
        assert_eq!(owned(&tensors, &t("b", 1)), Some(1));
        assert_eq!(owned(&tensors, &t("b", 0)), None);
        assert_eq!(owned(&tensors, &t("z", 1)), None);
    }
}
