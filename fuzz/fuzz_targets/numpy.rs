//! Fuzzes arbitrary bytes as a NumPy `.npy` array or `.npz` archive
//! (`interop::numpy::NumpySource::from_bytes`), held to the source contract. The body is the
//! library's `burnpack::interop::fuzz::numpy`, which `tests/fuzz_corpus.rs` replays over the
//! committed corpus. Any panic, hang or oversized allocation is a bug; errors are the expected
//! outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| burnpack::interop::fuzz::numpy(data));
