//! Fuzzes the source of Burn 0.14-0.21 records (`interop::burn_record`): arbitrary bytes as a
//! named-MessagePack record (`.mpk`) and as a JSON record (`.json`), opened and every tensor
//! read. Any panic, hang or oversized allocation is a bug; errors are the expected outcome.
#![no_main]

use burnpack::format::Limits;
use burnpack::interop::burn_record::{LegacySource, RecordFormat};
use burnpack::read::TensorSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("burnpack-fuzz-{}.record", std::process::id()));
    std::fs::write(&path, data).expect("a scratch file");
    for format in [RecordFormat::NamedMpk, RecordFormat::Json] {
        if let Ok(source) = LegacySource::open_with(&path, format, &Limits::default()) {
            for info in source.tensors() {
                let bytes = source.read(info).expect("a validated range is readable");
                assert_eq!(bytes.len() as u64, info.len());
            }
        }
    }
});
