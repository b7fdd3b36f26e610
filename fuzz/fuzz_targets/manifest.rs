//! Fuzzes arbitrary bytes as the references of an incremental checkpoint (the manifest's
//! `burnpack.refs` metadata), opened against two data files in memory. The body is the
//! library's `burnpack::interop::fuzz::manifest`, which `tests/fuzz_corpus.rs` replays over the
//! committed corpus. Any panic, hang or oversized allocation is a bug; errors are the expected
//! outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| burnpack::interop::fuzz::manifest(data));
