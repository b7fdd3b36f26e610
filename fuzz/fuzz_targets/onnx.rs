//! Fuzzes arbitrary bytes as an ONNX model (`interop::onnx::OnnxSource::from_bytes`), held to
//! the source contract. The body is the library's `burnpack::interop::fuzz::onnx`, which
//! `tests/fuzz_corpus.rs` replays over the committed corpus. Any panic, hang or oversized
//! allocation is a bug; errors are the expected outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| burnpack::interop::fuzz::onnx(data));
