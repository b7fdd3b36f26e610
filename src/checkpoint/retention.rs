//! Which checkpoints a manager keeps (the last few, the newest valid one, the best by a
//! metric), and the newer checkpoint a save would land behind.

use super::file::Checkpoint;
use crate::source::PackSource;

/// Which checkpoints a manager keeps: the last `keep_last`, the newest valid one, and
/// optionally the best by a progress metric.
#[derive(Debug, Clone)]
pub(crate) struct Retention {
    pub(crate) keep_last: usize,
    /// The metric's name, and whether lower is better.
    pub(crate) best: Option<(String, bool)>,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep_last: 3,
            best: None,
        }
    }
}

impl Retention {
    /// Keeps the `n` most recent checkpoints (at least 1).
    pub(crate) fn keep_last(self, n: usize) -> Self {
        Self {
            keep_last: n.max(1),
            ..self
        }
    }

    /// Also keeps the best by `progress.<metric>`.
    pub(crate) fn keep_best(self, metric: impl Into<String>, lower_is_better: bool) -> Self {
        Self {
            best: Some((metric.into(), lower_is_better)),
            ..self
        }
    }

    /// The checkpoints of `all` (sorted by `step`, oldest first) to delete. `open` opens one
    /// (`None` when it does not open as a checkpoint), each at most once: the newest that
    /// opens is always kept, and with a `best` policy each is opened for its metric.
    pub(crate) fn doomed<'e, E, S: PackSource>(
        &self,
        all: &'e [E],
        step: impl Fn(&E) -> u64,
        mut open: impl FnMut(&E) -> Option<Checkpoint<S>>,
    ) -> Vec<&'e E> {
        let mut keep: Vec<u64> = all.iter().rev().take(self.keep_last).map(&step).collect();
        match &self.best {
            None => keep.extend(all.iter().rev().find(|e| open(e).is_some()).map(&step)),
            Some((metric, lower)) => {
                // Every valid checkpoint, oldest first, with its metric when it has one.
                let valid: Vec<(u64, Option<f64>)> = all
                    .iter()
                    .filter_map(|e| {
                        let value = open(e)?.progress().scalars.get(metric).copied();
                        Some((step(e), value.and_then(|v| f64::try_from(v).ok())))
                    })
                    .collect();
                keep.extend(valid.last().map(|(step, _)| *step));
                let scored = valid.iter().filter_map(|(step, v)| Some((*step, (*v)?)));
                let best = if *lower {
                    scored.min_by(|a, b| a.1.total_cmp(&b.1))
                } else {
                    scored.max_by(|a, b| a.1.total_cmp(&b.1))
                };
                keep.extend(best.map(|(step, _)| step));
            }
        }
        all.iter().filter(|e| !keep.contains(&step(e))).collect()
    }
}

/// The newest entry of `all` (sorted by `step`, oldest first) of a step after `after` that
/// opens as a checkpoint: what a save of step `after` would land behind.
pub(crate) fn newer_valid<E, S: PackSource>(
    all: &[E],
    after: u64,
    step: impl Fn(&E) -> u64,
    mut open: impl FnMut(&E) -> Option<Checkpoint<S>>,
) -> Option<&E> {
    all.iter()
        .rev()
        .take_while(|e| step(e) > after)
        .find(|e| open(e).is_some())
}
