//! Fuzzes the safetensors source: arbitrary bytes as a `.safetensors` file, opened (header
//! validated by the `safetensors` crate, then by this crate's checks), every tensor read. Any
//! panic, hang or oversized allocation is a bug; errors are the expected outcome.
#![no_main]

use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::read::TensorSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("burnpack-fuzz-{}.safetensors", std::process::id()));
    std::fs::write(&path, data).expect("a scratch file");
    if let Ok(source) = SafetensorsSource::open(&path) {
        for info in source.tensors() {
            let bytes = source.read(info).expect("a validated range is readable");
            assert_eq!(bytes.len() as u64, info.len());
        }
    }
});
