//! Checksums (written in the data pass, checked on demand), disk-full and write errors in a
//! child process with a lowered file-size limit.

mod common;

use std::process::Command;

use burn::tensor::{Bytes, DType, Device};
use burnpack::format::{FormatError, Metadata};
use burnpack::module::{LoadOptions, ModuleError, PackModule};
use burnpack::read::Reader;
use burnpack::source::ReadError;
use burnpack::{Entry, Writer};
use common::{Spec, burns, every_dtype, ours_checked};

#[test]
fn every_tensor_gets_a_checksum_of_its_bytes() {
    let specs = every_dtype();
    for bytes in [ours_checked(&specs), {
        // Deferred, in parallel, through a file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.bpk");
        Writer::new(specs.iter().map(Spec::deferred_entry).collect())
            .threads(3)
            .write_to_file(&path)
            .unwrap();
        std::fs::read(&path).unwrap()
    }] {
        let reader = Reader::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
        assert!(reader.layout().has_checksums());
        for spec in &specs {
            let info = reader.tensor(&spec.name).unwrap();
            assert_eq!(
                info.checksum(),
                Some(burnpack::format::checksum(&spec.data)),
                "{}",
                spec.name
            );
        }
        assert_eq!(reader.verify_all().unwrap(), specs.len());
    }
}

/// Large tensors are checksummed piece by piece as they are written (256 KiB at a time, by
/// whichever thread writes them): the result is the checksum of the whole, at every length
/// around a piece's edges, for deferred and resident entries, beside small batched ones.
#[test]
fn checksums_computed_while_writing_equal_the_whole_tensors_checksums() {
    let piece = 256 << 10;
    let lengths = [piece - 1, piece, piece + 1, 3 * piece + 17, 7, 0, 64 << 20];
    let bytes_of = |len: usize, salt: usize| -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + salt) % 251) as u8).collect()
    };
    let mut entries = Vec::new();
    for (k, &len) in lengths.iter().enumerate() {
        let bytes = bytes_of(len, k);
        entries.push(Entry::resident(
            format!("r{k}"),
            DType::U8,
            vec![len],
            Bytes::from_bytes_vec(bytes.clone()),
        ));
        entries.push(Entry::deferred(
            format!("d{k}"),
            DType::U8,
            vec![len],
            len as u64,
            move || Ok(Bytes::from_bytes_vec(bytes)),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pieces.bpk");
    Writer::new(entries)
        .threads(2)
        .write_to_file(&path)
        .unwrap();
    let reader = Reader::open(&path).unwrap();
    for (k, &len) in lengths.iter().enumerate() {
        let expected = burnpack::format::checksum(&bytes_of(len, k));
        for name in [format!("r{k}"), format!("d{k}")] {
            let info = reader.tensor(&name).unwrap();
            assert_eq!(info.checksum(), Some(expected), "{name} ({len} bytes)");
            assert_eq!(
                &reader.read(info).unwrap()[..],
                &bytes_of(len, k)[..],
                "{name}"
            );
        }
    }
    assert_eq!(reader.verify_all().unwrap(), 2 * lengths.len());
}

#[test]
fn a_corrupt_byte_is_found_and_named() {
    let specs = every_dtype();
    let bytes = ours_checked(&specs);
    let clean = Reader::from_bytes(Bytes::from_bytes_vec(bytes.clone())).unwrap();
    for spec in specs.iter().filter(|s| !s.data.is_empty()) {
        let info = clean.tensor(&spec.name).unwrap();
        let mut corrupt = bytes.clone();
        corrupt[info.offset() as usize + spec.data.len() / 2] ^= 0x10;
        let reader = Reader::from_bytes(Bytes::from_bytes_vec(corrupt)).unwrap();
        let err = reader.verify_all().unwrap_err();
        let ReadError::Checksum { tensor, file, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(
            (tensor.as_str(), file.as_str()),
            (spec.name.as_str(), "<memory>")
        );
        assert!(err.to_string().contains("checksum mismatch"));
    }
}

#[test]
fn checksums_of_the_wrong_length_are_refused() {
    let mut meta = Metadata::default();
    meta.tensors.push((
        "w".into(),
        burnpack::format::Descriptor {
            dtype: DType::U8,
            shape: vec![1],
            data_offsets: (0, 1),
            param_id: None,
        },
    ));
    meta.checksums = Some(vec![0; 7]);
    let cbor = meta.encode().unwrap();
    let mut file = burnpack::format::Header::new(cbor.len() as u32)
        .to_bytes()
        .to_vec();
    file.extend_from_slice(&cbor);
    file.resize(
        burnpack::format::data_start(cbor.len() as u32) as usize + 1,
        0,
    );
    let err = Reader::from_bytes(Bytes::from_bytes_vec(file)).unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::Invalid {
                source: FormatError::Checksums {
                    found: 7,
                    tensors: 1
                },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn an_empty_pack_says_whether_it_was_written_with_checksums() {
    for checked in [true, false] {
        let bytes = Writer::new(Vec::new())
            .checksums(checked)
            .into_bytes()
            .unwrap();
        let reader = Reader::from_bytes(bytes).unwrap();
        assert_eq!(reader.layout().has_checksums(), checked);
        assert_eq!(reader.verify_all().unwrap(), 0);
    }
}

#[test]
fn files_without_checksums_load_unverified() {
    let specs = every_dtype();
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(burns(&specs))).unwrap();
    assert!(!reader.layout().has_checksums());
    assert_eq!(
        reader.verify_all().unwrap(),
        0,
        "nothing to verify, nothing failed"
    );
}

/// A one-parameter model.
#[derive(burn::module::Module, Debug)]
struct M {
    w: burn::module::Param<burn::tensor::Tensor<1>>,
}

impl M {
    fn new(values: [f32; 3], device: &Device) -> Self {
        Self {
            w: burn::module::Param::from_data(values, device),
        }
    }
}

/// Saves an `M` to `m.bpk` in `dir` and returns the path and the file's bytes.
fn saved_m(dir: &std::path::Path, device: &Device) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.join("m.bpk");
    M::new([1.0, 2.0, 3.0], device).save_pack(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

#[test]
fn loading_can_verify_checksums() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let (path, mut bytes) = saved_m(dir.path(), &device);
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let fresh = || M::new([0.0; 3], &device);
    assert!(
        fresh().load_pack(&path).is_ok(),
        "without verification the corruption is not seen"
    );
    let err = fresh()
        .load_pack_with(&path, &LoadOptions::new().verify_checksums(true))
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(mismatch.failed[0].0, "w");
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
}

/// Eight tensors of 1 MiB, too much for the 1 MiB limits of the disk-full tests.
fn eight_mib() -> Vec<Entry> {
    (0..8)
        .map(|i| {
            Entry::resident(
                format!("t{i}"),
                DType::U8,
                vec![1 << 20],
                Bytes::from_bytes_vec(vec![i as u8; 1 << 20]),
            )
        })
        .collect()
}

/// Child side: writes an 8 MiB pack over `path` with the file-size limit at 1 MiB.
#[test]
fn fsize_child() {
    let Ok(path) = std::env::var("BURNPACK_FSIZE_PATH") else {
        return;
    };
    // SAFETY: plain system calls in a single-purpose child process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let limit = libc::rlimit {
            rlim_cur: 1 << 20,
            rlim_max: 1 << 20,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let entries = eight_mib();
    let err = Writer::new(entries).write_to_file(&path).unwrap_err();
    println!("ERROR: {err}");
}

#[test]
fn a_full_disk_leaves_the_previous_file_and_no_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bpk");
    let previous = ours_checked(&every_dtype());
    std::fs::write(&path, &previous).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["fsize_child", "--exact", "--test-threads=1", "--nocapture"])
        .env("BURNPACK_FSIZE_PATH", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("ERROR: "))
        .unwrap_or_else(|| panic!("the child reported no error: {stdout}"));
    assert!(
        line.contains(".bpk-tmp") && line.contains("File too large"),
        "{line}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        previous,
        "the previous file is intact"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["model.bpk"], "no scratch file remains");
}

#[test]
fn a_destination_in_a_missing_or_non_directory_parent_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    for path in [not_a_dir.join("m.bpk"), dir.path().join("missing/m.bpk")] {
        let err = Writer::new(vec![]).write_to_file(&path).unwrap_err();
        assert!(
            err.to_string()
                .contains(path.parent().unwrap().to_str().unwrap()),
            "{err}"
        );
    }
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["file"]);
}

/// A pack with parameter ids, string metadata (this crate's `producer`) and scalars.
fn pack_of_ours() -> Vec<u8> {
    Writer::new(every_dtype().iter().map(Spec::entry).collect())
        .with_metadata("producer", burnpack::module::PRODUCER)
        .with_metadata("model", "mlp")
        .with_scalar("epoch", 3u32)
        .with_scalar("lr", 0.001f64)
        .into_bytes()
        .unwrap()
        .to_vec()
}

use common::damage_noticed as noticed;

#[test]
fn every_single_bit_flip_in_header_and_metadata_is_detected() {
    let clean = pack_of_ours();
    assert!(!noticed(clean.clone()), "the clean file verifies");
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(clean.clone())).unwrap();
    // Header, metadata and the padding up to the data section.
    let end = reader.layout().data_start() as usize;
    let missed = common::unnoticed_flips(&clean, end);
    println!(
        "{} single-bit flips in bytes 0..{end}, metadata size {}",
        end * 8,
        reader.layout().header().metadata_size
    );
    assert!(
        missed.is_empty(),
        "{} of {} flips went unnoticed: {missed:?}",
        missed.len(),
        end * 8
    );
}

/// The offset of the first occurrence of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{needle:?} not found"))
}

#[test]
fn a_flipped_parameter_id_is_refused_on_open() {
    let mut bytes = pack_of_ours();
    // The parameter id 1000 (CBOR: 0x19 0x03 0xE8) of the first dtype tensor.
    let at = find(&bytes, &[0x19, 0x03, 0xE8]);
    bytes[at + 2] ^= 1;
    let err = Reader::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::Invalid {
                source: FormatError::MetadataChecksum { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("metadata corrupt"), "{err}");
}

#[test]
fn a_damaged_checksums_key_does_not_turn_checking_off() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let (path, mut bytes) = saved_m(dir.path(), &device);
    // "checksums" -> "checksumr": an unknown key, ignored as Burn ignores it.
    let key = find(&bytes, b"checksums");
    bytes[key + 8] ^= 1;
    // And a corrupt tensor byte, which the lost checksums would have caught.
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &bytes).unwrap();

    let reader = Reader::open(&path).unwrap();
    assert!(!reader.layout().has_checksums());
    // Verification names the damaged key (this crate's writer adds no other).
    let err = reader.verify_all().unwrap_err();
    assert!(
        matches!(
            &err,
            ReadError::Invalid {
                source: FormatError::UnknownKey { key, producer },
                ..
            } if key == "checksumr" && producer == burnpack::module::PRODUCER
        ),
        "{err}"
    );
    assert!(err.to_string().contains("'checksumr'"), "{err}");
    let err = M::new([0.0; 3], &device)
        .load_pack_with(&path, &LoadOptions::new().verify_checksums(true))
        .unwrap_err();
    assert!(
        matches!(err, ModuleError::Read(ReadError::Invalid { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("damaged"), "{err}");
    // Files of other producers without checksums (Burn's) still load verified-as-far-as-possible.
    let burn_file = burns(&every_dtype());
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(burn_file)).unwrap();
    assert_eq!(reader.verify_all().unwrap(), 0);
}

#[test]
fn burn_reads_files_with_metadata_checksums() {
    let specs = every_dtype();
    let reader =
        burn_pack::Reader::from_bytes(Bytes::from_bytes_vec(ours_checked(&specs))).unwrap();
    let tensors = reader.into_tensors().unwrap();
    assert_eq!(tensors.len(), specs.len());
    for spec in &specs {
        let t = tensors.iter().find(|t| t.name == spec.name).unwrap();
        assert_eq!(t.param_id, spec.param_id, "{}", spec.name);
        assert_eq!(&t.to_bytes().unwrap()[..], &spec.data[..], "{}", spec.name);
    }
}

/// Child side: opens the file named by `BURNPACK_OPEN_PATH` (mapped, then buffered) and
/// prints each result; dies with SIGBUS if opening touches an unbacked page of the mapping.
#[test]
fn open_child() {
    let Ok(path) = std::env::var("BURNPACK_OPEN_PATH") else {
        return;
    };
    println!("MAPPED: {}", Reader::open(&path).unwrap_err());
    println!("BUFFERED: {}", Reader::open_buffered(&path).unwrap_err());
}

/// Mounts a tmpfs of `size` bytes at a new directory; `None` where mounting is not allowed
/// (not root): the caller then skips, except in CI, which runs as root.
fn tmpfs(size: usize) -> Option<(tempfile::TempDir, TmpfsGuard)> {
    let dir = tempfile::tempdir().unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::skip("cannot mount a tmpfs here (CI runs as root)");
        return None;
    }
    let guard = TmpfsGuard(dir.path().to_path_buf());
    Some((dir, guard))
}

struct TmpfsGuard(std::path::PathBuf);

impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_file_left_by_an_in_place_write_on_a_full_tmpfs_is_an_error_not_sigbus() {
    let Some((dir, _mounted)) = tmpfs(1 << 20) else {
        return;
    };
    let path = dir.path().join("model.bpk");
    // 8 MiB into a 1 MiB filesystem, in place: the head is written last and never lands,
    // leaving the first page an unallocated hole.
    let entries = eight_mib();
    let err = Writer::new(entries)
        .mode(burnpack::WriteMode::InPlace)
        .write_to_file(&path)
        .unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(path.exists(), "the in-place write left its partial file");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["open_child", "--exact", "--test-threads=1", "--nocapture"])
        .env("BURNPACK_OPEN_PATH", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the reader died ({:?}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for mode in ["MAPPED", "BUFFERED"] {
        let line = stdout
            .lines()
            .find_map(|l| l.find(&format!("{mode}: ")).map(|at| &l[at..]))
            .unwrap_or_else(|| panic!("no {mode} line: {stdout}"));
        assert!(
            line.contains("model.bpk") && line.contains("zero bytes"),
            "{line}"
        );
    }
}

#[test]
fn files_of_earlier_versions_with_tensor_checksums_only_still_verify() {
    // Earlier versions stored 8 bytes per tensor and no header/metadata checksum.
    let data = [5u8, 6, 7];
    let mut meta = Metadata::default();
    meta.tensors.push((
        "w".into(),
        burnpack::format::Descriptor {
            dtype: DType::U8,
            shape: vec![3],
            data_offsets: (0, 3),
            param_id: Some(1),
        },
    ));
    meta.checksums = Some(burnpack::format::checksum(&data).to_le_bytes().to_vec());
    let cbor = meta.encode().unwrap();
    let mut file = burnpack::format::Header::new(cbor.len() as u32)
        .to_bytes()
        .to_vec();
    file.extend_from_slice(&cbor);
    file.resize(burnpack::format::data_start(cbor.len() as u32) as usize, 0);
    file.extend_from_slice(&data);
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(file.clone())).unwrap();
    assert!(reader.layout().has_checksums());
    assert_eq!(reader.verify_all().unwrap(), 1);
    let mut corrupt = file;
    *corrupt.last_mut().unwrap() ^= 1;
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(corrupt)).unwrap();
    assert!(matches!(
        reader.verify_all().unwrap_err(),
        ReadError::Checksum { .. }
    ));
}

/// Every path of this crate that writes a pack with checksums names its producer, so a
/// damaged `checksums` key cannot pass for another writer's file without checksums; and every
/// single-bit flip in header and metadata of each path's file is noticed. (`PackStore`,
/// `PackCheckpointer`, uploads and `bpk convert` are checked the same way in `store.rs`,
/// `train.rs`, `object_store.rs` and `cli.rs`.)
#[test]
fn every_writing_path_names_the_producer_and_every_flip_is_detected() {
    use burnpack::checkpoint::{CheckpointManager, Progress, TrainingState};
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let model = M::new([1.0, 2.0, 3.0], &device);
    let entries = || {
        every_dtype()
            .iter()
            .map(Spec::deferred_entry)
            .collect::<Vec<_>>()
    };
    let file = |name: &str| dir.path().join(name);
    let read = |path: std::path::PathBuf| std::fs::read(path).unwrap();
    let mut paths: Vec<(&str, Vec<u8>)> = Vec::new();

    Writer::new(entries())
        .write_to_file(file("writer.bpk"))
        .unwrap();
    paths.push(("Writer::write_to_file", read(file("writer.bpk"))));
    paths.push((
        "Writer::into_bytes",
        Writer::new(entries())
            .with_scalar("epoch", 3u32)
            .into_bytes()
            .unwrap()
            .to_vec(),
    ));
    model.save_pack(file("module.bpk")).unwrap();
    paths.push(("PackModule::save_pack", read(file("module.bpk"))));
    paths.push((
        "PackModule::to_pack_bytes",
        model.to_pack_bytes().unwrap().to_vec(),
    ));
    let step = Progress::new(2, 20);
    TrainingState::new(&model, step.clone())
        .save(file("state.bpk"))
        .unwrap();
    paths.push(("TrainingState::save", read(file("state.bpk"))));
    let manager = CheckpointManager::new(file("ckpts")).unwrap();
    let saved = manager
        .save(TrainingState::new(&model, step))
        .unwrap()
        .location;
    paths.push(("CheckpointManager::save", read(saved.clone())));
    // A part taken out of a checkpoint (the model alone) is a pack of its own.
    let checkpoint = Reader::open(&saved).unwrap();
    Writer::from_part(&checkpoint, "model.")
        .unwrap()
        .write_to_file(file("part.bpk"))
        .unwrap();
    paths.push(("Writer::from_part", read(file("part.bpk"))));
    // safetensors weights converted.
    let st = file("weights.safetensors");
    burnpack::interop::safetensors::burnpack_to_safetensors(file("module.bpk"), &st).unwrap();
    burnpack::interop::safetensors::safetensors_to_burnpack(&st, file("converted.bpk")).unwrap();
    paths.push((
        "convert::safetensors_to_burnpack",
        read(file("converted.bpk")),
    ));

    for (path, bytes) in &paths {
        let flips = common::assert_written_here(path, bytes);
        println!("{path}: {flips} single-bit flips, all noticed");
    }
}

/// The stored checksums are XXH3-64 with seed 0, as another implementation computes them, at
/// every length class of the algorithm (short, mid, long with whole and partial stripes and
/// blocks), so files written by earlier builds and other tools verify.
#[test]
fn checksums_are_xxh3_64_as_the_reference_computes_it() {
    let data = common::pattern(7, 3 << 20);
    for len in (0..=300).chain([1023, 1024, 1025, 4096, 65_537, 1 << 20, 3 << 20]) {
        let bytes = &data[..len];
        assert_eq!(
            burnpack::format::checksum(bytes),
            xxhash_rust::xxh3::xxh3_64(bytes),
            "length {len}"
        );
    }
    let header = burnpack::format::Header::new(20).to_bytes();
    let mut joined = header.to_vec();
    joined.extend_from_slice(&data[..1000]);
    assert_eq!(
        burnpack::format::metadata_checksum(&header, &data[..1000]),
        xxhash_rust::xxh3::xxh3_64(&joined)
    );
}
