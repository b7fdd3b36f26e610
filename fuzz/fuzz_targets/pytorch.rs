//! Fuzzes the `torch.save` source (`interop::pytorch`): arbitrary bytes as a `.pt` file (a zip
//! archive, or a legacy file: pickles in a row, so the restricted unpickler sees the bytes
//! directly), opened and every tensor read. Any panic, hang or oversized allocation is a bug;
//! errors are the expected outcome.
#![no_main]

use burnpack::interop::pytorch::PytorchSource;
use burnpack::read::TensorSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("burnpack-fuzz-{}.pt", std::process::id()));
    std::fs::write(&path, data).expect("a scratch file");
    if let Ok(source) = PytorchSource::open(&path) {
        for info in source.tensors() {
            let bytes = source.read(info).expect("a validated view is readable");
            assert_eq!(bytes.len() as u64, info.len());
        }
    }
});
