//! Fuzzes arbitrary bytes as a file of any format, through the container registry (`interop::open_bytes_any`),
//! held to the source contract; bytes no format takes reach `interop/unknown` (what a file is
//! when it is not weights: a Git LFS pointer, an HTML page, a bincode record). The body is the
//! library's `burnpack::interop::fuzz::any`,
//! which `tests/fuzz_corpus.rs` replays over the committed corpus. Any panic, hang or
//! oversized allocation is a bug; errors are the expected outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| burnpack::interop::fuzz::any(data));
