//! Progress on a terminal for long work (`convert`, `verify`, `diff`, `migrate`): a bar of bytes
//! drawn on standard error from 256 MiB on, and nothing at all when standard error is not a
//! terminal (piped, redirected, in CI).

use std::sync::Arc;

/// Work smaller than this finishes before a bar would help.
const SHOWN_FROM: u64 = 256 << 20;

/// A progress bar over `total` bytes.
pub(crate) struct Bar(pub(crate) indicatif::ProgressBar);

impl Bar {
    /// A bar for `total` bytes, labelled `what`; hidden below 256 MiB or off a terminal.
    pub(crate) fn new(total: u64, what: &str) -> Self {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta} {msg}",
            )
            .expect("valid template"),
        );
        bar.set_message(what.to_string());
        // indicatif draws on standard error only when it is a terminal.
        if total < SHOWN_FROM {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        Self(bar)
    }

    /// A bar over `count` steps (epochs), labelled `what`; off a terminal, nothing.
    pub(crate) fn steps(count: u64, what: &str) -> Self {
        let bar = indicatif::ProgressBar::new(count);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} {msg}")
                .expect("valid template"),
        );
        bar.set_message(what.to_string());
        Self(bar)
    }

    /// Work whose progress cannot be counted (a writer that reports none): a spinner with the
    /// time taken, under the same rules.
    pub(crate) fn working(&self) {
        if !self.0.is_hidden() {
            self.0.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                    .expect("valid template"),
            );
            self.0
                .enable_steady_tick(std::time::Duration::from_millis(200));
        }
    }

    /// Adds `bytes` done.
    pub(crate) fn inc(&self, bytes: u64) {
        self.0.inc(bytes);
    }

    /// A function that adds bytes done, for other threads.
    pub(crate) fn counter(&self) -> impl Fn(u64) + Send + Sync + 'static {
        let bar = Arc::new(self.0.clone());
        move |bytes| bar.inc(bytes)
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        self.0.finish_and_clear();
    }
}
