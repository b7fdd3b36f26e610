//! Fuzzes the reader: open arbitrary bytes, read every tensor, verify every checksum. Any
//! panic, hang or oversized allocation is a bug; errors are the expected outcome.
#![no_main]

use burn::tensor::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = burnpack::read::Reader::from_bytes(Bytes::from_bytes_vec(data.to_vec())) else {
        return;
    };
    for info in reader.tensors() {
        let bytes = reader.read(info).expect("a validated range is readable");
        assert_eq!(bytes.len() as u64, info.len());
    }
    let _ = reader.verify_all();
    let _ = reader.tensors_by_position().count();
});
