//! Index renumbering of [`LoadOptions::map_indices_contiguous`](super::LoadOptions): the
//! numeric segments of a source's names made contiguous per place, as burn-store's
//! `map_indices_contiguous` does (Burn issue #4149).

use std::collections::BTreeMap;

/// The source's names as a tree of their `.`-separated segments (a segment's place is the
/// node of the prefix before it, the source's own indices included), and for each node with
/// index children the rank of each index there: `fc` -> {0: 0, 2: 1, 4: 2}. Built and walked
/// in time and memory linear in the names' length (no prefix is copied).
pub(crate) struct Indices<'n> {
    /// The children of each node by segment; node 0 is the root.
    children: Vec<foldhash::HashMap<&'n str, usize>>,
    /// For a node with index children: each index and its rank.
    ranks: foldhash::HashMap<usize, BTreeMap<usize, usize>>,
}

impl<'n> Indices<'n> {
    /// The indices of `names` (segments split at `.`; a segment is an index when it parses as
    /// a `usize`, as in burn-store), each place ranked on its own.
    pub(crate) fn of(names: impl Iterator<Item = &'n str>) -> Self {
        let mut children: Vec<foldhash::HashMap<&'n str, usize>> = vec![Default::default()];
        let mut ranks: foldhash::HashMap<usize, BTreeMap<usize, usize>> = Default::default();
        for name in names {
            let mut node = 0;
            for segment in name.split('.') {
                if let Ok(index) = segment.parse::<usize>() {
                    ranks.entry(node).or_default().insert(index, 0);
                }
                let next = children.len();
                node = *children[node].entry(segment).or_insert(next);
                if node == next {
                    children.push(Default::default());
                }
            }
        }
        for ranked in ranks.values_mut() {
            // BTreeMap: keys in ascending order.
            for (rank, slot) in ranked.values_mut().enumerate() {
                *slot = rank;
            }
        }
        Self { children, ranks }
    }

    /// `name` with each index replaced by its rank at its place; `None` when nothing changes
    /// (or when `name` was not among the names given).
    pub(crate) fn map(&self, name: &str) -> Option<String> {
        let mut out = String::with_capacity(name.len());
        let mut changed = false;
        let mut node = Some(0);
        for (i, segment) in name.split('.').enumerate() {
            if i > 0 {
                out.push('.');
            }
            let rank = node.and_then(|n| {
                let index = segment.parse::<usize>().ok()?;
                self.ranks.get(&n)?.get(&index).copied()
            });
            match rank {
                Some(rank) if rank.to_string() != segment => {
                    changed = true;
                    out.push_str(&rank.to_string());
                }
                _ => out.push_str(segment),
            }
            node = node.and_then(|n| self.children[n].get(segment).copied());
        }
        changed.then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::Indices;

    #[test]
    fn gaps_close_per_place_with_the_source_s_own_prefixes() {
        let names = [
            "feature.layers.0.conv_block.0.weight",
            "feature.layers.0.conv_block.2.weight",
            "feature.layers.2.conv_block.0.weight",
            "feature.layers.2.conv_block.4.weight",
            "fc.1.bias",
            "fc.3.bias",
            "head.weight",
        ];
        let indices = Indices::of(names.iter().copied());
        let mapped: Vec<String> = names
            .iter()
            .map(|n| indices.map(n).unwrap_or_else(|| (*n).to_string()))
            .collect();
        assert_eq!(
            mapped,
            [
                "feature.layers.0.conv_block.0.weight",
                "feature.layers.0.conv_block.1.weight",
                "feature.layers.1.conv_block.0.weight",
                "feature.layers.1.conv_block.1.weight",
                "fc.0.bias",
                "fc.1.bias",
                "head.weight",
            ]
        );
        assert_eq!(indices.map("head.weight"), None);
        assert_eq!(indices.map("feature.layers.0.conv_block.0.weight"), None);
        // A top-level index has the empty prefix.
        let top = Indices::of(["3.w", "7.w"].into_iter());
        assert_eq!(top.map("7.w").as_deref(), Some("1.w"));
    }

    #[test]
    fn a_name_of_many_index_segments_costs_its_length_not_its_square() {
        // 100,000 segments, `2.2.2...`: each place holds one index, ranked 0.
        let name = vec!["2"; 100_000].join(".");
        let indices = Indices::of(std::iter::once(name.as_str()));
        assert_eq!(indices.children.len(), 100_001);
        let mapped = indices.map(&name).unwrap();
        assert_eq!(mapped.len(), name.len());
        assert!(mapped.split('.').all(|s| s == "0"));
    }
}
