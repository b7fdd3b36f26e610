//! Where a save's time goes, part by part (what `SaveReport::phases` reports).

use std::time::{Duration, Instant};

/// Wall time by part of a save, in the order the parts first ran; a part that runs more
/// than once (a data file per part of the state) adds up.
#[derive(Default, Debug, Clone)]
pub(crate) struct Phases(pub(crate) Vec<(&'static str, Duration)>);

impl Phases {
    /// Adds `time` to the part `name`.
    pub(crate) fn add(&mut self, name: &'static str, time: Duration) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += time,
            None => self.0.push((name, time)),
        }
    }

    /// Adds the time since `*since` to the part `name`, and restarts `*since`.
    pub(crate) fn lap(&mut self, name: &'static str, since: &mut Instant) {
        let now = Instant::now();
        self.add(name, now - *since);
        *since = now;
    }
}
