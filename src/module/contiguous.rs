//! Index renumbering of [`LoadOptions::map_indices_contiguous`](super::LoadOptions): the
//! numeric segments of a source's names made contiguous per place, as burn-store's
//! `map_indices_contiguous` does (Burn issue #4149).

use std::collections::BTreeMap;

/// For each place an index occurs at (the prefix before it, with the source's own indices),
/// the indices seen there and their rank: `fc` -> {0: 0, 2: 1, 4: 2}.
pub(crate) struct Indices {
    places: BTreeMap<String, BTreeMap<usize, usize>>,
}

impl Indices {
    /// The indices of `names` (segments split at `.`; a segment is an index when it parses as
    /// a `usize`, as in burn-store), each place ranked on its own.
    pub(crate) fn of<'n>(names: impl Iterator<Item = &'n str>) -> Self {
        let mut places: BTreeMap<String, BTreeMap<usize, usize>> = BTreeMap::new();
        for name in names {
            for (at, segment) in segments(name) {
                if let Ok(index) = segment.parse::<usize>() {
                    let prefix = name[..at].strip_suffix('.').unwrap_or("");
                    places
                        .entry(prefix.to_string())
                        .or_default()
                        .insert(index, 0);
                }
            }
        }
        for ranks in places.values_mut() {
            // BTreeMap: keys in ascending order.
            for (rank, slot) in ranks.values_mut().enumerate() {
                *slot = rank;
            }
        }
        Self { places }
    }

    /// `name` with each index replaced by its rank at its place; `None` when nothing changes.
    pub(crate) fn map(&self, name: &str) -> Option<String> {
        let mut out = String::with_capacity(name.len());
        let mut changed = false;
        for (at, segment) in segments(name) {
            if at > 0 {
                out.push('.');
            }
            let rank = segment.parse::<usize>().ok().and_then(|index| {
                let prefix = name[..at].strip_suffix('.').unwrap_or("");
                self.places.get(prefix)?.get(&index).copied()
            });
            match rank {
                Some(rank) if rank.to_string() != segment => {
                    changed = true;
                    out.push_str(&rank.to_string());
                }
                _ => out.push_str(segment),
            }
        }
        changed.then_some(out)
    }
}

/// The `.`-separated segments of `name`, each with where it starts.
fn segments(name: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    name.split('.').map(move |segment| {
        let start = at;
        at += segment.len() + 1;
        (start, segment)
    })
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
}
