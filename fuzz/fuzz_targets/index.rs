//! Fuzzes arbitrary bytes as the index JSON of a sharded safetensors or PyTorch model
//! (`interop::index::ShardIndex::parse`). The body is the library's
//! `burnpack::interop::fuzz::index`, which `tests/fuzz_corpus.rs` replays over the committed
//! corpus. Any panic, hang or oversized allocation is a bug; errors are the expected outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| burnpack::interop::fuzz::index(data));
