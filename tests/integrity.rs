//! Checksums (written in the data pass, checked on demand), disk-full and write errors in a
//! child process with a lowered file-size limit.

mod common;

use std::process::Command;

use burn::tensor::{Bytes, DType, Device};
use burnpack::format::{FormatError, Metadata};
use burnpack::module::{LoadOptions, ModuleError, PackModule};
use burnpack::read::{ReadError, Reader};
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

#[test]
fn loading_can_verify_checksums() {
    use burn::module::{Module, Param};
    use burn::tensor::Tensor;
    #[derive(Module, Debug)]
    struct M {
        w: Param<Tensor<1>>,
    }
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    M {
        w: Param::from_data([1.0, 2.0, 3.0], &device),
    }
    .save_pack(&path)
    .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let fresh = || M {
        w: Param::from_data([0.0; 3], &device),
    };
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
    let entries = (0..8)
        .map(|i| {
            Entry::resident(
                format!("t{i}"),
                DType::U8,
                vec![1 << 20],
                Bytes::from_bytes_vec(vec![i as u8; 1 << 20]),
            )
        })
        .collect();
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
