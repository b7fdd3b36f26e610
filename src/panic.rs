//! Panics from code this crate calls on the user's behalf (deferred providers, a backend
//! refusing data): caught, turned into an error message, and kept off the user's stderr.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Set while this thread runs code under [`catch_quiet`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Runs `f`, returning its panic's message instead of unwinding further. The panic hook in
/// force is wrapped once so that it stays silent for panics caught here (on this thread) and
/// behaves as before for every other panic; a hook the program sets later replaces the
/// wrapper, and such panics are then printed by it as usual.
///
/// A program built with `panic = "abort"` cannot catch anything: callers check first what
/// they can (dtypes, lengths, kinds) so that a backend is never handed data known to make it
/// panic.
pub(crate) fn catch_quiet<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|quiet| quiet.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|quiet| quiet.set(was));
    result.map_err(|payload| message(payload.as_ref()))
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
