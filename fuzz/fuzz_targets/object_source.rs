//! Fuzzes the object-storage source: arbitrary bytes as an object of an in-memory store,
//! opened with two ranged GETs (header, then metadata after the limits), every tensor fetched
//! and checked. Any panic, hang or oversized allocation is a bug; errors are expected.
#![no_main]

use std::sync::Arc;

use burnpack::interop::object_store::{Bucket, ObjectLocation, ObjectSource};
use burnpack::read::TensorSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let store = Arc::new(object_store::memory::InMemory::new());
    let location = ObjectLocation::new(store as Arc<dyn Bucket>, "fuzz.bpk");
    location.put_all(data.to_vec()).expect("an in-memory put");
    if let Ok(source) = ObjectSource::open(&location) {
        for info in source.tensors() {
            if let Ok(bytes) = source.read(info) {
                assert_eq!(bytes.len() as u64, info.len());
            }
        }
    }
});
