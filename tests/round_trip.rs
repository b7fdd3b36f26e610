//! Round trips through every source and destination, and the zero-copy contract of views.

mod common;

use std::path::Path;

use burn::tensor::{AllocationProperty, Bytes, DType};
use burnpack::format::TENSOR_ALIGNMENT;
use burnpack::read::{ReadMode, ReadOptions, Reader};
use burnpack::{Entry, Scalar, WriteMode, Writer};
use common::{Spec, every_dtype, ours_checked as ours};

fn check(reader: &Reader, specs: &[Spec]) {
    assert_eq!(reader.tensors().len(), specs.len());
    for spec in specs {
        let info = reader.tensor(&spec.name).expect(&spec.name);
        assert_eq!(
            (info.dtype(), info.shape(), info.param_id()),
            (spec.dtype, &spec.shape[..], spec.param_id)
        );
        assert_eq!(&reader.bytes(&spec.name).unwrap()[..], &spec.data[..]);
        assert_eq!(
            info.offset() % TENSOR_ALIGNMENT,
            0,
            "{} not 256-aligned",
            spec.name
        );
    }
}

#[test]
fn file_round_trip_in_every_read_mode() {
    let specs = every_dtype();
    let dir = tempfile::tempdir().unwrap();
    for (mode, name) in [
        (WriteMode::Atomic, "atomic.bpk"),
        (WriteMode::InPlace, "in_place.bpk"),
    ] {
        let path = dir.path().join(name);
        let size = Writer::new(specs.iter().map(Spec::entry).collect())
            .mode(mode)
            .write_to_file(&path)
            .unwrap();
        assert_eq!(size, std::fs::metadata(&path).unwrap().len());
        assert_eq!(std::fs::read(&path).unwrap(), ours(&specs));
        check(&Reader::open(&path).unwrap(), &specs);
        check(&Reader::open_buffered(&path).unwrap(), &specs);
    }
}

#[test]
fn memory_destinations_match_the_file() {
    let specs = every_dtype();
    let writer = || Writer::new(specs.iter().map(Spec::deferred_entry).collect());
    let size = writer().size().unwrap() as usize;
    // A dirty, oversized buffer: gaps must still come out zero.
    let mut buffer = vec![0xAAu8; size + 100];
    assert_eq!(writer().write_into(&mut buffer).unwrap(), size as u64);
    assert_eq!(&buffer[..size], &ours(&specs)[..]);
    assert_eq!(&writer().into_bytes().unwrap()[..], &ours(&specs)[..]);

    let mut small = vec![0u8; size - 1];
    let err = writer().write_into(&mut small).unwrap_err();
    assert!(
        matches!(err, burnpack::WriteError::BufferTooSmall { .. }),
        "{err}"
    );
}

#[test]
fn bytes_and_static_sources_round_trip() {
    let specs = every_dtype();
    check(
        &Reader::from_bytes(Bytes::from_bytes_vec(ours(&specs))).unwrap(),
        &specs,
    );
    let leaked: &'static [u8] = Box::leak(ours(&specs).into_boxed_slice());
    check(&Reader::from_static(leaked).unwrap(), &specs);
}

#[test]
fn empty_pack_and_metadata_only_pack() {
    let bytes = Writer::new(vec![])
        .with_metadata("only", "metadata")
        .with_scalar("step", 9u32)
        .with_scalar("lr", 1e-3f64)
        .into_bytes()
        .unwrap();
    let reader = Reader::from_bytes(bytes).unwrap();
    assert!(reader.tensors().is_empty());
    assert_eq!(reader.metadata()["only"], "metadata");
    assert_eq!(reader.scalars()["step"], Scalar::UInt(9));
    assert_eq!(f64::try_from(reader.scalars()["lr"]).unwrap(), 1e-3);
    // No tensors: the file ends where the data section would start.
    assert_eq!(reader.layout().file_len(), reader.layout().data_start());
}

#[test]
fn mapped_tensors_are_windows_into_the_mapping() {
    let specs = every_dtype();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    Writer::new(specs.iter().map(Spec::entry).collect())
        .write_to_file(&path)
        .unwrap();
    let reader = Reader::open(&path).unwrap();
    let base = reader
        .bytes(reader.tensors_by_position().next().unwrap().name())
        .unwrap();
    let first_offset = reader.tensors_by_position().next().unwrap().offset();
    let base_ptr = base.as_ptr() as usize - first_offset as usize;
    for info in reader.tensors() {
        let bytes = reader.read(info).unwrap();
        assert!(matches!(bytes.property(), AllocationProperty::File));
        assert!(reader.is_zero_copy(info));
        if !info.is_empty() {
            // The window's address is the mapping's address plus the file offset: no copy.
            assert_eq!(
                bytes.as_ptr() as usize,
                base_ptr + info.offset() as usize,
                "{}",
                info.name()
            );
            assert_eq!(bytes.as_ptr() as usize % 256, 0);
        }
    }
    assert_eq!(reader.unaligned().count(), 0);
    // Views outlive the reader: the mapping lives as long as any of them.
    let view = reader.bytes("scalar").unwrap();
    drop(reader);
    assert_eq!(
        &view[..],
        &specs.iter().find(|s| s.name == "scalar").unwrap().data[..]
    );
}

#[test]
fn static_and_bytes_sources_are_not_copied() {
    let specs = every_dtype();
    let leaked: &'static [u8] = Box::leak(ours(&specs).into_boxed_slice());
    let reader = Reader::from_static(leaked).unwrap();
    for info in reader.tensors().iter().filter(|i| !i.is_empty()) {
        let bytes = reader.read(info).unwrap();
        assert_eq!(
            bytes.as_ptr() as usize,
            leaked.as_ptr() as usize + info.offset() as usize
        );
        assert!(!matches!(bytes.property(), AllocationProperty::Native));
    }

    let owned = Bytes::from_bytes_vec(ours(&specs));
    let addr = owned.as_ptr() as usize;
    let reader = Reader::from_bytes(owned).unwrap();
    let info = reader.tensor("quant.weight").unwrap();
    assert_eq!(
        reader.read(info).unwrap().as_ptr() as usize,
        addr + info.offset() as usize
    );
}

#[test]
fn buffered_reads_copy_into_aligned_buffers() {
    let specs = every_dtype();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.bpk");
    std::fs::write(&path, ours(&specs)).unwrap();
    let reader = ReadOptions::new()
        .mode(ReadMode::Buffered)
        .open(&path)
        .unwrap();
    for info in reader.tensors() {
        assert!(!reader.is_zero_copy(info));
        let bytes = reader.read(info).unwrap();
        assert_eq!(bytes.as_ptr() as usize % 8, 0, "{}", info.name());
    }
    // Opening read only the header and metadata: deleting the file's data now would be
    // noticed only by reads, which still work through the open descriptor.
    std::fs::remove_file(&path).unwrap();
    check(&reader, &specs);
}

#[test]
fn listing_touches_no_tensor_data() {
    // A provider that would panic if anything asked for its bytes before the write, and a
    // reader over a buffer whose data section is poisoned after opening: listing still works.
    let specs = every_dtype();
    let mut bytes = ours(&specs);
    let reader_view = Reader::from_bytes(Bytes::from_bytes_vec(bytes.clone())).unwrap();
    let data_start = reader_view.layout().data_start() as usize;
    bytes[data_start..].fill(0xFF);
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
    for (a, b) in reader.tensors().iter().zip(reader_view.tensors()) {
        assert_eq!(
            (a.name(), a.dtype(), a.shape(), a.param_id()),
            (b.name(), b.dtype(), b.shape(), b.param_id())
        );
    }
}

#[test]
fn entries_keep_their_order_in_the_file() {
    let entries = vec![
        Entry::resident(
            "c",
            DType::U8,
            vec![300],
            Bytes::from_bytes_vec(vec![1; 300]),
        ),
        Entry::resident("a", DType::U8, vec![1], Bytes::from_bytes_vec(vec![2])),
        Entry::resident("b", DType::U8, vec![0], Bytes::from_bytes_vec(vec![])),
    ];
    let plan = Writer::new(entries).plan().unwrap();
    let s = plan.slots();
    assert_eq!(s[0].offset, plan.data_start());
    assert_eq!(s[1].offset, plan.data_start() + 512);
    assert_eq!(s[2].offset, plan.data_start() + 768);
    assert_eq!(plan.total_size(), plan.data_start() + 768);
}

/// Saves past the size where Linux writes go past the page cache (64 MiB of entries in hand:
/// each chunk's block-aligned interior direct, its partial blocks buffered; with a deferred
/// entry, buffered): tensors of odd sizes, so chunks start and end inside blocks, small
/// neighbours grouped, all resident and half deferred, in both modes,
/// on the temporary directory's filesystem and on tmpfs (which refuses direct I/O, so the
/// save goes buffered): the file is byte for byte the buffer the same writer makes, and every
/// checksum verifies.
#[test]
fn large_saves_keep_every_byte_whichever_way_they_are_written() {
    let sizes = [
        13usize,
        (40 << 20) + 4093,
        300,
        24 << 20,
        1 << 20,
        7,
        (9 << 20) + 1,
    ];
    let data = |i: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|j| (j.wrapping_mul(31) ^ (j >> 12) ^ (i * 7)) as u8)
            .collect()
    };
    let entries = |deferred: bool| -> Vec<Entry> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let name = format!("t{i}");
                if i % 2 == 0 || !deferred {
                    Entry::resident(
                        name,
                        DType::U8,
                        vec![len],
                        Bytes::from_bytes_vec(data(i, len)),
                    )
                } else {
                    Entry::deferred(name, DType::U8, vec![len], len as u64, move || {
                        Ok(Bytes::from_bytes_vec(data(i, len)))
                    })
                }
            })
            .collect()
    };
    let expected = Writer::new(entries(false)).into_bytes().unwrap();
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    if Path::new("/dev/shm").is_dir() {
        dirs.extend(tempfile::tempdir_in("/dev/shm").ok());
    }
    for (dir, deferred) in dirs.iter().flat_map(|d| [(d, false), (d, true)]) {
        for mode in [WriteMode::Atomic, WriteMode::InPlace] {
            let path = dir.path().join("large.bpk");
            Writer::new(entries(deferred))
                .mode(mode)
                .threads(2)
                .write_to_file(&path)
                .unwrap();
            let written = std::fs::read(&path).unwrap();
            assert!(
                written == expected[..],
                "{} ({mode:?}, deferred: {deferred}) differs from the buffer",
                path.display()
            );
            let reader = Reader::open(&path).unwrap();
            assert_eq!(reader.verify_all().unwrap(), sizes.len());
            std::fs::remove_file(&path).unwrap();
        }
    }
}
